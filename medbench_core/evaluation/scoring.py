"""The metrics stage of one model x task: ``score`` a stored run against the task's judgments.

The last of the four stages (``embed_corpus`` -> ``build_corpus_index`` -> ``retrieve`` live in
:mod:`medbench_core.retrieval.stages`); it is evaluation's, so retrieval never imports evaluation
(docs/architecture.md, "Inside medbench_core"). Like the other stages it writes into the folder
it is given and only computes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.evaluation.metrics import breakdown, evaluate_frame
from medbench_core.evaluation.mlflow_names import PART_CHARS, mlflow_name
from medbench_core.metric_names import DEFAULT_METRICS
from medbench_core.taskdata.task import Task

BREAKDOWN_COLUMNS = ("language", "discipline", "tier")


def drops_identical_ids(task: Task, family: str | None) -> bool:
    """Whether scoring drops a retrieved document whose id is its query's id, for a run of a retriever of
    ``family`` (``dense``, ``lexical``, or None for a reranker or fusion): the task's ``ignore_identical_ids``,
    where ``"dense"`` is R2MED's rule (its dense script scores with BEIR, which drops them; its BM25 and
    reranker scripts with pytrec_eval, which keeps them)."""
    rule = task.meta.ignore_identical_ids
    return rule is True or (rule == "dense" and family == "dense")


def score(task: Task, run: pl.DataFrame, out: Path, metrics: tuple[str, ...] = DEFAULT_METRICS, *, family: str | None = None) -> dict[str, Any]:
    """Per-query and mean metrics, each mean's 95% bootstrap CI, breakdowns by language, discipline and tier,
    and beside the trec_eval figures their tie-aware and chance values (:func:`tie_aware_and_chance`).

    The CIs (``ci``: metric -> [low, high]; :func:`medbench_core.evaluation.stats.bootstrap_cis`, 10,000
    resamples of the queries, seed 0) are deterministic, so re-scoring a run reproduces them bit for bit.
    ``family``: the retriever family of the model that made the run (:func:`drops_identical_ids`).
    """
    from medbench_core.evaluation.holes import unjudged_in_universe
    from medbench_core.evaluation.stats import bootstrap_cis

    dropped = drops_identical_ids(task, family)
    if dropped:  # BEIR's rule: a document retrieved for a query of its own id is not scored
        run = run.filter(pl.col("query_id") != pl.col("doc_id"))
    unjudged = unjudged_in_universe(task)
    ev = evaluate_frame(task.qrels, run, metrics, unjudged=unjudged)
    per_query = ev.per_query_frame()
    floors, extra = tie_aware_and_chance(task, run, metrics, per_query, dropped=dropped)
    if extra.height:
        per_query = per_query.join(extra, on="query_id", how="left", maintain_order="left")
    per_query.write_parquet(out / "per_query.parquet", statistics=False)
    result: dict[str, Any] = {"mean": ev.mean, "n_queries": len(ev.per_query), "breakdowns": {}, **floors}
    if task.meta.ignore_identical_ids:  # the task has such pairs: say what this run's scoring did with them
        result["identical_ids"] = {"rule": task.meta.ignore_identical_ids, "family": family, "dropped": dropped}
    result["holes"] = hole_summary(task, per_query, unjudged)
    if per_query.height:
        names = [m for m in ev.mean if m in per_query.columns]
        # One draw of resampled queries for every metric (bootstrap_cis): the same values as one bootstrap_ci per metric.
        cis = bootstrap_cis([per_query[m].cast(pl.Float64).to_numpy() for m in names])
        result["ci"] = {m: list(ci) for m, ci in zip(names, cis)}
    for col in BREAKDOWN_COLUMNS:
        groups = task.queries.select("query_id", col)
        if groups[col].drop_nulls().n_unique() >= 1:
            result["breakdowns"][col] = breakdown(per_query, groups, col, metrics)
    result["files"] = ["per_query.parquet", "metrics.json"]
    (out / "metrics.json").write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    return result


def tie_aware_and_chance(
    task: Task, run: pl.DataFrame, metrics: tuple[str, ...], per_query: pl.DataFrame, *, dropped: bool = False
) -> tuple[dict[str, Any], pl.DataFrame]:
    """The floors beside the trec_eval figures (:mod:`medbench_core.evaluation.ties`): per query ``tie_aware.<m>``
    and ``chance.<m>`` columns; for metrics.json the means (``tie_aware``, ``chance``), on a candidate-set task
    ``chance_corrected`` = (mean - chance) / (1 - chance), and ``ties`` (queries with a tie inside the deepest
    cutoff; those whose tie was taken to continue over the documents the run left out). ``dropped``: scoring
    dropped the document bearing each query's id (:func:`drops_identical_ids`): it is no part of the universe."""
    from medbench_core.evaluation.ties import CHANCE, TIE_AWARE, chance, judged, supported, tie_aware

    wanted = supported(metrics)
    if not wanted or per_query.height == 0:
        return {}, pl.DataFrame()
    j = judged(task, max(k for _, _, k in wanted), drop_identical_ids=dropped)
    order = pl.DataFrame({"query_id": j.query_ids}).join(per_query, on="query_id", how="left", maintain_order="left")
    trec = {m: order[m].cast(pl.Float64).fill_null(0.0).to_numpy() for m, _, _ in wanted}
    ta = tie_aware(j, run, wanted, trec)
    floor = chance(j, wanted)
    columns = {"query_id": j.query_ids}
    columns |= {f"{TIE_AWARE}.{m}": ta.values[m] for m, _, _ in wanted}
    columns |= {f"{CHANCE}.{m}": floor[m] for m, _, _ in wanted}
    n = len(j.query_ids)
    out: dict[str, Any] = {
        # summed in qrels order, as evaluate_frame sums its means: a run without ties gets its mean bit for bit
        TIE_AWARE: {m: sum(ta.values[m].tolist()) / n for m, _, _ in wanted},
        CHANCE: {m: sum(floor[m].tolist()) / n for m, _, _ in wanted},
        "ties": {"queries_tied": int(ta.tied.sum()), "queries_tie_continued": int(ta.tail.sum())},
    }
    if task.candidates is not None:
        out["chance_corrected"] = {m: chance_corrected(sum(trec[m].tolist()) / n, out[CHANCE][m]) for m, _, _ in wanted if out[CHANCE][m] < 1.0}
    return out, pl.DataFrame(columns)


