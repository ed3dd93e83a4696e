"""The processes tests start: started in groups of their own, stopped as a group, none left behind.

Every process started while the suite runs carries two environment variables, :data:`SESSION_VAR`
(this pytest session) and :data:`TEST_VAR` (the test that was running), which its own children
inherit whichever process group or session they move to: dagster dev's webserver and code server,
mlflow ui's huey consumers, a postgres that ``pg_ctl`` detached. That is how a build server finds a
build's processes (Jenkins' ProcessTreeKiller looks for its BUILD_ID variable). :func:`start` also
records the process group it started. tests/conftest.py stops what a test left running at its
teardown, passed or failed, and fails the run naming every process left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterable, Sequence

import psutil

SESSION_VAR = "MB_TEST_SESSION"  # not MEDBENCH_*: tests drop those from the environments they build
TEST_VAR = "MB_TEST_ID"
SESSION = uuid.uuid4().hex

# Per-interpreter helpers that the pytest process starts for itself and that exit with it.
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver", "joblib.externals.loky", "loky.backend")

_GROUPS: dict[int, tuple[str, str]] = {}  # process group id -> (test id, command), recorded by start()


def begin_session() -> None:
    os.environ[SESSION_VAR] = SESSION


def nested_env() -> dict[str, str]:
    """This process's environment without the session's variables: for a pytest run started inside a test,
    which keeps books of its own (its processes are not taken for this session's)."""
    return {k: v for k, v in os.environ.items() if k not in (SESSION_VAR, TEST_VAR)}


def begin_test(test_id: str) -> None:
    os.environ[TEST_VAR] = test_id


def end_test() -> None:
    os.environ.pop(TEST_VAR, None)


_CURRENT = object()


def current_test() -> str | None:
    return os.environ.get(TEST_VAR)


def start(cmd: Sequence[str], *, env: dict[str, str] | None = None, test: str | None | object = _CURRENT, **popen_kwargs) -> subprocess.Popen:
    """``subprocess.Popen(cmd)`` in a new session (its own process group, for :func:`stop`), recorded for teardown.

    ``env`` (default: this process's environment) gets the session variable and ``test``, the test
    that owns the process: by default the one running, whose teardown stops it; None for a process
    that belongs to a fixture wider than one test (it stops it itself, and the session's end checks).
    """
    owner = current_test() if test is _CURRENT else test
    env = dict(os.environ if env is None else env)
    env[SESSION_VAR] = SESSION
    env.pop(TEST_VAR, None)
    if owner:
        env[TEST_VAR] = owner
    proc = subprocess.Popen(list(map(str, cmd)), env=env, start_new_session=True, **popen_kwargs)
    _GROUPS[proc.pid] = (owner or "", " ".join(map(str, cmd))[:300])
    return proc


def stop(proc: subprocess.Popen, grace: float = 10.0) -> int:
    """SIGTERM to the process group ``proc`` leads; SIGKILL to what is left of it after ``grace`` s. Returns its exit code."""
    stop_group(proc.pid, grace)
    return proc.wait()


def stop_group(pgid: int, grace: float = 10.0) -> None:
    """SIGTERM to every process of group ``pgid``, SIGKILL to those still running after ``grace`` s; returns once none runs."""
    _signal_group(pgid, signal.SIGTERM)
    if not _wait_until(lambda: not group_members(pgid), grace):
        _signal_group(pgid, signal.SIGKILL)
        _wait_until(lambda: not group_members(pgid), 10)
    _GROUPS.pop(pgid, None)


def group_members(pgid: int) -> list[psutil.Process]:
    """The running processes of group ``pgid`` (zombies waiting to be reaped do not count)."""
    out = []
    for p in psutil.process_iter(["status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def started_by(test_id: str | None = None) -> list[psutil.Process]:
    """Running processes this session started (those of one test when ``test_id`` is given), this
    process's own helpers excepted, and the members of the groups :func:`start` recorded."""
    me = os.getpid()
    found: dict[int, psutil.Process] = {}
    for p in psutil.process_iter(["status", "ppid", "cmdline"]):
        try:
            if p.pid == me or p.info["status"] == psutil.STATUS_ZOMBIE or _is_helper(p, me):
                continue
            env = p.environ()
        except psutil.Error:
            continue
        if env.get(SESSION_VAR) == SESSION and (test_id is None or env.get(TEST_VAR) == test_id):
            found[p.pid] = p
    for pgid, (test, _) in list(_GROUPS.items()):
        if test_id is None or test == test_id:
            found.update((p.pid, p) for p in group_members(pgid))
    return sorted(found.values(), key=lambda p: p.pid)


def descendants() -> list[psutil.Process]:
    """Running descendants of this process, its own helpers excepted (children that no variable marks, e.g. forks)."""
    me = psutil.Process()
    out = []
    for p in me.children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and not _is_helper(p, me.pid):
                out.append(p)
        except psutil.Error:
            continue
    return out


def describe(p: psutil.Process) -> str:
    """``pid 123 (python -m mlflow ui ...), started by <test>``."""
    try:
        cmd = " ".join(p.cmdline())[:200]
        test = p.environ().get(TEST_VAR) or next((t for g, (t, _) in _GROUPS.items() if g == os.getpgid(p.pid)), "")
    except (psutil.Error, ProcessLookupError):
        return f"pid {p.pid} (gone)"
    return f"pid {p.pid} ({cmd})" + (f", started by {test}" if test else "")


def ignored_signals(pid: int) -> set[str]:
    """Names of the signals process ``pid`` ignores (SigIgn in /proc/<pid>/status): a child that
    inherited an ignored SIGTERM outlives ``send_signal(SIGTERM)``."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("SigIgn:"):
            mask = int(line.split()[1], 16)
            return {signal.Signals(n).name for n in range(1, 65) if mask >> (n - 1) & 1 and n in signal.Signals._value2member_map_}
    return set()


def kill(procs: Iterable[psutil.Process], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` s to any still running."""
    procs = list(procs)
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5)


def settle(find, grace: float) -> list[psutil.Process]:
    """``find()``, after giving what it finds up to ``grace`` s to exit on its own (a server told to stop a moment ago)."""
    end = time.monotonic() + grace
    while True:
        left = find()
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.2)


def _is_helper(p: psutil.Process, parent: int) -> bool:
    try:
        return p.ppid() == parent and any(h in " ".join(p.cmdline()) for h in _HELPERS)
    except psutil.Error:
        return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # nothing of the group is left
        pass


def _wait_until(done, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while not done():
        if time.monotonic() > end:
            return False
        time.sleep(0.1)
    return True
