"""Paired significance tests and bootstrap confidence intervals over per-query metric values.

For one task, every model is compared with a baseline on the same queries (``per_query.parquet``:
every judged query, a query absent from a run already scored 0):

- **paired t-test**, two-sided: ``scipy.stats.ttest_rel(model, baseline)``. ranx's
  ``paired_student_t_test`` is this very call, so scipy is used directly.
- **paired randomisation test** (Fisher's, sign flips of the per-query differences), two-sided,
  statistic = mean difference: ``scipy.stats.permutation_test(..., permutation_type="samples")``
  with a fixed seed. When ``2**n <= n_resamples`` scipy enumerates every sign flip (exact p);
  otherwise p = (hits + 1) / (n_resamples + 1) on each side, doubled. ranx's own
  ``fisher_randomization_test`` is not used: it draws in numba threads (``prange``), whose random
  streams its seed does not fix (three calls with seed 42 on one 300-query pair gave 0.003,
  0.006 and 0.004).
- **Holm-Bonferroni** over the comparisons of one task (every model but the baseline), applied to
  the p-values of ``test`` (the randomisation test by default); ``significant`` means the
  adjusted p is below ``alpha``.
- **95% bootstrap CI** of each model's mean: percentile method, ``scipy.stats.bootstrap`` with a
  fixed seed and ``n_boot`` resamples of the queries.

Every random quantity uses a fresh ``numpy.random.default_rng(seed)`` per call, so a value does
not depend on which other models are in the table or in what order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from medbench_core.errors import DataError

STATS_SCHEMA: dict[str, pl.DataType] = {
    "task": pl.Utf8,
    "model": pl.Utf8,
    "baseline": pl.Utf8,
    "metric": pl.Utf8,
    "n_queries": pl.Int64,
    "mean": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "diff": pl.Float64,
    "p_ttest": pl.Float64,
    "p_perm": pl.Float64,
    "p_holm": pl.Float64,
    "significant": pl.Boolean,
}
TESTS = ("permutation", "ttest")
DEFAULT_SEED = 0
DEFAULT_RESAMPLES = 10_000


def _mean_diff(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def paired_ttest(x: Sequence[float], y: Sequence[float]) -> float:
    """Two-sided p of the paired t-test of ``x`` against ``y`` (``scipy.stats.ttest_rel``).

    Identical samples (every difference 0) give p = 1; a constant non-zero difference gives 0
    (scipy returns NaN for both: the variance of the differences is 0).
    """
    from scipy.stats import ttest_rel

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    d = x - y
    if np.all(d == d[0]):
        return 1.0 if d[0] == 0 else 0.0
    return float(ttest_rel(x, y, alternative="two-sided").pvalue)


def paired_permutation(x: Sequence[float], y: Sequence[float], *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> float:
    """Two-sided p of the paired randomisation test (sign flips) of mean(x) - mean(y).

    ``scipy.stats.permutation_test(permutation_type="samples")`` with ``rng=default_rng(seed)``;
    exact when ``2**len(x) <= n_resamples``.
    """
    from scipy.stats import permutation_test

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if np.all(x == y):
        return 1.0
    res = permutation_test(
        (x, y),
        _mean_diff,
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    return float(res.pvalue)


def bootstrap_ci(x: Sequence[float], *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``x`` (``scipy.stats.bootstrap``, ``rng=default_rng(seed)``)."""
    from scipy.stats import bootstrap

    x = np.asarray(x, dtype=np.float64)
    if n_resamples < 1000:
        raise ValueError(f"n_resamples={n_resamples}: use at least 1000 bootstrap resamples")
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])  # every resample has the same mean
    res = bootstrap(
        (x,),
        np.mean,
        n_resamples=n_resamples,
        vectorized=True,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order.

    With p sorted ascending p_(1) <= ... <= p_(m): adj_(i) = max over j <= i of
    min(1, (m - j + 1) * p_(j)). Rejecting adj <= alpha controls the family-wise error at alpha.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p_values[i])))
        out[i] = running
    return out


