"""The leaderboard asset (assets/reports.py) on the small operated world: bm25 and bm25-k12 on two tiny tasks."""

import json

import dagster as dg
import pytest

from medbench_core.pipeline import partition_keys
from tests.assets.project import leaderboard
from tests.orchestration.operating_env import BM25, BM25_K12, operated_world, write_models

pytestmark = pytest.mark.slow


def test_the_leaderboard_shows_each_cells_stored_metric_and_its_provenance(tmp_path_factory, tmp_path):
    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    never = {**BM25, "name": "bm25-b05", "settings": {**BM25["settings"], "b": 0.5}}  # registered, never evaluated
    write_models(world.models_file, [BM25, BM25_K12, never])
    resources = world.resources()
    with world.instance() as instance:
        res = dg.materialize([leaderboard], resources=resources, instance=instance)
    md = res.asset_materializations_for_node("leaderboard")[0].metadata
    reports = world.root / "data" / "reports"
    saved = json.loads((reports / "leaderboard.json").read_text())
    store, registry = resources["store"], resources["registry"]
    expected = {}
    for model in ("bm25", "bm25-k12"):
        for task in ("scifact", "liveqa_medquad"):
            keys = partition_keys(registry.model(model), store.load_task(task))
            metrics = json.loads((store.artifact_dir(model, task, "metrics", keys["metrics"]) / "metrics.json").read_text())
            expected[(model, task)] = round(metrics["mean"]["ndcg_at_10"], 4)
            assert saved["cells"][f"{model}/{task}"]["metrics_key"] == keys["metrics"]
    assert expected[("bm25", "scifact")] == 1.0  # three claims, each with its one abstract ranked first
    assert md["cells_filled"].value == 4 and set(saved["cells"]) == {f"{m}/{t}" for m, t in expected}
    rows = {r["model"]: r for r in saved["table"]}
    assert {(m, t): rows[m][t] for m, t in expected} == expected
    assert rows["bm25-b05"]["scifact"] is None and rows["bm25-b05"]["liveqa_medquad"] is None
    board = (reports / "leaderboard.md").read_text()
    assert "| bm25-b05 | - | - |" in board
    assert f"| bm25 | {expected[('bm25', 'scifact')]:.4f} | {expected[('bm25', 'liveqa_medquad')]:.4f} |" in board
    assert (reports / "leaderboard.csv").read_text().splitlines()[0] == "model,scifact,liveqa_medquad"
