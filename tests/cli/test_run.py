"""`medbench run`, the main job's driver (medbench_cli/run.py): which model it loads while the tasks
are prepared in a second process, that a failed gate still refuses the task, and a model that
cannot load.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from medbench_core.layout import Layout
from medbench_core.retrieval.model_registry import load_registry
from orchestration.preparation import model_to_warm
from orchestration.registry_sync import sync_model_partitions
from runtime.partitions import partition_key
from tests.cli.command import without_trust
from tests.forked import python_m
from tests.orchestration.operating_env import BM25, ROOT, curate, evaluate, new_world

pytestmark = pytest.mark.slow

MINILM = next(m for m in yaml.safe_load((ROOT / "models.yaml").read_text())["models"] if m["name"] == "all-MiniLM-L6-v2")


def test_the_model_to_load_is_the_first_dense_one_with_work_left(tmp_path):
    world = new_world(tmp_path / "w", [BM25, MINILM])
    defs = world.defs()
    layout = Layout(world.root / "data")
    specs = {s.name: s for s in load_registry(world.models_file)}
    bm25, minilm = specs["bm25"], specs["all-MiniLM-L6-v2"]
    both = ["scifact", "liveqa_medquad"]
    # Nothing curated yet: the dense model has work; BM25 never loads weights.
    assert model_to_warm([bm25, minilm], layout, both) == "all-MiniLM-L6-v2"
    assert model_to_warm([bm25], layout, both) is None
    with world.instance() as instance:
        sync_model_partitions(instance, world.resources()["registry"])
        curate(world, instance, defs, both)
        assert model_to_warm([minilm], layout, both) == "all-MiniLM-L6-v2"
        evaluate(instance, defs, partition_key("all-MiniLM-L6-v2", "scifact"))
        assert model_to_warm([minilm], layout, both) == "all-MiniLM-L6-v2"  # liveqa still to do
        assert model_to_warm([minilm], layout, ["scifact"]) is None
        assert model_to_warm([minilm], layout, ["scifact"], force=True) == "all-MiniLM-L6-v2"
        evaluate(instance, defs, partition_key("all-MiniLM-L6-v2", "liveqa_medquad"))
        assert model_to_warm([bm25, minilm], layout, both) is None


def test_a_failed_gate_refuses_its_task_although_the_model_was_loaded_beside_it(tmp_path):
    world = new_world(tmp_path / "w", [BM25, MINILM])
    # liveqa_medquad's questions carry a licence outside the allowlist: its contract fails.
    catalogue = (
        (world.root / "tasks.yaml").read_text().replace("path: lq, split: test, query_licence: CC-BY-4.0", "path: lq, split: test, query_licence: unknown")
    )
    (world.root / "tasks.yaml").write_text(catalogue)
    env = _main_env(world, tmp_path)
    out = python_m("medbench_cli", "run", "--tasks", "scifact,liveqa_medquad", env=env, timeout=600)
    # The failed contract fails liveqa's curation run, and so the main job.
    last = out.stderr.rstrip().splitlines()[-1]
    assert out.returncode == 1 and last.startswith("medbench run: FAILED: curated_task[liveqa_medquad]: task_contract: task liveqa_medquad: gate FAILED"), (
        out.stderr[-3000:]
    )
    assert "every licence is in the licence allowlist" in last and "'unknown'" in last  # the failing expectation and its value
    assert "kept: the new curated liveqa_medquad, refused by its gate" in last and "fix it, then: medbench run --tasks liveqa_medquad" in last
    assert "Traceback" not in out.stderr and "STEP_FAILURE" not in out.stderr
    log = out.stdout
    assert "[warm-up] all-MiniLM-L6-v2 loaded while the tasks are prepared" in log
    assert "[curate] liveqa_medquad         FAILED" in log and "[curate] scifact                ok" in log
    assert "[evaluate] all-MiniLM-L6-v2         x scifact" in log and "x liveqa_medquad" not in log
    # The store the child created is ready, and nothing was encoded for the refused task.
    assert (world.root / "state" / ".mlflow.db.ready").is_file()
    artifacts = world.root / "data" / "artifacts" / "all-MiniLM-L6-v2"
    assert (artifacts / "scifact" / "embeddings").is_dir()
    assert not (artifacts / "liveqa_medquad").exists(), "encoded a task whose gate failed"
    board = (world.root / "data" / "reports" / "leaderboard.md").read_text()
    minilm_row = next(line for line in board.splitlines() if line.startswith("| all-MiniLM-L6-v2"))
    assert minilm_row.split("|")[2].strip() != "-" and minilm_row.split("|")[3].strip() == "-"

    # Run again: nothing left to compute, so no model is loaded and nothing runs beside.
    again = python_m("medbench_cli", "run", "--tasks", "scifact,liveqa_medquad", env=env, timeout=600)
    assert again.returncode == 1, again.stderr[-3000:]
    assert "[warm-up]" not in again.stdout, again.stdout
    # Both models' scifact partitions are current as stored (issue 53): confirmed by the plan, not visited.
    assert "[plan] 2 of 2 partitions are current" in again.stdout and "[evaluate]" not in again.stdout, again.stdout
    assert not (artifacts / "liveqa_medquad").exists()


def _main_env(world, tmp_path: Path) -> dict[str, str]:
    (tmp_path / "shared_root").mkdir(exist_ok=True)
    if not (tmp_path / "shared_root" / "data").exists():
        (tmp_path / "shared_root" / "data").symlink_to(world.shared)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDBENCH_") and k != "MLFLOW_TRACKING_URI"}
    env.update(
        PYTHONPATH=str(ROOT),
        DAGSTER_HOME=str(world.dagster_home),
        MEDBENCH_SHARED=str(tmp_path / "shared_root"),
        MEDBENCH_DATA=str(world.root / "data"),
        MEDBENCH_STATE=str(world.root / "state"),
        MEDBENCH_MODELS=str(world.models_file),
        MEDBENCH_TASKS=str(world.root / "tasks.yaml"),
    )
    return env


def test_a_model_that_cannot_load_fails_its_partitions_not_the_preparation(tmp_path):
    broken = {"name": "broken-folder", "kind": "sentence-transformers", "path": str(tmp_path / "no-such-model"), "revision": "x"}
    world = new_world(tmp_path / "w", [broken, BM25])
    out = python_m("medbench_cli", "run", "--tasks", "scifact,liveqa_medquad", env=_main_env(world, tmp_path), timeout=600)
    assert out.returncode == 1
    assert "[warm-up] broken-folder could not be loaded" in out.stdout
    assert "[curate] scifact                ok" in out.stdout and "[curate] liveqa_medquad         ok" in out.stdout
    assert "x scifact                FAILED" in out.stdout and "[evaluate] bm25                     x scifact                ok" in out.stdout
    last = out.stderr.rstrip().splitlines()[-1]
    assert last.startswith("medbench run: FAILED (2): broken-folder|scifact: ") and "; broken-folder|liveqa_medquad: " in last, out.stderr[-2000:]
    assert "fix them, then: medbench run --models broken-folder --tasks scifact,liveqa_medquad" in last
    board = (world.root / "data" / "reports" / "leaderboard.md").read_text()
    assert "| broken-folder | - | - | - |" in board and "| bm25 | 1.0000 [1.00, 1.00] | 1.0000 [1.00, 1.00] | 1.0000 |" in without_trust(board), board


def _run_on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ``argv`` with its stderr on a pseudo-terminal (as in an interactive shell); returns (exit code, what stderr showed)."""
    import pty
    import threading

    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO once the child has closed its end
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = proc.wait(timeout=600)
    reader.join(timeout=10)
    os.close(master)
    return code, b"".join(chunks).decode(errors="replace")


