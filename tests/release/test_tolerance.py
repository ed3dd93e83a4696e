"""The run and metric rule of medbench_release/tolerance.py on hand-made runs: fast, no git, DVC or Dagster.

Expected values are worked out by hand in the comments (the score tolerance of two small vectors,
which pairs may swap, which documents may cross the cutoff, the tie orderings of a three-document
run) or checked against a brute-force reference (every score difference of perturbed float32
vectors against the bound).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from medbench_release.tolerance import (
    U32,
    compare_rankings,
    metric_bounds,
    order_problem,
    ranked_lists,
    score_tolerance,
    tie_orderings,
)

pytestmark = pytest.mark.portable  # float32 sums of the kernel path at hand, against bounds worked out by hand


def _run(rows: list[tuple[str, str, float]]) -> pl.DataFrame:
    """(query, doc, score) rows in rank order per query."""
    ranks, seen = [], {}
    for q, _, _ in rows:
        seen[q] = seen.get(q, 0) + 1
        ranks.append(seen[q])
    return pl.DataFrame({"query_id": [r[0] for r in rows], "doc_id": [r[1] for r in rows], "score": [r[2] for r in rows], "rank": ranks})


def test_the_score_tolerance_of_two_small_vectors_by_hand():
    q = np.array([[3.0, 4.0]], dtype=np.float32)  # L1 7, L2 5
    d = np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32)  # largest L1 2, L2 2
    tol = score_tolerance([q], [d], 0.01)
    # Published norms may be larger by dim*eps (L1) and sqrt(dim)*eps (L2): 7.02, 2.02, 5.0141421, 2.0141421.
    one = 0.01 * (7.02 + 2.02) + 2 * 0.01**2 + 2 * 2 * U32 * (5 + 2**0.5 * 0.01) * (2 + 2**0.5 * 0.01)
    assert tol.tau == pytest.approx(2 * one, rel=1e-12) and tol.tau == pytest.approx(0.1812048, rel=1e-6)
    assert (tol.dim, tol.l1, tol.l2) == (2, (7.0, 2.0), (5.0, 2.0))
    exact = score_tolerance([q], [d], 0.0)  # identical vectors: the rounding of either float32 sum only
    assert exact.tau == pytest.approx(2 * 2 * 2 * U32 * 5 * 2, rel=1e-12)
    assert "identical vectors" in exact.describe() and "vectors within 0.01" in tol.describe()
    assert score_tolerance([], [d], 0.01) is None and score_tolerance([q], [np.zeros((2, 3), np.float32)], 0.01) is None


def test_every_score_difference_of_vectors_moved_within_eps_stays_within_tau():
    rng = np.random.default_rng(3)
    eps = 1e-5
    q = rng.standard_normal((20, 384)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    d = rng.standard_normal((300, 384)).astype(np.float32)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    tol = score_tolerance([q], [d], eps)
    worst = 0.0
    for _ in range(3):  # the published side moved by up to eps in every value, signs at random
        qp = (q + rng.choice([-eps, eps], q.shape)).astype(np.float32)
        dp = (d + rng.choice([-eps, eps], d.shape)).astype(np.float32)
        s, sp = q @ d.T, qp @ dp.T  # float32 sums, as FAISS computes them
        pair = (s[:, :, None] - s[:, None, :]) - (sp[:, :, None] - sp[:, None, :])
        worst = max(worst, float(np.abs(pair).max()))
    assert 0 < worst <= tol.tau
    assert tol.tau < 2e-3  # and it is not vacuous: 2 x 1e-5 x (2 x 19.6) + rounding, for unit vectors of 384 values


PUBLISHED = _run([("q1", "a", 0.9), ("q1", "b", 0.5), ("q1", "c", 0.49999), ("q1", "d", 0.1)])


def test_scores_and_ties_within_tau_are_accepted_and_a_swap_beyond_it_is_not():
    tau = 1e-3
    noisy = _run([("q1", "a", 0.9 + 1e-7), ("q1", "b", 0.5 - 1e-7), ("q1", "c", 0.49999), ("q1", "d", 0.1)])
    got = compare_rankings(ranked_lists(PUBLISHED), ranked_lists(noisy), tau, k=4)
    assert got.within and got.worst_score_diff == pytest.approx(1e-7, rel=1e-3) and got.swapped_pairs == 0

    tie = _run([("q1", "a", 0.9), ("q1", "c", 0.500001), ("q1", "b", 0.5), ("q1", "d", 0.1)])  # b and c 1e-5 apart: a tie
    got = compare_rankings(ranked_lists(PUBLISHED), ranked_lists(tie), tau, k=4)
    assert got.within and got.swapped_pairs == 1 and got.widest_swap == pytest.approx(1e-5, rel=1e-6)

    flip = _run([("q1", "b", 0.9), ("q1", "a", 0.5), ("q1", "c", 0.49999), ("q1", "d", 0.1)])  # a and b swapped, 0.4 apart
    got = compare_rankings(ranked_lists(PUBLISHED), ranked_lists(flip), tau, k=4)
    assert not got.within
    assert got.problems[0] == "query q1: a scores 0.5, published 0.9 (difference 0.4 > τ)"
    assert any("b now ranks above a, whose published scores differ by 0.4 >= τ" in p for p in got.problems)


def test_a_document_may_cross_the_cutoff_only_tied_with_the_last_one():
    tau = 1e-3
    entered = _run([("q1", "a", 0.9), ("q1", "b", 0.5), ("q1", "c", 0.49999), ("q1", "e", 0.1004)])  # e replaces d, 4e-4 above it
    got = compare_rankings(ranked_lists(PUBLISHED), ranked_lists(entered), tau, k=4)
    assert got.within and got.moved_across_cutoff == 2  # d left, e came in
    far = _run([("q1", "a", 0.9), ("q1", "b", 0.5), ("q1", "c", 0.49999), ("q1", "e", 0.2)])
    got = compare_rankings(ranked_lists(PUBLISHED), ranked_lists(far), tau, k=4)
    # d may leave (its 0.1 is below the rebuilt list's last, 0.2), but e may not come in 0.1 above d's 0.1.
    assert got.problems == ["query q1: e (rebuilt score 0.2, rank 4) is not in the published top 4 (its last scores 0.1)"]
    assert got.moved_across_cutoff == 1
    # A list shorter than k holds every candidate: nothing may enter or leave it.
    got = compare_rankings(ranked_lists(PUBLISHED), ranked_lists(entered), tau, k=10)
    assert len(got.problems) == 2


def test_a_probe_holds_the_top_of_a_query_only():
    tau = 1e-3
    probe = ranked_lists(PUBLISHED.filter(pl.col("rank") <= 2))
    assert compare_rankings(probe, ranked_lists(PUBLISHED), tau, k=4, partial=True).within
    intruder = _run([("q1", "a", 0.9), ("q1", "x", 0.8), ("q1", "b", 0.5), ("q1", "c", 0.49999)])
    got = compare_rankings(probe, ranked_lists(intruder), tau, k=4, partial=True)
    assert got.problems == ["query q1: x (rebuilt score 0.8, rank 2) is not in the probe's top (its last scores 0.5)"]


def test_a_run_not_ranked_by_its_own_scores_is_named():
    assert order_problem(PUBLISHED) is None
    flipped = PUBLISHED.with_columns(pl.col("doc_id").replace({"a": "b", "b": "a"}), pl.col("score").replace({0.9: 0.5, 0.5: 0.9}))
    assert order_problem(flipped) == "query q1: a at rank 2 scores 0.9, above b at rank 1 (0.5): not ranked by its own scores"
    assert order_problem(PUBLISHED.with_columns(pl.col("rank") * 2)) == "query q1: rank 2 follows rank None"


QRELS = pl.DataFrame({"query_id": ["q1", "q1", "q1"], "doc_id": ["r1", "r2", "n2"], "relevance": [1, 2, 0]})
CORPUS = ["n1", "r1", "n2", "r2", "u1", "u2"]
TIES = _run([("q1", "n1", 0.5), ("q1", "r1", 0.49995), ("q1", "n3", 0.3)])  # n1 and r1 tied within 1e-3; n3 (unjudged) alone


def test_tie_orderings_put_the_most_and_least_relevant_first_and_open_the_last_tie_of_a_full_list():
    best, worst = tie_orderings(TIES, QRELS, CORPUS, 1e-3, k=3)
    # [n1, r1] is a tie: best r1 first, worst n1 first. [n3] ends a full list (k = 3): r2 (grade 2, not
    # retrieved) may enter it at best; at worst an unjudged, unretrieved document (u1) takes its place.
    assert best["doc_id"].to_list() == ["r1", "n1", "r2"] and worst["doc_id"].to_list() == ["n1", "r1", "u1"]
    assert best["rank"].to_list() == [1, 2, 3] and best["score"].to_list() == [3.0, 2.0, 1.0]
    best, worst = tie_orderings(TIES, QRELS, CORPUS, 1e-3, k=100)  # a list shorter than k: closed
    assert best["doc_id"].to_list() == ["r1", "n1", "n3"] and worst["doc_id"].to_list() == ["n1", "r1", "n3"]
    best, worst = tie_orderings(TIES, QRELS, CORPUS, 1e-6, k=100)  # 5e-5 apart is no tie under 1e-6
    assert best["doc_id"].to_list() == worst["doc_id"].to_list() == ["n1", "r1", "n3"]


def test_metric_bounds_hold_the_metrics_of_every_tie_ordering(tmp_path):
    from medbench_core.taskdata.task import TaskMeta, make_task

    task = make_task(
        TaskMeta(name="t", source="test"),
        pl.DataFrame({"query_id": ["q1"], "text": ["q"]}),
        pl.DataFrame({"doc_id": CORPUS, "text": CORPUS}),
        QRELS,
    )
    bounds = metric_bounds(task, TIES, 1e-3, 3, tmp_path)
    # MRR@10: r1 first (1) at best, second (1/2) at worst. recall@10 (2 relevant: r1, r2): 1 at best
    # (r2 entered), 1/2 at worst.
    assert (bounds.low["mrr_at_10"], bounds.high["mrr_at_10"]) == (0.5, 1.0)
    assert (bounds.low["recall_at_10"], bounds.high["recall_at_10"]) == (0.5, 1.0)
    problems, outside, widest = bounds.check({k: (bounds.low[k] + bounds.high[k]) / 2 for k in bounds.low}, 1e-9)
    assert problems == [] and outside == 0 and widest > 0
    problems, outside, _ = bounds.check({**bounds.low, "mrr_at_10": 0.25}, 1e-9)
    assert problems == ["mrr_at_10: recorded 0.25 outside [0.5, 1.0] (by 0.25)"] and outside == 0.25


def test_maxsim_scores_of_token_vectors_moved_within_eps_stay_within_tau():
    """A 3-D query array is a late-interaction query: τ covers MaxSim (a float32 sum over its tokens of each token's best
    inner product), checked against brute force; it is about ``tokens`` times one inner product's."""
    from medbench_core.retrieval import multivector as mv

    rng = np.random.default_rng(5)
    eps, tq, dim = 1e-5, 16, 32

    def unit(x):
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)

    q = unit(rng.standard_normal((6, tq, dim)))
    lens = rng.integers(3, 20, 40)
    d = unit(rng.standard_normal((int(lens.sum()), dim)))
    offsets = np.concatenate([[0], np.cumsum(lens)])
    tol = score_tolerance([q], [d], eps)
    single = score_tolerance([q.reshape(-1, dim)], [d], eps)
    assert tol.terms == tq and single.terms == 1 and tol.tau > tq * single.tau and "MaxSim over 16 query tokens" in tol.describe()
    s = mv.maxsim(q, d, offsets)
    worst = 0.0
    for _ in range(3):
        qp = (q + rng.choice([-eps, eps], q.shape)).astype(np.float32)
        dp = (d + rng.choice([-eps, eps], d.shape)).astype(np.float32)
        sp = mv.maxsim(qp, dp, offsets)
        pair = (s[:, :, None] - s[:, None, :]) - (sp[:, :, None] - sp[:, None, :])
        worst = max(worst, float(np.abs(pair).max()))
    assert 0 < worst <= tol.tau
    assert worst > single.tau  # one inner product's τ would not hold MaxSim


