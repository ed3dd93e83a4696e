"""One file of an artifact against the version file, by its rule: exact bytes, JSON apart from timings, float
vectors within a tolerance (:func:`compare_vectors`), metrics within :data:`~medbench_release.tolerance.METRIC_TOLERANCE`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from medbench_release.record import faiss_vectors, stable_json_sha256, unpack
from medbench_release.tolerance import METRIC_TOLERANCE
from medbench_release.verdicts import FileVerdict, Verdict


def _vectors(path: Path, rule: str) -> np.ndarray | None:
    return np.load(path, allow_pickle=False) if rule == "array" else faiss_vectors(path)


def compare_vectors(want: dict[str, Any], path: Path, rule: str, published: Path | None, tolerance: float) -> FileVerdict:
    """Float vectors whose bytes differ: same shape and dtype, and within ``tolerance``?

    Against the published file when it is at hand (``published``: every value), otherwise
    against the rows the version file kept (``probe``) and the sum of all values.
    """
    probe = want.get("probe")
    got = _vectors(path, rule)
    if got is None or probe is None:
        return FileVerdict(Verdict.DIFFERS, detail="other bytes, and no vectors to compare (index type without reconstruction)")
    if list(got.shape) != probe["shape"] or str(got.dtype) != probe["dtype"]:
        return FileVerdict(Verdict.DIFFERS, detail=f"shape {list(got.shape)} {got.dtype}, the version has {probe['shape']} {probe['dtype']}")
    if published is not None:
        ref = _vectors(published, rule)
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        over = f"all {got.size} values"
    else:
        rows = probe["rows"]
        ref = unpack(probe["values"], probe["dtype"]).astype(np.float64).reshape(got[rows].shape) if rows else np.zeros((0,))
        diff = np.abs(got[rows].astype(np.float64) - ref)
        over = f"{len(rows)} sampled {'rows' if got.ndim > 1 else 'values'} and the sum"
    worst = float(np.nanmax(diff)) if diff.size else 0.0
    if np.isnan(diff).any():
        worst = float("nan")
    sum_diff = abs(float(got.astype(np.float64).sum()) - probe["sum"])
    within = worst <= tolerance and sum_diff <= tolerance * max(got.size, 1)
    detail = f"other bytes; largest absolute difference {worst:.3g} over {over} (sum differs by {sum_diff:.3g}); tolerance {tolerance:g}"
    return FileVerdict(Verdict.WITHIN_TOLERANCE if within else Verdict.DIFFERS, detail=detail, max_abs_diff=worst)


def compare_metrics(path: Path, want_metrics: dict[str, float] | None) -> FileVerdict:
    from medbench_core.evaluation.scoring import flat_metrics

    if want_metrics is None:
        return FileVerdict(Verdict.DIFFERS, detail="other bytes, and the version records no metrics for this key")
    got = flat_metrics(json.loads(path.read_text()))
    bad = []
    for k in sorted(set(got) | set(want_metrics)):
        a, b = got.get(k), want_metrics.get(k)
        if a is None or b is None or not (abs(a - b) <= METRIC_TOLERANCE or (math.isnan(a) and math.isnan(b))):
            bad.append(f"{k} {b!r} -> {a!r}")
    if bad:
        return FileVerdict(Verdict.DIFFERS, detail=f"{len(bad)} metric(s) differ beyond {METRIC_TOLERANCE:g}: " + "; ".join(bad[:4]))
    return FileVerdict(Verdict.WITHIN_TOLERANCE, detail=f"other bytes; every metric within {METRIC_TOLERANCE:g}")


def compare_file(
    name: str, want: dict[str, Any], folder: Path, rebuilt: dict[str, Any] | None, *, published: Path | None, metrics: dict[str, float] | None, tolerance: float
) -> FileVerdict:
    """One file of an artifact, by its rule."""
    if rebuilt is None:
        return FileVerdict(Verdict.DIFFERS, detail="not in the rebuild")
    if rebuilt["sha256"] == want["sha256"]:
        return FileVerdict(Verdict.IDENTICAL)
    path, rule = folder / name, want["rule"]
    if rule == "json":
        same = stable_json_sha256(path) == want.get("stable_sha256")
        return FileVerdict(Verdict.IDENTICAL, detail="same apart from timings") if same else FileVerdict(Verdict.DIFFERS, detail="other content")
    if rule in ("array", "faiss"):
        return compare_vectors(want, path, rule, published, tolerance)
    if rule == "metrics":
        return compare_metrics(path, metrics)
    return FileVerdict(Verdict.DIFFERS, detail=f"sha256 {rebuilt['sha256'][:12]}, the version has {want['sha256'][:12]}")
