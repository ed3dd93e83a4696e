"""``python -m MODULE ARGS`` run as a child forked from a Python that imported the heavy libraries once.

A command's process costs ~8 s of CPU in imports before it does anything (torch, transformers, Great
Expectations, Dagster, MLflow ...), and the suite runs dozens. Here one process per pytest worker
(the zygote) imports those third-party libraries and nothing of medbench, then forks one child per
command. The child is a process of its own, as ``python -m`` would start it: the command's
environment, working directory, ``sys.path`` (cwd first, then its PYTHONPATH, so a test's clone runs
its own code), argv, stdin from /dev/null, stdout and stderr into files; it imports medbench afresh,
runs the module as ``__main__`` (runpy, as -m does) and ends as the interpreter would (non-daemon
threads joined, atexit handlers run). So the settings, the Dagster instance and the MLflow client
are the command's own; only the third-party imports are shared.

A library may read the environment when it is imported (huggingface_hub its cache folder, polars its
thread count), so a command is forked only when its environment equals the zygote's except for the
variables in :data:`PER_COMMAND`; any other difference runs it with ``subprocess.run`` instead.
:func:`python_m` returns a ``subprocess.CompletedProcess`` either way.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests import processes

ROOT = Path(__file__).resolve().parents[1]

# Third-party libraries the medbench commands import; none of medbench's own packages.
PRELOAD = (
    "dagster",
    "great_expectations",
    "mlflow",
    "polars",
    "pyarrow",
    "numpy",
    "scipy.sparse",
    "sklearn",
    "torch",
    "transformers",
    "sentence_transformers",
    "open_clip",
    "faiss",
    "bm25s",
)
OURS = ("medbench_core", "runtime", "assets", "orchestration", "medbench_cli", "medbench_release", "tests")
# Variables a command may set to its own values: none of the preloaded libraries reads them at import.
PER_COMMAND = (
    "MEDBENCH_",
    "DAGSTER_HOME",
    "MLFLOW_TRACKING_URI",
    "DVC_",
    "GIT_AUTHOR_",
    "GIT_COMMITTER_",
    "PYTHONPATH",
    processes.TEST_VAR,
    "PYTEST_CURRENT_TEST",
)

_ZYGOTE = r"""
import atexit, importlib, json, os, runpy, sys, threading, traceback
preload, ours = json.loads(sys.argv[1]), json.loads(sys.argv[2])
before = dict(os.environ)
for name in preload:
    importlib.import_module(name)
