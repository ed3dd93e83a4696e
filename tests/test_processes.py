"""The suite's process bookkeeping (tests/processes.py, tests/conftest.py): a process is found by the
variables it inherits wherever it moved, a test's leftovers are stopped at its teardown, and a run
that left any process behind fails naming it."""

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests import processes

ROOT = Path(__file__).resolve().parents[1]


def wait_for(what, predicate, timeout: float = 30):
    end = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def commands(procs) -> list[list[str]]:
    return sorted(p.cmdline() for p in procs)


def test_a_process_that_left_its_group_is_still_found_by_what_it_inherited():
    me = processes.current_test()
    proc = processes.start(["bash", "-c", "setsid sleep 300 & sleep 299 & wait"])
    wait_for("bash and both sleeps", lambda: len(processes.started_by(me)) == 3)
    assert sorted(map(len, commands(processes.group_members(proc.pid)))) == [2, 3]  # bash -c ... and sleep 299
    processes.stop(proc, grace=5)
    left = processes.started_by(me)
    assert commands(left) == [["sleep", "300"]]  # in a session of its own: the group's SIGTERM missed it
    processes.kill(left)
    assert processes.started_by(me) == []


LEAKY = textwrap.dedent(
    """
    import multiprocessing, subprocess, time
    from tests import processes

    def test_leaves_two_processes():
        processes.start(["sleep", "3001"])  # recorded, never stopped
        subprocess.Popen(["sleep", "3002"])  # not recorded: found by the variables it inherited

    def test_leaves_a_fork():
        multiprocessing.get_context("fork").Process(target=time.sleep, args=(3003,)).start()  # no exec: no variables
    """
)


def run_leaky(tmp_path, *pytest_args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """LEAKY run by a pytest of its own with tests/conftest.py: its outcome, and the sorted ``pid ...``
    lines of its "processes left behind" report."""
    (tmp_path / "test_leaky.py").write_text(LEAKY)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.conftest", *pytest_args, "-q", str(tmp_path / "test_leaky.py")],
        cwd=ROOT,
        env=processes.nested_env() | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1, out.stdout[-3000:]
    assert "2 passed" in out.stdout
    report = out.stdout[out.stdout.index("processes left behind") :]
    return out, sorted(line for line in report.splitlines()[1:] if line.startswith("pid "))


STOPPED = "test_leaves_two_processes: still running after the test; stopped at its teardown"


@pytest.mark.slow
def test_a_run_that_leaves_processes_behind_fails_naming_them(tmp_path):
    out, lines = run_leaky(tmp_path, "-p", "no:randomly")
    assert len(lines) == 3, out.stdout
    assert any("(sleep 3001), started by" in line and STOPPED in line for line in lines), out.stdout
    assert any("(sleep 3002), started by" in line and STOPPED in line for line in lines), out.stdout
    assert any("-p tests.conftest" in line and "still running at the end of the session" in line for line in lines), out.stdout  # the fork
    assert subprocess.run(["pgrep", "-f", "^sleep 300[12]$"], capture_output=True).stdout == b""


@pytest.mark.slow
def test_under_xdist_the_workers_leftovers_fail_the_run_naming_them(tmp_path):
    """``scripts/test`` runs the suite on xdist workers: each keeps its own books and the controller reports them all."""
    out, lines = run_leaky(tmp_path, "-n", "2")  # --dist load (the default of -n): the two tests go to the two workers
    assert len(lines) == 3, out.stdout
    assert any("(sleep 3001), started by" in line and STOPPED in line for line in lines), out.stdout
    assert any("(sleep 3002), started by" in line and STOPPED in line for line in lines), out.stdout
    assert sum("still running at the end of the session" in line for line in lines) == 1, out.stdout  # the fork, found by its worker
    assert subprocess.run(["pgrep", "-f", "^sleep 300[123]$"], capture_output=True).stdout == b""
