"""Runs and metrics of one model x task partition, judged with what the artifacts before them allow
(:mod:`medbench_release.tolerance`): a run's tolerance follows from its vectors' verdicts, its metrics' bound from the run's."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from medbench_release.compare_files import compare_metrics
from medbench_release.tolerance import (
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
from medbench_release.verdicts import OK, ArtifactResult, FileVerdict, RunState, Verdict


@dataclass
class Partition:
    """What the artifacts of one model x task tell those after them."""

    vectors_moved: bool = False  # a float array or FAISS index was accepted within the tolerance (not identical)
    run_state: RunState = RunState.IDENTICAL
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


def judge_run(
    res: ArtifactResult, a: dict, folder: Path, part: Partition, located: dict, results_by: dict, published_file, eps: float, kind: str | None = None
) -> None:
    """run.parquet (and run.trec, its TREC rendering) by the run rule of :mod:`medbench_release.tolerance`."""
    import polars as pl

    part.run_result = res
    pq, trec = res.files.get("run.parquet"), res.files.get("run.trec")
    if pq is None or pq.verdict != Verdict.PENDING:
        part.run_state = RunState.IDENTICAL if pq is not None and pq.verdict == Verdict.IDENTICAL else RunState.DIFFERS
        if trec is not None and trec.verdict == Verdict.PENDING:
            res.files["run.trec"] = replace(trec, verdict=Verdict.DIFFERS, detail="other bytes while run.parquet is the version's: the TREC rendering changed")
        return
    run = pl.read_parquet(folder / "run.parquet")
    info = json.loads((folder / "info.json").read_text()) if (folder / "info.json").exists() else {}
    part.run, part.k = run, int(info.get("k") or 100)
    upstream = [u for u in (info.get("upstream") or {}) if (u, a["task"], "run") in results_by]
    moved = [u for u in upstream if results_by[(u, a["task"], "run")].verdict != Verdict.IDENTICAL]
    problem = order_problem(run)
    if problem:
        pq = replace(pq, verdict=Verdict.DIFFERS, detail=problem)
        part.run_state = RunState.DIFFERS
    elif moved:
        pq = replace(
            pq, verdict=Verdict.WITHIN_TOLERANCE, detail=f"built from runs whose ties moved ({', '.join(moved)}): judged by its metrics, exactly",
            rule="run: judged by its metrics (built from runs that moved within their tolerance)",
        )  # fmt: skip
        part.run_state, part.run_pending = RunState.BY_METRICS, True
    else:
        queries, docs = _partition_vectors(located, a["model"], a["task"], folder)
        for u in info.get("upstream") or {}:  # a run searching another model's corpus (an expanded retriever)
            if not docs and located.get((u, a["task"], "embeddings"), (None,))[0] is not None:
                _, docs = _partition_vectors(located, u, a["task"], folder)
                part.vectors_moved |= any(results_by.get((u, a["task"], s), res).verdict == Verdict.WITHIN_TOLERANCE for s in ("embeddings", "index"))
        tol = score_tolerance(queries, docs, eps if part.vectors_moved else 0.0)
        if tol is None and _loads_weights(kind):
            # Scores a model computes directly (a cross-encoder): float outputs of a model, accepted as its vectors are, within eps each.
            tol = model_score_tolerance(eps)
        if tol is None:
            pq = replace(
                pq, verdict=Verdict.DIFFERS, rule="run: exact (no vectors behind it)",
                detail="exact work (no vectors behind this run, its inputs identical): "
                f"sha256 differs from the version's {a['files']['run.parquet']['sha256'][:12]}",
            )  # fmt: skip
            part.run_state = RunState.DIFFERS
        else:
            part.tolerance, part.run_state = tol, RunState.SCORES
            pq = replace(pq, rule=f"run: scores within {tol.describe()}, rankings up to ties within τ", tolerance=tol.to_json())
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
                pq = replace(
                    pq, verdict=Verdict.WITHIN_TOLERANCE,
                    detail="the published run is not at hand (the version file keeps its sha256 only): judged by its metrics, within the bound of its ties",
                )  # fmt: skip
                part.run_pending = True
            else:
                verdict = Verdict.WITHIN_TOLERANCE if cmp.within else Verdict.DIFFERS
                pq = replace(pq, verdict=verdict, detail=cmp.detail(tol.tau, what), max_abs_diff=cmp.worst_score_diff)
                if not cmp.within:
                    part.run_state = RunState.DIFFERS
    res.files["run.parquet"] = pq
    if trec is not None and trec.verdict == Verdict.PENDING:
        res.files["run.trec"] = _judge_trec(trec, folder, run, pq)


def _judge_trec(trec: FileVerdict, folder: Path, run, pq: FileVerdict) -> FileVerdict:
    """run.trec is exact work over run.parquet: it must be the rendering of the rebuilt run, and then shares its verdict."""
    import tempfile

    from medbench_core.retrieval.ranking import write_trec_file
    from medbench_core.storage import sha256_file

    with tempfile.TemporaryDirectory(prefix="medbench-trec-") as tmp:
        again = Path(tmp, "run.trec")
        write_trec_file(run, again, _trec_tag(folder / "run.trec"))
        same = sha256_file(again) == sha256_file(folder / "run.trec")
    if same:
        return replace(
            trec, verdict=pq.verdict, detail="the TREC rendering of the rebuilt run.parquet (rendered again: same bytes); judged with it", rule=pq.rule
        )
    return replace(trec, verdict=Verdict.DIFFERS, detail="not the TREC rendering of the rebuilt run.parquet", rule="exact: the rendering of run.parquet")


def judge_metrics(res: ArtifactResult, a: dict, folder: Path, part: Partition, recorded: dict | None, data_dir: Path, published_file) -> None:
    """metrics.json and per_query.parquet: exact where the run is identical (or built from moved runs), within the tie bound where ties moved."""
    import tempfile

    import polars as pl

    mj, pqf = res.files.get("metrics.json"), res.files.get("per_query.parquet")
    mj_pending, pqf_pending = mj is not None and mj.verdict == Verdict.PENDING, pqf is not None and pqf.verdict == Verdict.PENDING
    if not (mj_pending or pqf_pending):
        return
    if part.run_state != RunState.SCORES or part.tolerance is None or recorded is None:
        if mj_pending:
            why = "the run is identical" if part.run_state == RunState.IDENTICAL else "no tie bound for this run"
            mj = res.files["metrics.json"] = replace(compare_metrics(folder / "metrics.json", recorded), rule=f"metrics: within 1e-09 ({why})")
        if pqf_pending:
            if part.run_state == RunState.IDENTICAL:
                settled = replace(pqf, verdict=Verdict.DIFFERS, detail="other bytes from an identical run", rule="per_query: exact (the run is identical)")
            else:
                verdict = mj.verdict if mj is not None else Verdict.DIFFERS
                settled = replace(pqf, verdict=verdict, detail="judged by metrics.json (exactly)", rule="per_query: judged by metrics.json")
            res.files["per_query.parquet"] = settled
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
    if mj_pending:
        if problems:
            outside = f"{len(problems)} metric(s) outside their tie bound: " + "; ".join(problems[:3])
            mj = replace(mj, verdict=Verdict.DIFFERS, detail=outside, max_abs_diff=worst, rule=rule)
        else:
            mj = replace(mj, verdict=Verdict.WITHIN_TOLERANCE, detail=detail, max_abs_diff=worst, rule=rule)
        res.files["metrics.json"] = mj
    if pqf_pending:
        published = published_file(f"{a['path']}/per_query.parquet") if published_file else None
        if published is not None:
            bad = per_query_within(pl.read_parquet(published), bounds, METRIC_TOLERANCE)
            settled = replace(
                pqf, verdict=Verdict.DIFFERS if bad else Verdict.WITHIN_TOLERANCE, rule="per_query: each query within its tie bound",
                detail=("; ".join(bad[:3]) if bad else "every query's values within their tie bounds (against the published file)"),
            )  # fmt: skip
        else:
            settled = replace(
                pqf, verdict=mj.verdict if mj is not None else Verdict.DIFFERS, rule="per_query: judged by metrics.json",
                detail="the published file is not at hand (the version file keeps its sha256 only): judged by metrics.json's bound",
            )  # fmt: skip
        res.files["per_query.parquet"] = settled


def settle_run(run_res: ArtifactResult, metrics_res: ArtifactResult) -> None:
    """A run judged by its metrics takes their verdict."""
    if metrics_res.verdict in OK or run_res.verdict not in OK:
        return
    run_res.verdict = Verdict.DIFFERS
    for name in ("run.parquet", "run.trec"):
        f = run_res.files.get(name)
        if f is not None and f.verdict in OK:
            run_res.files[name] = replace(f, verdict=Verdict.DIFFERS, detail=f"{f.detail or ''}; its metrics differ ({metrics_res.path})")
