"""``medbench run`` with its MLflow store on a full disk (issue 44.10), a real tmpfs filled up (tests/mounts.py; skipped,
the reason printed, where the test cannot mount one).

A new model's partition cannot be logged, and neither can the leaderboard: the last line says ENOSPC, the device
and the store's file, and "kept: the saved leaderboard as it was" is true: every report under data/reports has the
bytes it had (they are written aside and replace the saved ones only once MLflow holds their run)."""

import hashlib
import json

import pytest

from tests.cli.command import medbench
from tests.mounts import fill, tmpfs
from tests.orchestration.operating_env import BM25, new_world, write_models

pytestmark = pytest.mark.slow

BM25_K09 = {**BM25, "name": "bm25-k09", "settings": {**BM25["settings"], "k1": 0.9}}


def hashes(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_full_mlflow_store_is_said_and_the_saved_leaderboard_is_kept(tmp_path):
    world = new_world(tmp_path / "w", [BM25])
    (tmp_path / "sh").mkdir()
    (tmp_path / "sh" / "data").symlink_to(world.shared)
    with tmpfs(tmp_path / "store", "16m") as store:
        env = {
            "MEDBENCH_SHARED": str(tmp_path / "sh"), "MEDBENCH_DATA": str(tmp_path / "data"), "MEDBENCH_STATE": str(tmp_path / "state"),
            "MEDBENCH_MODELS": str(world.models_file), "MEDBENCH_TASKS": str(world.root / "tasks.yaml"),
            "MLFLOW_TRACKING_URI": f"sqlite:///{store / 'mlflow.db'}",
        }  # fmt: skip
        first = medbench("run", "--tasks", "scifact", env=env, timeout=900)
        assert first.returncode == 0, first.stderr[-3000:]
        reports = tmp_path / "data" / "reports"
        before = hashes(reports)
        assert {"leaderboard.md", "leaderboard.csv", "leaderboard.json", "stats.csv", "heatmap.png"} <= set(before)

        write_models(world.models_file, [BM25, BM25_K09])
        fill(store, leave=0)
        full = medbench("run", "--tasks", "scifact", env=env, timeout=900)
    assert full.returncode == 1, full.stderr[-3000:]
    last = full.stderr.strip().splitlines()[-1]
    said = f"ENOSPC: no space left on tmpfs (mounted at {store}, 0 bytes free) while writing {store / 'mlflow.db'} (database or disk is full)"
    assert last.startswith("medbench run: FAILED (2): bm25-k09|scifact: task_metrics: " + said), last
    assert f"; leaderboard: leaderboard: {said}" in last, last
    assert "; kept: the saved leaderboard as it was, every other artifact;" in last, last
    assert hashes(reports) == before  # the saved leaderboard as it was, byte for byte
    assert "bm25-k09" not in json.loads((reports / "leaderboard.json").read_text())["cells"].__repr__()
