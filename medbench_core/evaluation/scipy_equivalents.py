"""scipy's percentile bootstrap and paired randomisation test, the very same numbers computed block by block.

At scale (issue 25): scipy builds every resample at once (``batch=None``), an index matrix of
``n_resamples x n`` (13 GB at 164K queries, twice that for the gathered values), and its paired
randomisation test loops in Python over the queries. :func:`percentile_cis` and
:func:`permutation_p` compute the very same numbers in blocks of resamples: the same
generator stream (numpy's bounded integers, or one ``next_uint32`` per sign flip, drawn in the
order scipy draws them), the same float operations in the same order (a resample's mean sums its
row pairwise, as ``np.mean`` over a contiguous row does; a sign-flipped mean sums the queries in
sequence, as ``np.mean`` over scipy's strided axis does), then scipy's own ``quantile`` and
p-value rule; one draw of bootstrap indices serves every column of the same queries. From 20M
resampled values the sums run in :mod:`medbench_core.evaluation.resampling`'s compiled loops
(the same additions, without the gathered copies), beside the next block's draw.
``tests/core/test_stats_scale.py`` checks equality with scipy bit for bit.

Why not scipy's own functions with ``batch=`` (issue 50 item 3): they give the same values bit for bit
(``bench/bench_stats_scipy.py`` asserts it), at a cost measured in one paired run (bench/paired.py,
7 rounds) on the leaderboard's shapes, 10,000 resamples, on the 2-core AMD EPYC (AVX2) build machine:
scipy / this module, CPU time, median (range) of 7 rounds, 2026-12-07 11:37-11:39 UTC, load average 11-13
(shared machine): the CIs of 8 models' means, 300 queries: 2.08x (1.69-2.31); 600 queries: 1.96x (1.12-2.18);
one paired test, 300 queries: 3.38x (2.43-4.14); 600 queries: 2.58x (2.04-3.27) (``batch=1000``;
``nice -n 15 python bench/bench_stats_scipy.py --pairs 7 [--queries 600]``). Over the 1.5x the issue allows:
scipy's bootstrap draws one index matrix per model where one draw serves every model here, and its
``permutation_test`` with ``permutation_type="samples"`` permutes an index array of (resamples,
queries, 2) with ``Generator.permuted`` and gathers both samples before the means; at 164K queries neither has the compiled loops used here.
So the copy stays, held to scipy bit for bit by ``tests/core/test_stats_scale.py``
and by the bench.
"""

from __future__ import annotations

import numpy as np

_BLOCK_VALUES = 1 << 22  # random draws per block of resamples: 16 MB of uint32, whatever the number of queries
# From this many resampled values (10,000 resamples of 2,000 queries) the compiled loops of
# resampling.py run, whose import and first compile (about a second) small tasks do not need.
_COMPILED_MIN = 20_000_000


