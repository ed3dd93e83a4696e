"""The leaderboard's statistics (medbench_core/evaluation/stats.py) vs scipy's own functions called with ``batch=``, paired.

    nice -n 5 python bench/bench_stats_scipy.py [--queries 300 --models 8 --resamples 10000 --batch 1000 --pairs 5]

Issue 50 item 3: stats.py keeps a copy of scipy's percentile bootstrap and paired randomisation test (the same draws
in the same order, computed in blocks). Could it call scipy directly, memory bounded by ``batch=``? On the
leaderboard's shapes (``--queries`` per-query values per model, ``--models`` models of one task, 10,000 resamples):

- **bootstrap**: the CI of every model's mean: ``bootstrap_cis`` (one draw of indices serves every model) against one
  ``scipy.stats.bootstrap((x,), np.mean, vectorized=True, batch=..., method="percentile", rng=default_rng(0))`` per model;
- **permutation**: one paired test (a model against the baseline): ``paired_permutation`` against
  ``scipy.stats.permutation_test((x, y), mean difference, permutation_type="samples", vectorized=True, batch=...,
  rng=default_rng(0))``.

Before the clock, the script asserts whether scipy's values equal ours bit for bit and prints it. Sides run in
interleaved rounds (bench/paired.py); the figure is scipy / ours, per round (CPU and wall). Nothing is reused between
calls (stats.py's cache is only active inside ``reuse.reusing``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import paired  # noqa: E402
from medbench_core.evaluation import stats  # noqa: E402


def values(queries: int, models: int, seed: int = 7) -> np.ndarray:
    """Per-query nDCG@10-like values: a third of the queries 0, the rest in (0, 1], rounded as metric values are not."""
    rng = np.random.default_rng(seed)
    v = rng.beta(2, 3, size=(models, queries))
    v[rng.random((models, queries)) < 0.33] = 0.0
    return v


def scipy_cis(cols: np.ndarray, resamples: int, batch: int) -> list[tuple[float, float]]:
    from scipy.stats import bootstrap

    out = []
    for x in cols:
        rng = np.random.default_rng(0)
        r = bootstrap((x,), np.mean, vectorized=True, batch=batch, method="percentile", confidence_level=0.95, n_resamples=resamples, rng=rng)
        out.append((float(r.confidence_interval.low), float(r.confidence_interval.high)))
    return out


def scipy_permutation(x: np.ndarray, y: np.ndarray, resamples: int, batch: int) -> float:
    from scipy.stats import permutation_test

    def mean_diff(a, b, axis=-1):
        return np.mean(a, axis=axis) - np.mean(b, axis=axis)

    rng = np.random.default_rng(0)
    r = permutation_test((x, y), mean_diff, permutation_type="samples", vectorized=True, batch=batch, n_resamples=resamples, alternative="two-sided", rng=rng)
    return float(r.pvalue)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--models", type=int, default=8)
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--pairs", type=int, default=paired.MIN_PAIRS)
    a = ap.parse_args()
    cols = values(a.queries, a.models)
    x, y = cols[1], cols[0]

    ours_ci = stats.bootstrap_cis(cols, n_resamples=a.resamples, seed=0)
    theirs_ci = scipy_cis(cols, a.resamples, a.batch)
    ours_p = stats.paired_permutation(x, y, n_resamples=a.resamples, seed=0)
    theirs_p = scipy_permutation(x, y, a.resamples, a.batch)
    print(f"bootstrap CIs equal bit for bit: {ours_ci == theirs_ci}  (first model: ours {ours_ci[0]}, scipy {theirs_ci[0]})")
    print(f"permutation p equal bit for bit: {ours_p == theirs_p}  (ours {ours_p!r}, scipy {theirs_p!r})")

    m = paired.measure(
        {
            "bootstrap_ours": lambda: paired.call(lambda: stats.bootstrap_cis(cols, n_resamples=a.resamples, seed=0)),
            "bootstrap_scipy": lambda: paired.call(lambda: scipy_cis(cols, a.resamples, a.batch)),
            "permutation_ours": lambda: paired.call(lambda: stats.paired_permutation(x, y, n_resamples=a.resamples, seed=0)),
            "permutation_scipy": lambda: paired.call(lambda: scipy_permutation(x, y, a.resamples, a.batch)),
        },
        a.pairs,
        warmup=1,
    )
    print(f"{m.started}, {m.load()}; {a.queries} queries, {a.models} models, {a.resamples} resamples, batch={a.batch}")
    rows = [("bootstrap CIs, every model", "bootstrap_scipy", "bootstrap_ours"), ("paired permutation, one pair", "permutation_scipy", "permutation_ours")]
    print(m.table(rows))


if __name__ == "__main__":
    main()
