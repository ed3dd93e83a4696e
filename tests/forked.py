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

What a fork copies, and what is done about it:

- **Random state.** ``random``, NumPy's global generator and torch's default one are seeded afresh in
  each child from the OS, as a new interpreter seeds each of them (torch 2.14 too: its initial seed
  differs from one process to the next).
- **The hash seed** of ``str`` and ``bytes`` is fixed when an interpreter starts: every command of
  one zygote shares it. The zygote is started with a ``PYTHONHASHSEED`` of its own, drawn per zygote
  (so per worker and per session) unless the suite's environment sets one, and kept in
  :attr:`Zygote.hash_seed`; a command whose environment sets another runs as a process of its own. A
  test showing that an output does not depend on set order across processes runs its commands with
  ``PYTHONHASHSEED`` set (tests/core/test_bm25.py does), or in the real-process lane.
- **Exit handlers.** A child runs at its exit what a new process running the command would: the
  command's own handlers and the libraries' module-level ones (``logging.shutdown``, MLflow's
  ``_safe_end_run``, multiprocessing's ``_exit_function`` ...: what importing those libraries
  registers in any process), each on the child's own state. It does not run what is bound to an
  object the zygote made: an ``atexit`` handler registered with arguments during the preload, and
  every ``weakref.finalize`` of an object of the zygote (a temporary folder made at import), which
  would act on what the zygote and the next children still use.
- **Threads.** A fork copies one thread; a lock another thread held stays held in the child. The
  preloaded libraries leave the OS threads of :data:`FORK_SAFE_THREADS` running (each with the reason
  it is safe; tests/test_forked.py runs every pool in a child to show it); before each fork the
  zygote looks at its threads and refuses (:class:`NotForked`) when any other runs, a Python thread
  above all. :func:`python_m` then runs the command as a process of its own.

A library may read the environment when it is imported (huggingface_hub its cache folder, polars its
thread count), so a command is forked only when its environment equals the zygote's except for the
variables in :data:`PER_COMMAND`; any other difference runs it with ``subprocess.run`` instead.
:func:`python_m` returns a ``subprocess.CompletedProcess`` either way.

``MEDBENCH_TEST_FORK=0`` runs every command as a real process (:class:`Spawned`, ``subprocess.run``):
the real-process lane of scripts/test runs the CLI tests that depend on what a command reads from
the environment at its start that way, without the offline switches this harness sets for the
zygote's imports (docs/contributing/testing.md).
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from tests import processes

ROOT = Path(__file__).resolve().parents[1]

FORK_VAR = "MEDBENCH_TEST_FORK"  # "0": every command a process of its own (the real-process lane)

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
# OS threads (by their name in /proc) that the preloaded libraries start and that a fork may copy.
# Threads named as the interpreter (native threads nobody named) are allowed only as many as the
# OpenBLAS pools threadpoolctl reports; any other thread, and any Python thread, refuses the fork.
FORK_SAFE_THREADS = {
    "jemalloc_bg_thd": "jemalloc's background purge threads (pyarrow's and polars' allocators): jemalloc takes every "
    "lock it has in its pthread_atfork handlers and starts its threads again in the child when needed",
    "polars-ooc-clea": "polars' out-of-core spill cleaner, idle in the zygote (which runs no polars work); "
    "polars' thread pool itself is started lazily, in the child",
    "(unnamed)": "OpenBLAS worker threads (numpy's and scipy's copies): OpenBLAS stops its pool in a pthread_atfork "
    "handler and starts it again in the child on first use",
}

