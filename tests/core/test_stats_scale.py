"""The block-wise bootstrap and randomisation test give scipy's numbers bit for bit (issue 25).

scipy (``batch=None``, as medbench called it before) is the reference: the CIs and p-values of
published versions were computed that way and must re-score to the same bits. Sizes cover the
exact test (2**n <= resamples: scipy itself), the first random sizes, an odd number of values per
block, a block of one resample, and several blocks. Every test runs both ways: numpy's gathers
(small tasks) and the compiled loops of ``resampling.py`` (from 20M resampled values).
"""

import numpy as np
import pytest
from scipy import stats as sps

from medbench_core.evaluation import resampling, scipy_equivalents
from medbench_core.evaluation.stats import bootstrap_ci, bootstrap_cis, compare, paired_permutation


@pytest.fixture(params=["numpy", "compiled"])
def path(request, monkeypatch):
    """The size from which the compiled loops run: never, or always."""
    monkeypatch.setattr(scipy_equivalents, "_COMPILED_MIN", 0 if request.param == "compiled" else 1 << 62)
    return request.param


def _mean_diff(a, b, axis=-1):
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def scipy_perm(x, y, n_resamples, seed):
    return sps.permutation_test(
        (x, y), _mean_diff, permutation_type="samples", vectorized=True, n_resamples=n_resamples, alternative="two-sided", rng=np.random.default_rng(seed)
    ).pvalue


def scipy_ci(x, n_resamples, seed, confidence=0.95):
    ci = sps.bootstrap(
        (x,), np.mean, n_resamples=n_resamples, vectorized=True, method="percentile", confidence_level=confidence, rng=np.random.default_rng(seed)
    ).confidence_interval
    return float(ci.low), float(ci.high)


def pair(n: int, seed: int, ties: bool = False):
    rng = np.random.default_rng(seed)
    x = rng.beta(2, 2, n)
    y = np.clip(x + rng.normal(0.01, 0.2, n), 0, 1)
    if ties:  # metric-like values: a few levels, many equal differences
        x, y = np.round(x * 4) / 4, np.round(y * 4) / 4
    return x, y


@pytest.mark.parametrize("n", [10, 13, 14, 15, 101, 999, 3001])
@pytest.mark.parametrize("seed", [0, 5])
def test_randomisation_test_equals_scipy(n, seed, path):
    x, y = pair(n, seed, ties=n % 2 == 1)
    assert paired_permutation(x, y, n_resamples=2000, seed=seed) == scipy_perm(x, y, 2000, seed)


@pytest.mark.parametrize("block", [1, 7, 1 << 22])
def test_randomisation_blocks_do_not_change_the_value(monkeypatch, block, path):
    """A block of one resample, blocks that do not divide the resamples, one block: the same p."""
    x, y = pair(501, 3)
    want = scipy_perm(x, y, 1000, 3)
    monkeypatch.setattr(scipy_equivalents, "_BLOCK_VALUES", block)
    assert paired_permutation(x, y, n_resamples=1000, seed=3) == want


@pytest.mark.parametrize("n", [2, 3, 17, 1000, 4099])
def test_bootstrap_equals_scipy(n, path):
    x, _ = pair(n, n, ties=n == 1000)
    for seed in (0, 11):
        assert bootstrap_ci(x, n_resamples=1000, seed=seed) == scipy_ci(x, 1000, seed)
    assert bootstrap_ci(x, n_resamples=1000, seed=0, confidence=0.9) == scipy_ci(x, 1000, 0, 0.9)


@pytest.mark.parametrize("block", [1, 1000, 12_345, 1 << 22])
def test_bootstrap_of_several_columns_equals_scipy_one_by_one(monkeypatch, block, path):
    monkeypatch.setattr(scipy_equivalents, "_BLOCK_VALUES", block)
    rng = np.random.default_rng(2)
    cols = [rng.beta(2, 2, 777), np.round(rng.random(777) * 3) / 3, np.full(777, 0.25), (rng.random(777) < 0.3).astype(float)]
    got = bootstrap_cis(cols, n_resamples=1500, seed=4)
    want = [scipy_ci(c, 1500, 4) if not np.all(c == c[0]) else (0.25, 0.25) for c in cols]
    assert got == want


def test_compare_unchanged_at_5000_queries(monkeypatch):
    """compare() on a larger task: every CI and p-value as scipy gives them (10,000 resamples, seed 0)."""
    import polars as pl

    monkeypatch.setattr(scipy_equivalents, "_COMPILED_MIN", 20_000_000)  # the default: compiled from 2,000 queries
    x, y = pair(5000, 9)
    ids = [f"q{i:05d}" for i in range(5000)]
    out = compare({"bm25": pl.DataFrame({"query_id": ids, "ndcg_at_10": y}), "m": pl.DataFrame({"query_id": ids, "ndcg_at_10": x})}, "bm25", task="t")
    rows = {r["model"]: r for r in out.iter_rows(named=True)}
    assert (rows["m"]["ci_low"], rows["m"]["ci_high"]) == scipy_ci(x, 10_000, 0)
    assert (rows["bm25"]["ci_low"], rows["bm25"]["ci_high"]) == scipy_ci(y, 10_000, 0)
    assert rows["m"]["p_perm"] == scipy_perm(x, y, 10_000, 0)


@pytest.mark.parametrize("n", [*range(1, 140), 255, 256, 257, 1023, 1024, 1025, 4099, 164_000])
def test_compiled_mean_of_a_resample_is_numpys_to_the_last_bit(n):
    """numpy's pairwise sum: blocks under 8, 8-128 with a remainder, every split above 128."""
    rng = np.random.default_rng(n)
    x = (rng.random(n) - 0.3) * rng.choice([1.0, 1e-6, 1e6], n)  # magnitudes that expose another order
    idx = rng.integers(0, n, size=(3, n), dtype=np.uint32)
    out = np.empty(3)
    resampling.resampled_means(x, idx, resampling.pairwise_plan(n), out)
    assert np.array_equal(out, np.mean(np.take(x, idx.astype(np.intp)), axis=-1))
    bits = rng.integers(0, 2**32, size=(3, n), dtype=np.uint32)
    y = rng.random(n)
    swap = (bits & 1) == 0
    want = [sum(np.where(s, y, x).tolist()) / n - sum(np.where(s, x, y).tolist()) / n for s in swap]  # in sequence, from 0
    resampling.sign_flip_means(x, y, bits, out)
    assert out.tolist() == want