imports_set = {k: v for k, v in os.environ.items() if before.get(k) != v}  # e.g. KMP_INIT_AT_FORK
mine = sorted(m for m in sys.modules if m.split(".")[0] in ours)
assert not mine, f"the zygote imported medbench's own modules: {mine}"
own_pythonpath = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
tail = [p for p in sys.path[1:] if p and os.path.abspath(p) not in own_pythonpath]  # [0] is -c's ''
print(json.dumps({"ready": os.getpid(), "imports_set": imports_set}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.environ.clear(); os.environ.update(req["env"]); os.chdir(req["cwd"])
            pythonpath = [os.path.abspath(p) for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
            sys.path[:] = [os.getcwd(), *pythonpath, *tail]
            out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if req.get("err") else out
            os.dup2(out, 1); os.dup2(err, 2)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            sys.stdin = open(0, closefd=False)
            sys.stdout = open(1, "w", closefd=False)  # block-buffered, as into a pipe
            sys.stderr = open(2, "w", buffering=1, closefd=False)
            sys.argv = [req["module"], *req["args"]]
            exec(req.get("prelude") or "")  # e.g. hooks a test installs into the command's process
            try:
                runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
            threading._shutdown()  # what the interpreter does at exit, in its order
            atexit._run_exitfuncs()
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush(); sys.stderr.flush()
            finally:
                os._exit(code)
    print(json.dumps({"id": req["out"], "pid": pid}), flush=True)
    _, status, usage = os.wait4(pid, 0)  # its CPU, with what it waited for of its own children
    print(json.dumps({"id": req["out"], "rc": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime}), flush=True)
"""


def base_env() -> dict[str, str]:
    """The zygote's environment: this process's, without the per-command variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PER_COMMAND)}
    # Set before huggingface_hub could read them at import, as scripts/setup.sh does.
    return {**env, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


class Zygote:
    """One forking process and the command it runs (one at a time): ``submit`` starts one, ``result`` waits for it."""

    def __init__(self, workdir: Path, prelude: str = "", *, owner: str | None = None, env: dict[str, str] | None = None) -> None:
        self.workdir, self.prelude, self.base = Path(workdir), prelude, base_env() if env is None else env
        self.lock = threading.Lock()  # held by the thread whose command runs (python_m)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = processes.start(
            [sys.executable, "-c", _ZYGOTE, json.dumps(PRELOAD), json.dumps(OURS)],
            env=self.base,
            test=owner,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.count, self.pid, self.out = 0, None, None
        # Once the imports are done: what they set in the environment (a process importing them sets the same).
        self.imports_set = self._read("imports_set")["imports_set"]

    def forkable(self, env: dict[str, str]) -> bool:
        """Whether a command with ``env`` can be forked: it differs from the zygote's environment only in
        :data:`PER_COMMAND` and in what the preloaded libraries' imports set (to the values they set)."""
        keys = {k for k in (*env, *self.base) if not k.startswith(PER_COMMAND)}
        return all(env.get(k) == self.base.get(k) or (k in self.imports_set and env.get(k) in (None, self.imports_set[k])) for k in keys)

    def submit(self, module: str, *args: str, env: dict[str, str], cwd: Path = ROOT, merged: bool = True) -> Path:
        """Starts ``python -m module args`` with exactly ``env``; returns the file its stdout goes to (stderr too when ``merged``)."""
        assert self.pid is None, "one command at a time"
        assert self.forkable(env), "this environment sets variables the preloaded libraries read at import"
        self.count += 1
        self.out = self.workdir / f"command-{self.count}.out"
        self.err = None if merged else self.workdir / f"command-{self.count}.err"
        request = {"module": module, "args": list(map(str, args)), "env": env, "cwd": str(cwd), "out": str(self.out), "prelude": self.prelude}
        if self.err:
            request["err"] = str(self.err)
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        self.pid = self._read("pid")["pid"]
        return self.out

    def result(self, timeout: float | None = None) -> int:
        """The command's exit code (negative: killed by that signal) once it ended; after ``timeout`` s
        without its end, TimeoutError (the command still runs: :meth:`kill` it or wait again)."""
        if timeout is not None and not select.select([self.proc.stdout], [], [], timeout)[0]:
            raise TimeoutError(f"the command did not end within {timeout:.0f} s; it said:\n{self.out.read_text(errors='replace')[-3000:]}")
        said = self._read("rc")
        self.pid, self.cpu = None, said["cpu"]
        return said["rc"]

    def kill(self) -> int:
        os.kill(self.pid, signal.SIGKILL)
        return Zygote.result(self)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)

    def _read(self, field: str) -> dict:
        """The zygote's next line, which must carry ``field`` for the command in flight (none before the first)."""
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the forking process ended (exit {self.proc.poll()})")
        said = json.loads(line)
        if field not in said or said.get("id") != (self.out and str(self.out)):
            raise RuntimeError(f"the forking process answered {said}, not the {field} of {self.out}")
        return said


_CPU = 0.0  # CPU seconds of the commands python_m forked in this process so far (tests/conftest.py's CPU log)


def cpu_seconds() -> float:
    return _CPU


_SHARED: dict[int, Zygote] = {}  # this worker's, started by its first command
_STARTING = threading.Lock()


def python_m(module: str, *args: str, env: dict[str, str], cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    """``subprocess.run([python, -m, module, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)``,
    forked from this worker's zygote when ``env`` allows and no other thread's command is in flight (see the module's docstring)."""
    argv = [sys.executable, "-m", module, *map(str, args)]
    with _STARTING:
        zygote = _SHARED.get(os.getpid())
        if zygote is None:
            import tempfile

            zygote = _SHARED[os.getpid()] = Zygote(Path(tempfile.mkdtemp(prefix="medbench-zygote-")), owner=None)
    if not zygote.forkable(env) or not zygote.lock.acquire(blocking=False):
        return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    try:
        zygote.submit(module, *args, env=env, cwd=cwd, merged=False)
        try:
            code = zygote.result(timeout)
        except TimeoutError:
            zygote.kill()
            raise subprocess.TimeoutExpired(argv, timeout, zygote.out.read_text(errors="replace"), zygote.err.read_text(errors="replace")) from None
        global _CPU
        _CPU += zygote.cpu  # the zygote, reaped at the session's end, would count it for no test
        stdout, stderr = zygote.out.read_text(errors="replace"), zygote.err.read_text(errors="replace")
        zygote.out.unlink()
        zygote.err.unlink()
        return subprocess.CompletedProcess(argv, code, stdout, stderr)
    except (RuntimeError, OSError, ValueError):  # out of step with its zygote: the next command starts a new one
        _SHARED.pop(os.getpid(), None)
        processes.stop(zygote.proc, grace=5)
        shutil.rmtree(zygote.workdir, ignore_errors=True)
        raise
    finally:
        zygote.lock.release()


def close_all() -> None:
    """Ends this worker's zygote (before the session's end looks for processes left running)."""
    zygote = _SHARED.pop(os.getpid(), None)
    if zygote is not None:
        zygote.close()
        shutil.rmtree(zygote.workdir, ignore_errors=True)
