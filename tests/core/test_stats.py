"""Significance tests and bootstrap CIs: one case worked out by hand, the rest against scipy called directly.

The hand case (4 queries): model x = [0.9, 0.6, 0.8, 0.4], baseline y = [0.5, 0.5, 0.4, 0.5], so the
differences are d = [0.4, 0.1, 0.4, -0.1], mean 0.2.
- t-test: deviations from the mean 0.2, -0.1, 0.2, -0.3; squares sum 0.18; s^2 = 0.18 / 3 = 0.06;
  se = sqrt(0.06 / 4) = 0.12247; t = 0.2 / 0.12247 = sqrt(8/3) = 1.63299 with 3 degrees of freedom.
  Student's t with 3 df has the closed form P(|T| > t) = 1 - (2/pi) (atan(u) + u / (1 + u^2)), u = t / sqrt(3),
  which gives p = 0.20098 (u = 0.94281, atan(u) = 0.75597, u / (1 + u^2) = 0.49913).
- randomisation test: 2^4 = 16 sign patterns of d; the sum is 0.4 (s1 + s3) + 0.1 (s2 + s4). |sum| >= 0.8
  for 1.0 (1 pattern), 0.8 (2), -0.8 (2), -1.0 (1): 6 of 16, p = 0.375 exactly.
- Holm on p = [0.01, 0.04, 0.03]: sorted 0.01 * 3 = 0.03, 0.03 * 2 = 0.06, 0.04 * 1 = 0.04 -> max(0.06, 0.04) = 0.06;
  adjusted in input order [0.03, 0.06, 0.06].
"""

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from medbench_core.errors import DataError
from medbench_core.evaluation.stats import (
    STATS_SCHEMA,
    align,
    bootstrap_ci,
    compare,
    format_cell,
    holm,
    paired_permutation,
    paired_ttest,
)

X = [0.9, 0.6, 0.8, 0.4]
Y = [0.5, 0.5, 0.4, 0.5]


def frame(values, ids=None) -> pl.DataFrame:
    ids = ids or [f"q{i}" for i in range(len(values))]
    return pl.DataFrame({"query_id": ids, "ndcg_at_10": [float(v) for v in values]})


def test_paired_t_test_by_hand():
    t = 0.2 / math.sqrt(0.06 / 4)
    assert t == pytest.approx(math.sqrt(8 / 3), abs=1e-12)
    u = t / math.sqrt(3)
    p_hand = 1 - (2 / math.pi) * (math.atan(u) + u / (1 + u * u))
    assert p_hand == pytest.approx(0.20098, abs=1e-5)
    assert paired_ttest(X, Y) == pytest.approx(p_hand, abs=1e-12)


def test_exact_randomisation_test_by_hand():
    # 16 <= n_resamples: scipy enumerates every sign flip, so the p-value is exact and seed-free.
    assert paired_permutation(X, Y, n_resamples=10_000, seed=0) == pytest.approx(6 / 16, abs=1e-12)
    assert paired_permutation(X, Y, n_resamples=10_000, seed=123) == pytest.approx(6 / 16, abs=1e-12)


def test_holm_by_hand():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06], abs=1e-15)
    # Capped at 1, and monotone in the sorted order.
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_degenerate_differences():
    assert paired_ttest(X, X) == 1.0 and paired_permutation(X, X) == 1.0
    shifted = [v + 0.1 for v in Y]
    assert paired_ttest(shifted, Y) == 0.0  # a constant non-zero difference: no variance, certain
    assert bootstrap_ci([0.3] * 10) == (0.3, 0.3)


@pytest.fixture(scope="module")
def three_models():
    """Per-query nDCG-like values of 300 queries for a baseline and two models (one better, one nearly equal)."""
    rng = np.random.default_rng(7)
    base = rng.beta(2, 2, 300)
    better = np.clip(base + rng.normal(0.05, 0.15, 300), 0, 1)
    same = np.clip(base + rng.normal(0.0, 0.15, 300), 0, 1)
    ids = [f"q{i:03d}" for i in range(300)]
    # Shuffled row order: compare() must align by id, not by position.
    perm = rng.permutation(300)
    frames = {
        "bm25": frame(base, ids),
        "better": frame(better[perm], [ids[i] for i in perm]),
        "same": frame(same, ids),
    }
    return frames, {"bm25": base, "better": better, "same": same}


