"""The warm path of `medbench run` (medbench_cli/uptodate.py): a second run with nothing changed
answers in one line from medbench's own record of the last complete run (runtime/ledger.py), the
artifacts' manifests and MLflow's public client, without importing Dagster, and the Dagster UI
agrees (every partition fresh, nothing due); each kind of change takes the full run again."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys

import pytest

from orchestration.freshness import EVALUATION_ASSETS, due_partitions, stale_status_resolver
from runtime.partitions import partition_key
from tests.cli.test_run import _main_env
from tests.orchestration.operating_env import BM25, BM25_K12, QUIET, ROOT, materialization_ids, new_world

pytestmark = pytest.mark.slow

RRF = {"name": "rrf", "kind": "fusion", "fusion": {"method": "rrf", "k": 60, "runs": ["bm25", "bm25-k12"]}}
MODELS, TASKS = ["bm25", "bm25-k12", "rrf"], ["scifact", "liveqa_medquad"]

# Runs `medbench run ARGS` in this interpreter and reports which heavy modules it imported.
RUN_AND_REPORT = """
import json, sys
from medbench_cli.main import main
code = main(["run", *sys.argv[1:]])
print("IMPORTED " + json.dumps(sorted(m for m in ("dagster", "mlflow", "torch", "great_expectations") if m in sys.modules)))
sys.exit(code)
"""

# Only the decision: why the warm path answers or not, without running anything.
DECIDE = """
from medbench_cli import uptodate
from medbench_cli.common import prepare_environment
from medbench_core.taskdata.catalog import load_catalog
from medbench_core.retrieval.model_registry import load_registry
from runtime import settings
prepare_environment()
specs, catalog = load_registry(settings.MODELS_FILE), load_catalog(settings.TASKS_FILE)
models, tasks = [s.name for s in specs], catalog.names
try:
    done = uptodate.check(specs, catalog, models, tasks, uptodate.inputs(specs, catalog, tasks))
    print("ANSWERED", done.partitions)
except uptodate.Undecided as exc:
    print("UNDECIDED", exc)
