"""Rank intervals and the groups no test separates, against a direct bootstrap written out here.

The direct bootstrap draws one resample at a time (``rng.integers(0, n, size=n)``, the draw the
library documents), recomputes each model's mean, ranks with ``scipy.stats.rankdata(method="min")``
and takes the quantiles with ``numpy.percentile``; the library draws blocks of resamples, ranks by
counting and uses ``numpy.quantile``.
"""

import itertools
import json

import numpy as np
import polars as pl
import pytest
from scipy.stats import rankdata

from medbench_core.evaluation.reports import AVERAGE, Cell, Significance, build_tables, rank_table, write_leaderboard
from medbench_core.evaluation.stats import inseparable_groups, pairwise_holm, rank_intervals, ranks_of, stratified_permutation

B = 2000


def direct(per_task: dict[str, dict[str, np.ndarray]], seed: int = 0, n_resamples: int = B) -> dict[str, tuple[int, int, int]]:
    models = list(next(iter(per_task.values())))
    rng = np.random.default_rng(seed)
    sums = np.zeros((n_resamples, len(models)))
    for values in per_task.values():
        n = len(values[models[0]])
        for b in range(n_resamples):
            idx = rng.integers(0, n, size=n)
            sums[b] += [values[m][idx].mean() / len(per_task) for m in models]
    ranks = np.array([rankdata(-row, method="min") for row in sums])
    observed = rankdata(-np.array([np.mean([per_task[t][m].mean() for t in per_task]) for m in models]), method="min")
    lo = np.percentile(ranks, 2.5, axis=0, method="inverted_cdf")
    hi = np.percentile(ranks, 97.5, axis=0, method="inverted_cdf")
    return {m: (int(observed[i]), int(lo[i]), int(hi[i])) for i, m in enumerate(models)}