def test_compare_equals_scipy_called_directly(three_models):
    frames, raw = three_models
    out = compare(frames, "bm25", task="scifact", n_resamples=2000, n_boot=2000, seed=11)
    assert out.schema == pl.Schema(STATS_SCHEMA)
    rows = {r["model"]: r for r in out.iter_rows(named=True)}
    for model in ("better", "same"):
        x, y = raw[model], raw["bm25"]
        r = rows[model]
        assert r["p_ttest"] == pytest.approx(sps.ttest_rel(x, y).pvalue, abs=1e-12)
        perm = sps.permutation_test(
            (x, y),
            lambda a, b, axis: np.mean(a, axis=axis) - np.mean(b, axis=axis),
            permutation_type="samples",
            vectorized=True,
            n_resamples=2000,
            rng=np.random.default_rng(11),
        )
        assert r["p_perm"] == pytest.approx(perm.pvalue, abs=1e-12)
        assert r["mean"] == pytest.approx(x.mean(), abs=1e-12)
        assert r["diff"] == pytest.approx(x.mean() - y.mean(), abs=1e-12)
    for model, x in raw.items():
        ci = sps.bootstrap((x,), np.mean, n_resamples=2000, method="percentile", rng=np.random.default_rng(11)).confidence_interval
        assert (rows[model]["ci_low"], rows[model]["ci_high"]) == pytest.approx((ci.low, ci.high), abs=1e-12)
        assert rows[model]["ci_low"] < rows[model]["mean"] < rows[model]["ci_high"]
    # Holm over the two comparisons of this task, on the randomisation p-values.
    adj = holm([rows["better"]["p_perm"], rows["same"]["p_perm"]])
    assert [rows["better"]["p_holm"], rows["same"]["p_holm"]] == pytest.approx(adj, abs=1e-15)
    assert rows["better"]["significant"] is True and rows["same"]["significant"] is False
    base = rows["bm25"]
    assert base["diff"] == 0.0 and base["p_ttest"] is None and base["p_holm"] is None and base["significant"] is False


def test_holm_can_follow_the_t_test(three_models):
    frames, _ = three_models
    out = compare(frames, "bm25", task="t", test="ttest", n_resamples=1000, n_boot=1000)
    p = out.filter(pl.col("model") != "bm25").sort("model")
    assert p["p_holm"].to_list() == pytest.approx(holm(p["p_ttest"].to_list()), abs=1e-15)


def test_values_do_not_depend_on_the_other_models(three_models):
    frames, _ = three_models
    full = compare(frames, "bm25", task="t", n_resamples=1000, n_boot=1000)
    alone = compare({"same": frames["same"], "bm25": frames["bm25"]}, "bm25", task="t", n_resamples=1000, n_boot=1000)
    a = full.filter(pl.col("model") == "same").row(0, named=True)
    b = alone.filter(pl.col("model") == "same").row(0, named=True)
    for col in ("ci_low", "ci_high", "p_ttest", "p_perm"):
        assert a[col] == b[col]
    assert b["p_holm"] == b["p_perm"]  # one comparison: Holm changes nothing


def test_query_sets_must_match():
    with pytest.raises(DataError, match=r"task scifact: b and a were scored on different queries.*\['q3'\].*\['q9'\]"):
        align({"a": frame([1, 0, 1, 0]), "b": frame([1, 0, 1, 0], ["q0", "q1", "q2", "q9"])}, "ndcg_at_10", task="scifact")
    with pytest.raises(DataError, match=r"twice: \['q1'\]"):
        align({"a": frame([1, 0, 1], ["q0", "q1", "q1"])}, "ndcg_at_10")
    with pytest.raises(DataError, match="baseline 'bm25' has no per-query metrics"):
        compare({"a": frame(X)}, "bm25", task="scifact")


def test_bootstrap_needs_1000_resamples():
    with pytest.raises(ValueError, match="at least 1000"):
        bootstrap_ci(X, n_resamples=999)


def test_format_cell():
    assert format_cell(0.66021, 0.6312, 0.6898, True) == "0.6602 [0.63, 0.69] *"
    assert format_cell(0.66021, 0.6312, 0.6898, False) == "0.6602 [0.63, 0.69]"
    assert format_cell(None) == "-"