def test_vectors_are_identical_within_eps_or_differ_naming_the_place():
    from medbench_release.tolerance import rounding_of, vectors_verdict, widened

    a = np.array([[0.5, 0.25], [0.125, -1.0]], dtype=np.float32)
    assert vectors_verdict(a, a.copy()).verdict == "identical" and not vectors_verdict(a, a.copy()).moved
    moved = a + np.float32(4e-6)
    got = vectors_verdict(a, moved, 1e-5)
    assert got.verdict == "within_tolerance" and got.moved and got.worst == pytest.approx(4e-6, rel=1e-2)
    far = a.copy()
    far[1, 0] += 3e-5
    got = vectors_verdict(a, far, 1e-5, what="corpus")
    assert got.verdict == "differs" and got.detail.startswith("corpus: ") and "at [1, 0]" in got.detail and "> ε 1e-05" in got.detail
    assert vectors_verdict(a, a[:1]).verdict == "differs"  # another shape
    # A value kept to 6 decimals stands for any within 5e-7 of it; a difference of two of them is off by 1e-6.
    assert rounding_of(6) == 5e-7 and rounding_of(None) == 0.0 and widened(1e-4, 5e-7) == pytest.approx(1.01e-4)
    assert vectors_verdict([0.123456], [0.1234564], 0.0, rho=5e-7).verdict == "within_tolerance"
    assert vectors_verdict([0.123456], [0.1234566], 0.0, rho=5e-7).verdict == "differs"