"""


def medbench_run(env, *args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-c", RUN_AND_REPORT, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


def decide(env) -> str:
    out = subprocess.run([sys.executable, "-c", DECIDE], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def fresh_everywhere(world) -> None:
    """As the UI sees it: every evaluation asset of every partition FRESH, and nothing due for the nightly."""
    defs = world.defs()
    with world.instance() as instance:
        resolver = stale_status_resolver(instance, defs.resolve_asset_graph())
        for asset in EVALUATION_ASSETS:
            materialised = materialization_ids(instance, asset.to_user_string())
            for m in MODELS:
                for t in TASKS:
                    key = str(partition_key(m, t))
                    assert key in materialised and resolver.get_status(asset, key).value == "FRESH", (asset, key)
        assert due_partitions(instance, defs.resolve_asset_graph(), MODELS, TASKS) == []


def test_a_run_with_nothing_changed_answers_in_one_line_and_each_change_runs_again(tmp_path):
    world = new_world(tmp_path / "w", [BM25, BM25_K12, RRF])
    env = _main_env(world, tmp_path)
    first = medbench_run(env)
    assert "[plan] evaluating: no complete run recorded yet" in first.stdout
    assert "[evaluate] rrf" in first.stdout and "IMPORTED" in first.stdout
    board = (world.root / "data" / "reports" / "leaderboard.md").read_text()
    runs_db = world.dagster_home / "history" / "runs.db"
    n_runs = sqlite3.connect(runs_db).execute("SELECT count(*) FROM runs").fetchone()[0]

    second = medbench_run(env)
    lines = second.stdout.splitlines()
    assert lines[0].startswith("[up to date] nothing changed since Dagster run ") and "6 partitions on 2 tasks" in lines[0], second.stdout
    assert "[evaluate]" not in second.stdout and "[curate]" not in second.stdout
    assert board in second.stdout  # the stored leaderboard, as the full run printed it
    # The store is the file in which the first run's end found every run FINISHED: MLflow not even imported.
    assert lines[-1] == "IMPORTED []", "the warm path imported Dagster, MLflow, torch or GX"
    assert sqlite3.connect(runs_db).execute("SELECT count(*) FROM runs").fetchone()[0] == n_runs  # no Dagster run at all
    fresh_everywhere(world)
    # A subset of what the last run covered is answered too; --force always runs.
    assert medbench_run(env, "--models", "bm25", "--tasks", "scifact").stdout.startswith("[up to date]")
    assert decide(env) == "ANSWERED 6"

    # An artifact that fails its manifest: the full run decides (and rebuilds it).
    metrics_json = next((world.root / "data" / "artifacts" / "bm25" / "scifact" / "metrics").glob("*/metrics.json"))
    good = metrics_json.read_bytes()
    metrics_json.write_bytes(good + b" ")
    assert decide(env) == "UNDECIDED bm25 x scifact: its metrics artifact is missing or fails its manifest"
    metrics_json.write_bytes(good)

    # A partition's MLflow run deleted (as the MLflow UI does): not logged any more.
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{world.root / 'state' / 'mlflow.db'}")
    key = json.loads((world.root / "data" / "reports" / "leaderboard.json").read_text())["cells"]["rrf/scifact"]["metrics_key"]
    (run,) = client.search_runs([client.get_experiment_by_name("medbench-test").experiment_id], filter_string=f"tags.`medbench.run_key` = '{key}'")
    client.delete_run(run.info.run_id)
    assert decide(env) == "UNDECIDED rrf x scifact has no FINISHED MLflow run"
    client.restore_run(run.info.run_id)
    assert decide(env) == "ANSWERED 6"  # the store was written since: asked through MLflow's client
    restored = medbench_run(env)
    assert restored.stdout.startswith("[up to date]") and restored.stdout.splitlines()[-1] == 'IMPORTED ["mlflow"]'
    # What it found is kept (issue 51: a copied state asked MLflow on every later run): the store's new fingerprint.
    assert medbench_run(env).stdout.splitlines()[-1] == "IMPORTED []"
    # A file replaced by the same bytes (a copied state: a new inode) is hashed again once, then sealed afresh.
    ledger = world.root / "state" / "last_complete_run.json"
    folder = str(metrics_json.parent)
    moved = metrics_json.with_name("moved")
    shutil.copy2(metrics_json, moved)
    moved.replace(metrics_json)
    inode = metrics_json.stat().st_ino
    assert inode not in [e[2] for e in json.loads(ledger.read_text())["sealed"][folder]]
    assert medbench_run(env).stdout.startswith("[up to date]")
    assert inode in [e[2] for e in json.loads(ledger.read_text())["sealed"][folder]]

    # One byte of one source file: the inputs changed.
    source = world.shared / "lq" / "corpus.jsonl"
    original = source.read_bytes()
    source.write_bytes(original.replace(b"}", b" }", 1))
    assert decide(env) == "UNDECIDED task liveqa_medquad: its source files changed since the last complete run"
    source.write_bytes(original)
    assert decide(env) == "ANSWERED 6"

    # A partition materialised again from the UI (cache hits): nothing it left behind changed.
    defs = world.defs()
    with world.instance() as instance:
        res = defs.resolve_job_def("evaluate_partition").execute_in_process(
            instance=instance, partition_key=partition_key("bm25", "scifact"), run_config=QUIET, raise_on_error=False
        )
        assert res.success
    assert decide(env) == "ANSWERED 6"
    fresh_everywhere(world)
    # The leaderboard written again from the UI (or by hand): not the one the last complete run recorded.
    board_md = world.root / "data" / "reports" / "leaderboard.md"
    board_md.write_text(board_md.read_text() + "\n")
    assert decide(env) == "UNDECIDED the saved leaderboard is not the one the last complete run wrote"
    third = medbench_run(env)
    assert "[plan] evaluating: the saved leaderboard is not the one the last complete run wrote" in third.stdout
    # Every partition current as stored (issue 53): confirmed by the plan, none visited; the leaderboard built again.
    assert "[plan] 6 of 6 partitions are current" in third.stdout and "[evaluate]" not in third.stdout, third.stdout
    assert medbench_run(env).stdout.startswith("[up to date]")
    forced = medbench_run(env, "--force", "--models", "bm25", "--tasks", "scifact")
    assert "[up to date]" not in forced.stdout and "[evaluate] bm25" in forced.stdout


def test_a_recorded_state_that_cannot_be_read_leaves_the_decision_to_the_full_run(tmp_path, monkeypatch):
    """A damaged ledger, leaderboard or MLflow store must not fail `medbench run`: the full run decides."""
    from medbench_cli import uptodate
    from runtime.ledger import LEDGER_FILE

    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setattr(uptodate.settings, "STATE", state)
    monkeypatch.setattr(uptodate.settings, "ONLINE", False)
    (state / LEDGER_FILE).write_text("{not json")
    with pytest.raises(uptodate.Undecided, match=r"^no complete run recorded yet$"):
        uptodate.check([], None, [], [], uptodate.Inputs("k", {}))
    store = tmp_path / "mlflow.db"
    sqlite3.connect(store).execute("CREATE TABLE runs (other TEXT)")  # not an MLflow store
    monkeypatch.setattr(uptodate.settings, "default_tracking_uri", lambda: f"sqlite:///{store}")
    with pytest.raises(uptodate.Undecided, match=r"^cannot read the MLflow store"):
        uptodate.mlflow_state("medbench", {"k"}, "r")


def test_the_store_fingerprint_changes_with_every_committed_write_and_is_empty_while_one_is_under_way(tmp_path):
    from runtime.ledger import store_fingerprint

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    assert store_fingerprint(uri) == {} and store_fingerprint("http://127.0.0.1:5000") == {}
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE runs (id TEXT, status TEXT)")
    con.execute("INSERT INTO runs VALUES ('a', 'FINISHED')")
    con.commit()
    first = store_fingerprint(uri)
    assert set(first) == {"size", "inode", "mtime_ns", "change_counter"}
    sqlite3.connect(db).execute("SELECT * FROM runs").fetchall()
    assert store_fingerprint(uri) == first  # reading writes nothing
    con.execute("UPDATE runs SET status = 'KILLED'")  # same size, maybe the same mtime tick
    con.commit()
    second = store_fingerprint(uri)
    assert second["change_counter"] == first["change_counter"] + 1 and second["size"] == first["size"]
    con.execute("UPDATE runs SET status = 'RUNNING'")  # uncommitted: its rollback journal is beside the store
    assert (tmp_path / "mlflow.db-journal").exists() and store_fingerprint(uri) == {}
    con.rollback()
    assert store_fingerprint(uri) == second
    (tmp_path / "other.db").write_bytes(b"not sqlite" * 20)
    assert store_fingerprint(f"sqlite:///{tmp_path / 'other.db'}") == {}
