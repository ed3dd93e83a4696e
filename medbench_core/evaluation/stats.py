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

Reused between leaderboards (issue 53; :mod:`medbench_core.evaluation.reuse`): inside its
``reusing`` block every CI and test here is looked up by a digest of everything it depends on (the
values' bytes, resamples, seed, confidence, this module's and resampling.py's code, numpy's and
scipy's versions) and computed only when absent. Each is a pure function of those inputs (a fresh
generator per call, and per column of :func:`bootstrap_cis`), so a value taken from the last
leaderboard is the value the call would compute, to the bit: a leaderboard with one model more
computes that model's cells and pairs only, and Holm's correction runs again over the stored p-values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.evaluation import reuse, scipy_equivalents

_T = TypeVar("_T")

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


def _reused(kind: str, parts: tuple, compute: Callable[[], _T]) -> _T:
    """``compute()``, or, inside :func:`medbench_core.evaluation.reuse.reusing`, its value for these inputs from the last leaderboard."""
    return reuse.reused(lambda: reuse.digest(kind, _code(), *parts), compute)


def _code() -> str:
    """What computes the values here: this module, scipy_equivalents.py, resampling.py, numpy's and scipy's versions."""
    return reuse.code_digest(("stats.py", "scipy_equivalents.py", "resampling.py"), ("numpy", "scipy"))


def paired_ttest(x: Sequence[float], y: Sequence[float]) -> float:
    """Two-sided p of the paired t-test of ``x`` against ``y`` (``scipy.stats.ttest_rel``).

    Identical samples (every difference 0) give p = 1; a constant non-zero difference gives 0
    (scipy returns NaN for both: the variance of the differences is 0).
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return _reused("ttest", (x, y), lambda: _paired_ttest(x, y))


def _paired_ttest(x: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import ttest_rel

    d = x - y
    if np.all(d == d[0]):
        return 1.0 if d[0] == 0 else 0.0
    return float(ttest_rel(x, y, alternative="two-sided").pvalue)


def paired_permutation(x: Sequence[float], y: Sequence[float], *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> float:
    """Two-sided p of the paired randomisation test (sign flips) of mean(x) - mean(y).

    The p of ``scipy.stats.permutation_test(permutation_type="samples", vectorized=True,
    rng=default_rng(seed))``, exact when ``2**len(x) <= n_resamples``: scipy itself below that,
    else the same sign flips in blocks (module docstring), in memory of one block.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return _reused("permutation", (x, y, n_resamples, seed), lambda: scipy_equivalents.permutation_p(x, y, n_resamples, seed))


