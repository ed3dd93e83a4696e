"""The floating-point environment of this process: the CPU, the kernel path each numeric library takes, their versions.

A value recorded on one machine and compared on another (golden outputs, a library's outputs kept as
numbers, a benchmark version) is judged by :mod:`medbench_release.tolerance`; what it was made with is
recorded beside it (:func:`environment`), so that a difference can be traced to a kernel path. The
switches below are the ones the lock's libraries honour, each checked to change float results on an
AVX2 machine (docs/contributing/testing.md, "Portability lanes"):

- ``ATEN_CPU_CAPABILITY`` (torch's own kernels: layer norm, softmax, GELU, addmm's epilogue), read at import;
- ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` (how BLAS splits a product);
- ``MKL_CBWR`` (the MKL code path behind torch's matrix products);
- ``ONEDNN_MAX_CPU_ISA`` (oneDNN's kernels in torch: GELU, convolutions);
- ``OPENBLAS_CORETYPE`` (the OpenBLAS kernels numpy and FAISS load);
- ``FAISS_SIMD_LEVEL`` (faiss-cpu >= 1.12 is one library that dispatches at run time; ``FAISS_OPT_LEVEL``
  only picks among separately built modules, and the installed wheel ships one).

``python -m medbench_release.kernels`` prints :func:`environment` as JSON.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from importlib import metadata
from typing import Any

SWITCHES = (
    "ATEN_CPU_CAPABILITY",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_CBWR",
    "ONEDNN_MAX_CPU_ISA",
    "OPENBLAS_CORETYPE",
    "FAISS_SIMD_LEVEL",
    "FAISS_OPT_LEVEL",
)
LIBRARIES = ("torch", "numpy", "faiss-cpu", "transformers", "sentence-transformers", "open_clip_torch", "polars", "bm25s")
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16", "amx_tile")


def cpu() -> dict[str, Any]:
    """The CPU's model name, the SIMD flags that decide kernel paths, and the logical cores."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and name in ("", platform.machine(), platform.processor()):
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return {"model": name, "machine": platform.machine(), "flags": [f for f in CPU_FLAGS if f in flags], "cores": os.cpu_count()}


def kernel_paths() -> dict[str, Any]:
    """The path each library takes here: torch's ATen capability and threads, FAISS's SIMD level, every BLAS and OpenMP
    runtime loaded (threadpoolctl: library, version, threads, the OpenBLAS core type it chose). A library that is not
    installed (a recording environment of its own, as bench/record_pylate_reference.py's) is left out."""
    out: dict[str, Any] = {}
    try:
        import torch

        out["torch"] = {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(), "mkl": torch.backends.mkl.is_available()}
    except ImportError:
        pass
    try:
        import faiss

        out["faiss"] = {"compile_options": faiss.get_compile_options().strip()}
        if hasattr(faiss, "SIMDConfig"):  # one library dispatching at run time (faiss-cpu >= 1.12)
            out["faiss"]["simd_level"] = faiss.SIMDConfig.get_level_name()
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return out
    out["threadpools"] = [
        {k: p.get(k) for k in ("internal_api", "version", "num_threads", "architecture", "threading_layer") if p.get(k) is not None}
        | {"library": os.path.basename(p["filepath"])}
        for p in threadpool_info()
    ]
    return out


def environment() -> dict[str, Any]:
    """What a recorded float value was made with: CPU, kernel paths, the switches set, library versions, Python."""
    versions = {}
    for lib in LIBRARIES:
        try:
            versions[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            continue
    return {
        "cpu": cpu(),
        "kernels": kernel_paths(),
        "switches": {k: os.environ[k] for k in SWITCHES if k in os.environ},
        "libraries": versions,
        "python": platform.python_version(),
    }


if __name__ == "__main__":
    json.dump(environment(), sys.stdout, indent=1)
    sys.stdout.write("\n")
