"""Each model's rank on every task and on the average: its 95% bootstrap interval and the groups no paired test separates."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from medbench_core.evaluation.board import Significance
from medbench_core.evaluation.cell import Cell
from medbench_core.evaluation.markdown_tables import markdown_table
from medbench_core.evaluation.plots import METRIC_LABELS

RANKS_SCHEMA: dict[str, pl.DataType] = {
    "task": pl.Utf8, "model": pl.Utf8, "rank": pl.Int64, "rank_low": pl.Int64, "rank_high": pl.Int64, "group": pl.Utf8, "n_models": pl.Int64,
}  # fmt: skip
AVERAGE = "average"  # the task name of the average's rows in the rank table


def rank_table(cells: Iterable[Cell], board: pl.DataFrame, tasks: list[str], sig: Significance) -> pl.DataFrame:
    """Each model's rank, its 95% bootstrap interval and its group, per task and for the average.

    Per task: the models with per-query values there (:func:`medbench_core.evaluation.stats.rank_intervals`
    with ``sig``'s resamples and seed; groups from every pair's paired test, ``sig.test``,
    Holm-Bonferroni across the task's pairs, ``sig.alpha``: :func:`~medbench_core.evaluation.stats.inseparable_groups`).
    The average (rows with task ``average``): the models whose leaderboard average is over the same
    tasks as the most models' (an average over other tasks does not compare), queries resampled
    within each task, groups from the stratified randomisation test. Rows follow the board's model order.
    """
    from medbench_core.evaluation.stats import align, inseparable_groups, pairwise_holm, rank_intervals

    metric = sig.metric
    models = board["model"].to_list()
    pq: dict[str, dict[str, pl.DataFrame]] = {}
    for c in cells:
        if c.applicable and c.per_query is not None and c.task in tasks and metric in c.per_query.columns and c.per_query.height:
            pq.setdefault(c.task, {})[c.model] = c.per_query
    aligned: dict[str, dict[str, Any]] = {}
    for t in tasks:
        if t in pq:
            _, values = align({m: pq[t][m] for m in models if m in pq[t]}, metric, task=t)
            aligned[t] = values
    rows = []

    def rank_rows(name: str, per_task: dict[str, dict[str, Any]]) -> None:
        got = rank_intervals(per_task, n_resamples=sig.n_resamples, seed=sig.seed)
        p = pairwise_holm(per_task, test=sig.test, n_resamples=sig.n_resamples, seed=sig.seed)
        means = {m: float(sum(float(per_task[t][m].mean()) for t in per_task) / len(per_task)) for m in got}
        groups = inseparable_groups(means, p, sig.alpha)
        for m, (r, lo, hi) in got.items():
            rows.append({"task": name, "model": m, "rank": r, "rank_low": lo, "rank_high": hi, "group": groups[m], "n_models": len(got)})

    for t, values in aligned.items():
        rank_rows(t, {t: values})
    over: dict[str, list[str]] = {}
    for r in board.iter_rows(named=True):
        if r["average"] is not None:
            over.setdefault(r["averaged_over"], []).append(r["model"])
    if over:
        # The most models; on a tie, the set of the board's first such model.
        common = max(over, key=lambda k: (len(over[k]), -min(models.index(m) for m in over[k])))
        over_tasks = [t for t in common.split(", ") if t]
        ranked = [m for m in over[common] if all(m in aligned.get(t, {}) for t in over_tasks)]
        if ranked and over_tasks:
            rank_rows(AVERAGE, {t: {m: aligned[t][m] for m in ranked} for t in over_tasks})
    order = {m: i for i, m in enumerate(models)}
    rows.sort(key=lambda r: ([*tasks, AVERAGE].index(r["task"]), order[r["model"]]))
    return pl.DataFrame(rows, schema=RANKS_SCHEMA) if rows else pl.DataFrame(schema=RANKS_SCHEMA)


def format_rank(rank: int | None, low: int | None = None, high: int | None = None, group: str | None = None) -> str:
    """``2 [1, 3] ab``: the rank, its 95% interval, its group letters; '-' without a rank."""
    if rank is None:
        return "-"
    return f"{rank} [{low}, {high}]" + (f" {group}" if group else "")


def ranks_markdown(ranks: pl.DataFrame, models: list[str], tasks: list[str], sig: Significance) -> str:
    """The rank table: one row per model, one column per task and the average, ``2 [1, 3] ab`` cells."""
    by = {(r["model"], r["task"]): r for r in ranks.iter_rows(named=True)}
    label = METRIC_LABELS.get(sig.metric, sig.metric)
    head = ["model", *tasks, AVERAGE]
    rows = []
    for m in models:
        cells = [m]
        for t in [*tasks, AVERAGE]:
            r = by.get((m, t))
            cells.append(format_rank(r["rank"], r["rank_low"], r["rank_high"], r["group"]) if r else "-")
        rows.append(cells)
    lines = [f"Rank by {label} (95% bootstrap interval of the rank; letters: groups no test separates)", "", *markdown_table(head, rows)]
    name = "paired randomisation test" if sig.test == "permutation" else "paired t-test"
    avg = ranks.filter(pl.col("task") == AVERAGE)
    note = (
        f"rank [low, high]: 1 = best, ties share the better rank; the 2.5% and 97.5% quantiles of the rank over {sig.n_resamples} "
        f"paired bootstrap resamples of the queries (seed {sig.seed}; for the average, each task's queries resampled within it). "
        f"Models sharing a letter are not separated by the {name} between them (every pair, Holm-Bonferroni across the pairs "
        f"of a task, p < {sig.alpha:g}; for the average, the randomisation test with sign flips within each task)."
    )
    if avg.height:
        note += f" The average ranks {avg.height} model(s) averaged over the same tasks."
    return "\n".join(lines + ["", note]) + "\n"
