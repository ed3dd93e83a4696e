"""Compare a rebuilt data folder with a version file, artifact by artifact, and say what moved.

Each artifact of the version (curated tasks, then embeddings, indices, runs, metrics of every
model x task, in stage order) is looked for in the rebuild under its key, and its files are
judged by the rule the version file gives them (:data:`medbench_release.record.RULES`). An
artifact is ``identical``, ``within_tolerance`` (float vectors only: their largest absolute
difference is reported), ``differs`` (other bytes, or rebuilt under another key: its inputs
changed) or ``missing`` (not rebuilt). The first artifact that differs is named with its upstream
provenance beside the version's, so that a reader sees whether the data, the model or the code
moved (:func:`first_difference`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from medbench_core.errors import IntegrityError
from medbench_core.storage import MANIFEST, verify_manifest
from medbench_release.record import (
    ARRAY_TOLERANCE,
    METRIC_TOLERANCE,
    catalogue_entries,
    faiss_vectors,
    model_upstream,
    registry_entries,
    stable_json_sha256,
    task_upstream,
    unpack,
)

OK = ("identical", "within_tolerance")
# What each upstream field is evidence of, when it moved.
MOVED = {
    "source_sha256": "the data",
    "dataset_revision": "the data",
    "task_entry": "the task's catalogue entry",
    "task_content_hash": "the data",
    "model_revision": "the model",
    "model_entry": "the model",
    "code_version": "the code",
    "upstream_key": "an upstream artifact",
}


@dataclass
class Rebuilt:
    """What the rebuild ran with: its data folder, registry and catalogue texts, code versions and source folder."""

    data_dir: Path
    models_text: str
    tasks_text: str
    code_versions: dict[str, str]
    shared_data: Path


@dataclass
class ArtifactResult:
    stage: str
    model: str | None
    task: str
    path: str
    key: str
    rebuilt_key: str | None
    verdict: str
    notes: list[str] = field(default_factory=list)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_abs_diff: float | None = None
    upstream: dict[str, Any] = field(default_factory=dict)  # the version's
    rebuilt_upstream: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.stage} {self.model} x {self.task}" if self.model else f"{self.stage} {self.task}"

    @property
    def partition(self) -> str:
        return f"{self.model} x {self.task}" if self.model else f"task {self.task}"

    @property
    def moved(self) -> list[str]:
        """Upstream fields whose rebuilt value differs from the version's."""
        if not self.rebuilt_upstream:
            return []
        return [k for k, v in self.upstream.items() if k in self.rebuilt_upstream and self.rebuilt_upstream[k] != v]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["label"], out["partition"], out["moved"] = self.label, self.partition, self.moved
        return out


# --- files -------------------------------------------------------------------------------------


def _vectors(path: Path, rule: str) -> np.ndarray | None:
    return np.load(path, allow_pickle=False) if rule == "array" else faiss_vectors(path)


def compare_vectors(want: dict[str, Any], path: Path, rule: str, published: Path | None, tolerance: float) -> dict[str, Any]:
    """Float vectors whose bytes differ: same shape and dtype, and within ``tolerance``?

    Against the published file when it is at hand (``published``: every value), otherwise
    against the rows the version file kept (``probe``) and the sum of all values.
    """
    probe = want.get("probe")
    got = _vectors(path, rule)
    if got is None or probe is None:
        return {"verdict": "differs", "detail": "other bytes, and no vectors to compare (index type without reconstruction)"}
    if list(got.shape) != probe["shape"] or str(got.dtype) != probe["dtype"]:
        return {"verdict": "differs", "detail": f"shape {list(got.shape)} {got.dtype}, the version has {probe['shape']} {probe['dtype']}"}
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
    return {"verdict": "within_tolerance" if within else "differs", "detail": detail, "max_abs_diff": worst}


def compare_metrics(path: Path, want_metrics: dict[str, float] | None) -> dict[str, Any]:
    from medbench_core.retrieval.stages import flat_metrics

    if want_metrics is None:
        return {"verdict": "differs", "detail": "other bytes, and the version records no metrics for this key"}
    got = flat_metrics(json.loads(path.read_text()))
    bad = []
    for k in sorted(set(got) | set(want_metrics)):
        a, b = got.get(k), want_metrics.get(k)
        if a is None or b is None or not (abs(a - b) <= METRIC_TOLERANCE or (math.isnan(a) and math.isnan(b))):
            bad.append(f"{k} {b!r} -> {a!r}")
    if bad:
        return {"verdict": "differs", "detail": f"{len(bad)} metric(s) differ beyond {METRIC_TOLERANCE:g}: " + "; ".join(bad[:4])}
    return {"verdict": "within_tolerance", "detail": f"other bytes; every metric within {METRIC_TOLERANCE:g}"}


