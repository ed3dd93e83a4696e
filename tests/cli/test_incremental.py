"""Adding a model does the new model's work only (issue 53), and leaves what a full recompute leaves.

One board is built once for the module by ``medbench run`` (two BM25 models on two tasks in the bundled
tasks' BEIR layout). Then a third model is added to models.yaml and one task's source changes into one
that fails curation (its cells are kept and marked stale); from that same state:

- ``medbench run``: the plan (orchestration/plan.py) confirms every partition already on the board
  without a Dagster run, the unchanged task is not curated again, only the new model's partition is
  evaluated and the leaderboard takes every statistic and plot of the old cells from the last one (reuse.py);
- ``medbench run --recheck`` with the leaderboard's stored statistics removed: every task curated,
  every partition visited, every statistic and plot computed: the full recompute.

Both leave the same reports byte for byte (leaderboard.md/csv/json, stats.csv, the plots), the same
MLflow runs (params, metrics, tags but the Dagster run id), the same stale marks, and a Dagster
instance that shows every current partition fresh and nothing due (the UI's view, and the nightly's).
Three ``medbench run`` in all (about 2-3 minutes on 2 cores): the ICD split built once per source is
tests/core/test_curation_reuse.py's, the statistics reused value for value tests/core/test_stats_reuse.py's.
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
    shown(out.stdout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def shown(stdout: str) -> None:
    """The run's progress lines, with their times, in the test's captured output (shown when it fails, or with -s)."""
    print("\n".join(line for line in stdout.splitlines() if line.startswith(("[", "total "))))


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


def tasks_of(world: World) -> list[str]:
    from medbench_core.taskdata.catalog import load_catalog

    return load_catalog(world.root / "tasks.yaml").names


@pytest.fixture(scope="module")
def board(tmp_path_factory) -> tuple[World, dict, Path]:
    """The board of two models on two tasks as ``medbench run`` leaves it, copied aside (each test starts from the copy)."""
    tmp = tmp_path_factory.mktemp("incremental")
    world = new_world(tmp / "w", [BM25, BM25_K12])
    env = _main_env(world, tmp)
    first = medbench_run(env)
    assert "[evaluate] bm25-k12                 x liveqa_medquad         ok" in first, first
    kept = tmp / "built"
    shutil.copytree(world.root, kept, symlinks=True)
    return world, env, kept


def restore(world: World, kept: Path) -> None:
    shutil.rmtree(world.root)
    shutil.copytree(kept, world.root, symlinks=True)


def add_a_model_and_break_scifact(world: World) -> None:
    write_models(world.models_file, [BM25, BM25_K12, BM25_K10])
    queries = world.shared / "sci" / "queries.jsonl"
    queries.write_bytes(queries.read_bytes() + b"{not json\n")  # curating scifact again fails; its cells are kept, marked stale


def failed_run(env: dict, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "medbench_cli", "run", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False)
    shown(out.stdout)
    assert out.returncode == 1 and "curated_task[scifact]" in out.stderr.splitlines()[-1], out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def test_adding_a_model_runs_its_partitions_only_and_leaves_what_a_full_recompute_leaves(board):
    world, env, kept = board
    restore(world, kept)
    add_a_model_and_break_scifact(world)
    new = failed_run(env)
    new_reports, new_runs = reports(world), mlflow_runs(world)
    fresh_everywhere(world, ["bm25", "bm25-k12", "bm25-k10"], ["liveqa_medquad"])

    restore(world, kept)
    add_a_model_and_break_scifact(world)
    (world.root / "state" / "scratch" / "leaderboard" / "stats_results.json").unlink()
    full = failed_run(env, "--recheck")
    full_reports, full_runs = reports(world), mlflow_runs(world)

    # The incremental run: the unchanged task not curated, the board's partitions confirmed by the plan, one evaluated.
    lines = new.splitlines()
    assert "[curate] not curated again: liveqa_medquad" in new and "[curate] scifact                FAILED" in new, new
    assert any(line.startswith("[plan] 2 of 3 partitions are current") and "1 to evaluate" in line for line in lines), new
    evaluated = [line.split()[1:4] for line in lines if line.startswith("[evaluate]")]
    assert evaluated == [["bm25-k10", "x", "liveqa_medquad"]], new  # nothing else visited
    assert "[audit] not audited again: liveqa_medquad" in new and not any(line.startswith("[audit] liveqa_medquad") for line in lines), new
    # The full recompute curates and visits everything (the test's check that the two runs differ in work).
    assert "[audit] liveqa_medquad         ok (cached)" in full, full
    assert "[curate] liveqa_medquad         ok" in full and "[evaluate] bm25                     x liveqa_medquad         ok (cached)" in full, full

    assert new_reports.keys() == full_reports.keys() and "diff/liveqa_medquad/bm25-k10.png" in new_reports and "trust/bm25-k10.png" in new_reports
    # issue 48's pages link each cell's Dagster and MLflow runs (new ids in each history) and say when they were built: by name only.
    differ = [name for name in new_reports if not name.startswith("site/") and new_reports[name] != full_reports[name]]
    assert differ == [], differ
    assert new_runs == full_runs and len(new_runs) == 7  # five partitions, the leaderboard of two models and that of three
    board_json = json.loads(new_reports["leaderboard.json"])
    assert sorted(board_json["cells"]) == ["bm25-k10/liveqa_medquad", "bm25-k12/liveqa_medquad", "bm25-k12/scifact", "bm25/liveqa_medquad", "bm25/scifact"]
    assert sorted(board_json["stale"]) == ["bm25-k12/scifact", "bm25/scifact"], board_json["stale"]  # bm25-k10 has no result on the old scifact
    assert tasks_of(world) == ["scifact", "liveqa_medquad"]


def test_the_overlap_gates_image_rule_is_part_of_its_key(board):
    """tasks.yaml's ``test_image_duplicates`` (issue 49: ignore, mark or refuse) changes what the cross-task gate judges,
    so a changed rule judges the tasks again, though no task changed; ``ignore`` keeps the key it had before the rule."""
    from orchestration.preparation import overlap_judged

    world, env, kept = board
    restore(world, kept)

    def judged() -> bool:
        resources = world.resources()
        return overlap_judged(resources["store"], resources["registry"])

    catalogue = world.root / "tasks.yaml"
    text = catalogue.read_text()
    assert judged()
    for rule, reused in (("ignore", True), ("mark", False), ("refuse", False)):
        catalogue.write_text(f"test_image_duplicates: {rule}\n" + text)
        assert judged() is reused, rule
