"""The portability lanes of the README's test command: the tests that compare float work with recorded values, run again
under other kernel paths of the same machine, each against the same recorded values.

    python tests/portability.py [--lanes generic,avx2,avx512] [pytest options]

``scripts/test`` runs it after the whole suite passed (docs/contributing/testing.md, "Portability lanes").
Each lane is a pytest process of its own, so that what the libraries read when they are imported
(``ATEN_CPU_CAPABILITY``, ``FAISS_SIMD_LEVEL``, the BLAS core type and thread counts) is the lane's, and
tests/forked.py's zygote, started by that process, carries it to the commands it forks
(tests/test_forked.py holds it). Before its tests, each lane asks a process of its environment which
paths it took (``python -m medbench_release.kernels``) and stops if a switch did not take effect.

The tests are those marked ``portable`` in :data:`FILES` (tests/test_portability.py keeps the list and
the marks in step): the golden outputs check and the changes beyond the rule it must catch, the
recorded version judged by ``medbench reproduce``'s compare and the changes it must catch, ColBERT
against pylate's recorded outputs, the rule's own tests, and the zygote's kernel path.

A lane needs the CPU flags its kernels use (``avx512`` is skipped, with the reason printed, on a CPU
without AVX-512). FAISS: faiss-cpu >= 1.12 is one library that picks its SIMD level at run time
(``FAISS_SIMD_LEVEL``); an older wheel ships one module per level, picked by ``FAISS_OPT_LEVEL``
(``generic`` loads the plain one); a wheel with neither gets no FAISS switch, said so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = (
    "tests/core/test_golden_outputs.py",
    "tests/core/test_colbert_kind.py",
    "tests/release/test_tolerance.py",
    "tests/test_forked.py",
)
THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclass(frozen=True)
class Lane:
    """One set of kernel paths: the environment that forces it, the CPU flags it needs, and the paths it must take."""

    name: str
    env: dict[str, str]
    needs: tuple[str, ...] = ()
    torch: str = ""  # torch.backends.cpu.get_cpu_capability() expected
    faiss: str = ""  # faiss.SIMDConfig.get_level_name() expected (dynamic-dispatch FAISS)
    faiss_module: str = ""  # FAISS_OPT_LEVEL for a FAISS of one module per level
    threads: int = 0
    notes: list[str] = field(default_factory=list)


LANES = (
    # Everything on its most generic path: ATen's default kernels, one thread, FAISS without SIMD, MKL's compatible
    # code path, oneDNN at SSE4.1, OpenBLAS's oldest x86-64 kernels.
    Lane(
        "generic",
        {
            "ATEN_CPU_CAPABILITY": "default",
            **dict.fromkeys(THREADS, "1"),
            "MKL_CBWR": "COMPATIBLE",
            "ONEDNN_MAX_CPU_ISA": "SSE41",
            "OPENBLAS_CORETYPE": "Prescott",
        },
        torch="DEFAULT",
        faiss="NONE",
        faiss_module="generic",
        threads=1,
    ),
    # AVX2 + FMA everywhere, two threads.
    Lane(
        "avx2",
        {"ATEN_CPU_CAPABILITY": "avx2", **dict.fromkeys(THREADS, "2"), "ONEDNN_MAX_CPU_ISA": "AVX2", "OPENBLAS_CORETYPE": "Haswell"},
        needs=("avx2", "fma"),
        torch="AVX2",
        faiss="AVX2",
        faiss_module="AVX2",
        threads=2,
    ),
    Lane(
        "avx512",
        {"ATEN_CPU_CAPABILITY": "avx512", **dict.fromkeys(THREADS, "2"), "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "OPENBLAS_CORETYPE": "SkylakeX"},
        needs=("avx512f", "avx512bw", "avx512vl", "avx512dq"),
        torch="AVX512",
        faiss="AVX512",
        faiss_module="AVX512",
        threads=2,
    ),
)


def _kernels(env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-m", "medbench_release.kernels"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"python -m medbench_release.kernels failed under {env_line(env)}:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def env_line(env: dict[str, str]) -> str:
    from medbench_release.kernels import SWITCHES

    return " ".join(f"{k}={env[k]}" for k in SWITCHES if k in env)


def lane_env(lane: Lane, native: dict) -> tuple[dict[str, str], str]:
    """The lane's environment over this one, with the FAISS switch the installed faiss honours; and what was said about it."""
    env = {k: v for k, v in os.environ.items() if k not in ("FAISS_SIMD_LEVEL", "FAISS_OPT_LEVEL")}
    env.update(lane.env)
    faiss = native["kernels"]["faiss"]
    if "simd_level" in faiss:  # one library, SIMD level chosen at run time
        env["FAISS_SIMD_LEVEL"] = lane.faiss
        return env, ""
    import importlib.util

    spec = importlib.util.find_spec("faiss")
    folder = Path(spec.origin).parent if spec and spec.origin else None
    if folder is not None and any(folder.glob("swigfaiss_avx2*")):
        env["FAISS_OPT_LEVEL"] = lane.faiss_module
        return env, ""
    return env, "the installed faiss is one build without run-time dispatch: no FAISS switch in this lane"


