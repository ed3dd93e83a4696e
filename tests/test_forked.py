"""tests/forked.py: a command forked from the zygote behaves as ``python -m`` started afresh would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests import forked

PROBE = """
import atexit, json, os, sys, threading, time
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