def align(per_query: Mapping[str, pl.DataFrame], metric: str, *, task: str = "") -> tuple[list[str], dict[str, np.ndarray]]:
    """Per-query values of ``metric`` for every model, aligned by query id (sorted).

    Raises DataError naming the model, the task and the query ids when the query sets differ
    (a model scored on another version of the task, or a truncated per_query file).
    """
    where = f"task {task}: " if task else ""
    ids: dict[str, list[str]] = {}
    for model, df in per_query.items():
        if "query_id" not in df.columns or metric not in df.columns:
            raise DataError(f"{where}per-query metrics of {model} need columns query_id and {metric}; found {df.columns}")
        q = df["query_id"].cast(pl.Utf8).to_list()
        dup = sorted({x for x in q if q.count(x) > 1}) if len(set(q)) != len(q) else []
        if dup:
            raise DataError(f"{where}per-query metrics of {model} list query id(s) twice: {dup[:10]}")
        ids[model] = q
    names = list(per_query)
    if not names:
        raise DataError(f"{where}no per-query metrics to compare")
    ref_model = names[0]
    ref = set(ids[ref_model])
    for model in names[1:]:
        got = set(ids[model])
        if got != ref:
            only_ref = sorted(ref - got)[:10]
            only_got = sorted(got - ref)[:10]
            raise DataError(
                f"{where}{model} and {ref_model} were scored on different queries: "
                f"{len(ref - got)} only in {ref_model} (e.g. {only_ref}), {len(got - ref)} only in {model} (e.g. {only_got}); "
                "rescore both on the same version of the task"
            )
    qids = sorted(ref)
    values = {}
    for model, df in per_query.items():
        s = df.select(pl.col("query_id").cast(pl.Utf8), pl.col(metric).cast(pl.Float64)).sort("query_id")
        if s[metric].null_count():
            raise DataError(f"{where}per-query {metric} of {model} has missing values")
        values[model] = s[metric].to_numpy()
    return qids, values


def compare(
    per_query: Mapping[str, pl.DataFrame],
    baseline: str,
    *,
    task: str,
    metric: str = "ndcg_at_10",
    test: str = "permutation",
    alpha: float = 0.05,
    n_resamples: int = DEFAULT_RESAMPLES,
    n_boot: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> pl.DataFrame:
    """One task: mean, 95% bootstrap CI and paired tests of every model against ``baseline``.

    ``per_query``: model name -> its ``per_query.parquet`` frame. Returns a tidy frame with
    :data:`STATS_SCHEMA`, one row per model (the baseline's own row has diff 0 and null p-values).
    ``p_holm`` is the Holm-adjusted p of ``test`` ("permutation" or "ttest") across this task's
    comparisons; ``significant`` is ``p_holm < alpha``.
    """
    if test not in TESTS:
        raise ValueError(f"test {test!r} unknown; use one of {TESTS}")
    if baseline not in per_query:
        raise DataError(f"task {task}: baseline {baseline!r} has no per-query metrics; models with results: {sorted(per_query)}")
    qids, values = align(per_query, metric, task=task)
    base = values[baseline]
    rows = []
    for model, v in values.items():
        lo, hi = bootstrap_ci(v, n_resamples=n_boot, seed=seed)
        row = {
            "task": task, "model": model, "baseline": baseline, "metric": metric, "n_queries": len(qids),
            "mean": float(np.mean(v)), "ci_low": lo, "ci_high": hi, "diff": float(np.mean(v) - np.mean(base)),
            "p_ttest": None, "p_perm": None, "p_holm": None, "significant": False,
        }
        if model != baseline:
            row["p_ttest"] = paired_ttest(v, base)
            row["p_perm"] = paired_permutation(v, base, n_resamples=n_resamples, seed=seed)
        rows.append(row)
    tested = [r for r in rows if r["model"] != baseline]
    key = "p_perm" if test == "permutation" else "p_ttest"
    for r, p in zip(tested, holm([r[key] for r in tested])):
        r["p_holm"] = p
        r["significant"] = bool(p < alpha)
    return pl.DataFrame(rows, schema=STATS_SCHEMA)


def format_cell(mean: float | None, ci_low: float | None = None, ci_high: float | None = None, significant: bool = False, digits: int = 4) -> str:
    """``0.6602 [0.63, 0.69] *``: mean, 95% CI to two places, ``*`` when significantly different from the baseline."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    out = f"{mean:.{digits}f}"
    if ci_low is not None and ci_high is not None:
        out += f" [{ci_low:.2f}, {ci_high:.2f}]"
    if significant:
        out += " *"
    return out


def mlflow_metrics(row: Mapping[str, object]) -> dict[str, float]:
    """MLflow keys for one row of :func:`compare`: ``ci_low.ndcg_at_10``, ``p_perm.vs_bm25.ndcg_at_10``, ...

    Null p-values (the baseline's own row) are left out.
    """
    m = row["metric"]
    base = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(row["baseline"]))
    out = {f"ci_low.{m}": float(row["ci_low"]), f"ci_high.{m}": float(row["ci_high"])}
    for col in ("diff", "p_ttest", "p_perm", "p_holm"):
        if row.get(col) is not None:
            out[f"{col}.vs_{base}.{m}"] = float(row[col])
    if row.get("p_holm") is not None:
        out[f"significant.vs_{base}.{m}"] = 1.0 if row["significant"] else 0.0
    return out