def _mean_diff(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def permutation_p(x: np.ndarray, y: np.ndarray, n_resamples: int, seed: int) -> float:
    """Two-sided p of ``scipy.stats.permutation_test`` on sign flips of (x, y), statistic mean(x) - mean(y) (see the module docstring)."""
    if np.all(x == y):
        return 1.0
    if len(x) < 64 and 2 ** len(x) <= n_resamples:
        from scipy.stats import permutation_test

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
    null = _sign_flip_null(x, y, n_resamples, seed)
    observed = _mean_diff(x, y)
    # scipy's rule: a tolerance for equal-in-theory values, +1 on each count, the smaller side doubled.
    gamma = abs(np.finfo(np.float64).eps * 100 * observed)
    less = float(np.count_nonzero(null <= observed + gamma) + 1) / (n_resamples + 1)
    greater = float(np.count_nonzero(null >= observed - gamma) + 1) / (n_resamples + 1)
    return float(np.clip(min(less, greater) * 2, 0.0, 1.0))


def _block_rows(n: int, n_resamples: int) -> int:
    """Resamples per block: about ``_BLOCK_VALUES`` drawn values each."""
    return max(1, min(n_resamples, _BLOCK_VALUES // max(n, 1)))


def _sign_flip_null(x: np.ndarray, y: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """scipy's null distribution of mean(x') - mean(y') under random swaps of each pair, block by block.

    scipy permutes each pair with ``Generator.permuted`` on a (resamples, queries, 2) index array:
    one ``next_uint32`` per pair in C order (a full-range uint32 draw is that very call), the pair
    swapped when its low bit is 0. Its means run over an axis whose stride is the largest, which
    numpy adds in sequence (query 0, 1, 2, ...); ``np.add.reduce`` over axis 0 of a (queries,
    resamples) array adds in that same sequence, as long as the block has two resamples or more.
    From ``_COMPILED_MIN`` resampled values, the same sums in :mod:`medbench_core.evaluation.resampling`'s loop.
    """
    n = len(x)
    rng = np.random.default_rng(seed)
    null = np.empty(n_resamples, dtype=np.float64)
    rows = _block_rows(n, n_resamples)

    def draw(b: int) -> np.ndarray:
        return rng.integers(0, 2**32, size=(b, n), dtype=np.uint32)

    if n * n_resamples >= _COMPILED_MIN:
        from medbench_core.evaluation import resampling

        resampling.in_blocks(draw, lambda bits, start: resampling.sign_flip_means(x, y, bits, null[start : start + len(bits)]), n_resamples, rows)
        return null
    xc, yc = x[:, None], y[:, None]
    for start in range(0, n_resamples, rows):
        bits = draw(min(rows, n_resamples - start))
        b = len(bits)
        swap = np.ascontiguousarray(((bits & 1) == 0).T)
        if b == 1:  # one resample alone would be summed pairwise: pad it with a copy (discarded)
            swap = np.concatenate([swap, swap], axis=1)
        sx = np.add.reduce(np.where(swap, yc, xc), axis=0)
        sy = np.add.reduce(np.where(swap, xc, yc), axis=0)
        null[start : start + b] = (sx / n - sy / n)[:b]
    return null


def percentile_cis(cols: np.ndarray, n_resamples: int, seed: int, confidence: float) -> list[tuple[float, float]]:
    """``scipy.stats.bootstrap``'s percentile CI of the mean of each row of ``cols``, one draw of indices for every row."""
    from scipy.stats import quantile

    out: list[tuple[float, float] | None] = [None] * cols.shape[0]
    varied = []
    for i, x in enumerate(cols):
        if np.all(x == x[0]):
            out[i] = (float(x[0]), float(x[0]))  # every resample has the same mean
        else:
            varied.append(i)
    if varied:
        data = np.ascontiguousarray(cols[varied])
        n = data.shape[1]
        theta = np.empty((len(varied), n_resamples), dtype=np.float64)
        rng = np.random.default_rng(seed)
        rows = _block_rows(n, n_resamples)

        def draw(b: int) -> np.ndarray:
            # scipy draws int64 indices; uint32 holds the same values from the same stream.
            return rng.integers(0, n, size=(b, n), dtype=np.uint32 if n <= 2**32 else np.int64)

        if n * n_resamples >= _COMPILED_MIN:
            from medbench_core.evaluation import resampling

            plan = resampling.pairwise_plan(n)

            def work(idx: np.ndarray, start: int) -> None:
                for row in range(len(varied)):
                    resampling.resampled_means(data[row], idx, plan, theta[row, start : start + len(idx)])

            resampling.in_blocks(draw, work, n_resamples, rows)
        else:
            for start in range(0, n_resamples, rows):
                idx = draw(min(rows, n_resamples - start)).astype(np.intp)
                for row in range(len(varied)):
                    # One 2-D (resamples, n) gather per column, as scipy's: a row of a 3-D gather is
                    # summed in another order by numpy (other last bits).
                    theta[row, start : start + len(idx)] = np.mean(np.take(data[row], idx), axis=-1)
        alpha = np.asarray((1 - confidence) / 2, dtype=np.float64)
        interval = np.stack((alpha, 1 - alpha), axis=-1)
        for row, i in enumerate(varied):
            ci = quantile(theta[row], interval, axis=-1)
            out[i] = (float(ci[..., 0]), float(ci[..., 1]))
    return out  # type: ignore[return-value]
