"""Two project states and Dagster's instance (issue 44.7).

scripts/setup.sh exported ``DAGSTER_HOME=<checkout>/.medbench/dagster_home``, so states of their own
(MEDBENCH_STATE) shared one run history: a partition that failed in state X (its MLflow store full) showed as
current in X once state Y had run it. Now the instance follows the state (<state>/dagster_home) unless
DAGSTER_HOME is set on purpose; and where one instance does serve two states, each leaderboard judges a
partition by the runs of its own state (runs are tagged with the data root and MLflow store they write into)."""

import os
import re
import shutil
import subprocess

import pytest

from runtime.mlflow_store import MLflowResource
from tests.cli.command import medbench
from tests.mounts import fill, tmpfs
from tests.orchestration.operating_env import BM25, ROOT, new_world

BM25_K09 = {**BM25, "name": "bm25-k09", "settings": {**BM25["settings"], "k1": 0.9}}


def fake_checkout(tmp_path):
    """A checkout's scripts/setup.sh and the files it reads (its venv is this one: same lock), elsewhere."""
    fake = tmp_path / "checkout"
    (fake / "scripts").mkdir(parents=True)
    for name in ("scripts/setup.sh", "requirements.lock", "requirements-gpu.lock", "pyproject.toml", "dagster.yaml"):
        shutil.copy(ROOT / name, fake / name)
    return fake


def shell(script: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEDBENCH_") and k not in ("DAGSTER_HOME", "MLFLOW_TRACKING_URI", "PYTHONPATH")}
    return subprocess.run(["bash", "-c", script], env={**base, **(env or {})}, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("on_purpose", [False, True])
def test_setup_leaves_dagster_home_to_the_command(tmp_path, on_purpose):
    fake = fake_checkout(tmp_path)
    home = tmp_path / "on-purpose" / "dagster_home"
    if on_purpose:
        home.mkdir(parents=True)
        (home / "dagster.yaml").write_text("run_monitoring: {enabled: false}\n")  # the user's own: kept
    out = shell(f'source {fake}/scripts/setup.sh >/dev/null 2>&1; echo "${{DAGSTER_HOME-unset}}"', {"DAGSTER_HOME": str(home)} if on_purpose else {})
    assert out.stdout.strip().splitlines()[-1] == (str(home) if on_purpose else "unset"), out.stderr[-2000:]
    assert not (fake / ".medbench").exists()
    if on_purpose:
        assert (home / "dagster.yaml").read_text() == "run_monitoring: {enabled: false}\n"


def test_setup_creates_a_dagster_home_set_on_purpose(tmp_path):
    fake = fake_checkout(tmp_path)
    home = tmp_path / "new" / "dagster_home"
    out = shell(f"source {fake}/scripts/setup.sh >/dev/null 2>&1", {"DAGSTER_HOME": str(home)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert (home / "dagster.yaml").read_text() == (ROOT / "dagster.yaml").read_text()


@pytest.mark.slow
def test_each_state_has_its_own_instance_unless_dagster_home_is_set(tmp_path):
    """The same shell (setup.sh sourced once), two states: each its own partitions; one DAGSTER_HOME set on purpose: shared."""
    fake = fake_checkout(tmp_path)
    world = new_world(tmp_path / "w", [BM25])
    sync = f"MEDBENCH_MODELS={world.models_file} MEDBENCH_TASKS={world.root / 'tasks.yaml'} python -m medbench_cli models sync"
    script = (
        f"source {fake}/scripts/setup.sh >/dev/null 2>&1 && export PYTHONPATH={ROOT} && cd {tmp_path} && "
        f"MEDBENCH_STATE={tmp_path}/x {sync} && MEDBENCH_STATE={tmp_path}/y {sync} && "
        f"mkdir {tmp_path}/shared-home && export DAGSTER_HOME={tmp_path}/shared-home && "
        f"MEDBENCH_STATE={tmp_path}/x {sync} && MEDBENCH_STATE={tmp_path}/y {sync}"
    )
    out = shell(script)
    assert out.returncode == 0, out.stderr[-3000:]
    assert [line for line in out.stdout.splitlines() if line.startswith("added:")] == ["added: bm25", "added: bm25", "added: bm25", "added: none"]
    assert (tmp_path / "x" / "dagster_home" / "dagster.yaml").read_text() == (ROOT / "dagster.yaml").read_text()
    assert (tmp_path / "y" / "dagster_home" / "dagster.yaml").is_file() and (tmp_path / "shared-home" / "dagster.yaml").is_file()
    assert not (fake / ".medbench").exists()


@pytest.mark.slow
def test_a_partition_failed_in_one_state_stays_marked_when_another_state_runs_it(tmp_path):
    """One DAGSTER_HOME for two states, X and Y (each its own data/, state/ and MLflow store): X fails bm25-k09 on a
    full MLflow store (a real tmpfs filled up; skipped where the test cannot mount one), Y runs it, X rebuilds its
    leaderboard: the cell is still marked, with X's failed run and its error."""
    worlds = {}
    for name in ("x", "y"):
        w = new_world(tmp_path / name / "w", [BM25, BM25_K09])
        (tmp_path / name / "sh").mkdir()
        (tmp_path / name / "sh" / "data").symlink_to(w.shared)
        worlds[name] = {
            "MEDBENCH_SHARED": str(tmp_path / name / "sh"), "MEDBENCH_DATA": str(tmp_path / name / "data"),
            "MEDBENCH_STATE": str(tmp_path / name / "state"), "MEDBENCH_MODELS": str(w.models_file), "MEDBENCH_TASKS": str(w.root / "tasks.yaml"),
            "DAGSTER_HOME": str(tmp_path / "one-instance"),
        }  # fmt: skip
    (tmp_path / "one-instance").mkdir()
    shutil.copy(ROOT / "dagster.yaml", tmp_path / "one-instance" / "dagster.yaml")  # as one sets up an instance to share
    with tmpfs(tmp_path / "x-store", "16m") as store:
        worlds["x"]["MLFLOW_TRACKING_URI"] = f"sqlite:///{store / 'mlflow.db'}"
        MLflowResource(tracking_uri=worlds["x"]["MLFLOW_TRACKING_URI"]).ensure_store()
        fill(store, leave=0)
        failed = medbench("run", "--models", "bm25-k09", "--tasks", "scifact", env=worlds["x"], timeout=900)
        assert failed.returncode == 1 and "bm25-k09|scifact: task_metrics: " in failed.stderr, failed.stderr[-3000:]
        assert (tmp_path / "x" / "data" / "artifacts" / "bm25-k09" / "scifact" / "metrics").is_dir()  # its metrics, written before MLflow refused them

        done = medbench("run", "--models", "bm25-k09", "--tasks", "scifact", env=worlds["y"], timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "(stale)" not in (tmp_path / "y" / "data" / "reports" / "leaderboard.md").read_text()

        (store / "filler").unlink()  # room again: X's leaderboard can be logged
        rebuilt = medbench("leaderboard", "--rebuild", env=worlds["x"], timeout=900)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    board = (tmp_path / "x" / "data" / "reports" / "leaderboard.md").read_text()
    assert re.search(r"\| bm25-k09 \| \d\.\d{4} \[\d\.\d\d, \d\.\d\d\] \(stale\)", board), board
    assert "- bm25-k09 x scifact: the last evaluation of bm25-k09 x scifact failed (Dagster run " in board
    assert f": task_metrics: DiskFull: ENOSPC: no space left on tmpfs (mounted at {store}, 0 bytes free) while writing {store / 'mlflow.db'}" in board