def bootstrap_ci(x: Sequence[float], *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``x``: ``scipy.stats.bootstrap`` with ``rng=default_rng(seed)``, bit for bit (see :func:`bootstrap_cis`)."""
    return bootstrap_cis([x], n_resamples=n_resamples, seed=seed, confidence=confidence)[0]


def bootstrap_cis(
    columns: Sequence[Sequence[float]], *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED, confidence: float = 0.95
) -> list[tuple[float, float]]:
    """Percentile bootstrap CI of the mean of each column (same length), each equal bit for bit to
    ``scipy.stats.bootstrap((column,), np.mean, vectorized=True, method="percentile",
    confidence_level=confidence, n_resamples=n_resamples, rng=default_rng(seed))``.

    Every column gets the same resampled indices (a fresh ``default_rng(seed)`` each in scipy), so
    they are drawn once, a block of resamples at a time, and gathered for all columns.
    """
    if n_resamples < 1000:
        raise ValueError(f"n_resamples={n_resamples}: use at least 1000 bootstrap resamples")
    cols = np.atleast_2d(np.asarray(columns, dtype=np.float64))
    results = reuse.active()
    if results is None:
        return scipy_equivalents.percentile_cis(cols, n_resamples, seed, confidence)
    # Each column's CI depends on its own values only (the draws on n, the resamples and the seed): looked up one by one.
    keys = [reuse.digest("ci", _code(), col, n_resamples, seed, confidence) for col in cols]
    found = [results.get(k) for k in keys]
    missing = [i for i, ci in enumerate(found) if ci is None]
    if missing:
        for i, ci in zip(missing, scipy_equivalents.percentile_cis(cols[missing], n_resamples, seed, confidence), strict=True):
            results.put(keys[i], ci)
            found[i] = ci
    return [(float(lo), float(hi)) for lo, hi in found]


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
    # The same queries, resamples and seed for every model: their CIs share one draw of indices.
    cis = dict(zip(values, bootstrap_cis(list(values.values()), n_resamples=n_boot, seed=seed)))
    for model, v in values.items():
        lo, hi = cis[model]
        row = {
            "task": task,
            "model": model,
            "baseline": baseline,
            "metric": metric,
            "n_queries": len(qids),
            "mean": float(np.mean(v)),
            "ci_low": lo,
            "ci_high": hi,
            "diff": float(np.mean(v) - np.mean(base)),
            "p_ttest": None,
            "p_perm": None,
            "p_holm": None,
            "significant": False,
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


# --- ranks ----------------------------------------------------------------------------------
# Rank intervals by the paired bootstrap over queries (Sakai, "Evaluating Evaluation Metrics based on the
# Bootstrap", SIGIR 2006: resample topics jointly for every system; Chatbot Arena, arXiv 2403.04132, reports
# rank intervals from bootstrapped scores the same way). Hall & Miller (Ann. Statist. 2009/2010) show that
# ranks of near-tied systems stay unstable: wide intervals are the point, not a defect.
_BLOCK = 4_000_000  # values gathered per block of resamples (models x resamples x queries), to bound memory


def ranks_of(means: np.ndarray) -> np.ndarray:
    """Competition ranks ("min") along the last axis: 1 + the number of strictly higher means (1 = best)."""
    means = np.asarray(means, dtype=np.float64)
    return 1 + (means[..., None, :] > means[..., :, None]).sum(axis=-1)


def _resampled_means(values: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(n_resamples, models): each model's mean over one bootstrap resample of the queries, the same
    resample for every model (paired). Resample r draws ``rng.integers(0, n, size=n)`` in order."""
    m, n = values.shape
    out = np.empty((n_resamples, m), dtype=np.float64)
    step = max(1, _BLOCK // max(1, n))
    for start in range(0, n_resamples, step):
        b = min(step, n_resamples - start)
        idx = rng.integers(0, n, size=(b, n))
        # How often each query was drawn, then one matrix product for every model (not a gather per model).
        counts = np.bincount((idx + (np.arange(b) * n)[:, None]).ravel(), minlength=b * n).reshape(b, n)
        out[start : start + b] = counts @ values.T / n
    return out


def _interval(ranks: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Per column, the (1-c)/2 and (1+c)/2 quantiles of integer ranks (inverted CDF: values that occur)."""
    tail = (1.0 - confidence) / 2
    return (np.quantile(ranks, tail, axis=0, method="inverted_cdf").astype(int),
            np.quantile(ranks, 1.0 - tail, axis=0, method="inverted_cdf").astype(int))  # fmt: skip


def rank_intervals(
    per_task: Mapping[str, Mapping[str, np.ndarray]],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
) -> dict[str, tuple[int, int, int]]:
    """Each model's rank by its mean (averaged over tasks) and the 95% bootstrap interval of that rank.

    ``per_task``: task -> model -> per-query values, aligned by query within each task, every
    model present on every task. One task: the queries are resampled with replacement, the same
    draw for every model (paired), each model's mean recomputed and the models ranked (1 = best,
    ties share the better rank). Several tasks: the queries of each task are resampled within
    that task (tasks in the given order, from one ``numpy.random.default_rng(seed)``) and models
    are ranked by the mean over tasks of their resampled means. The interval is the 2.5% and
    97.5% quantiles of the ``n_resamples`` ranks (inverted CDF, so both ends are ranks that
    occurred). Returns model -> ``(rank, low, high)``; ``rank`` is that of the observed means.
    """
    tasks = list(per_task)
    if not tasks:
        return {}
    models = list(per_task[tasks[0]])
    if any(list(per_task[t]) != models for t in tasks):
        raise DataError(f"rank intervals need the same models on every task; got {[sorted(per_task[t]) for t in tasks]}")
    if not models:
        return {}
    if len(models) == 1:  # one model ranks first in every resample: its interval is [1, 1] without drawing one
        return {models[0]: (1, 1, 1)}
    rng = np.random.default_rng(seed)
    observed = np.zeros(len(models))
    boot = np.zeros((n_resamples, len(models)))
    for t in tasks:
        values = np.stack([np.asarray(per_task[t][m], dtype=np.float64) for m in models])
        observed += values.mean(axis=1) / len(tasks)
        boot += _resampled_means(values, n_resamples, rng) / len(tasks)
    low, high = _interval(ranks_of(boot), confidence)
    rank = ranks_of(observed)
    return {m: (int(rank[i]), int(low[i]), int(high[i])) for i, m in enumerate(models)}


def stratified_permutation(diffs: Sequence[np.ndarray], *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> float:
    """Two-sided p of the paired randomisation test of a mean over tasks of mean per-query differences.

    The signs of the per-query differences are flipped at random within every task (the null: in
    each task, the two models are exchangeable query by query), statistic = mean over tasks of the
    mean difference. p = min(1, 2 min(P(T* >= t), P(T* <= t))): over every sign pattern when there
    are at most ``log2(n_resamples)`` queries in all (exact), else over ``n_resamples`` random ones
    with both counts taken as (hits + 1) / (n_resamples + 1), as scipy's ``permutation_test`` does.
    With one task it is the test of :func:`paired_permutation` (the same statistic and p rule).
    """
    diffs = [np.asarray(d, dtype=np.float64) for d in diffs]
    return _reused("stratified", (len(diffs), *diffs, n_resamples, seed), lambda: _stratified_permutation(diffs, n_resamples, seed))


def _stratified_permutation(diffs: list[np.ndarray], n_resamples: int, seed: int) -> float:
    observed = float(np.mean([d.mean() for d in diffs]))
    if all(np.all(d == 0) for d in diffs):
        return 1.0
    n_all = sum(len(d) for d in diffs)
    weights = np.concatenate([d / (len(d) * len(diffs)) for d in diffs])  # T = sum of sign_i * weight_i
    eps = 1e-12 * max(1.0, abs(observed))  # the observed pattern itself counts as a hit despite rounding
    if 2**n_all <= n_resamples:
        bits = (np.arange(2**n_all)[:, None] >> np.arange(n_all)) & 1
        null = (2 * bits - 1) @ weights
        return float(min(1.0, 2 * min(np.mean(null >= observed - eps), np.mean(null <= observed + eps))))
    rng = np.random.default_rng(seed)
    null = np.empty(n_resamples)
    step = max(1, _BLOCK // n_all)
    for start in range(0, n_resamples, step):
        b = min(step, n_resamples - start)
        bits = np.unpackbits(rng.integers(0, 256, size=(b, -(-n_all // 8)), dtype=np.uint8), axis=1, count=n_all)
        null[start : start + b] = 2 * (bits @ weights) - weights.sum()
    greater = (np.sum(null >= observed - eps) + 1) / (n_resamples + 1)
    less = (np.sum(null <= observed + eps) + 1) / (n_resamples + 1)
    return float(min(1.0, 2 * min(greater, less)))


def pairwise_holm(
    per_task: Mapping[str, Mapping[str, np.ndarray]],
    *,
    test: str = "permutation",
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[tuple[str, str], float]:
    """Holm-adjusted p of every pair of models, (a, b) with a before b in the models' order.

    The randomisation test (sign flips of the per-query differences, two-sided, mean difference:
    the test the leaderboard runs against the baseline) by :func:`stratified_permutation`, which
    draws its sign patterns faster than scipy (every pair is tested, not only the baseline's); on
    several tasks (the average) the signs flip within each task. ``test="ttest"`` on one task uses
    :func:`paired_ttest`; the t-test has no stratified form, so the average keeps the randomisation
    test. Holm's correction runs across all pairs.
    """
    tasks = list(per_task)
    models = list(per_task[tasks[0]]) if tasks else []
    pairs = [(a, b) for i, a in enumerate(models) for b in models[i + 1 :]]
    raw = []
    for a, b in pairs:
        if len(tasks) == 1 and test == "ttest":
            raw.append(paired_ttest(per_task[tasks[0]][a], per_task[tasks[0]][b]))
        else:
            raw.append(stratified_permutation([np.asarray(per_task[t][a]) - np.asarray(per_task[t][b]) for t in tasks], n_resamples=n_resamples, seed=seed))
    return dict(zip(pairs, holm(raw)))


def inseparable_groups(means: Mapping[str, float], p_holm: Mapping[tuple[str, str], float], alpha: float = 0.05) -> dict[str, str]:
    """Letters naming the groups of models that no test separates (a compact letter display).

    Models are ordered by mean (best first, ties by name); a group is a maximal run of
    consecutive models in which no pair differs (Holm-adjusted p >= ``alpha``). Groups get
    letters a, b, c, ... in order; a model's label lists the letters of every group it is in,
    so two models sharing a letter were not told apart, and two with no letter in common were.
    """
    order = sorted(means, key=lambda m: (-means[m], m))

    def differ(a: str, b: str) -> bool:
        p = p_holm.get((a, b), p_holm.get((b, a)))
        return p is not None and p < alpha

    runs: list[tuple[int, int]] = []
    for i in range(len(order)):
        j = i
        while j + 1 < len(order) and not any(differ(order[k], order[j + 1]) for k in range(i, j + 1)):
            j += 1
        if not runs or j > runs[-1][1]:
            runs.append((i, j))
    letters: dict[str, list[str]] = {m: [] for m in order}
    for n, (i, j) in enumerate(runs):
        for m in order[i : j + 1]:
            letters[m].append(_letter(n))
    sep = "," if len(runs) > 26 else ""  # past z, letters are "aa", "ab", ...: keep them apart
    return {m: sep.join(ls) for m, ls in letters.items()}


def _letter(n: int) -> str:
    """a..z, then aa, ab, ..."""
    out = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(ord("a") + r) + out
    return out
