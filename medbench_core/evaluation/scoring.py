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

from medbench_core.evaluation.metrics import breakdown, cross_lingual_gap, evaluate_frame
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
    """Per-query and mean metrics, each mean's 95% bootstrap CI, and breakdowns by language, discipline and tier.

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
    per_query.write_parquet(out / "per_query.parquet", statistics=False)
    result: dict[str, Any] = {"mean": ev.mean, "n_queries": len(ev.per_query), "breakdowns": {}}
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
    langs = result["breakdowns"].get("language", {})
    if len(langs) > 1:
        result["cross_lingual_gap"] = cross_lingual_gap(langs, "ndcg_at_10")
    result["files"] = ["per_query.parquet", "metrics.json"]
    (out / "metrics.json").write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    return result


def hole_summary(task: Task, per_query: pl.DataFrame, unjudged: dict[str, int]) -> dict[str, Any]:
    """What metrics.json says about the cell's holes beside the per-query means: the total hole count
    in the top 10 (``holes_at_10``), the queries whose top 10 holds no judged document, the task's
    top grade and what the bounds took as each query's universe."""
    out: dict[str, Any] = {
        "top_grade": max(int(task.qrels["relevance"].max() or 1), 1) if task.qrels.height else 1,
        "universe": "candidates" if task.candidates is not None else "corpus",
        "unjudged_in_universe": int(sum(unjudged.values())),
    }
    if "holes_at_10" in per_query.columns:
        out["holes_at_10"] = int(per_query["holes_at_10"].sum())
    if "judged_at_10" in per_query.columns:
        out["queries_without_judged_top10"] = int((per_query["judged_at_10"] == 0).sum())
    return out


def flat_metrics(result: dict[str, Any]) -> dict[str, float]:
    """MLflow-ready metric keys: ``ndcg_at_10``, ``ci_low.ndcg_at_10`` / ``ci_high.ndcg_at_10`` (the mean's 95% CI),
    ``language.fr.ndcg_at_10``, ``gap.language.ja.ndcg_at_10``."""
    out = {k: float(v) for k, v in result["mean"].items()}
    for m, (low, high) in result.get("ci", {}).items():
        out[f"ci_low.{m}"], out[f"ci_high.{m}"] = float(low), float(high)
    for col, groups in result.get("breakdowns", {}).items():
        for value, vals in groups.items():
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(value))
            for m, v in vals.items():
                out[f"{col}.{safe}.{m}"] = float(v)
    for lang, gap in result.get("cross_lingual_gap", {}).items():
        out[f"gap.language.{lang}.ndcg_at_10"] = float(gap)
    return out
