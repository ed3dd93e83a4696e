"""Issue 29.5: a cell whose partition failed is never shown as current.

state/ filled up while task_metrics logged a new model's run: its metrics artifact was complete in
data/, the partition FAILED, and the leaderboard showed that figure unmarked (and logged it
FINISHED). Here the MLflow store refuses the partition's run the way a full disk does (OSError 28)
after every stage wrote its artifact; the leaderboard marks the cell stale with the Dagster run and
its error, in the Markdown, the JSON, the CSV and the leaderboard's MLflow run, and drops the mark
once the partition has been evaluated again.
"""

import json

import dagster as dg
import pytest

from medbench_core.storage import is_complete
from orchestration.definitions import build_definitions
from orchestration.registry_sync import sync_model_partitions
from runtime.partitions import partition_key
from runtime.resources import MLflowResource
from tests.assets.project import leaderboard
from tests.orchestration.operating_env import BM25, BM25_K12, QUIET, operated_world, write_models

pytestmark = pytest.mark.slow

B05 = {**BM25, "name": "bm25-b05", "settings": {**BM25["settings"], "b": 0.5}}


class FullDisk(MLflowResource):
    """An MLflow store on a full disk: a partition's run cannot be logged."""

    def log_run(self, *args, **kwargs):
        raise OSError(28, "No space left on device")


def test_a_cell_whose_partition_failed_is_marked_with_its_run_and_error_until_evaluated_again(tmp_path_factory, tmp_path):
    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    write_models(world.models_file, [BM25, BM25_K12, B05])
    resources = world.resources()
    full = {**resources, "mlflow": FullDisk(tracking_uri=resources["mlflow"].tracking_uri, artifact_root=resources["mlflow"].artifact_root)}
    reports = world.root / "data" / "reports"
    with world.instance() as instance:
        sync_model_partitions(instance, resources["registry"])
        failed = (
            build_definitions(resources=full)
            .resolve_job_def("evaluate_partition")
            .execute_in_process(instance=instance, partition_key=partition_key("bm25-b05", "scifact"), run_config=QUIET, raise_on_error=False)
        )
        assert not failed.success
        assert {e.step_key for e in failed.all_events if e.is_step_failure} == {"task_metrics"}  # after its artifact was written:
        (metrics,) = (world.root / "data" / "artifacts" / "bm25-b05" / "scifact" / "metrics").iterdir()
        assert is_complete(metrics)
        assert dg.materialize([leaderboard], resources=resources, instance=instance).success

        why = (
            f"the last evaluation of bm25-b05 x scifact failed (Dagster run {failed.run_id[:8]}: task_metrics: OSError: [Errno 28] No space left on device): "
            "the value its stored metrics hold is not confirmed (`medbench run --models bm25-b05 --tasks scifact`)"
        )
        board = (reports / "leaderboard.md").read_text()
        assert "| bm25-b05 | 1.0000 [1.00, 1.00] (stale) † | - | - |" in board, board
        assert "| bm25 | 1.0000 [1.00, 1.00] † | 1.0000 [1.00, 1.00] † | 1.0000 |" in board  # the others are current
        assert f"- bm25-b05 x scifact: {why}" in board
        assert "or the last evaluation of its partition failed or has not finished" in board
        saved = json.loads((reports / "leaderboard.json").read_text())
        assert saved["stale"] == {"bm25-b05/scifact": why} and saved["cells"]["bm25-b05/scifact"]["stale"] == why
        row = next(line for line in (reports / "leaderboard.csv").read_text().splitlines() if line.startswith("bm25-b05,"))
        assert row.endswith(f"scifact: {why}"), row  # no comma or quote in it: unquoted
        client = resources["mlflow"].client()
        exp = client.get_experiment_by_name("medbench-test-leaderboard")
        latest = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)[0]
        assert latest.info.status == "FINISHED" and latest.data.tags["medbench.stale"] == f"bm25-b05/scifact: {why}"
        assert latest.data.metrics["scifact/bm25-b05/stale"] == 1.0
        # No FINISHED run of the failed partition was logged: MLflow holds nothing for it.
        assert client.search_runs([client.get_experiment_by_name("medbench-test").experiment_id], filter_string="tags.`medbench.model` = 'bm25-b05'") == []

        # Evaluated again with the disk freed: current, unmarked.
        assert build_definitions(resources=resources).resolve_job_def("evaluate_partition").execute_in_process(
            instance=instance, partition_key=partition_key("bm25-b05", "scifact"), run_config=QUIET
        ).success  # fmt: skip
        assert dg.materialize([leaderboard], resources=resources, instance=instance).success
    board = (reports / "leaderboard.md").read_text()
    assert "| bm25-b05 | 1.0000 [1.00, 1.00] † | - | - |" in board and "(stale)" not in board
    assert json.loads((reports / "leaderboard.json").read_text())["stale"] == {}
