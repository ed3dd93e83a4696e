"""ranking.topk's block-maximum bound selects exactly what sorting every score selects (ties by tie key).

The reference is Python's sort of every position by (-score, tie key): worked out without numpy's
selection. Rows are long enough for the bound to be used (at least k blocks of BOUND_BLOCK scores),
with heavy ties at the boundary, zeros, negative and infinite scores, float32 and float64; a NaN
anywhere makes topk take its plain path, which the bound must not change either.
"""

from __future__ import annotations

import numpy as np
import pytest

from medbench_core.retrieval import ranking


def reference(scores: np.ndarray, tie: np.ndarray, k: int) -> np.ndarray:
    return np.array(sorted(range(len(scores)), key=lambda i: (-float(scores[i]), int(tie[i])))[:k], dtype=np.int64)


def rows(n: int, seed: int):
    rng = np.random.default_rng(seed)
    yield "gamma, 40% zeros, 2 decimals", np.round(rng.gamma(2.0, 2.0, n) * (rng.random(n) > 0.4), 2)
    yield "three values only", rng.choice([0.0, 1.0, 2.0], n, p=[0.9, 0.09, 0.01])
    yield "all equal", np.full(n, 3.5)
    yield "few non-zero", np.where(rng.random(n) < 0.0005, rng.random(n), 0.0)
    signed = rng.normal(size=n)
    signed[rng.integers(0, n, 5)] = np.inf
    signed[rng.integers(0, n, 5)] = -np.inf
    yield "signed with infinities", signed
    yield "ascending (the best in the last block)", np.arange(n, dtype=np.float64)
    one = np.zeros(n)  # one score per block: the k-th best is exactly the k-th largest block maximum
    blocks = n // ranking.BOUND_BLOCK
    one[np.arange(blocks) * ranking.BOUND_BLOCK + rng.integers(0, ranking.BOUND_BLOCK, blocks)] = rng.permutation(blocks) + 1.0
    yield "one score per block", one


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 10, 100])
def test_the_bounded_selection_equals_sorting_every_score(dtype, k):
    n = ranking.BOUND_BLOCK * k + 777  # k blocks and a partial one: the bound is used
    tie = np.random.default_rng(k).permutation(n).astype(np.int64)
    for name, row in rows(n, seed=k):
        row = row.astype(dtype)
        assert ranking._above_bound(row, k) is not None, name
        assert np.array_equal(ranking.topk(row, tie, k), reference(row, tie, k)), name


def test_rows_too_short_for_k_blocks_and_rows_with_nan_take_the_plain_path():
    n = ranking.MIN_BOUND_BLOCK * 10 - 1  # 9 blocks of the smallest size < 10
    tie = np.arange(n, dtype=np.int64)
    row = np.round(np.random.default_rng(1).random(n), 1)
    assert ranking._above_bound(row, 10) is None
    assert np.array_equal(ranking.topk(row, tie, 10), reference(row, tie, 10))
    n = ranking.BOUND_BLOCK * 20
    nan_row = np.random.default_rng(2).random(n)
    for where in (5, n - 3):  # inside the blocks, and in the tail past the last whole block
        with_nan = nan_row.copy()
        with_nan[where] = np.nan
        assert ranking._above_bound(with_nan, 10) is None
    assert ranking._above_bound(nan_row, 10) is not None


def test_the_bound_keeps_every_score_that_ties_the_kth():
    # k = 10 over 10 blocks whose maxima are all 1.0: the bound is 1.0; 25 scores equal 1.0, and all
    # of them must be candidates so that the tie key, not the block layout, picks the 10 kept.
    n = ranking.BOUND_BLOCK * 10
    row = np.zeros(n)
    ones = np.random.default_rng(3).choice(n, 25, replace=False)
    row[ones] = 1.0
    row[np.arange(10) * ranking.BOUND_BLOCK] = 1.0  # every block has a 1.0
    tie = np.random.default_rng(4).permutation(n).astype(np.int64)
    assert set(np.flatnonzero(row == 1.0)) <= set(ranking._above_bound(row, 10).tolist())
    assert np.array_equal(ranking.topk(row, tie, 10), reference(row, tie, 10))


@pytest.mark.parametrize("n", [100_000, ranking.MIN_BOUND_BLOCK * 100])
def test_rows_with_fewer_than_k_full_blocks_use_smaller_blocks_and_select_the_same(n):
    # 100K documents hold 97 blocks of BOUND_BLOCK, fewer than k = 100: blocks of 512 are used (195 of
    # them), as are 100 of MIN_BOUND_BLOCK at the other length. The selection is the sort's.
    k = 100
    assert n // ranking.BOUND_BLOCK < k
    tie = np.random.default_rng(5).permutation(n).astype(np.int64)
    for name, row in rows(n, seed=6):
        assert ranking._above_bound(row, k) is not None, name
        assert np.array_equal(ranking.topk(row, tie, k), reference(row, tie, k)), name
