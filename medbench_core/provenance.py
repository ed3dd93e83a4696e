"""Code version, lock-file hash, environment fingerprint and provenance keys.

A result is identified by everything that produced it; :func:`artifact_key` hashes those
inputs so that two artifacts differing in any of them never share a path.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

_CORE = Path(__file__).resolve().parent

# Packages whose versions can change a score; recorded with every run.
SCORING_PACKAGES = (
    "torch", "transformers", "sentence-transformers", "open_clip_torch", "faiss-cpu", "bm25s",
    "PyStemmer", "numpy", "polars", "pyarrow", "tokenizers", "safetensors",
)


# The medbench_core modules (or packages) whose code decides each stage's output. A stage's code version
# hashes only these, so editing (say) the contracts does not re-encode every corpus.
STAGE_MODULES: dict[str, tuple[str, ...]] = {
    "curated_task": ("model", "readers", "catalog", "images", "licences", "storage", "hub"),
    "embeddings": ("model", "retrieval", "encoders", "clip", "images", "bm25", "pipeline", "storage", "chunking", "vectors"),
    "index": ("index", "pipeline", "storage", "vectors"),
    "run": ("model", "ranking", "index", "bm25", "retrieval", "encoders", "clip", "images", "pipeline", "storage", "chunking", "instructions", "vectors"),
    "metrics": ("metrics", "pipeline", "storage", "stats"),  # stats: each mean's bootstrap CI
    "leaderboard": ("leaderboard", "pipeline"),
    # Runs built from upstream runs (fusion, cross-encoder reranking); see medbench_core/derived.py.
    "derived_run": ("derived", "fuse_rerank", "models", "model", "ranking", "encoders", "storage"),
    "reports": ("reports", "plots", "stats", "leaderboard", "metrics"),
    "contracts": ("contracts", "licences", "model", "images"),
    # Generation-augmented retrieval: the expansion texts, their contract, and the run on them.
    # Kept apart so that editing how expansions are combined does not regenerate them.
    "expansion": ("expansion/spec", "expansion/frame", "expansion/files", "expansion/generate", "expansion/stage", "model", "storage"),
    "expansion_contract": ("expansion/contract", "contracts/gx", "contracts/results"),
    # The expanded run is built by derived.build_derived_run, like every run built from upstreams.
    "expanded_run": ("expansion/combine", "expansion/rules", "expansion/frame", "derived", "fuse_rerank", "model", "ranking", "index", "bm25", "retrieval", "encoders", "pipeline", "storage"),
}


@lru_cache(maxsize=None)
def code_version(stage: str | None = None) -> str:
    """sha256 over the sources behind ``stage`` (see STAGE_MODULES), or all of medbench_core."""
    if stage is None:
        files = sorted(p for p in _CORE.rglob("*") if p.is_file() and p.suffix in {".py", ".json"} and "__pycache__" not in p.parts)
    else:
        files = []
        for m in STAGE_MODULES[stage]:  # a module, or a package (every file in it)
            files += sorted((_CORE / m).rglob("*.py")) if (_CORE / m).is_dir() else [_CORE / f"{m}.py"]
        if "clip" in STAGE_MODULES[stage]:
            files += sorted((_CORE / "clip_configs").glob("*.json"))
    h = hashlib.sha256()
    for p in files:
        if p.exists():
            h.update(str(p.relative_to(_CORE)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def git_sha(repo: str | Path) -> str:
    """HEAD commit of ``repo``, with ``-dirty`` when tracked files differ; ``unknown`` outside git."""
    try:
        sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, check=True
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def file_hash(path: str | Path) -> str:
    p = Path(path)
    if not p.exists():
        return "missing"
    return hashlib.sha256(p.read_bytes()).hexdigest()[:16]


def package_versions(names: tuple[str, ...] = SCORING_PACKAGES) -> dict[str, str]:
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = "absent"
    return out


def environment_fingerprint() -> dict[str, Any]:
    """Python, platform, CPU/GPU and the versions of the packages that compute scores."""
    gpu = "none"
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except Exception:  # torch absent or CUDA broken: the fingerprint says so
        gpu = "unavailable"
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "gpu": gpu,
        "packages": package_versions(),
    }


def artifact_key(**parts: Any) -> str:
    """Short sha256 of the JSON of ``parts`` (sorted keys): the identity of an artifact."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]
