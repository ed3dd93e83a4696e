"""Expanded models (query or document expansion) beside their plain retrievers, with the paired test between them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from medbench_core.evaluation.board import Significance
from medbench_core.evaluation.cell import Cell
from medbench_core.evaluation.markdown_tables import markdown_table
from medbench_core.evaluation.plots import METRIC_LABELS
from medbench_core.evaluation.stats import compare


def expanded_beside(
    cells: Iterable[Cell], board: pl.DataFrame, specs: list[Any], sig: Significance, copies: Mapping[tuple[str, str], int] | None = None
) -> pl.DataFrame:
    """Every expanded model beside its plain retriever, task by task (:func:`medbench_core.retrieval.expansion.report.beside_retriever`),
    with the paired test of the expanded model against its retriever on the same queries.

    Per task, the expanded models of one retriever are one family for Holm's correction.
    ``copies``: (model, task) -> expansions flagged as copying a relevant passage (EXPANSION_GATE.json).
    """
    from medbench_core.retrieval.expansion.report import beside_retriever

    tasks = [c for c in board.columns if c not in ("model", "average", "averaged_over")]
    rows = beside_retriever(board.select("model", *tasks), specs, dict(copies or {}))
    if rows.height == 0:
        return rows.with_columns(
            pl.lit(None, pl.Float64).alias("p_perm"),
            pl.lit(None, pl.Float64).alias("p_ttest"),
            pl.lit(None, pl.Float64).alias("p_holm"),
            pl.lit(None, pl.Boolean).alias("significant"),
        )
    pq = {(c.model, c.task): c.per_query for c in cells if c.applicable and c.per_query is not None}
    tested: dict[tuple[str, str], dict[str, Any]] = {}
    for (retriever, task), group in rows.group_by(["retriever", "task"], maintain_order=True):
        have = {m: pq[(m, task)] for m in [retriever, *group["model"].to_list()] if (m, task) in pq}
        if retriever not in have or len(have) < 2:
            continue
        res = compare(
            have, retriever, task=task, metric=sig.metric, test=sig.test, alpha=sig.alpha, n_resamples=sig.n_resamples, n_boot=sig.n_resamples, seed=sig.seed
        )
        for r in res.filter(pl.col("model") != retriever).iter_rows(named=True):
            tested[(r["model"], task)] = r
    cols = {k: [tested.get((m, t), {}).get(k) for m, t in zip(rows["model"], rows["task"])] for k in ("p_perm", "p_ttest", "p_holm", "significant")}
    return rows.with_columns(
        *[pl.Series(k, v, dtype=pl.Float64) for k, v in cols.items() if k != "significant"],
        pl.Series("significant", cols["significant"], dtype=pl.Boolean),
    )


def expanded_markdown(rows: pl.DataFrame, sig: Significance) -> str:
    """Markdown of :func:`expanded_beside`: ``0.5734 (bm25 0.1919, +0.3815) *``, a warning on copied passages."""
    label = METRIC_LABELS.get(sig.metric, sig.metric)

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.4f}"

    body = []
    for r in rows.iter_rows(named=True):
        delta = "-" if r["delta"] is None else f"{r['delta']:+.4f}" + (" *" if r["significant"] else "")
        warn = f" (warning: {r['copies']} expansion(s) copy a relevant passage)" if r["copies"] else ""
        body.append([r["model"], r["task"], f"{fmt(r['value'])}{warn}", f"{r['retriever']} {fmt(r['retriever_value'])}", delta, fmt(r["p_holm"])])
    head = ["model", "task", "expanded", "retriever", "difference", "p (Holm)"]
    lines = [f"{label} of expanded models beside their retrievers", "", *markdown_table(head, body), ""]
    lines.append(
        f"*: the expanded model differs from its retriever ({sig.describe()['test']}, "
        f"Holm-Bonferroni across the expanded models of one retriever on a task, p < {sig.alpha:g})."
    )
    return "\n".join(lines) + "\n"
