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

# Packages whose versions can change any score: what every stage rests on (task frames, vectors, the FAISS
# index). Each model kind declares its own library beside them (``Kind.packages``); the whole list, recorded
# with a benchmark version and a canary run, is medbench_core.retrieval.kinds.scoring_packages().
SCORING_PACKAGES = ("numpy", "polars", "pyarrow", "faiss-cpu")


# The declared output version of each stage. Bump a stage's number in the change that alters what
# it writes (tests/core/test_golden_outputs.py fails when an output changes without a bump). Keys use
# these, never the bytes of the sources: moving a module, renaming a function or editing a comment
# re-keys nothing. A model kind declares its own version too (medbench_core.retrieval.kinds).
STAGE_VERSIONS: dict[str, str] = {
    "curated_task": "1",  # readers, the task model, images, licences
    # the task and overlap contracts' verdicts; 2: qrels holes (judged documents per query, refuse or mark);
    # 3: no query equals or near-duplicates its relevant document (multilingual tasks)
    "contracts": "3",
    "embeddings": "1",  # corpus representation (with the kind's version)
    "index": "1",  # FAISS index over the vectors
    "run": "1",  # top-k search with the tie rule (with the kind's version)
    # per-query metrics, means, bootstrap CIs, breakdowns; 2: judged@10, holes, bpref, condensed nDCG, bounds;
    # 3: tie-aware and chance values, chance-corrected means, no best-minus-each gap;
    # 4: exact nDCG bounds, negative grades unjudged, queries with a judged non-relevant document (issue 46)
    "metrics": "4",
    "derived_run": "1",  # runs built from upstream runs (fusion, rerank)
    "expanded_run": "1",  # a retriever on expanded queries
    "expansion": "3",  # expansion texts (published or generated) and their split (2: R2MED's rule per generator family;
    # 3: an answer without its family's marker is the text as written, unstripped, and an empty R2MED hy_doc is kept, as R2MED's code)
    "expansion_contract": "2",  # the expansion gate and its leakage measure (2: an empty answer warns, as R2MED scores it, instead of failing)
    "judgements": "1",  # LLM relevance judgements of a task's pool, or a judgement file read (evaluation/judging)
    "filled_metrics": "2",  # a cell's run scored on the human + LLM qrels layer; 2: the humans' queries only, identical ids, exact bounds
    "contamination": "1",  # a task's near-duplicate texts and images in other tasks and training manifests (evaluation/contamination)
    "leaderboard": "1",  # the leaderboard cells
    # tables, CIs, paired tests, plots; 2: rank intervals and groups; 3: chance row, floors and ties, one paired gap
    # (pivot minus L, Holm), language variance; 4: trust cells follow the metric, one interval per cell (issue 46)
    # 5: a short head (figure + CI) pointing to the site (issue 48); 6: one difference plot per model x task,
    # diff/<task>/<model>.png, instead of one per task with every model (issue 53)
    "reports": "6",
}


def stage_version(stage: str) -> str:
    """The declared output version of ``stage`` (:data:`STAGE_VERSIONS`)."""
    try:
        return STAGE_VERSIONS[stage]
    except KeyError:
        raise KeyError(f"stage {stage!r} declares no version; known: {sorted(STAGE_VERSIONS)}") from None


@lru_cache(maxsize=None)
def source_digest() -> str:
    """sha256 over every source file of medbench_core: which code ran (provenance only, never a key)."""
    files = sorted(p for p in _CORE.rglob("*") if p.is_file() and p.suffix in {".py", ".json"} and "__pycache__" not in p.parts)
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(_CORE)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def code_versions() -> dict[str, str]:
    """What a benchmark version records of its code: the source digest (``core``) and every stage's version."""
    return {"core": source_digest(), **STAGE_VERSIONS}


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
    """The installed version of each distribution in ``names`` (``absent`` when it is not installed)."""
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = "absent"
    return out


def environment_fingerprint(packages: tuple[str, ...]) -> dict[str, Any]:
    """Python, platform, CPU/GPU and the versions of ``packages``: pass
    :func:`medbench_core.retrieval.kinds.scoring_packages` (every kind's library; this module imports none of ours)."""
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
        "packages": package_versions(packages),
    }


def artifact_key(**parts: Any) -> str:
    """Short sha256 of the JSON of ``parts`` (sorted keys): the identity of an artifact."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]
