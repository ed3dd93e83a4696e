"""Adding a model does the new model's work only (issue 53), and leaves what a full recompute leaves.

On a board built by ``medbench run``, a model is added to models.yaml. Then, from the same state:

- ``medbench run``: the plan (orchestration/plan.py) confirms every partition already on the board
  without a Dagster run, no task is curated again, the new model's partitions are evaluated and the
  leaderboard takes every statistic and plot of the old cells from the last one (reuse.py);
- ``medbench run --recheck`` with the leaderboard's stored statistics removed: every task curated,
  every partition visited, every statistic and plot computed: the full recompute.

Both leave the same reports byte for byte (leaderboard.md/csv/json, stats.csv, the plots), the same
MLflow runs (params, metrics, tags but the Dagster run id), the same stale marks, and a Dagster
instance that shows every partition fresh and nothing due (the UI's view, and the nightly's).
Tiny tasks here; the bundled benchmark's eleven tasks in the second test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestration.freshness import EVALUATION_ASSETS, due_partitions, stale_status_resolver
from runtime.partitions import partition_key
from tests.cli.test_run import _main_env
from tests.orchestration.operating_env import BM25, BM25_K12, ROOT, World, new_world, write_models

pytestmark = pytest.mark.slow

BM25_K10 = {**BM25, "name": "bm25-k10", "settings": {**BM25["settings"], "k1": 1.0}}
VOLATILE_TAGS = ("medbench.dagster_run_id",)  # which Dagster run logged it: another run in each history


def medbench_run(env: dict, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "medbench_cli", "run", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def reports(world: World) -> dict[str, bytes]:
    folder = world.root / "data" / "reports"
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def mlflow_runs(world: World) -> dict[str, dict]:
    """Every active FINISHED run of the world's MLflow store by its run key: name, params, metric values, tags (but the Dagster run id)."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{world.root / 'state' / 'mlflow.db'}")
    out = {}
    for exp in client.search_experiments():
        for r in client.search_runs([exp.experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=5000):
            key = r.data.tags.get("medbench.run_key")
            if key is None or r.info.status != "FINISHED":
                continue
            assert key not in out, f"two FINISHED runs of {key}"
            tags = {k: v for k, v in r.data.tags.items() if not k.startswith("mlflow.") and k not in VOLATILE_TAGS}
            out[key] = {"experiment": exp.name, "name": r.info.run_name, "params": r.data.params, "metrics": r.data.metrics, "tags": tags}
    return out


def fresh_everywhere(world: World, models: list[str], tasks: list[str]) -> None:
    """As the UI sees it: every evaluation asset of every partition FRESH; and the nightly schedule has nothing due."""
    defs = world.defs()
    with world.instance() as instance:
        resolver = stale_status_resolver(instance, defs.resolve_asset_graph())
        for asset in EVALUATION_ASSETS:
            for m in models:
                for t in tasks:
                    assert resolver.get_status(asset, str(partition_key(m, t))).value == "FRESH", (asset, m, t)
        assert due_partitions(instance, defs.resolve_asset_graph(), models, tasks) == []


def add_model_both_ways(world: World, env: dict, tmp_path: Path, models: list[dict]) -> tuple[str, dict, dict, str, dict, dict]:
    """From the world's state, add the last of ``models`` and run both ways (module docstring), the world restored in between:
    (stdout, reports, MLflow runs) of the incremental run, then of the full recompute."""
    kept = tmp_path / "before"
    shutil.copytree(world.root, kept, symlinks=True)
    write_models(world.models_file, models)
    incremental = medbench_run(env)
    seen = (incremental, reports(world), mlflow_runs(world))
    fresh_everywhere(world, [m["name"] for m in models], tasks_of(world))
    shutil.rmtree(world.root)
    shutil.copytree(kept, world.root, symlinks=True)
    write_models(world.models_file, models)
    (world.root / "state" / "scratch" / "leaderboard" / "stats_results.json").unlink()
    full = medbench_run(env, "--recheck")
    return (*seen, full, reports(world), mlflow_runs(world))


def tasks_of(world: World) -> list[str]:
    from medbench_core.taskdata.catalog import load_catalog

    return load_catalog(world.root / "tasks.yaml").names


def test_adding_a_model_runs_its_partitions_only_and_leaves_what_a_full_recompute_leaves(tmp_path):
    world = new_world(tmp_path / "w", [BM25, BM25_K12])
    env = _main_env(world, tmp_path)
    medbench_run(env)
    new, new_reports, new_runs, full, full_reports, full_runs = add_model_both_ways(world, env, tmp_path, [BM25, BM25_K12, BM25_K10])

    lines = new.splitlines()
    assert "[curate] not curated again: scifact, liveqa_medquad" in new and "[overlap] not judged again" in new
    assert any(line.startswith("[plan] 4 of 6 partitions are current") and "2 to evaluate" in line for line in lines), new
    evaluated = [line.split()[1:4] for line in lines if line.startswith("[evaluate]")]
    assert evaluated == [["bm25-k10", "x", "scifact"], ["bm25-k10", "x", "liveqa_medquad"]]  # nothing else visited
    assert "[curate] scifact" in full and "[evaluate] bm25                     x scifact                ok (cached)" in full

    assert new_reports.keys() == full_reports.keys() and "diff/scifact.png" in new_reports and "trust/bm25-k10.png" in new_reports
    for name in new_reports:
        assert new_reports[name] == full_reports[name], name
    assert new_runs == full_runs and len(new_runs) == 8  # six partitions, the leaderboard of two models and that of three
    board = json.loads(new_reports["leaderboard.json"])
    assert set(board["cells"]) == {f"{m}/{t}" for m in ("bm25", "bm25-k12", "bm25-k10") for t in ("scifact", "liveqa_medquad")}
    assert board["stale"] == {}


def test_on_the_bundled_tasks_with_a_stale_task_the_marks_and_bytes_are_those_of_a_full_recompute(tmp_path):
    """The bundled benchmark's eleven tasks (text, images, the ICD split) with BM25 models; one task's source then
    changes into one that fails curation, so its cells are kept and marked stale, the same both ways."""
    shared = tmp_path / "shared"
    shutil.copytree(ROOT.parent / "shared" / "data", shared, symlinks=True)
    world = new_world(tmp_path / "w", [BM25, BM25_K12])
    shutil.rmtree(world.shared)
    world.shared.symlink_to(shared)
    shutil.copy(ROOT / "tasks.yaml", world.root / "tasks.yaml")
    env = _main_env(world, tmp_path)
    medbench_run(env)
    tasks = tasks_of(world)
    queries = shared / "scifact" / "queries.jsonl"
    queries.write_bytes(queries.read_bytes() + b"{not json\n")  # curating scifact again fails; its cells are kept, marked stale
    env_fails = {**env}

    kept = tmp_path / "before"
    shutil.copytree(world.root, kept, symlinks=True)
    results = []
    for args in ((), ("--recheck",)):
        write_models(world.models_file, [BM25, BM25_K12, BM25_K10])
        if args:
            (world.root / "state" / "scratch" / "leaderboard" / "stats_results.json").unlink()
        out = subprocess.run([sys.executable, "-m", "medbench_cli", "run", *args], env=env_fails, cwd=ROOT, capture_output=True, text=True, timeout=1800)
        assert out.returncode == 1 and "curated_task[scifact]" in out.stderr.splitlines()[-1], out.stderr[-2000:]
        results.append((out.stdout, reports(world), mlflow_runs(world)))
        if not args:
            evaluated = {line.split()[1] for line in out.stdout.splitlines() if line.startswith("[evaluate]")}
            assert evaluated == {"bm25-k10"}, out.stdout
            assert "[curate] scifact                FAILED" in out.stdout
            shutil.rmtree(world.root)
            shutil.copytree(kept, world.root, symlinks=True)
    (new, new_reports, new_runs), (full, full_reports, full_runs) = results
    for name in new_reports:
        assert new_reports[name] == full_reports[name], name
    assert new_reports.keys() == full_reports.keys() and new_runs == full_runs
    stale = json.loads(new_reports["leaderboard.json"])["stale"]
    assert sorted(stale) == ["bm25-k12/scifact", "bm25/scifact"], stale  # bm25-k10 has no result on the old scifact: '-'
    assert len(tasks) == 11
