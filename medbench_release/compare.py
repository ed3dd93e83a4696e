"""Compare a rebuilt data folder with a version file, artifact by artifact, and say what moved.

Each artifact of the version (curated tasks, then embeddings, indices, runs, metrics of every
model x task, in stage order) is looked for in the rebuild under its key, and its files are
judged by the rule the version file gives them (:data:`medbench_release.record.RULES`; runs and
metrics by :mod:`medbench_release.tolerance`, with what the artifacts before them in the same
partition allow: a run's tolerance follows from its vectors' verdicts, its metrics' bound from the
run's). An artifact is ``identical``, ``within_tolerance`` (the rule it was judged by and its
largest difference are reported), ``differs`` (beyond the rule, or rebuilt under another key: its
inputs changed) or ``missing`` (not rebuilt). The first artifact that differs is named with its upstream
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
    RULES,
    catalogue_entries,
    effective_rule,
    faiss_vectors,
    model_upstream,
    registry_entries,
    stable_json_sha256,
    task_upstream,
    unpack,
)
from medbench_release.tolerance import (
    ARRAY_TOLERANCE,
    METRIC_TOLERANCE,
    ScoreTolerance,
    compare_rankings,
    metric_bounds,
    model_score_tolerance,
    order_problem,
    partition_vectors,
    per_query_within,
    probe_lists,
    ranked_lists,
    score_tolerance,
)

OK = ("identical", "within_tolerance")
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
    max_abs_diff: float | None = None  # vectors: values; runs: scores; metrics: the largest metric difference
    rule: str = ""  # the rule that decided the verdict, with its tolerance
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
    from medbench_core.evaluation.scoring import flat_metrics

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
    kinds = {(r["model"], r["task"]): r.get("model_kind") for r in record["runs"]}
    located: dict[tuple[str | None, str, str], tuple[Path | None, list[str]]] = {}
    for a in record["artifacts"]:
        located[(a["model"], a["task"], a["stage"])] = _rebuilt_folder(rebuilt.data_dir, a)
    results: list[ArtifactResult] = []
    results_by: dict[tuple[str | None, str, str], ArtifactResult] = {}
    parts: dict[tuple[str | None, str], _Partition] = {}
    for a in record["artifacts"]:
        folder, notes = located[(a["model"], a["task"], a["stage"])]
        res = ArtifactResult(a["stage"], a["model"], a["task"], a["path"], a["key"], None, "missing", list(notes), upstream=a["upstream"])
        results_by[(a["model"], a["task"], a["stage"])] = res
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
            keys = {
                s: (located[(a["model"], a["task"], s)][0].name if located.get((a["model"], a["task"], s), (None,))[0] else "")
                for s in ("embeddings", "index", "run", "metrics")
            }
            res.rebuilt_upstream = model_upstream(folder, a["stage"], keys, models.get(a["model"]))
        got_files = manifest.get("files", {})
        part = parts.setdefault((a["model"], a["task"]), _Partition())
        for name in sorted(set(a["files"]) | set(got_files)):
            if name not in a["files"]:
                res.files[name] = {"verdict": "differs", "detail": "not in the version", "rule": "exact"}
                continue
            want, rule = a["files"][name], effective_rule(name, a["files"][name]["rule"])
            if rule in ("run", "per_query", "metrics"):  # judged below, with what the partition's artifacts before them allow
                same = got_files.get(name) is not None and got_files[name]["sha256"] == want["sha256"]
                res.files[name] = {"verdict": "identical", "rule": rule} if same else {"verdict": "pending", "rule": rule}
                continue
            pub = published_file(f"{a['path']}/{name}") if published_file and rule in ("array", "faiss") else None
            res.files[name] = compare_file(name, want, folder, got_files.get(name), published=pub, metrics=None, tolerance=tolerance)
            res.files[name]["rule"] = rule
            if rule in ("array", "faiss") and res.files[name]["verdict"] == "within_tolerance":
                part.vectors_moved = True
        if a["stage"] == "run":
            _judge_run(res, a, folder, part, located, results_by, published_file, tolerance, kinds.get((a["model"], a["task"])))
        elif a["stage"] == "metrics":
            _judge_metrics(res, a, folder, part, metrics_of.get((a["model"], a["task"], a["key"])), rebuilt.data_dir, published_file)
        for f in res.files.values():
            if f["verdict"] == "pending":  # a file of a stage that no judge above covers
                f.update(verdict="differs", detail="other bytes, and no rule to judge them by here")
        verdicts = {f["verdict"] for f in res.files.values()}
        # What the artifact's own rule measures: a run's score differences, a metrics artifact's metric differences, else values.
        own = [n for n in res.files if effective_rule(n, "") in {"run": ("run",), "metrics": ("metrics", "per_query")}.get(a["stage"], ())]
        diffs = [f.get("max_abs_diff") for n, f in res.files.items() if f.get("max_abs_diff") is not None and (not own or n in own)]
        res.max_abs_diff = max(diffs) if diffs else None
        res.rule = _deciding_rule(res.files, a["stage"])
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
        if a["stage"] == "metrics" and part.run_result is not None and part.run_pending:
            _settle_run(part.run_result, res)
    return results


# --- runs and metrics (medbench_release.tolerance) ---------------------------------------------


@dataclass
class _Partition:
    """What the artifacts of one model x task tell those after them."""

    vectors_moved: bool = False  # a float array or FAISS index was accepted within the tolerance (not identical)
    run_state: str = "identical"  # identical | scores (ties within tolerance) | by_metrics (built from moved runs) | differs
    tolerance: ScoreTolerance | None = None
    run_result: ArtifactResult | None = None
    run_pending: bool = False  # the run is judged by its metrics (no published run, probe or exact rule to hold it to)
    run: Any = None  # the rebuilt run frame
    k: int = 100


def _partition_vectors(located: dict, model: str, task: str, run_folder: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    emb = located.get((model, task, "embeddings"), (None,))[0]
    index = located.get((model, task, "index"), (None,))[0]
    return partition_vectors(run_folder, emb, index)


def _trec_tag(path: Path) -> str:
    with open(path) as f:
        first = f.readline().split()
    return first[5] if len(first) >= 6 else ""


def _loads_weights(kind: str | None) -> bool:
    from medbench_core.retrieval.kinds import get_kind

    try:
        return bool(kind) and get_kind(kind).loads_weights
    except KeyError:
        return False


def _judge_run(
    res: ArtifactResult, a: dict, folder: Path, part: _Partition, located: dict, results_by: dict, published_file, eps: float, kind: str | None = None
) -> None:
    """run.parquet (and run.trec, its TREC rendering) by the run rule of :mod:`medbench_release.tolerance`."""
    import polars as pl

    part.run_result = res
    pq, trec = res.files.get("run.parquet"), res.files.get("run.trec")
    if pq is None or pq["verdict"] != "pending":
        part.run_state = "identical" if pq is not None and pq["verdict"] == "identical" else "differs"
        if trec is not None and trec["verdict"] == "pending":
            trec.update(verdict="differs", detail="other bytes while run.parquet is the version's: the TREC rendering changed")
        return
    run = pl.read_parquet(folder / "run.parquet")
    info = json.loads((folder / "info.json").read_text()) if (folder / "info.json").exists() else {}
    part.run, part.k = run, int(info.get("k") or 100)
    upstream = [u for u in (info.get("upstream") or {}) if (u, a["task"], "run") in results_by]
    moved = [u for u in upstream if results_by[(u, a["task"], "run")].verdict != "identical"]
    problem = order_problem(run)
    if problem:
        pq.update(verdict="differs", detail=problem)
        part.run_state = "differs"
    elif moved:
        pq.update(verdict="within_tolerance", detail=f"built from runs whose ties moved ({', '.join(moved)}): judged by its metrics, exactly")
        pq["rule"] = "run: judged by its metrics (built from runs that moved within their tolerance)"
        part.run_state, part.run_pending = "by_metrics", True
    else:
        queries, docs = _partition_vectors(located, a["model"], a["task"], folder)
        for u in info.get("upstream") or {}:  # a run searching another model's corpus (an expanded retriever)
            if not docs and located.get((u, a["task"], "embeddings"), (None,))[0] is not None:
                _, docs = _partition_vectors(located, u, a["task"], folder)
                part.vectors_moved |= any(results_by.get((u, a["task"], s), res).verdict == "within_tolerance" for s in ("embeddings", "index"))
        tol = score_tolerance(queries, docs, eps if part.vectors_moved else 0.0)
        if tol is None and _loads_weights(kind):
            # Scores a model computes directly (a cross-encoder): float outputs of a model, accepted as its vectors are, within eps each.
            tol = model_score_tolerance(eps)
        if tol is None:
            pq.update(
                verdict="differs",
                detail="exact work (no vectors behind this run, its inputs identical): "
                f"sha256 differs from the version's {a['files']['run.parquet']['sha256'][:12]}",
            )
            pq["rule"] = "run: exact (no vectors behind it)"
            part.run_state = "differs"
        else:
            part.tolerance, part.run_state = tol, "scores"
            pq["rule"] = f"run: scores within {tol.describe()}, rankings up to ties within τ"
            pq["tolerance"] = tol.to_json()
            published = published_file(f"{a['path']}/run.parquet") if published_file else None
            probe = a["files"]["run.parquet"].get("probe")
            if published is not None:
                cmp = compare_rankings(ranked_lists(pl.read_parquet(published)), ranked_lists(run), tol.tau, k=part.k)
                what = "against the published run"
            elif probe:
                cmp = compare_rankings(probe_lists(probe), ranked_lists(run), tol.tau, k=part.k, partial=True)
                what = f"against the version file's probe (top {probe.get('ranks')} of {len(probe['queries'])} queries)"
            else:
                cmp = None
            if cmp is None:
                pq.update(
                    verdict="within_tolerance",
                    detail="the published run is not at hand (the version file keeps its sha256 only): judged by its metrics, within the bound of its ties",
                )
                part.run_pending = True
            else:
                pq.update(verdict="within_tolerance" if cmp.within else "differs", detail=cmp.detail(tol.tau, what), max_abs_diff=cmp.worst_score_diff)
                if not cmp.within:
                    part.run_state = "differs"
    if trec is not None and trec["verdict"] == "pending":
        _judge_trec(trec, folder, run, pq)


def _judge_trec(trec: dict, folder: Path, run, pq: dict) -> None:
    """run.trec is exact work over run.parquet: it must be the rendering of the rebuilt run, and then shares its verdict."""
    import tempfile

    from medbench_core.retrieval.ranking import write_trec_file
    from medbench_core.storage import sha256_file

    with tempfile.TemporaryDirectory(prefix="medbench-trec-") as tmp:
        again = Path(tmp, "run.trec")
        write_trec_file(run, again, _trec_tag(folder / "run.trec"))
        same = sha256_file(again) == sha256_file(folder / "run.trec")
    if same:
        trec.update(verdict=pq["verdict"], detail="the TREC rendering of the rebuilt run.parquet (rendered again: same bytes); judged with it", rule=pq["rule"])
    else:
        trec.update(verdict="differs", detail="not the TREC rendering of the rebuilt run.parquet", rule="exact: the rendering of run.parquet")


def _judge_metrics(res: ArtifactResult, a: dict, folder: Path, part: _Partition, recorded: dict | None, data_dir: Path, published_file) -> None:
    """metrics.json and per_query.parquet: exact where the run is identical (or built from moved runs), within the tie bound where ties moved."""
    import tempfile

    import polars as pl

    mj, pqf = res.files.get("metrics.json"), res.files.get("per_query.parquet")
    pending = [f for f in (mj, pqf) if f is not None and f["verdict"] == "pending"]
    if not pending:
        return
    if part.run_state != "scores" or part.tolerance is None or recorded is None:
        if mj is not None and mj["verdict"] == "pending":
            mj.update(compare_metrics(folder / "metrics.json", recorded))
            mj["rule"] = "metrics: within 1e-09 (" + ("the run is identical" if part.run_state == "identical" else "no tie bound for this run") + ")"
        if pqf is not None and pqf["verdict"] == "pending":
            if part.run_state == "identical":
                pqf.update(verdict="differs", detail="other bytes from an identical run", rule="per_query: exact (the run is identical)")
            else:
                settled = mj["verdict"] if mj is not None else "differs"
                pqf.update(verdict=settled, detail="judged by metrics.json (exactly)", rule="per_query: judged by metrics.json")
        return
    from medbench_core.evaluation.scoring import flat_metrics
    from medbench_core.layout import Layout
    from medbench_core.taskdata.task import load_task

    tau = part.tolerance.tau
    task = load_task(Layout(data_dir).task_dir(a["task"]))
    with tempfile.TemporaryDirectory(prefix="medbench-bounds-") as tmp:
        bounds = metric_bounds(task, part.run, tau, part.k, Path(tmp))
    got = flat_metrics(json.loads((folder / "metrics.json").read_text()))
    problems, outside, widest = bounds.check(recorded, METRIC_TOLERANCE)
    # The rebuilt metrics are one ordering of the rebuilt run's ties: in the bound too, or the stage wrote something else.
    problems += [f"rebuilt {p.replace('recorded ', '', 1)}" for p in bounds.check(got, METRIC_TOLERANCE)[0]]
    worst = max((abs(float(got[m]) - float(v)) for m, v in recorded.items() if m in got and not (math.isnan(got[m]) and math.isnan(v))), default=0.0)
    rule = f"metrics: within the bound of the run's ties within τ {tau:.2g} (each metric of the ties ordered worst and best first)"
    detail = f"every metric in its bound (widest {widest:.3g}); largest difference from the rebuilt value {worst:.3g}"
    if mj is not None and mj["verdict"] == "pending":
        if problems:
            mj.update(verdict="differs", detail=f"{len(problems)} metric(s) outside their tie bound: " + "; ".join(problems[:3]), max_abs_diff=worst, rule=rule)
        else:
            mj.update(verdict="within_tolerance", detail=detail, max_abs_diff=worst, rule=rule)
    if pqf is not None and pqf["verdict"] == "pending":
        published = published_file(f"{a['path']}/per_query.parquet") if published_file else None
        if published is not None:
            bad = per_query_within(pl.read_parquet(published), bounds, METRIC_TOLERANCE)
            pqf.update(
                verdict="differs" if bad else "within_tolerance",
                rule="per_query: each query within its tie bound",
                detail=("; ".join(bad[:3]) if bad else "every query's values within their tie bounds (against the published file)"),
            )
        else:
            pqf.update(
                verdict=mj["verdict"] if mj is not None else "differs",
                rule="per_query: judged by metrics.json",
                detail="the published file is not at hand (the version file keeps its sha256 only): judged by metrics.json's bound",
            )


def _settle_run(run_res: ArtifactResult, metrics_res: ArtifactResult) -> None:
    """A run judged by its metrics takes their verdict."""
    if metrics_res.verdict in OK or run_res.verdict not in OK:
        return
    run_res.verdict = "differs"
    for name in ("run.parquet", "run.trec"):
        f = run_res.files.get(name)
        if f is not None and f["verdict"] in OK:
            f.update(verdict="differs", detail=f"{f.get('detail', '')}; its metrics differ ({metrics_res.path})")


def _deciding_rule(files: dict[str, dict[str, Any]], stage: str = "") -> str:
    """The rule of the file that decided the artifact's verdict (the worst one), else of the first file."""
    own = {"run": "run", "metrics": "metrics"}.get(stage, "")
    for verdict in ("differs", "within_tolerance", "identical"):
        found = [f for f in files.values() if f["verdict"] == verdict and f.get("rule")]
        # A run's (a metrics artifact's) own rule first, then the artifact's content, its info.json last.
        found.sort(key=lambda f: (not (own and f["rule"].startswith(own)), f["rule"].startswith("json")))
        if found:
            rule = found[0]["rule"]
            return rule if ":" in rule else f"{rule}: {RULES.get(rule, '')}"
    return ""


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
            upstream.append(f"{name} {_short(bad.rebuilt_upstream[k])} (the version: {_short(v)}): MOVED{extra}")
        else:
            upstream.append(f"{name} {_short(v)}" + (" (same)" if bad.rebuilt_upstream else ""))
    causes = sorted({MOVED.get(k, k) for k in bad.moved if k != "upstream_key"})
    if bad.verdict == "missing":
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
        return f"~{r.max_abs_diff:.1e}" if r.max_abs_diff is not None else "~ties"
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
        out.append(
            f"{row['partition']:<{width}}  {cells}  {f'{m:.4f}' if m is not None else '':<10}  {'reproduced' if row['reproduced'] else 'NOT reproduced'}"
        )
    return "\n".join(out)


def largest_differences(results: list[ArtifactResult]) -> dict[str, float | None]:
    """The largest difference accepted within tolerance, by what it measures: vectors, scores (runs), metrics."""
    kinds = {"embeddings": "vectors", "index": "vectors", "run": "scores", "metrics": "metrics"}
    out: dict[str, float | None] = {"vectors": None, "scores": None, "metrics": None}
    for r in results:
        what = kinds.get(r.stage)
        if what and r.verdict == "within_tolerance" and r.max_abs_diff is not None:
            out[what] = max(out[what] or 0.0, r.max_abs_diff)
    return out
