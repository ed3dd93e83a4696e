"""The leaderboard's numbers: model x task means with the average over what each model can read
(:func:`leaderboard`), and every cell's CI and paired test against the baseline (:func:`significance`,
:func:`ci_only`), compared as :class:`Significance` says."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import polars as pl

from medbench_core.evaluation.cell import Cell
from medbench_core.evaluation.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, compare


@dataclass(frozen=True)
class Significance:
    """How cells are compared with the baseline (see :func:`medbench_core.evaluation.stats.compare`)."""

    baseline: str
    metric: str = "ndcg_at_10"
    test: str = "permutation"
    alpha: float = 0.05
    n_resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED

    def describe(self) -> dict[str, Any]:
        """What the leaderboard's legend, its JSON and the MLflow run state about the tests."""
        return {
            "baseline": self.baseline,
            "metric": self.metric,
            "test": "paired randomisation test (sign flips), two-sided" if self.test == "permutation" else "paired t-test, two-sided",
            "also_reported": "paired t-test (p_ttest)" if self.test == "permutation" else "paired randomisation test (p_perm)",
            "alpha": self.alpha,
            "correction": "Holm-Bonferroni across the comparisons of one task",
            "ci": "95% percentile bootstrap of the mean over queries",
            "ranks": "95% interval of each model's rank over paired bootstrap resamples of the queries (within each task for the average); "
            "groups: every pair tested, Holm-Bonferroni across a task's pairs",
            "resamples": self.n_resamples,
            "seed": self.seed,
        }


def leaderboard(cells: Iterable[Cell], models: list[str], tasks: list[str], metric: str = "ndcg_at_10") -> pl.DataFrame:
    """Model x task means (4 places), an ``average`` over the tasks each model can read, and which.

    ``average`` is the plain mean over the model's applicable tasks, listed in ``averaged_over``;
    it is null when one of them has no value yet (an average over fewer tasks would not compare).
    """
    by = {(c.model, c.task): c for c in cells}
    rows = []
    for m in models:
        row: dict[str, Any] = {"model": m}
        vals, over, complete = [], [], True
        for t in tasks:
            c = by.get((m, t))
            v = c.value(metric) if c else None
            row[t] = None if v is None else round(v, 4)
            if c is not None and not c.applicable:
                continue
            over.append(t)
            if v is None:
                complete = False
            else:
                vals.append(v)
        row["average"] = round(sum(vals) / len(vals), 4) if vals and complete else None
        row["averaged_over"] = ", ".join(over)
        rows.append(row)
    schema = {"model": pl.Utf8, **{t: pl.Float64 for t in tasks}, "average": pl.Float64, "averaged_over": pl.Utf8}
    return pl.DataFrame(rows, schema=schema)


def significance(
    cells: Iterable[Cell],
    baseline: str,
    tasks: list[str] | None = None,
    metric: str = "ndcg_at_10",
    *,
    test: str = "permutation",
    alpha: float = 0.05,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> pl.DataFrame:
    """:func:`medbench_core.evaluation.stats.compare` on every task where the baseline has per-query values.

    Models without per-query values on a task (not evaluated, not applicable) are left out of that
    task's comparisons; a task whose baseline has none gives no rows.
    """
    by_task: dict[str, dict[str, pl.DataFrame]] = {}
    for c in cells:
        if c.applicable and c.per_query is not None and (tasks is None or c.task in tasks):
            by_task.setdefault(c.task, {})[c.model] = c.per_query
    frames = []
    for task in tasks if tasks is not None else sorted(by_task):
        pq = by_task.get(task, {})
        if baseline not in pq:
            continue
        frames.append(compare(pq, baseline, task=task, metric=metric, test=test, alpha=alpha, n_resamples=n_resamples, n_boot=n_resamples, seed=seed))
    from medbench_core.evaluation.stats import STATS_SCHEMA

    return pl.concat(frames) if frames else pl.DataFrame(schema=STATS_SCHEMA)


def ci_only(cells: Iterable[Cell], stats: pl.DataFrame, tasks: list[str], sig: Significance) -> pl.DataFrame:
    """Rows for the cells :func:`significance` left out (their task has no baseline values, e.g. an
    image task BM25 cannot read): the mean and its bootstrap CI, no baseline and no test."""
    from medbench_core.evaluation.stats import STATS_SCHEMA, bootstrap_ci

    done = set(zip(stats["model"].to_list(), stats["task"].to_list()))
    rows = []
    for c in cells:
        if not c.applicable or c.per_query is None or c.task not in tasks or (c.model, c.task) in done or sig.metric not in c.per_query.columns:
            continue
        v = c.per_query[sig.metric].cast(pl.Float64).to_numpy()
        if len(v) == 0:
            continue
        lo, hi = bootstrap_ci(v, n_resamples=sig.n_resamples, seed=sig.seed)
        rows.append({"task": c.task, "model": c.model, "baseline": None, "metric": sig.metric, "n_queries": len(v), "mean": float(v.mean()),
                     "ci_low": lo, "ci_high": hi, "diff": None, "p_ttest": None, "p_perm": None, "p_holm": None, "significant": False})  # fmt: skip
    return pl.DataFrame(rows, schema=STATS_SCHEMA) if rows else pl.DataFrame(schema=STATS_SCHEMA)