def chance_corrected(value: float, floor: float) -> float:
    """(value - chance) / (1 - chance): 0 at chance, 1 at the best possible value (Cohen's kappa's form)."""
    return (value - floor) / (1.0 - floor)


# Measures that rank relevant documents against judged non-relevant ones: on a query whose qrels hold
# no judged non-relevant document they say nothing (bpref counts every retrieved relevant document as
# ranked above all of them, the condensed list puts it first: a relevant document at rank 90 gives
# nDCG@10 0 and both 1.0).
NEEDS_JUDGED_NONRELEVANT = ("bpref_at_100", "ndcg_condensed_at_10")


def judged_nonrelevant_summary(qrels: pl.DataFrame, per_query: pl.DataFrame) -> dict[str, Any]:
    """The queries whose qrels hold a judged non-relevant document (grade 0; a negative grade is
    unjudged), those that hold none, and the means of :data:`NEEDS_JUDGED_NONRELEVANT` over the
    former alone (null when there is none): what the reports show in their place."""
    if not per_query.height or "query_id" not in per_query.columns:
        return {"queries_with": 0, "queries_without": 0, "mean": {}}
    with_nonrel = qrels.filter(pl.col("relevance") == 0).select(pl.col("query_id").cast(pl.Utf8)).unique()
    informative = per_query.join(with_nonrel, on="query_id", how="semi")
    means = {m: (float(informative[m].mean()) if informative.height else None) for m in NEEDS_JUDGED_NONRELEVANT if m in per_query.columns}
    return {"queries_with": informative.height, "queries_without": per_query.height - informative.height, "mean": means}


def hole_summary(task: Task, per_query: pl.DataFrame, unjudged: dict[str, int]) -> dict[str, Any]:
    """What metrics.json says about the cell's holes beside the per-query means: the total hole count
    in the top 10 (``holes_at_10``), the queries whose top 10 holds no judged document, the task's
    top grade, what the bounds took as each query's universe, and the queries with and without a
    judged non-relevant document (:func:`judged_nonrelevant_summary`)."""
    out: dict[str, Any] = {
        "top_grade": max(int(task.qrels["relevance"].max() or 1), 1) if task.qrels.height else 1,
        "universe": "candidates" if task.candidates is not None else "corpus",
        "unjudged_in_universe": int(sum(unjudged.values())),
    }
    if "holes_at_10" in per_query.columns:
        out["holes_at_10"] = int(per_query["holes_at_10"].sum())
    if "judged_at_10" in per_query.columns:
        out["queries_without_judged_top10"] = int((per_query["judged_at_10"] == 0).sum())
    out["judged_nonrelevant"] = judged_nonrelevant_summary(task.qrels, per_query)
    return out


def flat_metrics(result: dict[str, Any]) -> dict[str, float]:
    """MLflow-ready metric keys: ``ndcg_at_10``, ``ci_low.ndcg_at_10`` / ``ci_high.ndcg_at_10`` (the mean's 95% CI),
    ``language.fr.ndcg_at_10``, ``tie_aware.ndcg_at_10``, ``chance.ndcg_at_10`` and, on a candidate-set task,
    ``chance_corrected.ndcg_at_10``; beside ir_measures' all-query bpref and condensed nDCG@10,
    ``judged_nonrelevant.queries_with`` / ``.queries_without`` and their means over the queries with a
    judged non-relevant document (``judged_nonrelevant.bpref_at_100``; absent when none has one)."""
    out = {k: float(v) for k, v in result["mean"].items()}
    nonrel = (result.get("holes") or {}).get("judged_nonrelevant")
    if nonrel:
        out["judged_nonrelevant.queries_with"] = float(nonrel["queries_with"])
        out["judged_nonrelevant.queries_without"] = float(nonrel["queries_without"])
        out |= {f"judged_nonrelevant.{m}": float(v) for m, v in (nonrel.get("mean") or {}).items() if v is not None}
    for m, (low, high) in result.get("ci", {}).items():
        out[f"ci_low.{m}"], out[f"ci_high.{m}"] = float(low), float(high)
    for col, groups in result.get("breakdowns", {}).items():
        for value, vals in groups.items():
            safe = mlflow_name(value, PART_CHARS)
            for m, v in vals.items():
                out[f"{col}.{safe}.{m}"] = float(v)
    for family in ("tie_aware", "chance", "chance_corrected"):
        for m, v in result.get(family, {}).items():
            out[f"{family}.{m}"] = float(v)
    return out
