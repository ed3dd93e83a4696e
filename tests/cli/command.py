"""Running ``medbench`` as users do (``python -m medbench_cli``, what the console script calls), on temporary folders."""

import os
import subprocess
from pathlib import Path

from tests import processes
from tests.forked import commands, python_m
from tests.orchestration.operating_env import ROOT


def medbench(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEDBENCH_") and k not in ("DAGSTER_HOME", "MLFLOW_TRACKING_URI")}
    return python_m("medbench_cli", *args, env={**base, "PYTHONPATH": str(ROOT), **(env or {})}, cwd=ROOT, timeout=timeout)


def state_env(tmp_path: Path) -> dict[str, str]:
    """Data, state and instance in ``tmp_path`` (none of them exist yet)."""
    return {"MEDBENCH_DATA": str(tmp_path / "data"), "MEDBENCH_STATE": str(tmp_path / "state"), "DAGSTER_HOME": str(tmp_path / "dagster_home")}


class Forked:
    """``medbench`` commands run in children forked from one process that imported the heavy libraries once
    (tests/forked.py), or as real processes when ``MEDBENCH_TEST_FORK=0``.

    ``run(args, env)`` returns (exit code, what the command printed: stdout and stderr into one file,
    in the order written, as a terminal shows them); ``submit`` starts one and ``result`` waits for it
    (one at a time). ``env`` is added to the base environment (:func:`tests.forked.base_env`). ``prelude``:
    Python run in each command's process before the command. Close it when done (``stop`` after a failure).
    """

    def __init__(self, workdir: Path, prelude: str = "") -> None:
        self.runner = commands(workdir, prelude, owner=processes.current_test())
        self.base = self.runner.base

    @property
    def out(self) -> Path:
        return self.runner.out

    def run(self, *args: str, env: dict | None = None) -> tuple[int, str]:
        self.submit(*args, env=env)
        return self.result()

    def submit(self, *args: str, env: dict | None = None) -> Path:
        """Start a command; returns the file its output goes to (read it while it runs)."""
        return self.runner.submit("medbench_cli", *args, env={**self.base, **_test_var(), **(env or {})})

    def result(self, timeout: float | None = None) -> tuple[int, str]:
        """The submitted command's exit code (negative: killed by that signal) and output, once it ended
        (TimeoutError after ``timeout`` s without its end)."""
        return self.runner.result(timeout), self.runner.out.read_text(errors="replace")

    def close(self) -> None:
        self.runner.close()

    def stop(self) -> None:
        self.runner.stop()


def _test_var() -> dict[str, str]:
    test = processes.current_test()
    return {processes.TEST_VAR: test} if test else {}


def without_trust(board: str) -> str:
    """A leaderboard's Markdown without each cell's '†' mark (Judged@10 low: docs/trust.md)."""
    import re

    return re.sub(r" †(?= \|)", "", board)