def compare_file(
    name: str, want: dict[str, Any], folder: Path, rebuilt: dict[str, Any] | None, *, published: Path | None, metrics: dict[str, float] | None, tolerance: float
) -> dict[str, Any]:
    """One file of an artifact, by its rule."""
    if rebuilt is None:
        return {"verdict": "differs", "detail": "not in the rebuild"}
    if rebuilt["sha256"] == want["sha256"]:
        return {"verdict": "identical"}
    path, rule = folder / name, want["rule"]
    if rule == "json":
        same = stable_json_sha256(path) == want.get("stable_sha256")
        return {"verdict": "identical", "detail": "same apart from timings"} if same else {"verdict": "differs", "detail": "other content"}
    if rule in ("array", "faiss"):
        return compare_vectors(want, path, rule, published, tolerance)
    if rule == "metrics":
        return compare_metrics(path, metrics)
    return {"verdict": "differs", "detail": f"sha256 {rebuilt['sha256'][:12]}, the version has {want['sha256'][:12]}"}


# --- artifacts -----------------------------------------------------------------------------------


def _rebuilt_folder(data_dir: Path, a: dict[str, Any]) -> tuple[Path | None, list[str]]:
    """Where the rebuild put the artifact: under the version's key, else the one folder of that stage."""
    exact = data_dir / a["path"]
    if (exact / MANIFEST).exists():
        return exact, []
    if a["stage"] == "curated_task":
        return None, []
    parent = exact.parent
    found = sorted(p for p in parent.iterdir() if (p / MANIFEST).exists()) if parent.is_dir() else []
    if not found:
        return None, []
    notes = [f"{len(found)} rebuilt {a['stage']} folders for {a['model']} x {a['task']}; comparing {found[0].name}"] if len(found) > 1 else []
    return found[0], notes


def compare_version(
    record: dict[str, Any], rebuilt: Rebuilt, *, published_file: Callable[[str], Path | None] | None = None, tolerance: float = ARRAY_TOLERANCE
) -> list[ArtifactResult]:
    """Judge every artifact of ``record`` against the rebuild, in the version file's (stage) order."""
    models, catalogue = registry_entries(rebuilt.models_text), catalogue_entries(rebuilt.tasks_text)
    metrics_of = {(r["model"], r["task"], r["keys"]["metrics"]): r["metrics"] for r in record["runs"]}
    located: dict[tuple[str | None, str, str], tuple[Path | None, list[str]]] = {}
    for a in record["artifacts"]:
        located[(a["model"], a["task"], a["stage"])] = _rebuilt_folder(rebuilt.data_dir, a)
    results = []
    for a in record["artifacts"]:
        folder, notes = located[(a["model"], a["task"], a["stage"])]
        res = ArtifactResult(a["stage"], a["model"], a["task"], a["path"], a["key"], None, "missing", list(notes), upstream=a["upstream"])
        if folder is None:
            res.notes.append("not rebuilt (see the rebuild's log)")
            results.append(res)
            continue
        try:
            manifest = verify_manifest(folder)
        except IntegrityError as exc:
            res.verdict, res.rebuilt_key = "differs", folder.name
            res.notes.append(str(exc))
            results.append(res)
            continue
        if a["stage"] == "curated_task":
            res.rebuilt_key = manifest.get("content_hash", "")
            res.rebuilt_upstream = task_upstream(folder, catalogue.get(a["task"]), rebuilt.shared_data, rebuilt.code_versions.get("curated_task", ""))
        else:
            res.rebuilt_key = folder.name
            keys = {s: (located[(a["model"], a["task"], s)][0].name if located.get((a["model"], a["task"], s), (None,))[0] else "") for s in ("embeddings", "index", "run", "metrics")}
            res.rebuilt_upstream = model_upstream(folder, a["stage"], keys, models.get(a["model"]))
        got_files = manifest.get("files", {})
        for name in sorted(set(a["files"]) | set(got_files)):
            if name not in a["files"]:
                res.files[name] = {"verdict": "differs", "detail": "not in the version"}
                continue
            pub = published_file(f"{a['path']}/{name}") if published_file and a["files"][name]["rule"] in ("array", "faiss") else None
            res.files[name] = compare_file(
                name, a["files"][name], folder, got_files.get(name),
                published=pub, metrics=metrics_of.get((a["model"], a["task"], a["key"])), tolerance=tolerance,
            )
        verdicts = {f["verdict"] for f in res.files.values()}
        diffs = [f.get("max_abs_diff") for f in res.files.values() if f.get("max_abs_diff") is not None]
        res.max_abs_diff = max(diffs) if diffs else None
        if res.rebuilt_key != a["key"]:
            same = verdicts <= set(OK)
            res.verdict = "differs"
            res.notes.insert(0, f"rebuilt under key {_short(res.rebuilt_key)}, the version has {_short(a['key'])}" + (" (same files)" if same else ""))
        elif "differs" in verdicts:
            res.verdict = "differs"
        elif "within_tolerance" in verdicts:
            res.verdict = "within_tolerance"
        else:
            res.verdict = "identical"
        results.append(res)
    return results


