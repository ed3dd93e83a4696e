"""What moved between a version and its rebuild: the first artifact that differs, its upstream provenance beside the
version's, and the entries of models.yaml or tasks.yaml that changed (:func:`first_difference`)."""

from __future__ import annotations

from typing import Any

from medbench_release.record import catalogue_entries, registry_entries
from medbench_release.verdicts import OK, ArtifactResult, Rebuilt, Verdict

# What each upstream field is evidence of, when it moved.
# What each upstream field is evidence of, when it moved.
MOVED = {
    "source_sha256": "the sources changed",
    "dataset_revision": "the sources changed",
    "task_entry": "the task's catalogue entry moved",
    "task_content_hash": "the data moved",
    "model_revision": "the model moved",
    "model_entry": "the model moved",
    "code_version": "the code moved",
    "upstream_key": "an upstream artifact moved",
}


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def entry_changes(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """``settings.k1: 1.2 -> 1.3`` for every field of a registry or catalogue entry that changed."""
    a, b = _flat(old or {}), _flat(new or {})
    return [f"{k}: {a.get(k, '(absent)')!r} -> {b.get(k, '(absent)')!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


NAMES = {
    "source": "source",
    "source_sha256": "source data sha256",
    "dataset_revision": "dataset revision",
    "task_entry": "catalogue entry",
    "task_content_hash": "task content hash",
    "model_revision": "model revision",
    "model_entry": "registry entry",
    "code_version": "code version",
    "upstream_key": "upstream key",
}


def first_difference(results: list[ArtifactResult], record: dict[str, Any], rebuilt: Rebuilt) -> dict[str, Any] | None:
    """The first artifact (in stage order) that differs or is missing, its upstream provenance and what moved."""
    bad = next((r for r in results if r.verdict not in OK), None)
    if bad is None:
        return None
    changes: list[str] = []
    if "model_entry" in bad.moved and bad.model:
        changes = entry_changes(
            registry_entries(record["registry"]["models.yaml"]["text"]).get(bad.model), registry_entries(rebuilt.models_text).get(bad.model)
        )
    elif "task_entry" in bad.moved:
        changes = entry_changes(catalogue_entries(record["registry"]["tasks.yaml"]["text"]).get(bad.task), catalogue_entries(rebuilt.tasks_text).get(bad.task))
    upstream = []
    for k in sorted(bad.upstream, key=lambda k: list(NAMES).index(k) if k in NAMES else len(NAMES)):
        v = bad.upstream[k]
        if v in (None, "") and not bad.rebuilt_upstream.get(k):
            continue
        name = NAMES.get(k, k)
        if k in bad.moved:
            extra = f" ({', '.join(changes)})" if k in ("model_entry", "task_entry") and changes else ""
            upstream.append(f"{name} {short(bad.rebuilt_upstream[k])} (the version: {short(v)}): MOVED{extra}")
        else:
            upstream.append(f"{name} {short(v)}" + (" (same)" if bad.rebuilt_upstream else ""))
    causes = sorted({MOVED.get(k, k) for k in bad.moved if k != "upstream_key"})
    if bad.verdict == Verdict.MISSING:
        cause = "it was not rebuilt (see the rebuild's log)"
    elif causes:
        cause = " and ".join(causes)
    elif "upstream_key" in bad.moved:
        cause = "an upstream artifact moved"
    elif bad.stage == "curated_task":
        # Read from the sources by the version's own code: a version released before medbench recorded the sources a task
        # was curated from (issue 44) recorded the sources as they were at release time.
        cause = (
            "same upstream provenance, other bytes: the sources changed after the version's task was curated (its record names the "
            "sources as they were at its release), or the reader is not deterministic"
        )
    else:
        cause = "same upstream provenance, other bytes: the environment (library versions, CPU, threads) or code that is not deterministic"
    why = bad.notes[:1] + [f"{n}: {f.detail or f.verdict}" for n, f in bad.files.items() if f.verdict not in OK][:3]
    lines = [f"first difference: {bad.label} ({bad.path}): {bad.verdict}", *(f"  {w}" for w in why)]
    lines.append("  upstream provenance: " + "; ".join(upstream))
    lines.append(f"  so {cause}")
    return {
        "artifact": bad.label,
        "path": bad.path,
        "verdict": bad.verdict,
        "why": why,
        "upstream": upstream,
        "moved": bad.moved,
        "entry_changes": changes,
        "cause": cause,
        "message": "\n".join(lines),
    }


def short(v: Any) -> str:
    s = str(v)
    return s[:16] if len(s) > 20 and " " not in s else s
