"""tests/forked.py: a command forked from the zygote behaves as ``python -m`` started afresh would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import forked

PROBE = """
import atexit, json, os, sys, threading, time
if sys.argv[1:] == ["seeds"]:
    import random, numpy, torch
    print(json.dumps({"random": random.random(), "numpy": numpy.random.random(), "torch": torch.initial_seed(), "hash": hash("medbench")}))
    sys.exit(0)
atexit.register(lambda: print("atexit", flush=True))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread", flush=True))).start()
print(json.dumps({"argv": sys.argv, "name": __name__, "cwd": os.getcwd(), "path": sys.path, "var": os.environ.get("MEDBENCH_PROBE"),
                  "stdin": sys.stdin.read(), "medbench imported": sorted(m for m in sys.modules if m.startswith("medbench_"))}))
print("to stderr", file=sys.stderr)
if sys.argv[1:] == ["sleep"]:
    sys.stdout.flush()
    time.sleep(60)
sys.exit(3)
"""


@pytest.fixture
def probe(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe_module.py").write_text(PROBE)
    (tmp_path / "cwd").mkdir()
    env = {**os.environ, "PYTHONPATH": str(code), "MEDBENCH_PROBE": "its own"}
    return env, tmp_path / "cwd"


def test_a_forked_command_runs_as_python_m_would_in_its_own_environment_folder_and_path(probe):
    env, cwd = probe
    argv = [sys.executable, "-m", "probe_module", "a", "b"]
    real = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    forked.python_m("probe_module", env=env, cwd=cwd, timeout=60)  # this worker's zygote, started by its first command
    zygote = forked._SHARED[os.getpid()]
    before = zygote.count
    fork = forked.python_m("probe_module", "a", "b", env=env, cwd=cwd, timeout=60)
    assert fork.args == real.args and fork.returncode == real.returncode == 3
    assert fork.stderr == real.stderr == "to stderr\n"
    said, shown = fork.stdout.splitlines(), real.stdout.splitlines()
    assert said[1:] == shown[1:] == ["thread", "atexit"]  # threads joined, then atexit, as at an interpreter's exit
    ours, theirs = json.loads(said[0]), json.loads(shown[0])
    assert ours == theirs, (ours, theirs)  # argv, __main__, cwd, sys.path (cwd, then PYTHONPATH), variable, empty stdin
    assert ours["var"] == "its own" and ours["path"][:2] == [str(cwd), env["PYTHONPATH"]] and ours["medbench imported"] == []
    assert zygote.proc.poll() is None and zygote.count == before + 1  # it was forked, and the zygote lives on for the next one


@pytest.mark.slow
def test_an_environment_a_preloaded_library_reads_at_import_runs_in_a_process_of_its_own(probe, tmp_path):
    env, cwd = probe
    # A zygote of its own, started as the first of a worker's is: before any test imported torch in the worker.
    set_by_imports = ("KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK", "TORCHINDUCTOR_CACHE_DIR")
    zygote = forked.Zygote(tmp_path / "zygote", env={k: v for k, v in forked.base_env().items() if k not in set_by_imports})
    try:
        base = zygote.base
        assert zygote.forkable({**base, "MEDBENCH_DATA": "/x", "DAGSTER_HOME": "/y", "PYTHONPATH": "/z"})
        for variable in ("HF_HOME", "OMP_NUM_THREADS", "POLARS_MAX_THREADS"):
            assert not zygote.forkable({**base, variable: "1"}), variable
        assert not zygote.forkable({k: v for k, v in base.items() if k != "HF_HUB_OFFLINE"})
        # What the preloaded libraries set when imported (torch: KMP_INIT_AT_FORK), as an in-process test leaves it in os.environ.
        assert zygote.imports_set.get("KMP_INIT_AT_FORK") == "FALSE" and zygote.forkable({**base, **zygote.imports_set})
        assert not zygote.forkable({**base, "KMP_INIT_AT_FORK": "TRUE"})
    finally:
        zygote.close()
    forked.python_m("probe_module", env=env, cwd=cwd, timeout=60)
    shared = forked._SHARED[os.getpid()]
    before = shared.count
    out = forked.python_m("probe_module", env={**env, "HF_HOME": str(cwd)}, cwd=cwd, timeout=60)
    assert out.returncode == 3 and json.loads(out.stdout.splitlines()[0])["var"] == "its own"
    assert shared.count == before  # not forked


def test_commands_from_two_threads_at_once_both_run(probe):
    env, cwd = probe
    with ThreadPoolExecutor(2) as pool:  # one is forked, the other, finding the zygote busy, runs as a process of its own
        outs = list(pool.map(lambda arg: forked.python_m("probe_module", arg, env=env, cwd=cwd, timeout=60), ["x", "y"]))
    assert [o.returncode for o in outs] == [3, 3]
    assert [json.loads(o.stdout.splitlines()[0])["argv"][1:] for o in outs] == [["x"], ["y"]]
    assert forked.python_m("probe_module", "z", env=env, cwd=cwd, timeout=60).stdout.startswith('{"argv"')  # still in step


def test_a_forked_command_past_its_timeout_is_killed_and_the_next_one_runs(probe):
    env, cwd = probe
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        forked.python_m("probe_module", "sleep", env=env, cwd=cwd, timeout=3)
    assert '"argv"' in caught.value.output and caught.value.stderr == "to stderr\n"
    assert forked.python_m("probe_module", env=env, cwd=cwd, timeout=60).returncode == 3


@pytest.mark.portable
def test_a_forked_command_takes_the_kernel_path_of_the_process_that_started_the_zygote():
    """tests/portability.py runs each lane as a pytest process of its own: the zygote is that process's child, started
    with the lane's environment (ATEN_CPU_CAPABILITY is read when torch is imported, FAISS_SIMD_LEVEL when faiss is),
    so a command forked from it takes the lane's kernel path, and no lane's torch is another's."""
    import faiss
    import torch

    before = forked._SHARED[os.getpid()].count if os.getpid() in forked._SHARED else 0
    out = forked.python_m("medbench_release.kernels", env=forked.base_env(), cwd=forked.ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert forked._SHARED[os.getpid()].count == before + 1  # forked, not started afresh
    kernels = json.loads(out.stdout)["kernels"]
    assert kernels["torch"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert kernels["torch"]["threads"] == torch.get_num_threads()
    assert kernels["faiss"].get("simd_level") == (faiss.SIMDConfig.get_level_name() if hasattr(faiss, "SIMDConfig") else None)
    if os.environ.get("ATEN_CPU_CAPABILITY"):
        assert kernels["torch"]["cpu_capability"] == os.environ["ATEN_CPU_CAPABILITY"].upper()


def _hold_until_the_command_ended(zygote: forked.Zygote) -> None:
    """Wait until the zygote wrote both lines of the command in flight (its pid, then its exit) into the pipe,
    unread: the byte count waiting is longer than any pid line (pids have at most 7 digits on Linux)."""
    import fcntl
    import struct
    import termios
    import time

    longest_pid_line = len(json.dumps({"id": str(zygote.out), "pid": 4194304})) + 1
    deadline = time.monotonic() + 60
    while True:
        waiting = struct.unpack("i", fcntl.ioctl(zygote.proc.stdout.fileno(), termios.FIONREAD, b"\0" * 4))[0]
        if waiting > longest_pid_line:
            return
        assert time.monotonic() < deadline, f"the command did not end ({waiting} bytes waiting)"
        time.sleep(0.05)


def test_a_command_that_ended_before_its_pid_was_read_is_not_waited_for_nor_killed(probe, monkeypatch):
    """The race of issue 50, made certain: the command ends, and the zygote writes its pid and exit lines, before
    the pid is read. A reader that buffers both lines then waits on the pipe for a line it already holds."""
    import time

    env, cwd = probe
    forked.python_m("probe_module", env=env, cwd=cwd, timeout=60)  # the shared zygote, started
    read = forked.Zygote._read

    def read_late(self, *fields, **kw):
        if "pid" in fields:
            _hold_until_the_command_ended(self)
        return read(self, *fields, **kw)

    killed = []
    real_kill = os.kill
    monkeypatch.setattr(forked.Zygote, "_read", read_late)
    monkeypatch.setattr(os, "kill", lambda pid, sig: (killed.append(pid), real_kill(pid, sig)))
    t = time.monotonic()
    out = forked.python_m("probe_module", "a", env=env, cwd=cwd, timeout=5)
    assert out.returncode == 3 and json.loads(out.stdout.splitlines()[0])["argv"][1:] == ["a"]
    assert time.monotonic() - t < 5 and killed == []  # its end was seen at once; no signal went to the pid it had


def test_each_child_draws_its_own_random_numbers_as_a_new_interpreter_does(probe):
    env, cwd = probe
    a, b = (json.loads(forked.python_m("probe_module", "seeds", env=env, cwd=cwd, timeout=60).stdout) for _ in range(2))
    zygote = forked._SHARED[os.getpid()]
    # Seeded afresh in each child, as each new process seeds them (torch's initial seed too: it differs between processes).
    assert a["random"] != b["random"] and a["numpy"] != b["numpy"] and a["torch"] != b["torch"]
    # The hash seed is the zygote's, drawn at its start (the module's docstring): the same in both children.
    assert a["hash"] == b["hash"] and zygote.hash_seed.isdigit()
    real = subprocess.run([sys.executable, "-c", "print(hash('medbench'))"], env={**env, "PYTHONHASHSEED": zygote.hash_seed},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert int(real.stdout) == a["hash"]  # that seed, and no other, is what the children hash with


ZYGOTE_RESOURCES = """
import atexit, os, tempfile
FOLDER = tempfile.TemporaryDirectory(prefix="zygote-")  # a weakref.finalize removes it at exit
atexit.register(print, "the zygote's bound handler ran", flush=True)  # bound to this process's arguments
def module_level():
    print("the module-level handler ran", flush=True)
atexit.register(module_level)
"""


def test_a_child_runs_the_module_level_exit_handlers_and_leaves_the_zygotes_objects_alone(probe, tmp_path):
    env, cwd = probe
    code = Path(env["PYTHONPATH"])
    (code / "zygote_resources.py").write_text(ZYGOTE_RESOURCES)
    (code / "folder_of_zygote.py").write_text("import sys, zygote_resources\nprint(zygote_resources.FOLDER.name)\n")
    base = {**forked.base_env(), "PYTHONPATH": f"{forked.ROOT}{os.pathsep}{code}"}
    zygote = forked.Zygote(tmp_path / "zygote", env=base, preload=("zygote_resources",))
    try:
        assert zygote.ready["exit_handlers"] == ["finalize._exitfunc", "module_level"] and zygote.ready["bound_exit_handlers"] == ["print"]
        assert zygote.ready["unrecorded_exit_handlers"] == 0
        zygote.submit("folder_of_zygote", env=base, cwd=cwd)
        assert zygote.result(timeout=60) == 0
        said = zygote.out.read_text().splitlines()
        folder = Path(said[0])
        assert said[1:] == ["the module-level handler ran"]  # not the bound one
        assert folder.is_dir()  # the zygote's temporary folder outlived the child's exit
    finally:
        zygote.close()
    assert not folder.exists()  # ... and went with the zygote


def test_the_zygote_refuses_to_fork_while_a_thread_it_cannot_vouch_for_runs(probe, tmp_path):
    env, cwd = probe
    code = Path(env["PYTHONPATH"])
    (code / "starts_a_thread.py").write_text("import threading, time\nthreading.Thread(target=time.sleep, args=(3600,), name='poller', daemon=True).start()\n")
    base = {**forked.base_env(), "PYTHONPATH": f"{forked.ROOT}{os.pathsep}{code}"}
    zygote = forked.Zygote(tmp_path / "zygote", env=base, preload=("starts_a_thread",))
    try:
        with pytest.raises(forked.NotForked, match=r"Python threads alive in the zygote: \['poller'\]"):
            zygote.submit("probe_module", env=base, cwd=cwd)
        assert zygote.pid is None and zygote.proc.poll() is None  # nothing started; the zygote still answers
    finally:
        zygote.stop()


def test_the_thread_pools_the_preloaded_libraries_leave_running_work_in_a_forked_child(probe):
    """The threads a fork copies (tests/forked.py's FORK_SAFE_THREADS) were alive in the zygote, and every pool of
    the preloaded libraries then runs parallel work in the child to the values this process computes."""
    from tests import fork_pools

    env, cwd = probe
    forked.python_m("probe_module", env=env, cwd=cwd, timeout=60)
    zygote = forked._SHARED[os.getpid()]
    assert {"jemalloc_bg_thd", "polars-ooc-clea", "(unnamed)"} <= set(zygote.threads) <= set(forked.FORK_SAFE_THREADS)
    before = zygote.count
    out = forked.python_m("tests.fork_pools", env={**env, "PYTHONPATH": str(forked.ROOT)}, cwd=forked.ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert zygote.count == before + 1  # forked
    said = json.loads(out.stdout)
    assert said.pop("threads")["torch"] > 1  # work spread over threads, not one
    assert said == fork_pools.results(threads=False)


def test_medbench_test_fork_0_runs_every_command_as_a_process_of_its_own(probe, monkeypatch, tmp_path):
    env, cwd = probe
    forked.python_m("probe_module", env=env, cwd=cwd, timeout=60)
    zygote = forked._SHARED[os.getpid()]
    before = zygote.count
    monkeypatch.setenv(forked.FORK_VAR, "0")
    out = forked.python_m("probe_module", "a", env=env, cwd=cwd, timeout=60)
    assert out.returncode == 3 and zygote.count == before  # not forked
    assert "HF_HUB_OFFLINE" not in forked.base_env() or "HF_HUB_OFFLINE" in os.environ  # no offline switch of the harness's own
    # A test's own commands (tests/cli/command.py's Forked): real processes, a prelude run before the module as -m runs it.
    runner = forked.commands(tmp_path / "runs", prelude="print('prelude', flush=True)")
    assert isinstance(runner, forked.Spawned)
    runner.submit("probe_module", "b", env=env, cwd=cwd)
    assert runner.result(timeout=60) == 3
    said = runner.out.read_text().splitlines()
    real = subprocess.run([sys.executable, "-m", "probe_module", "b"], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert said[0] == "prelude" and json.loads(said[1]) == json.loads(real.stdout.splitlines()[0])