_ZYGOTE = r"""
import atexit, importlib, json, os, random, runpy, select, signal, sys, threading, traceback, weakref
preload, ours, fork_safe = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
before = dict(os.environ)
# The atexit handlers the imports register. Those without arguments are module-level (logging.shutdown, ...):
# what importing the library registers in any process, so a child keeps them; those given arguments are
# bound to objects of this process, which a child leaves alone.
exit_handlers, bound_exit_handlers, register = [], [], atexit.register
def recording(func, *args, **kwargs):
    (bound_exit_handlers if args or kwargs else exit_handlers).append(func)
    return register(func, *args, **kwargs)
atexit.register = recording
for name in preload:
    importlib.import_module(name)
atexit.register = register
imports_set = {k: v for k, v in os.environ.items() if before.get(k) != v}  # e.g. KMP_INIT_AT_FORK
mine = sorted(m for m in sys.modules if m.split(".")[0] in ours)
assert not mine, f"the zygote imported medbench's own modules: {mine}"
own_pythonpath = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
tail = [p for p in sys.path[1:] if p and os.path.abspath(p) not in own_pythonpath]  # [0] is -c's ''
try:
    from threadpoolctl import threadpool_info  # what the preloaded BLAS copies run: n threads, n - 1 workers
    blas_workers = sum(max(p["num_threads"] - 1, 0) for p in threadpool_info() if p.get("internal_api") == "openblas")
except ImportError:
    blas_workers = 0
unnamed = open("/proc/self/comm").read().strip()  # a thread nobody named carries the interpreter's name

def threads():
    # The OS threads of this process other than this one, by name ("(unnamed)": the interpreter's name).
    names = []
    for task in os.listdir("/proc/self/task"):
        if int(task) == threading.get_native_id():
            continue
        try:
            name = open(f"/proc/self/task/{task}/comm").read().strip()
        except OSError:  # it ended meanwhile
            continue
        names.append("(unnamed)" if name == unnamed else name)
    return sorted(names)

def fork_unsafe():
    # Why a fork now could copy a held lock into the child ("" when it cannot, as far as this process knows).
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    if others:
        return f"Python threads alive in the zygote: {others}"
    names = threads()
    unknown = sorted({n for n in names if n not in fork_safe})
    if unknown:
        return f"threads alive in the zygote that no test shows fork-safe: {unknown}"
    if names.count("(unnamed)") > blas_workers:
        return f"{names.count('(unnamed)')} unnamed threads alive in the zygote, {blas_workers} OpenBLAS worker(s) expected"
    return ""

def say(**fields):
    print(json.dumps(fields), flush=True)

def run(req):
    # In the child: becomes `python -m module args` in the request's environment; never returns.
    code = 1
    try:
        random.seed()  # random's own at-fork hook does this too; said here with NumPy's and torch's
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        if "torch" in sys.modules:
            sys.modules["torch"].seed()
        atexit._clear()  # then the module-level ones again, in their order: not those bound to the zygote's objects
        for func in exit_handlers:
            atexit.register(func)
        for finalizer in list(weakref.finalize._registry):
            finalizer.atexit = False  # the zygote's objects (a temporary folder it made) are not the child's to clean up
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

say(ready=os.getpid(), imports_set=imports_set, threads=threads(), blas_workers=blas_workers,
    exit_handlers=[getattr(f, "__qualname__", repr(f)) for f in exit_handlers],
    bound_exit_handlers=[getattr(f, "__qualname__", repr(f)) for f in bound_exit_handlers],
    unrecorded_exit_handlers=atexit._ncallbacks() - len(exit_handlers) - len(bound_exit_handlers))

# One request a line on stdin: {"run": {...}} starts a command (one at a time), {"kill": id} SIGKILLs it
# while it runs (a pidfd: never a pid that was reaped and reused). Lines are read with os.read into a
# buffer of our own, so that select() and the reading see the same bytes.
inbox, child = b"", None  # child: (id, pid, pidfd)
while True:
    ready = select.select([0] + ([child[2]] if child else []), [], [])[0]
    if 0 in ready:
        data = os.read(0, 1 << 16)
        if not data:  # the harness closed our stdin: wait for the command in flight, then end
            if child:
                os.waitpid(child[1], 0)
            break
        inbox += data
        while b"\n" in inbox:
            line, inbox = inbox.split(b"\n", 1)
            req = json.loads(line)
            if "kill" in req:
                if child and child[0] == req["kill"]:
                    signal.pidfd_send_signal(child[2], signal.SIGKILL)
                continue  # else it ended already: its exit line is written
            req = req["run"]
            assert child is None, "one command at a time"
            why = fork_unsafe()
            if why:
                say(id=req["out"], refused=why)
                continue
            sys.stdout.flush(); sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                run(req)
            child = (req["out"], pid, os.pidfd_open(pid))
            say(id=req["out"], pid=pid)
    if child and child[2] in ready:  # it ended: reap it, then say so
        _, status, usage = os.wait4(child[1], 0)  # its CPU, with what it waited for of its own children
        os.close(child[2])
        say(id=child[0], rc=os.waitstatus_to_exitcode(status), cpu=usage.ru_utime + usage.ru_stime)
        child = None
"""


class NotForked(RuntimeError):
    """The zygote refused to fork (threads alive that a fork could copy a held lock from): run the command as a process."""


def forking() -> bool:
    """Whether commands are forked from a zygote (``MEDBENCH_TEST_FORK`` unset or not ``0``)."""
    return os.environ.get(FORK_VAR, "1") != "0"