# --- what moved --------------------------------------------------------------------------------


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
        changes = entry_changes(registry_entries(record["registry"]["models.yaml"]["text"]).get(bad.model), registry_entries(rebuilt.models_text).get(bad.model))
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
            upstream.append(f"{name} {_short(bad.rebuilt_upstream[k])} (the version: {_short(v)}): MOVED{extra}")
        else:
            upstream.append(f"{name} {_short(v)}" + (" (same)" if bad.rebuilt_upstream else ""))
    causes = sorted({MOVED.get(k, k) for k in bad.moved if k != "upstream_key"})
    if bad.verdict == "missing":
        cause = "it was not rebuilt (see the rebuild's log)"
    elif causes:
        cause = " and ".join(causes) + " moved"
    elif "upstream_key" in bad.moved:
        cause = "an upstream artifact moved"
    else:
        cause = "same upstream provenance, other bytes: the environment (library versions, CPU, threads) or code that is not deterministic"
    why = bad.notes[:1] + [f"{n}: {f.get('detail', f['verdict'])}" for n, f in bad.files.items() if f["verdict"] not in OK][:3]
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


def _short(v: Any) -> str:
    s = str(v)
    return s[:16] if len(s) > 20 and " " not in s else s


# --- the table ---------------------------------------------------------------------------------

_CELL = {"identical": "same", "missing": "missing", "differs": "DIFFERS"}


def _cell(r: ArtifactResult) -> str:
    if r.verdict == "within_tolerance":
        return f"~{r.max_abs_diff:.1e}" if r.max_abs_diff is not None else "~1e-9"
    return _CELL[r.verdict]


def partitions(results: list[ArtifactResult]) -> list[dict[str, Any]]:
    """One row per curated task and per model x task: each stage's verdict and whether it reproduced."""
    rows: dict[str, dict[str, Any]] = {}
    for r in results:
        row = rows.setdefault(r.partition, {"partition": r.partition, "stages": {}, "reproduced": True})
        row["stages"][r.stage] = {"verdict": r.verdict, "cell": _cell(r), "max_abs_diff": r.max_abs_diff}
        row["reproduced"] = row["reproduced"] and r.verdict in OK
    return list(rows.values())


def table(rows: list[dict[str, Any]], record: dict[str, Any], main_metric: str = "ndcg_at_10") -> str:
    """The printed table: a row per partition, a column per stage, the version's main metric."""
    stages = ("curated_task", "embeddings", "index", "run", "metrics")
    metric = {f"{r['model']} x {r['task']}": r["metrics"].get(main_metric) for r in record["runs"]}
    width = max([len("partition")] + [len(r["partition"]) for r in rows])
    head = f"{'partition':<{width}}  " + "  ".join(f"{s:<12}" for s in stages) + f"  {main_metric:<10}  verdict"
    out = [head, "-" * len(head)]
    for row in rows:
        cells = "  ".join(f"{row['stages'].get(s, {}).get('cell', '-'):<12}" for s in stages)
        m = metric.get(row["partition"])
        out.append(f"{row['partition']:<{width}}  {cells}  {f'{m:.4f}' if m is not None else '':<10}  {'reproduced' if row['reproduced'] else 'NOT reproduced'}")
    return "\n".join(out)