def test_metric_bounds_hold_the_upper_bounds_which_count_unjudged_documents_relevant(tmp_path):
    """Three documents tied (grades 2, 1 and unjudged; two more of grade 2 not retrieved, so that no order is ideal):
    nDCG's upper bound counts the unjudged one relevant at the top grade, so its best order puts the grade-1 document
    last and its worst first; the orderings that count unjudged documents least relevant alone bound it too tightly.
    Every order of the tie lies in the bounds."""
    from itertools import permutations

    from medbench_core.evaluation.scoring import flat_metrics, score
    from medbench_core.taskdata.task import TaskMeta, make_task

    qrels = pl.DataFrame({"query_id": ["q1"] * 4, "doc_id": ["r2", "r1", "r3", "r4"], "relevance": [2, 1, 2, 2]})
    corpus = ["r2", "r1", "u1", "r3", "r4"]
    queries = pl.DataFrame({"query_id": ["q1"], "text": ["q"]})
    task = make_task(TaskMeta(name="t", source="test"), queries, pl.DataFrame({"doc_id": corpus, "text": corpus}), qrels)
    scores = (0.5, 0.49999, 0.49998)  # one chain of ties within 1e-3; k = 10: a list that is not full
    bounds = metric_bounds(task, _run([("q1", d, x) for d, x in zip(("r2", "r1", "u1"), scores)]), 1e-3, 10, tmp_path / "b")
    upper = []
    for order in permutations(("r2", "r1", "u1")):
        out = tmp_path / "-".join(order)
        out.mkdir()
        got = flat_metrics(score(task, _run([("q1", d, x) for d, x in zip(order, scores)]), out))
        assert bounds.check(got, 1e-9)[0] == [], order
        upper.append(got["ndcg_upper_at_10"])
    assert (bounds.low["ndcg_upper_at_10"], bounds.high["ndcg_upper_at_10"]) == (min(upper), max(upper))
    least = []
    for name, frame in zip(("best", "worst"), tie_orderings(_run([("q1", d, x) for d, x in zip(("r2", "r1", "u1"), scores)]), qrels, corpus, 1e-3, 10)):
        (tmp_path / name).mkdir()
        least.append(flat_metrics(score(task, frame, tmp_path / name))["ndcg_upper_at_10"])
    assert min(upper) < min(least) or max(upper) > max(least)  # unjudged counted least relevant only: too tight