def base_env() -> dict[str, str]:
    """The commands' base environment: this process's, without the per-command variables.

    For a zygote, the hub libraries' offline switches are set before its imports read them, as
    scripts/setup.sh sets them (a child cannot change what was read). Real processes (the lane) get
    none that this process does not have: the command's own default decides.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(PER_COMMAND)}
    env["PYTHONPATH"] = str(ROOT)
    if forking():
        env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return env


class _Lines:
    """The lines of a pipe, read with ``os.read`` into a buffer of our own: a wait (select) and the reading
    see the same bytes. (A buffered file object may hold a whole line that select then waits for in vain.)"""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer = fd, b""

    def readline(self, timeout: float | None = None) -> str:
        """The next line without its newline; "" at the end of the pipe; TimeoutError when none came in ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return ""
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


class Zygote:
    """One forking process and the command it runs (one at a time): ``submit`` starts one, ``result`` waits for it."""

    def __init__(
        self,
        workdir: Path,
        prelude: str = "",
        *,
        owner: str | None = None,
        env: dict[str, str] | None = None,
        preload: tuple[str, ...] = PRELOAD,
    ) -> None:
        self.workdir, self.prelude, self.base = Path(workdir), prelude, base_env() if env is None else env
        self.lock = threading.Lock()  # held by the thread whose command runs (python_m)
        self.workdir.mkdir(parents=True, exist_ok=True)
        # One hash seed per zygote, shared by its children (see the module's docstring).
        self.hash_seed = self.base.get("PYTHONHASHSEED") or str(random.SystemRandom().randrange(1, 2**32))
        self.proc = processes.start(
            [sys.executable, "-c", _ZYGOTE, json.dumps(preload), json.dumps(OURS), json.dumps(sorted(FORK_SAFE_THREADS))],
            env={**self.base, "PYTHONHASHSEED": self.hash_seed},
            test=owner,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines = _Lines(self.proc.stdout.fileno())
        self.count, self.pid, self.out, self.err, self.cpu = 0, None, None, None, 0.0
        # Once the imports are done: what they set in the environment (a process importing them sets the same),
        # and the threads they left running.
        self.ready = self._read("ready")
        self.imports_set, self.threads = self.ready["imports_set"], self.ready["threads"]

    def forkable(self, env: dict[str, str]) -> bool:
        """Whether a command with ``env`` can be forked: it differs from the zygote's environment only in
        :data:`PER_COMMAND` and in what the preloaded libraries' imports set (to the values they set)."""
        keys = {k for k in (*env, *self.base) if not k.startswith(PER_COMMAND)}
        return all(env.get(k) == self.base.get(k) or (k in self.imports_set and env.get(k) in (None, self.imports_set[k])) for k in keys)

    def submit(self, module: str, *args: str, env: dict[str, str], cwd: Path = ROOT, merged: bool = True) -> Path:
        """Starts ``python -m module args`` with exactly ``env``; returns the file its stdout goes to (stderr too when ``merged``).
        :class:`NotForked` when the zygote refuses to fork (nothing started)."""
        assert self.pid is None, "one command at a time"
        assert self.forkable(env), "this environment sets variables the preloaded libraries read at import"
        self.count += 1
        self.out = self.workdir / f"command-{self.count}.out"
        self.err = None if merged else self.workdir / f"command-{self.count}.err"
        request = {"module": module, "args": list(map(str, args)), "env": env, "cwd": str(cwd), "out": str(self.out), "prelude": self.prelude}
        if self.err:
            request["err"] = str(self.err)
        self._send({"run": request})
        said = self._read("pid", "refused")
        if "refused" in said:
            raise NotForked(said["refused"])
        self.pid = said["pid"]
        return self.out

    def result(self, timeout: float | None = None) -> int:
        """The command's exit code (negative: killed by that signal) once it ended; after ``timeout`` s
        without its end, TimeoutError (the command still runs: :meth:`kill` it or wait again)."""
        try:
            said = self._read("rc", timeout=timeout)
        except TimeoutError:
            raise TimeoutError(f"the command did not end within {timeout:.0f} s; it said:\n{self.out.read_text(errors='replace')[-3000:]}") from None
        self.pid, self.cpu = None, said["cpu"]
        return said["rc"]

    def kill(self) -> int:
        """SIGKILL to the command, by the zygote while it has not reaped it (a command that ended meanwhile is left be); its exit code."""
        self._send({"kill": str(self.out)})
        return Zygote.result(self, timeout=60)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)

    def stop(self) -> None:
        """SIGKILL to the command in flight and everything it started, then to the zygote (a test's cleanup after a failure)."""
        processes.kill(psutil.Process(self.proc.pid).children(recursive=True), grace=0)
        self.proc.kill()
        self.proc.wait()

    def _send(self, request: dict) -> None:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    def _read(self, *fields: str, timeout: float | None = None) -> dict:
        """The zygote's next line, which must carry one of ``fields`` for the command in flight (none before the first)."""
        line = self.lines.readline(timeout)
        if not line:
            raise RuntimeError(f"the forking process ended (exit {self.proc.poll()})")
        said = json.loads(line)
        if not any(f in said for f in fields) or said.get("id") != (self.out and str(self.out)):
            raise RuntimeError(f"the forking process answered {said}, not the {' or '.join(fields)} of {self.out}")
        return said