def test_progress_bars_show_in_a_terminal_and_not_in_ci_or_a_log(tmp_path):
    from medbench_core.progress import CI_VARIABLES

    world = new_world(tmp_path / "w", [BM25])
    env = {k: v for k, v in _main_env(world, tmp_path).items() if k not in CI_VARIABLES} | {"TERM": "xterm"}
    argv = [sys.executable, "-m", "medbench_cli", "run", "--tasks", "scifact", "--force"]
    code, shown = _run_on_a_terminal(argv, env)
    assert code == 0 and "bm25 search" in shown and "query/s" in shown, shown[-2000:]  # tqdm's bar over the queries
    code, shown = _run_on_a_terminal(argv, env | {"CI": "true"})
    assert code == 0 and "bm25 search" not in shown and "it/s" not in shown, shown[-2000:]
    logged = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)  # stderr to a pipe, as in a log
    assert logged.returncode == 0 and "bm25 search" not in logged.stderr and "it/s" not in logged.stderr, logged.stderr[-2000:]


def test_the_stage_run_config_carries_force_and_progress_to_every_stage():
    from assets.stage import PARTITION_ASSETS
    from orchestration.run_steps import stage_run_config

    assert "ops" not in stage_run_config(False, False)
    assert stage_run_config(True, True)["ops"] == {a: {"config": {"force": True, "progress": True}} for a in PARTITION_ASSETS}
    assert stage_run_config(False, True)["ops"][PARTITION_ASSETS[0]] == {"config": {"progress": True}}
