"""The nightly evaluation with one new model (issue 53): the new model's partitions, then one leaderboard.

The world has bm25 and bm25-k12 evaluated on two tiny tasks and their leaderboard built. A model is
added; the nightly schedule requests its partitions only; once they have run and one sensor tick has
seen no further evaluation, ``leaderboard_after_evaluations`` requests one leaderboard, which takes
the statistics of the cells it did not touch from the last one and computes the new model's.
"""

from datetime import datetime, timezone

import dagster as dg
import pytest

from medbench_core.evaluation import scipy_equivalents
from orchestration.definitions import build_definitions
from orchestration.schedules import nightly_evaluation
from orchestration.sensors import LEADERBOARD_SENSOR, leaderboard_tick
from tests.orchestration.operating_env import BM25, BM25_K12, QUIET, evaluate, materialization_ids, operated_world, write_models

pytestmark = pytest.mark.slow

BM25_B05 = {**BM25, "name": "bm25-b05", "settings": {**BM25["settings"], "b": 0.5}}


def nightly(world, instance, defs) -> list[dg.RunRequest]:
    tick = datetime(2026, 12, 8, 2, tzinfo=timezone.utc)
    repo = defs.get_repository_def()
    with dg.build_schedule_context(instance=instance, resources=world.resources(), repository_def=repo, scheduled_execution_time=tick) as context:
        return list(nightly_evaluation.evaluate_tick(context).run_requests or [])


def test_the_sensor_is_registered_and_running_by_default():
    sensor = build_definitions().get_repository_def().get_sensor_def(LEADERBOARD_SENSOR)
    assert sensor.job_name == "build_leaderboard" and sensor.default_status == dg.DefaultSensorStatus.RUNNING


def test_one_new_model_at_night_runs_its_partitions_then_one_leaderboard(tmp_path_factory, tmp_path, monkeypatch):
    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    defs = world.defs()
    with world.instance() as instance:
        quiet = leaderboard_tick(instance, None)
        assert not quiet.run_requests and quiet.skip_reason.skip_message == "the leaderboard is newer than every evaluation"

        write_models(world.models_file, [BM25, BM25_K12, BM25_B05])
        requests = nightly(world, instance, defs)
        assert sorted(str(r.partition_key) for r in requests) == ["bm25-b05|liveqa_medquad", "bm25-b05|scifact"]
        before = materialization_ids(instance, "task_metrics")
        cursor = leaderboard_tick(instance, quiet.cursor).cursor
        for r in requests:
            evaluate(instance, defs, r.partition_key)
        after = materialization_ids(instance, "task_metrics")
        assert {p: i for p, i in after.items() if not p.startswith("bm25-b05|")} == before  # nothing else was evaluated

        settling = leaderboard_tick(instance, cursor)  # evaluations recorded since the last tick: not yet
        assert not settling.run_requests and settling.skip_reason.skip_message == "waiting for the evaluations to settle"
        settled = leaderboard_tick(instance, settling.cursor)
        (request,) = settled.run_requests
        assert request.run_key == f"after-evaluations:{max(after.values())}"
        assert leaderboard_tick(instance, settled.cursor).run_requests == [request]  # the same run key: the daemon launches it once

        bootstraps = []  # the columns whose bootstrap CI the leaderboard computes (none: every one's inputs are stored)
        computed = scipy_equivalents.percentile_cis
        monkeypatch.setattr(scipy_equivalents, "percentile_cis", lambda cols, *a: bootstraps.append(len(cols)) or computed(cols, *a))
        res = defs.resolve_job_def("build_leaderboard").execute_in_process(instance=instance, run_config=QUIET, tags=request.tags)
        (event,) = res.get_asset_materialization_events()
        md = event.materialization.metadata
        # Each cell's decontaminated CI (its contamination mark, issue 49) is looked up too: the clean queries are all of
        # them (no audit pair), so each of the 6 cells' is its CI above, stored: 6 more hits; before, computed every time.
        assert bootstraps == []
        # Every model finds each tiny task's relevant document first (nDCG@10 1 on every query), so every statistic's inputs
        # are some already stored: the CIs (3 models x 2 tasks), the tests against bm25 (2 x 2 x 2), the pairs (3 per task, 3
        # for the average) are all taken as they were, with the two other models' trust plots and bm25-k12's two difference
        # plots (one per model x task, issue 53); drawn: bm25-b05's trust plot, its two difference plots and the heatmap.
        assert (md["stats_computed"].value, md["stats_reused"].value) == (4, 6 + 8 + 9 + 2 + 2 + 6)
        assert leaderboard_tick(instance, settled.cursor).skip_reason.skip_message == "the leaderboard is newer than every evaluation"