class Spawned:
    """:class:`Zygote`'s interface over real processes, one per command (``MEDBENCH_TEST_FORK=0``): ``python -m
    module`` itself, or, with a ``prelude``, ``python -c`` running the prelude and then the module as ``-m`` would."""

    def __init__(self, workdir: Path, prelude: str = "", *, owner: str | None = None, env: dict[str, str] | None = None) -> None:
        self.workdir, self.prelude, self.owner, self.base = Path(workdir), prelude, owner, base_env() if env is None else env
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.count, self.pid, self.out, self.err, self.cpu, self.proc = 0, None, None, None, 0.0, None

    def forkable(self, env: dict[str, str]) -> bool:
        return False

    def submit(self, module: str, *args: str, env: dict[str, str], cwd: Path = ROOT, merged: bool = True) -> Path:
        assert self.pid is None, "one command at a time"
        self.count += 1
        self.out = self.workdir / f"command-{self.count}.out"
        self.err = None if merged else self.workdir / f"command-{self.count}.err"
        if self.prelude:
            bootstrap = "import os, runpy, sys\nsys.path[0] = os.getcwd()\nsys.argv = sys.argv[1:]\n"
            bootstrap += f"exec({self.prelude!r})\nrunpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
            argv = [sys.executable, "-c", bootstrap, module, *map(str, args)]
        else:
            argv = [sys.executable, "-m", module, *map(str, args)]
        with open(self.out, "wb") as out, open(self.err or os.devnull, "wb") as err:
            self.proc = processes.start(
                argv, env=env, test=self.owner, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err if self.err else subprocess.STDOUT
            )
        self.pid = self.proc.pid
        return self.out

    def result(self, timeout: float | None = None) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"the command did not end within {timeout:.0f} s; it said:\n{self.out.read_text(errors='replace')[-3000:]}") from None
        self.pid = None  # its CPU is this process's children's (os.times), as for any process it started
        return code

    def kill(self) -> int:
        self.proc.kill()
        return Spawned.result(self, timeout=60)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.wait(timeout=60)

    def stop(self) -> None:
        if self.proc is not None:
            processes.stop(self.proc, grace=0)


def commands(workdir: Path, prelude: str = "", *, owner: str | None = None) -> Zygote | Spawned:
    """Where a test's commands run: a zygote of its own, or real processes when ``MEDBENCH_TEST_FORK=0``."""
    return Zygote(workdir, prelude, owner=owner) if forking() else Spawned(workdir, prelude, owner=owner)


_CPU = 0.0  # CPU seconds of the commands python_m forked in this process so far (tests/conftest.py's CPU log)


def cpu_seconds() -> float:
    return _CPU


_SHARED: dict[int, Zygote] = {}  # this worker's, started by its first command
_STARTING = threading.Lock()


def python_m(module: str, *args: str, env: dict[str, str], cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    """``subprocess.run([python, -m, module, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)``,
    forked from this worker's zygote when ``env`` allows, no other thread's command is in flight and the zygote
    finds forking safe (see the module's docstring)."""
    argv = [sys.executable, "-m", module, *map(str, args)]

    def as_a_process() -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)

    if not forking():
        return as_a_process()
    with _STARTING:
        zygote = _SHARED.get(os.getpid())
        if zygote is None:
            import tempfile

            zygote = _SHARED[os.getpid()] = Zygote(Path(tempfile.mkdtemp(prefix="medbench-zygote-")), owner=None)
    if not zygote.forkable(env) or not zygote.lock.acquire(blocking=False):
        return as_a_process()
    try:
        try:
            zygote.submit(module, *args, env=env, cwd=cwd, merged=False)
        except NotForked:
            return as_a_process()
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