def close_models(seed: int, n: int) -> dict[str, np.ndarray]:
    """Three models whose means are close enough for their ranks to move under resampling."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0, 1, n)
    return {"a": np.clip(base + rng.normal(0.03, 0.2, n), 0, 1), "b": base, "c": np.clip(base + rng.normal(-0.02, 0.2, n), 0, 1)}


def test_one_task_agrees_with_a_direct_bootstrap():
    per_task = {"t": close_models(1, 40)}
    got = rank_intervals(per_task, n_resamples=B, seed=0)
    assert got == direct(per_task)
    assert any(lo < hi for _, lo, hi in got.values())  # the ranks did move: the case tests something


def test_the_average_resamples_each_tasks_queries_and_agrees_with_a_direct_bootstrap():
    per_task = {"t1": close_models(2, 25), "t2": close_models(3, 60)}
    got = rank_intervals(per_task, n_resamples=B, seed=7)
    assert got == direct(per_task, seed=7)
    assert got == rank_intervals(per_task, n_resamples=B, seed=7)


def test_a_model_better_on_every_query_ranks_first_in_every_resample_and_ties_share_the_better_rank():
    x = np.linspace(0.1, 0.9, 30)
    got = rank_intervals({"t": {"low": x - 0.05, "high": x, "twin": x.copy()}}, n_resamples=1000)
    assert got == {"low": (3, 3, 3), "high": (1, 1, 1), "twin": (1, 1, 1)}
    assert ranks_of(np.array([0.2, 0.5, 0.5, 0.1])).tolist() == [3, 1, 1, 4]


def test_groups_are_maximal_runs_of_models_no_test_separates():
    means = {"A": 0.9, "B": 0.8, "C": 0.7, "D": 0.6}
    sig = {("A", "C"), ("A", "D"), ("B", "D")}  # A-B, B-C and C-D are not separated
    p = {pair: (0.01 if pair in sig else 0.3) for pair in itertools.combinations("ABCD", 2)}
    assert inseparable_groups(means, p) == {"A": "a", "B": "ab", "C": "bc", "D": "c"}
    assert inseparable_groups(means, {pair: 0.01 for pair in p}) == {"A": "a", "B": "b", "C": "c", "D": "d"}
    assert inseparable_groups(means, {pair: 0.5 for pair in p}) == {m: "a" for m in means}
    assert inseparable_groups(means, p, alpha=0.001) == {m: "a" for m in means}  # nothing significant at that level


def test_the_stratified_randomisation_test_matches_exact_enumeration():
    d1, d2 = np.array([0.3, -0.1, 0.2]), np.array([0.5, 0.1, -0.2, 0.4])
    observed = (d1.mean() + d2.mean()) / 2
    stats = []
    for signs in itertools.product((-1, 1), repeat=7):
        s = np.array(signs)
        stats.append(((s[:3] * d1).mean() + (s[3:] * d2).mean()) / 2)
    stats = np.array(stats)
    exact = min(1.0, 2 * min(np.mean(stats >= observed - 1e-12), np.mean(stats <= observed + 1e-12)))
    assert stratified_permutation([d1, d2], n_resamples=40_000, seed=0) == pytest.approx(exact, abs=0.01)
    # 20 queries all better: no random sign pattern of 1000 reaches it, p = 2 (0 + 1) / 1001.
    assert stratified_permutation([np.full(20, 0.2)], n_resamples=1000) == pytest.approx(2 / 1001)
    assert stratified_permutation([np.zeros(5), np.zeros(3)]) == 1.0


def test_pairwise_holm_tests_every_pair_as_scipy_does_and_corrects_across_them():
    from medbench_core.evaluation.stats import holm, paired_permutation

    # 12 queries: 2^12 sign patterns <= 10,000, so both this test and scipy's enumerate them (exact p).
    models = close_models(4, 12)
    got = pairwise_holm({"t": models}, n_resamples=10_000)
    pairs = [("a", "b"), ("a", "c"), ("b", "c")]
    raw = [paired_permutation(models[x], models[y], n_resamples=10_000) for x, y in pairs]
    assert got == pytest.approx(dict(zip(pairs, holm(raw))), abs=1e-12)
    # More queries: Monte Carlo on both sides, the same test up to the draws.
    models = close_models(4, 200)
    got = pairwise_holm({"t": models}, n_resamples=10_000)
    raw = [paired_permutation(models[x], models[y], n_resamples=10_000) for x, y in pairs]
    assert got == pytest.approx(dict(zip(pairs, holm(raw))), abs=0.02)


def per_query(values) -> pl.DataFrame:
    return pl.DataFrame({"query_id": [f"q{i:02d}" for i in range(len(values))], "ndcg_at_10": values})


def test_the_leaderboard_shows_rank_intervals_that_agree_with_the_direct_bootstrap(tmp_path):
    t1, t2 = close_models(5, 30), close_models(6, 20)
    img = np.random.default_rng(9).uniform(0, 1, 12)
    cells = [
        Cell(m, t, metrics={"mean": {"ndcg_at_10": float(v.mean())}}, per_query=per_query(v)) for t, vals in (("t1", t1), ("t2", t2)) for m, v in vals.items()
    ]
    cells += [Cell(m, "img", applicable=False) for m in ("a", "b")] + [
        Cell("c", "img", metrics={"mean": {"ndcg_at_10": float(img.mean())}}, per_query=per_query(img))
    ]
    sig = Significance("b", n_resamples=B)
    out = write_leaderboard(build_tables(cells, ["a", "b", "c"], ["t1", "t2", "img"], sig), tmp_path)
    ranks = {(r["task"], r["model"]): r for r in out["ranks"].iter_rows(named=True)}
    for task, values in (("t1", t1), ("t2", t2)):
        for m, (r, lo, hi) in direct({task: values}).items():
            assert (ranks[(task, m)]["rank"], ranks[(task, m)]["rank_low"], ranks[(task, m)]["rank_high"]) == (r, lo, hi)
    assert ranks[("img", "c")]["rank"] == 1 and ranks[("img", "c")]["n_models"] == 1
    # The average: a and b are averaged over t1, t2; c over t1, t2, img: only the first two are ranked there.
    assert {m for (t, m) in ranks if t == AVERAGE} == {"a", "b"}
    both = direct({"t1": {m: t1[m] for m in "ab"}, "t2": {m: t2[m] for m in "ab"}})
    assert {m: (ranks[(AVERAGE, m)]["rank"], ranks[(AVERAGE, m)]["rank_low"], ranks[(AVERAGE, m)]["rank_high"]) for m in "ab"} == both
    # In every saved form; the existing columns and figures unchanged.
    csv = pl.read_csv(tmp_path / "leaderboard.csv")
    assert [c for c in csv.columns if "." not in c] == ["model", "t1", "t2", "img", "average", "averaged_over", "rank", "rank_low", "rank_high", "group"]
    # beside them, what each cell rests on (issue 33): Judged@10 and the nDCG@10 bounds per task
    trust = ("judged_at_10", "ndcg_lower_at_10", "ndcg_upper_at_10", "low_judged")
    assert [c for c in csv.columns if "." in c] == [f"{m}.{t}" for t in ("t1", "t2", "img") for m in trust]
    assert csv.select("model", "t1", "t2", "img", "average", "averaged_over").equals(out["board"])
    stats = pl.read_csv(tmp_path / "stats.csv")
    assert stats.columns[13:17] == ["rank", "rank_low", "rank_high", "group"]  # after the significance columns, before the trust ones
    row = stats.filter((pl.col("task") == "t1") & (pl.col("model") == "a")).row(0, named=True)
    assert (row["rank"], row["rank_low"], row["rank_high"]) == direct({"t1": t1})["a"]
    doc = json.loads((tmp_path / "leaderboard.json").read_text())
    assert {(r["task"], r["model"]) for r in doc["ranks"]} == set(ranks)
    r = ranks[("t1", "a")]
    assert f"| a | {r['rank']} [{r['rank_low']}, {r['rank_high']}] {r['group']} |" in out["markdown"]
    assert "Rank by nDCG@10 (95% bootstrap interval of the rank; letters: groups no test separates)" in out["markdown"]
    assert rank_table(cells, out["board"], ["t1", "t2", "img"], sig).equals(out["ranks"])  # deterministic
