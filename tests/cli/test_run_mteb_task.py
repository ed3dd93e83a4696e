"""A task added only through a tasks.yaml entry (reader ``mteb`` on a local folder in MTEB's Parquet
layout, no code) runs through ``medbench run`` to MLflow and the leaderboard, its provenance naming
the dataset's revision everywhere: the curated_task asset's metadata, the run's MLflow params and
the leaderboard's per-cell provenance."""

from __future__ import annotations

import json

import dagster as dg
import numpy as np
import polars as pl
import pytest
from scipy.stats import bootstrap

from medbench_core.layout import Layout
from tests.cli.test_run import _main_env
from tests.core.hf_layouts import QRELS, write_mteb_parquet
from tests.forked import python_m
from tests.orchestration.operating_env import BM25, new_world

pytestmark = pytest.mark.slow


def test_a_catalogue_entry_alone_runs_an_mteb_folder_to_mlflow_and_the_leaderboard(tmp_path):
    world = new_world(tmp_path / "w", [BM25])
    write_mteb_parquet(world.shared / "mteb_fixture")
    with open(world.root / "tasks.yaml", "a") as f:
        f.write("  - {name: mteb_fixture, reader: mteb, path: mteb_fixture, research_only: true}\n")  # records state no licence
    env = _main_env(world, tmp_path)
    out = python_m("medbench_cli", "run", "--tasks", "mteb_fixture", env=env, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "[evaluate] bm25                     x mteb_fixture           ok" in out.stdout

    task = Layout(world.root / "data").load_task("mteb_fixture")
    revision = task.meta.source_revision
    assert revision.startswith("sha256:") and task.meta.dataset == "mteb_fixture"  # a local folder: the hash of its files
    assert task.qrels.height == len(QRELS)

    with world.instance() as instance:
        (curated,) = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("curated_task"), asset_partitions=["mteb_fixture"]), limit=1
        ).records
    md = curated.event_log_entry.asset_materialization.metadata
    assert md["dataset_revision"].value == revision and md["dataset"].value == "mteb_fixture"

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{world.root / 'state' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("medbench-test")
    (run,) = client.search_runs([exp.experiment_id], filter_string="tags.`medbench.task` = 'mteb_fixture'")
    assert run.data.params["dataset_revision"] == revision and run.data.params["dataset"] == "mteb_fixture"
    assert run.data.params["long_text"] == "whole" and run.data.params["research_only"] == "True"
    saved = json.loads((world.root / "data" / "reports" / "leaderboard.json").read_text())
    cell = saved["cells"]["bm25/mteb_fixture"]
    assert cell["dataset_revision"] == revision and cell["long_text"] == "whole" and cell["metrics_key"] == run.data.tags["medbench.run_key"]
    metrics_dir = world.root / "data" / "artifacts" / "bm25" / "mteb_fixture" / "metrics" / cell["metrics_key"]
    stored = json.loads((metrics_dir / "metrics.json").read_text())
    assert run.data.metrics["ndcg_at_10"] == stored["mean"]["ndcg_at_10"]
    # The partition's bootstrap CI is in its MLflow run, around the mean, and in the leaderboard cell.
    low, high = run.data.metrics["ci_low.ndcg_at_10"], run.data.metrics["ci_high.ndcg_at_10"]
    assert low <= stored["mean"]["ndcg_at_10"] <= high and low < high and stored["ci"]["ndcg_at_10"] == [low, high]
    per_query = pl.read_parquet(metrics_dir / "per_query.parquet")["ndcg_at_10"].to_numpy()
    ci = bootstrap((per_query,), np.mean, n_resamples=10_000, vectorized=True, method="percentile", rng=np.random.default_rng(0)).confidence_interval
    assert (low, high) == (ci.low, ci.high)  # scipy called directly on the stored per-query values
    board = (world.root / "data" / "reports" / "leaderboard.md").read_text()
    assert "mteb_fixture (research-only)" in board
    assert f"{stored['mean']['ndcg_at_10']:.4f} [{low:.2f}, {high:.2f}]" in board
