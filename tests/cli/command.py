"""Running ``medbench`` as users do (``python -m medbench_cli``, what the console script calls), on temporary folders."""

import os
import subprocess
import sys
from pathlib import Path

from tests.orchestration.operating_env import ROOT


def medbench(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEDBENCH_") and k not in ("DAGSTER_HOME", "MLFLOW_TRACKING_URI")}
    return subprocess.run(
        [sys.executable, "-m", "medbench_cli", *args],
        env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def state_env(tmp_path: Path) -> dict[str, str]:
    """Data, state and instance in ``tmp_path`` (none of them exist yet)."""
    return {"MEDBENCH_DATA": str(tmp_path / "data"), "MEDBENCH_STATE": str(tmp_path / "state"), "DAGSTER_HOME": str(tmp_path / "dagster_home")}


# A Python that has imported the libraries every command imports (Dagster, MLflow, Great Expectations,
# polars) and then forks one child per command: each child is a new process, with its own environment,
# that runs `python -m medbench_cli ARGS` (runpy, as -m does) and imports all of medbench afresh, so
# the settings, the Dagster instance and the MLflow client are the command's own. Only the ~10-20 s
# of third-party imports per command are saved.
_ZYGOTE = r"""
import json, os, runpy, sys, traceback
import dagster, great_expectations, mlflow, polars  # noqa: F401
for line in sys.stdin:
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.environ.clear(); os.environ.update(req["env"]); os.chdir(req["cwd"])
            fd = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1); os.dup2(fd, 2); os.close(fd)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            sys.stdout = open(1, "w", closefd=False)  # block-buffered, as into a pipe
            sys.stderr = open(2, "w", buffering=1, closefd=False)
            sys.argv = ["medbench", *req["args"]]
            exec(req.get("prelude") or "")  # e.g. hooks a test installs into the command's process
            try:
                runpy.run_module("medbench_cli", run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class Forked:
    """``medbench`` commands run in children forked from one process that imported the heavy libraries once.

    ``run(args, env)`` returns (exit code, what the command printed: stdout and stderr into one file,
    in the order written, as a terminal shows them); ``submit`` starts one and ``result`` waits for it
    (one at a time). ``prelude``: Python run in each child before the command. Close it when done.
    """

    def __init__(self, workdir: Path, prelude: str = "") -> None:
        self.workdir, self.prelude = workdir, prelude
        base = {k: v for k, v in os.environ.items() if not k.startswith("MEDBENCH_") and k not in ("DAGSTER_HOME", "MLFLOW_TRACKING_URI")}
        # Set before huggingface_hub could read them at import, as scripts/setup.sh does.
        self.base = {**base, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        self.proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE], env=self.base, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.count = 0

    def run(self, *args: str, env: dict | None = None) -> tuple[int, str]:
        self.submit(*args, env=env)
        return self.result()

    def submit(self, *args: str, env: dict | None = None) -> Path:
        """Start a command; returns the file its output goes to (read it while it runs)."""
        import json

        self.count += 1
        self.out = self.workdir / f"command-{self.count}.out"
        request = {"args": list(args), "env": {**self.base, **(env or {})}, "cwd": str(ROOT), "out": str(self.out), "prelude": self.prelude}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self.out

    def result(self, timeout: float | None = None) -> tuple[int, str]:
        """The submitted command's exit code (negative: killed by that signal) and output, once it ended
        (TimeoutError after ``timeout`` s without its end)."""
        import json
        import select

        if timeout is not None and not select.select([self.proc.stdout], [], [], timeout)[0]:
            raise TimeoutError(f"the command did not end within {timeout:.0f} s; it said:\n{self.out.read_text(errors='replace')[-3000:]}")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the forking process ended (exit {self.proc.poll()})")
        return json.loads(line)["rc"], self.out.read_text(errors="replace")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def without_trust(board: str) -> str:
    """A leaderboard's Markdown without each cell's ' · J@10 ..., bounds [...]' suffix (docs/trust.md)."""
    import re

    return re.sub(r" · [^|]*", " ", board).replace("  |", " |")
