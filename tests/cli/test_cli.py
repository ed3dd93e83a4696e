"""The ``medbench`` command line: help everywhere, hidden internal flags, names checked before any work, exit codes.

Each command runs as users run it (``python -m medbench_cli``, which the console script calls),
against a temporary data and state folder, so nothing here touches the project's data.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from medbench_cli.main import parser
from tests.cli.command import medbench, state_env
from tests.orchestration.operating_env import BM25, ROOT, new_world, operated_world


def subcommand_paths(p: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path of the parser, e.g. ("run",), ("models", "retire"), ("data", "pull")."""
    out = []
    for action in p._actions:  # argparse keeps subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append((*prefix, name))
                out += subcommand_paths(sub, (*prefix, name))
    return out


PATHS = subcommand_paths(parser())


def test_the_commands_are_the_documented_ones():
    top = {p[0] for p in PATHS}
    assert top == {"run", "ui", "models", "leaderboard", "export", "release", "reproduce", "gc", "data"}
    assert {("models", "sync"), ("models", "retire"), ("data", "remote"), ("data", "pull"), ("data", "push"), ("data", "check")} <= set(PATHS)


@pytest.mark.parametrize("path", [(), *PATHS], ids=lambda p: " ".join(p) or "medbench")
def test_every_command_has_help(path, capsys):
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args([*path, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: medbench{' ' if path else ''}{' '.join(path)}")
    assert len(out.splitlines()) >= 3  # usage, description or commands, options


def test_the_prepare_child_flags_are_accepted_but_not_shown(capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(["run", "--help"])
    shown = capsys.readouterr().out
    assert "--report" not in shown and "--prepare-only" not in shown
    assert "--models" in shown and "--tasks" in shown and "--force" in shown and "--serial" in shown
    args = parser().parse_args(["run", "--prepare-only", "--report", "/tmp/r.json", "--tasks", "scifact"])
    assert args.prepare_only and args.report == Path("/tmp/r.json")


CHECK_FIRST = """
import sys
from medbench_cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    print(exc.code, "dagster" in sys.modules)
"""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tasks", "scifactt"], "unknown task 'scifactt'; did you mean 'scifact'?"),
        (["--tasks", "scifact,vqarad"], "unknown task 'vqarad'; did you mean 'vqa_rad'?"),
        (["--models", "bm2"], "unknown model 'bm2'; did you mean 'bm25'?"),
        (["--models", "all-MiniLM-L12-v2", "--tasks", "scifact"], "unknown model 'all-MiniLM-L12-v2'; did you mean 'all-MiniLM-L6-v2'?"),
        (["--models", "colbert"], "unknown model 'colbert' ("),
    ],
)
def test_unknown_names_exit_2_with_a_suggestion_before_any_work(tmp_path, args, message):
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEDBENCH_") and k != "DAGSTER_HOME"}
    out = subprocess.run(
        [sys.executable, "-c", CHECK_FIRST, "run", *args], env={**base, **state_env(tmp_path), "PYTHONPATH": str(ROOT)},
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.stdout.split() == ["2", "False"]  # exit code 2, and Dagster was never imported
    assert message in out.stderr and "usage: medbench run" in out.stderr
    assert "models.yaml has:" in out.stderr or "tasks.yaml has:" in out.stderr
    if message.endswith("("):
        assert "did you mean" not in out.stderr  # nothing close: no guess
    assert not any((tmp_path / d).exists() for d in ("data", "state", "dagster_home"))  # no work started


@pytest.mark.parametrize(
    "option, message",
    [
        ("spilt: train", "task 'scifact': unknown option 'spilt' for reader beir; did you mean 'split'?"),
        ("split: [train]", "task 'scifact': option 'split' must be a string, not list"),
        ("path: ../../outside", "task 'scifact': path '../../outside' leaves the data folder through '..'"),
    ],
    ids=["typo", "type", "outside"],
)
def test_a_bad_task_option_exits_2_naming_file_task_and_option(tmp_path, option, message):
    entry = {"name": "scifact", "reader": "beir", "path": "scifact", "split": "train", "query_licence": "CC-BY-4.0", "doc_licence": "ODC-By-1.0"}
    key, value = option.split(": ", 1)
    entry[key] = value  # a new key (the typo) or a changed value
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("tasks:\n  - " + "\n    ".join(f"{k}: {v}" for k, v in entry.items()) + "\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEDBENCH_") and k != "DAGSTER_HOME"}
    out = subprocess.run(
        [sys.executable, "-c", CHECK_FIRST, "run"], env={**base, **state_env(tmp_path), "MEDBENCH_TASKS": str(tasks), "PYTHONPATH": str(ROOT)},
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.stdout.split() == ["2", "False"]  # a configuration error: exit 2, before Dagster is imported
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"medbench run: error: {tasks}: {message}"), out.stderr
    assert not any((tmp_path / d).exists() for d in ("data", "state", "dagster_home"))


def test_the_leaderboard_is_printed_as_saved_and_a_missing_one_exits_1(tmp_path):
    env = state_env(tmp_path)
    missing = medbench("leaderboard", env=env)
    assert missing.returncode == 1 and "no leaderboard at" in missing.stderr and "medbench run" in missing.stderr
    reports = tmp_path / "data" / "reports"
    reports.mkdir(parents=True)
    (reports / "leaderboard.md").write_text("| model | scifact |\n|---|---|\n| bm25 | 0.6964 |\n")
    (reports / "leaderboard.csv").write_text("model,scifact\nbm25,0.6964\n")
    shown = medbench("leaderboard", env=env)
    assert shown.returncode == 0 and shown.stdout == (reports / "leaderboard.md").read_text()
    assert medbench("leaderboard", "--format", "csv", env=env).stdout == "model,scifact\nbm25,0.6964\n"


@pytest.mark.slow
def test_the_leaderboard_is_rebuilt_from_the_stored_metrics(tmp_path_factory, tmp_path):
    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    board = world.root / "data" / "reports" / "leaderboard.md"
    before = board.read_text()
    board.unlink()
    env = {
        "DAGSTER_HOME": str(world.dagster_home),
        "MEDBENCH_MODELS": str(world.models_file),
        "MEDBENCH_TASKS": str(world.root / "tasks.yaml"),
        "MEDBENCH_DATA": str(world.root / "data"),
        "MEDBENCH_STATE": str(world.root / "state"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{world.root / 'mlflow.db'}",
    }
    assert medbench("leaderboard", env=env).returncode == 1
    rebuilt = medbench("leaderboard", "--rebuild", env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    table = [line for line in before.splitlines() if line.startswith("|")]  # the footer names the code version and git sha
    # the means, the ranks, then what each cell rests on and the tasks' qrels holes (docs/trust.md)
    assert [line for line in rebuilt.stdout.splitlines() if line.startswith("|")] == table and len(table) > 8
    assert any(line.startswith("| model | task | nDCG@10 | bounds | J@10 |") for line in table)
    assert rebuilt.stdout == board.read_text()


def test_release_commands_outside_a_checkout_exit_2(tmp_path):
    out = medbench("release", "v1", "--repo", str(tmp_path), env=state_env(tmp_path))
    assert out.returncode == 2 and "not a git checkout" in out.stderr
    out = medbench("gc", "--repo", str(tmp_path), env=state_env(tmp_path))
    assert out.returncode == 2
    assert medbench("release", env=state_env(tmp_path)).returncode == 2  # TAG is required: argparse's usage error


@pytest.mark.slow
def test_models_sync_then_retire_only_what_left_the_registry(tmp_path):
    world = new_world(tmp_path / "w", [BM25, {**BM25, "name": "bm25-old"}])
    env = {"DAGSTER_HOME": str(world.dagster_home), "MEDBENCH_MODELS": str(world.models_file), "MEDBENCH_TASKS": str(world.root / "tasks.yaml"),
           "MEDBENCH_DATA": str(world.root / "data"), "MEDBENCH_STATE": str(world.root / "state")}  # fmt: skip
    synced = medbench("models", "sync", env=env)
    assert synced.returncode == 0 and synced.stdout.strip() == "added: bm25, bm25-old"
    refused = medbench("models", "retire", "bm25-old", env=env)
    assert refused.returncode == 2 and "still listed" in refused.stderr
    world.models_file.write_text(json.dumps({"models": [BM25]}))
    retired = medbench("models", "retire", "bm25-old", env=env)
    assert retired.returncode == 0 and retired.stdout.startswith("retired bm25-old")
    with world.instance() as instance:
        assert instance.get_dynamic_partitions("models") == ["bm25"]
    assert medbench("models", "sync", env=env).stdout.strip() == "added: none"


def test_the_console_script_runs_the_checkout_first_on_pythonpath(tmp_path):
    """setup.sh writes the `medbench` launcher into the shared venv; which code it runs is PYTHONPATH's choice."""
    launcher = Path(sys.executable).parent / "medbench"
    assert launcher.is_file() and os.access(launcher, os.X_OK), "source scripts/setup.sh first (it writes the launcher)"
    assert "from medbench_cli.main import main" in launcher.read_text()
    other = tmp_path / "other_checkout" / "medbench_cli"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    (other / "main.py").write_text("def main():\n    print('the other checkout')\n    return 0\n")
    ours = subprocess.run([str(launcher), "--help"], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert ours.returncode == 0 and ours.stdout.startswith("usage: medbench")
    theirs = subprocess.run([str(launcher)], env={**os.environ, "PYTHONPATH": str(other.parent)}, capture_output=True, text=True, timeout=60)
    assert theirs.stdout.strip() == "the other checkout"
    lost = subprocess.run([str(launcher)], env={**os.environ, "PYTHONPATH": str(tmp_path / "nowhere")}, capture_output=True, text=True, timeout=60)
    assert lost.returncode == 1 and "source scripts/setup.sh" in lost.stderr
