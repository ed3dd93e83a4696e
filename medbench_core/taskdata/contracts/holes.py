"""Holes in a task's qrels themselves, counted per task (issue 33): what its contract reports.

- qrels rows naming a document absent from the corpus: a relevant one is a document no model can
  retrieve (trec_eval still counts it in the ideal, so every model loses the same), a judged
  non-relevant one is inert; both say the corpus and the qrels were not built together
  (mteb#5021, beir#101);
- queries without any judged document: left out of every mean, since metrics are computed over
  the judged queries (beir#172, #202);
- queries without a positive judgment: score 0 for every model (nDCG's ideal is empty).

``qrels_holes`` (a task option in tasks.yaml, of the readers of BEIR folders and of hub, MTEB and
R2MED datasets) decides what happens: ``refuse`` (the default) fails the task's gate, ``mark``
keeps the task, its gate passing with the holes as warnings, recorded in ``GATE.json``
(``holes``) and shown under the leaderboard. Never silent either way.
"""

from __future__ import annotations

from typing import Any

import polars as pl

SHOW = 10  # ids kept per kind in the report


def qrels_holes_report(task: Any, mode: str = "refuse") -> dict[str, Any]:
    """Counts (and the first ids) of the task's qrels holes; ``mode`` is the task's ``qrels_holes`` option.

    Never raises on a malformed task (the contract's schema expectations say what is wrong): a
    report that cannot be counted says so in ``unreadable``."""
    try:
        return _report(task, mode)
    except (pl.exceptions.PolarsError, TypeError, ValueError) as exc:
        return {"mode": mode, "n_absent_doc_rows": 0, "n_queries_without_judgment": 0, "n_queries_without_positive": 0, "unreadable": str(exc).splitlines()[0]}


def _report(task: Any, mode: str) -> dict[str, Any]:
    from medbench_core.taskdata.contracts.gx import is_int_column

    qrels = task.qrels
    docs = task.corpus.select(pl.col("doc_id").cast(pl.Utf8))
    if {"query_id", "doc_id"} - set(qrels.columns) or "doc_id" not in task.corpus.columns or "query_id" not in task.queries.columns:
        return {"mode": mode, "n_absent_doc_rows": 0, "n_queries_without_judgment": 0, "n_queries_without_positive": 0}
    graded = "relevance" in qrels.columns and is_int_column(qrels, "relevance")
    q = qrels.select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), *([pl.col("relevance")] if graded else []))
    absent = q.join(docs, on="doc_id", how="anti")
    qids = task.queries["query_id"].cast(pl.Utf8).to_list()
    judged = set(q["query_id"].to_list())
    positive = set(q.filter(pl.col("relevance") > 0)["query_id"].to_list()) if "relevance" in q.columns else judged
    no_judgment = [x for x in qids if x not in judged]
    no_positive = [x for x in qids if x in judged and x not in positive]
    absent_relevant = absent.filter(pl.col("relevance") > 0).height if "relevance" in absent.columns else absent.height
    return {
        "mode": mode,
        "n_absent_doc_rows": absent.height,
        "n_absent_relevant_rows": absent_relevant,
        "absent_doc_ids": sorted(set(absent["doc_id"].to_list()))[:SHOW],
        "n_queries_without_judgment": len(no_judgment),
        "queries_without_judgment": no_judgment[:SHOW],
        "n_queries_without_positive": len(no_positive),
        "queries_without_positive": no_positive[:SHOW],
        "n_queries": len(qids),
    }


def describe(report: dict[str, Any]) -> str:
    """One line of the verdict: the counts and what was done about them."""
    done = "kept and marked (qrels_holes: mark)" if report.get("mode") == "mark" else "refused (qrels_holes: refuse; mark keeps them, reported)"
    parts = [
        f"{report['n_absent_doc_rows']} qrels row(s) name documents absent from the corpus ({report.get('n_absent_relevant_rows', 0)} relevant)",
        f"{report['n_queries_without_judgment']} query(ies) without any judged document (not scored)",
        f"{report['n_queries_without_positive']} query(ies) without a positive judgment (score 0)",
    ]
    return "qrels holes: " + "; ".join(parts) + f": {done}"