def check_paths(lane: Lane, got: dict) -> list[str]:
    """Where the lane's process did not take the lane's paths."""
    k, bad = got["kernels"], []
    if k["torch"]["cpu_capability"] != lane.torch:
        bad.append(f"torch took {k['torch']['cpu_capability']}, not {lane.torch}")
    if k["torch"]["threads"] != lane.threads:
        bad.append(f"torch runs {k['torch']['threads']} threads, not {lane.threads}")
    if "simd_level" in k["faiss"] and k["faiss"]["simd_level"] != lane.faiss:
        bad.append(f"faiss took {k['faiss']['simd_level']}, not {lane.faiss}")
    return bad


def describe(got: dict) -> str:
    k = got["kernels"]
    blas = ", ".join(
        f"{p['library'].split('-')[0].split('.')[0]} {p.get('architecture', '')}".strip() for p in k["threadpools"] if p["internal_api"] == "openblas"
    )
    faiss = k["faiss"].get("simd_level", k["faiss"]["compile_options"])
    return f"torch {k['torch']['cpu_capability']} x{k['torch']['threads']}, faiss {faiss}, openblas {blas}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", default=",".join(lane.name for lane in LANES), help="comma-separated lanes (default: all)")
    args, pytest_args = parser.parse_known_args(argv)
    sys.path.insert(0, str(ROOT))
    from medbench_release.kernels import cpu

    wanted = [lane for lane in LANES if lane.name in args.lanes.split(",")]
    flags = set(cpu()["flags"])
    native = _kernels(dict(os.environ))
    print(f"portability lanes on {cpu()['model']} ({', '.join(sorted(flags))}); natively {describe(native)}", flush=True)
    failed, rows = [], []
    for lane in wanted:
        missing = [f for f in lane.needs if f not in flags]
        if missing:
            print(f"lane {lane.name}: skipped: this CPU has no {', '.join(missing)}", flush=True)
            rows.append({"lane": lane.name, "skipped": f"no {', '.join(missing)}"})
            continue
        env, note = lane_env(lane, native)
        started, cpu0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        got = _kernels(env)
        wrong = check_paths(lane, got)
        print(f"lane {lane.name}: {env_line(env)}: {describe(got)}" + (f" ({note})" if note else ""), flush=True)
        if wrong:
            print(f"lane {lane.name}: FAILED: the switches did not take effect: {'; '.join(wrong)}", flush=True)
            failed.append(lane.name)
            continue
        cmd = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-m", "portable", "-q", *pytest_args, *FILES]
        rc = subprocess.run(cmd, env=env, cwd=ROOT).returncode
        seconds, cpu1 = time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime  # the lane's processes, their children too
        rows.append({"lane": lane.name, "rc": rc, "seconds": round(seconds, 1), "cpu_seconds": round(cpu_s, 1), "env": env_line(env), "paths": describe(got)})
        print(f"lane {lane.name}: {'passed' if rc == 0 else 'FAILED'} in {seconds:.0f} s ({cpu_s:.0f} s of CPU)", flush=True)
        if rc != 0:
            failed.append(lane.name)
    if os.environ.get("MEDBENCH_LANES_REPORT"):
        Path(os.environ["MEDBENCH_LANES_REPORT"]).write_text(json.dumps(rows, indent=1) + "\n")
    print(f"portability lanes: {len(rows) - len(failed) - sum('skipped' in r for r in rows)} passed, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else "") + f", {sum('skipped' in r for r in rows)} skipped", flush=True)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
