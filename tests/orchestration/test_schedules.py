"""The nightly schedules: when they tick, and what the evaluation schedule launches."""

import importlib
from datetime import datetime, timezone

import dagster as dg
import pytest
from dagster._utils.schedules import cron_string_iterator

from orchestration.definitions import build_definitions
from orchestration.schedules import build_nightly_evaluation, nightly_evaluation
from runtime import settings
from tests.orchestration.operating_env import BM25, BM25_K12, operated_world, write_models


def next_tick(schedule: dg.ScheduleDefinition, after: datetime) -> datetime:
    return next(cron_string_iterator(after.timestamp(), schedule.cron_schedule, schedule.execution_timezone))


def test_the_schedules_tick_at_two_by_default():
    repo = build_definitions().get_repository_def()
    for name in ("nightly_evaluation", "nightly_drift_canary"):
        schedule = repo.get_schedule_def(name)
        assert (schedule.cron_schedule, schedule.execution_timezone) == ("0 2 * * *", "UTC")
        assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
        # Sunday 22 November 2026, 00:37 UTC -> 02:00 the same night; just after 02:00 -> the next night
        assert next_tick(schedule, datetime(2026, 11, 22, 0, 37, tzinfo=timezone.utc)) == datetime(2026, 11, 22, 2, 0, tzinfo=timezone.utc)
        assert next_tick(schedule, datetime(2026, 11, 22, 2, 0, 1, tzinfo=timezone.utc)) == datetime(2026, 11, 23, 2, 0, tzinfo=timezone.utc)
    assert repo.get_schedule_def("nightly_evaluation").job_name == "evaluate_partition"
    assert repo.get_schedule_def("nightly_drift_canary").job_name == "rescore_canary"


def test_the_time_is_configurable_from_the_environment(monkeypatch):
    monkeypatch.setenv("MEDBENCH_NIGHTLY_CRON", "30 3 * * 1-5")
    monkeypatch.setenv("MEDBENCH_NIGHTLY_TZ", "Europe/Paris")
    try:
        importlib.reload(settings)
        schedule = build_nightly_evaluation(settings.NIGHTLY_CRON, settings.NIGHTLY_TIMEZONE)
    finally:
        monkeypatch.delenv("MEDBENCH_NIGHTLY_CRON")
        monkeypatch.delenv("MEDBENCH_NIGHTLY_TZ")
        importlib.reload(settings)
    assert (schedule.cron_schedule, schedule.execution_timezone) == ("30 3 * * 1-5", "Europe/Paris")
    # Saturday 28 November 2026, noon in Paris -> Monday 30 November 03:30 Paris = 02:30 UTC (winter time)
    tick = next_tick(schedule, datetime(2026, 11, 28, 11, 0, tzinfo=timezone.utc))
    assert tick.astimezone(timezone.utc) == datetime(2026, 11, 30, 2, 30, tzinfo=timezone.utc)
    assert settings.NIGHTLY_CRON == "0 2 * * *"


@pytest.mark.slow
def test_nothing_to_do_launches_nothing_and_a_missing_model_is_requested(tmp_path_factory, tmp_path):
    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    defs = world.defs()

    def evaluate_tick(instance):
        with dg.build_schedule_context(  # a context manager: see tests/orchestration/test_sensors.py tick()
            instance=instance,
            resources=world.resources(),
            repository_def=defs.get_repository_def(),
            scheduled_execution_time=datetime(2026, 11, 23, 2, tzinfo=timezone.utc),
        ) as context:
            return nightly_evaluation.evaluate_tick(context)

    with world.instance() as instance:
        quiet = evaluate_tick(instance)
        assert not quiet.run_requests
        assert quiet.skip_message == "every registered model x usable task partition is materialised and up to date"

        # A model registered while the sensor was off: the schedule adds its partition and requests it.
        write_models(world.models_file, [BM25, BM25_K12, {**BM25, "name": "bm25-b05", "settings": {**BM25["settings"], "b": 0.5}}])
        busy = evaluate_tick(instance)
        assert [(str(r.partition_key), r.tags["medbench/reason"]) for r in busy.run_requests] == [
            ("bm25-b05|scifact", "missing: corpus_embeddings, corpus_index, query_expansion, retrieval_run, task_metrics"),
            ("bm25-b05|liveqa_medquad", "missing: corpus_embeddings, corpus_index, query_expansion, retrieval_run, task_metrics"),
        ]
        assert [r.run_key for r in busy.run_requests] == [
            "nightly:2026-11-23T02:00:00+00:00:bm25-b05|scifact",
            "nightly:2026-11-23T02:00:00+00:00:bm25-b05|liveqa_medquad",
        ]
        assert "bm25-b05" in instance.get_dynamic_partitions("models")
