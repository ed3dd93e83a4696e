"""Suite-wide: processes start with SIGINT and SIGTERM at their defaults, and no test leaves a process behind."""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import time

import pytest

from tests import forked, processes

_LEFT_BEHIND: list[str] = []
_WORKER_KEY = "medbench_processes_left_behind"


def pytest_configure(config):
    # Run as a background job (a CI runner, `scripts/test &`), pytest starts with SIGINT ignored;
    # the first in-process Dagster run then copies that onto SIGTERM, and every process the suite
    # starts afterwards ignores SIGTERM (issue 20). The `medbench` command does the same for itself
    # (medbench_cli/stopping.py's install).
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    processes.begin_session()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With MEDBENCH_TEST_CPU_LOG=FILE: one JSON line per test, the CPU seconds it cost this process and the
    children it waited for (their own children included; commands forked from tests/forked.py's zygote too),
    fixtures of any scope set up for it or torn down after it counted: where the suite's CPU goes
    (docs/contributing/testing.md)."""
    path = os.environ.get("MEDBENCH_TEST_CPU_LOG")
    if not path:
        yield
        return
    t0, f0, w0 = os.times(), forked.cpu_seconds(), time.monotonic()
    yield
    t1, f1 = os.times(), forked.cpu_seconds()
    line = {
        "test": item.nodeid,
        "self": round(t1.user + t1.system - t0.user - t0.system, 2),
        "children": round(t1.children_user + t1.children_system - t0.children_user - t0.children_system + f1 - f0, 2),
        "wall": round(time.monotonic() - w0, 2),
    }
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def pytest_collection_finish(session):
    # The test modules and the libraries they imported live as long as the session: out of the walk of
    # every later full collection (automatic, medbench's between stages, the fixture below's).
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: heaviest modules first (tests/scheduling.py)
        from tests.scheduling import heaviest_scopes_first

        items[:] = heaviest_scopes_first(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") == "loadscope":
        from tests.scheduling import ModuleScheduling

        return ModuleScheduling(config, log)
    return None


@pytest.fixture(autouse=True)
def _no_dagster_state_storage_from_an_earlier_test(request):
    """Dagster keeps the current instance's state storage in a context variable that an instance's
    ``with`` sets and resets. A context left to the garbage collector resets it when collected: in
    whatever test runs then, to the storage of an instance that is gone ("Attempted to resolve
    undefined DagsterInstance weakref", seen when xdist put another module before
    tests/assets/test_leaderboard_unconfirmed.py). A slow test starts after a collection, with none set."""
    if "dagster" not in sys.modules or request.node.get_closest_marker("slow") is None:
        yield
        return
    from dagster._core.storage.defs_state.base import _current_storage

    gc.collect()
    token = _current_storage.set(None)
    yield
    _current_storage.reset(token)


@pytest.fixture(autouse=True)
def _stop_what_the_test_started(request):
    """Stops, at teardown, every process started during the test (it failed, or its cleanup missed one)."""
    test_id = request.node.nodeid
    processes.begin_test(test_id)
    yield
    processes.end_test()
    left = processes.settle(lambda: processes.started_by(test_id), grace=5)
    if left:
        _LEFT_BEHIND.extend(f"{processes.describe(p)}: still running after the test; stopped at its teardown" for p in left)
        processes.kill(left)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """On the xdist controller: takes in what a worker found left behind (each worker keeps its own books)."""
    _LEFT_BEHIND.extend(getattr(node, "workeroutput", {}).get(_WORKER_KEY, []))


def pytest_sessionfinish(session, exitstatus):
    """Fails the run naming every process a test left running, and any the suite started that still runs.

    An xdist worker hands its lines to the controller, which reports them all and fails the run."""
    if path := os.environ.get("MEDBENCH_TEST_CPU_LOG"):  # this process's whole CPU: collection and gaps too
        t = os.times()
        name = getattr(session.config, "workerinput", {}).get("workerid", "controller")
        with open(path, "a") as f:
            f.write(json.dumps({"session": name, "self": round(t.user + t.system, 2), "children": round(t.children_user + t.children_system, 2)}) + "\n")

    forked.close_all()

    def running():
        return list({p.pid: p for p in [*processes.started_by(), *processes.descendants()]}.values())

    still = processes.settle(running, grace=10)
    lines = _LEFT_BEHIND + [f"{processes.describe(p)}: still running at the end of the session" for p in still]
    processes.kill(still)
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput[_WORKER_KEY] = lines
        return
    if not lines:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_sep("=", "processes left behind", red=True)
        for line in lines:
            reporter.write_line(line)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