def test_a_full_list_of_a_task_with_candidate_sets_takes_entering_documents_from_the_query_candidates(tmp_path):
    """The last tie of a full list is open to the documents of the query's universe: its candidates, not the corpus."""
    qrels = pl.DataFrame({"query_id": ["q1", "q1"], "doc_id": ["r1", "n1"], "relevance": [1, 0]})
    corpus = ["x1", "r1", "n1", "u1", "c1"]  # x1: in the corpus, not among q1's candidates
    run = _run([("q1", "r1", 0.9), ("q1", "n1", 0.5), ("q1", "u1", 0.49999)])  # n1 and u1 tied within 1e-3; k = 3: full
    universe = {"q1": ["r1", "n1", "u1", "c1"]}
    best, worst = tie_orderings(run, qrels, corpus, 1e-3, 3, universe=universe)
    assert best["doc_id"].to_list() == ["r1", "n1", "u1"] and worst["doc_id"].to_list() == ["r1", "c1", "u1"]
    best, worst = tie_orderings(run, qrels, corpus, 1e-3, 3, unjudged="most", universe=universe)
    assert best["doc_id"].to_list() == ["r1", "u1", "c1"] and worst["doc_id"].to_list() == ["r1", "n1", "c1"]
    assert tie_orderings(run, qrels, corpus, 1e-3, 3)[1]["doc_id"].to_list() == ["r1", "x1", "c1"]  # without candidates: the corpus


def test_the_counts_of_exactly_tied_queries_lie_between_none_and_those_with_a_tie_within_tau(tmp_path):
    """metrics.json's ``ties`` counts the queries whose scores tie exactly: a float coincidence that a tie within τ may keep
    on one machine and not on another, so the rule holds them between 0 and the queries with a tie within τ."""
    import json

    from medbench_core.evaluation.scoring import score
    from medbench_core.taskdata.task import TaskMeta, make_task

    queries = pl.DataFrame({"query_id": ["q1"], "text": ["q"]})
    task = make_task(TaskMeta(name="t", source="test"), queries, pl.DataFrame({"doc_id": CORPUS, "text": CORPUS}), QRELS)
    bounds = metric_bounds(task, TIES, 1e-3, 3, tmp_path / "b")
    assert bounds.ties_within_tau == {"queries_tied": 1, "queries_tie_continued": 0}  # n1 and r1 within 1e-3; n3 alone last
    (tmp_path / "m").mkdir()
    score(task, TIES, tmp_path / "m")
    made = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert made["ties"]["queries_tied"] == 0 and bounds.check_results(made) == []  # 0.5 and 0.49995: no exact tie here
    assert bounds.check_results({**made, "ties": {**made["ties"], "queries_tied": 1}}) == []  # exactly tied elsewhere: allowed
    assert bounds.check_results({**made, "ties": {**made["ties"], "queries_tied": 2}}) == ["ties.queries_tied: recorded 2 outside [0, 1]"]
