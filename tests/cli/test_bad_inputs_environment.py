"""Bad environments, as a user's machine gives them (issue 44.12): a read-only HOME, and ``export --to`` a file.

A read-only HOME (a container, a locked-down account) makes the first write under ``~/.cache`` fail: the command
says which file, why, and the variable that moves that folder, in one line with exit 2, not "unexpected OSError".
Each command runs as a process of its own, its HOME a read-only tmpfs (tests/mounts.py; skipped, with the reason
printed, where the test cannot mount one)."""

import os
import subprocess
import sys

import pytest

from tests.cli.command import medbench
from tests.mounts import tmpfs
from tests.orchestration.operating_env import BM25, ROOT, free_port, new_world


@pytest.mark.slow
@pytest.mark.parametrize("args", [["run", "--models", "bm25", "--tasks", "scifact"], ["ui"]])
def test_a_read_only_home_names_the_variable_to_set(tmp_path, args):
    world = new_world(tmp_path / "w", [BM25])
    (tmp_path / "sh").mkdir()
    (tmp_path / "sh" / "data").symlink_to(world.shared)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDBENCH_", "XDG_", "HF_HOME")) and k not in ("DAGSTER_HOME", "MLFLOW_TRACKING_URI")}
    env |= {
        "PYTHONPATH": str(ROOT), "MEDBENCH_SHARED": str(tmp_path / "sh"), "MEDBENCH_DATA": str(tmp_path / "data"),
        "MEDBENCH_STATE": str(tmp_path / "state"), "MEDBENCH_MODELS": str(world.models_file), "MEDBENCH_TASKS": str(world.root / "tasks.yaml"),
    }  # fmt: skip
    if args[0] == "ui":
        args = ["ui", "--port", str(free_port()), "--mlflow-port", str(free_port())]
    with tmpfs(tmp_path / "home", read_only=True) as home:
        out = subprocess.run(
            [sys.executable, "-m", "medbench_cli", *args], env={**env, "HOME": str(home)}, cwd=tmp_path, capture_output=True, text=True, timeout=600
        )  # fmt: skip
    assert out.returncode == 2, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert "Traceback" not in out.stderr and "unexpected" not in last, out.stderr[-3000:]
    cache = home / ".cache" / "medbench"
    assert last.startswith(f"medbench {args[0]}: error: cannot write {cache}/mlflow-schema: {home}/.cache is on a read-only file system; "), last
    assert f"; set MEDBENCH_CACHE to a writable folder (it is {cache})" in last


@pytest.mark.parametrize("to", ["notes.txt", "notes.txt/export"])
def test_export_to_a_file_is_a_usage_error(tmp_path, to):
    (tmp_path / "notes.txt").write_text("my notes\n")
    out = medbench("export", "--to", str(tmp_path / to), env={"MEDBENCH_DATA": str(tmp_path / "data"), "MEDBENCH_STATE": str(tmp_path / "state")})
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.strip() == (
        f"medbench export: error: --to {tmp_path / to}: {tmp_path / 'notes.txt'} is a file, not a folder; nothing was written; "
        "name a new folder, or an earlier export"
    )
    assert (tmp_path / "notes.txt").read_text() == "my notes\n" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
