"""Tie-aware scores and chance (issue 45) against brute force: every tied order of small runs scored by
pytrec_eval-terrier (trec_eval 9) and averaged, every order of small universes, and values worked out by hand."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import polars as pl
import pytest
import pytrec_eval

from medbench_core.evaluation.metrics import evaluate_frame
from medbench_core.evaluation.ties import chance, judged, supported, tie_aware
from medbench_core.taskdata.task import TaskMeta, make_task

METRICS = ["ndcg_at_3", "ndcg_at_10", "recall_at_2", "recall_at_10", "mrr_at_3", "map_at_4", "map_at_10", "hit_rate_at_2"]


def task_of(docs: list[str], qrels: dict[str, dict[str, int]], pools: dict[str, list[str]] | None = None, ignore_ids: bool = False):
    queries = pl.DataFrame({"query_id": list(qrels), "text": [f"query {q}" for q in qrels]})
    corpus = pl.DataFrame({"doc_id": docs, "text": [f"doc {d}" for d in docs]})
    rows = [(q, d, r) for q, rels in qrels.items() for d, r in rels.items()]
    cands = None if pools is None else pl.DataFrame([(q, d) for q, ds in pools.items() for d in ds], schema=["query_id", "doc_id"], orient="row")
    meta = TaskMeta(name="t", source="test", ignore_identical_ids=ignore_ids)
    return make_task(meta, queries, corpus, pl.DataFrame(rows, schema=["query_id", "doc_id", "relevance"], orient="row"), cands)


def trec_values(qrels: dict[str, dict[str, int]], order: list[str], k_max: int) -> dict[str, float]:
    """pytrec_eval's values of one strict order (scores strictly decreasing), under medbench's names."""
    run = {"q": {d: float(len(order) - i) for i, d in enumerate(order)}}
    q = {"q": qrels}
    cuts = sorted({int(m.rsplit("_", 1)[1]) for m in METRICS})
    at = ",".join(map(str, cuts))
    full = pytrec_eval.RelevanceEvaluator(q, {f"ndcg_cut.{at}", f"recall.{at}", f"map_cut.{at}"}).evaluate(run)
    out = {}
    for m in METRICS:
        base, k = m.rsplit("_at_", 1)
        k = int(k)
        if base == "ndcg":
            out[m] = full.get("q", {}).get(f"ndcg_cut_{k}", 0.0)
        elif base == "recall":
            out[m] = full.get("q", {}).get(f"recall_{k}", 0.0)
        elif base == "map":
            out[m] = full.get("q", {}).get(f"map_cut_{k}", 0.0)
        elif base == "mrr":
            top = {"q": {d: run["q"][d] for d in order[:k]}}
            out[m] = pytrec_eval.RelevanceEvaluator(q, {"recip_rank"}).evaluate(top).get("q", {}).get("recip_rank", 0.0) if order else 0.0
        elif base == "hit_rate":
            out[m] = float(any(qrels.get(d, 0) > 0 for d in order[:k]))
    return out


def brute_force(qrels: dict[str, int], scored: dict[str, float], universe: list[str]) -> dict[str, float]:
    """The mean of each metric over every order of each run of equal scores; a tie at the run's last row
    continues over the universe's documents the run left out (the module's rule)."""
    by_score: dict[float, list[str]] = {}
    for d, s in scored.items():
        by_score.setdefault(s, []).append(d)
    groups = [by_score[s] for s in sorted(by_score, reverse=True)]
    left_out = [d for d in universe if d not in scored]
    if groups and len(groups[-1]) >= 2 and left_out:
        groups[-1] = groups[-1] + left_out
    totals = dict.fromkeys(METRICS, 0.0)
    n = 0
    for combo in itertools.product(*[itertools.permutations(g) for g in groups]):
        order = [d for part in combo for d in part]
        for m, v in trec_values(qrels, order, 10).items():
            totals[m] += v
        n += 1
    return {m: v / max(n, 1) for m, v in totals.items()}


def ours(task, run_rows: list[tuple[str, str, float]]) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    run = pl.DataFrame(run_rows, schema=["query_id", "doc_id", "score"], orient="row")
    metrics = supported(METRICS)
    j = judged(task, 10)
    ev = evaluate_frame(task.qrels, run, METRICS)
    trec = {m: np.array([ev.per_query[q][m] for q in j.query_ids]) for m in METRICS}
    ta = tie_aware(j, run, metrics, trec)
    ch = chance(j, metrics)
    return (
        {q: {m: float(ta.values[m][i]) for m in METRICS} for i, q in enumerate(j.query_ids)},
        {q: {m: float(ch[m][i]) for m in METRICS} for i, q in enumerate(j.query_ids)},
    )


@pytest.mark.parametrize("seed", range(12))
def test_tie_aware_equals_the_mean_over_every_tied_order(seed):
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(rng.randint(3, 7))]
    qrels, rows, universes = {}, [], {}
    for q in ("q1", "q2", "q3"):
        rels = {d: rng.choice([0, 0, 1, 2]) for d in rng.sample(docs, rng.randint(1, len(docs)))}
        if not any(r > 0 for r in rels.values()):
            rels[docs[0]] = 1
        qrels[q] = rels
        depth = rng.randint(1, len(docs))
        for d in rng.sample(docs, depth):
            rows.append((q, d, float(rng.choice([0, 1, 1, 2]))))  # few distinct scores: ties everywhere
        universes[q] = docs
    got, _ = ours(task_of(docs, qrels), rows)
    for q in qrels:
        scored = {d: s for qq, d, s in rows if qq == q}
        want = brute_force(qrels[q], scored, universes[q])
        for m in METRICS:
            assert got[q][m] == pytest.approx(want[m], abs=1e-12), (seed, q, m, scored)


def test_candidate_pools_and_a_relevant_document_outside_the_pool():
    docs = [f"d{i}" for i in range(8)]
    pools = {"q1": ["d0", "d1", "d2", "d3", "d4"], "q2": ["d3", "d4", "d5", "d6", "d7"]}
    qrels = {"q1": {"d1": 1, "d7": 2}, "q2": {"d5": 2, "d6": 1, "d0": 1}}  # d7 and d0 are judged but outside the pools
    rows = [("q1", "d0", 1.0), ("q1", "d1", 0.5), ("q1", "d2", 0.5), ("q2", "d3", 0.0), ("q2", "d4", 0.0), ("q2", "d5", 0.0)]
    got, got_chance = ours(task_of(docs, qrels, pools), rows)
    for q in qrels:
        scored = {d: s for qq, d, s in rows if qq == q}
        want = brute_force(qrels[q], scored, pools[q])
        for m in METRICS:
            assert got[q][m] == pytest.approx(want[m], abs=1e-12), (q, m)
        every = [trec_values(qrels[q], list(p), 10) for p in itertools.permutations(pools[q])]
        for m in METRICS:
            assert got_chance[q][m] == pytest.approx(sum(v[m] for v in every) / len(every), abs=1e-12), (q, m)


def test_a_query_with_no_shared_token_scores_its_chance_value():
    # BM25 gives every document 0 for a query that shares no token with them: the run holds its top 3 of
    # 6 by doc id; the tie continues over the three left out, so the figure is the chance value.
    docs = [f"d{i}" for i in range(6)]
    qrels = {"q": {"d0": 1}}
    rows = [("q", "d5", 0.0), ("q", "d4", 0.0), ("q", "d3", 0.0)]
    got, got_chance = ours(task_of(docs, qrels), rows)
    assert got["q"] == pytest.approx(got_chance["q"], abs=1e-15)
    # Worked by hand: one relevant document among six, uniformly placed.
    d = [1 / math.log2(i + 2) for i in range(6)]
    assert got["q"]["ndcg_at_10"] == pytest.approx(sum(d) / 6, abs=1e-15)
    assert got["q"]["ndcg_at_3"] == pytest.approx(sum(d[:3]) / 6, abs=1e-15)
    assert got["q"]["mrr_at_3"] == pytest.approx((1 + 1 / 2 + 1 / 3) / 6, abs=1e-15)
    assert got["q"]["recall_at_2"] == got["q"]["hit_rate_at_2"] == pytest.approx(2 / 6, abs=1e-15)
    # trec_eval scores the doc-id order: d0 is not even retrieved.
    assert (
        evaluate_frame(task_of(docs, qrels).qrels, pl.DataFrame(rows, schema=["query_id", "doc_id", "score"], orient="row"), ["ndcg_at_10"]).mean["ndcg_at_10"]
        == 0.0
    )


def test_five_candidates_one_relevant_chance_by_hand():
    docs = [f"d{i}" for i in range(5)]
    _, got = ours(task_of(docs, {"q": {"d2": 1, "d3": 0}}, {"q": docs}), [("q", "d0", 1.0)])
    assert got["q"]["ndcg_at_10"] == pytest.approx((1 + 1 / math.log2(3) + 1 / 2 + 1 / math.log2(5) + 1 / math.log2(6)) / 5, abs=1e-15)
    assert round(got["q"]["ndcg_at_10"], 4) == 0.5897  # the floor of a five-option confusion set (issue 45)
    assert got["q"]["mrr_at_3"] == pytest.approx((1 + 1 / 2 + 1 / 3) / 5, abs=1e-15)
    assert got["q"]["map_at_10"] == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 5, abs=1e-15)


def test_a_run_without_ties_keeps_its_trec_eval_values_bit_for_bit():
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(30)]
    qrels = {f"q{i}": {d: rng.choice([0, 1, 2]) for d in rng.sample(docs, 6)} for i in range(20)}
    rows = [(q, d, float(s)) for q in qrels for s, d in enumerate(rng.sample(docs, 12))]
    task = task_of(docs, qrels)
    run = pl.DataFrame(rows, schema=["query_id", "doc_id", "score"], orient="row")
    j = judged(task, 10)
    ev = evaluate_frame(task.qrels, run, METRICS)
    trec = {m: np.array([ev.per_query[q][m] for q in j.query_ids]) for m in METRICS}
    ta = tie_aware(j, run, supported(METRICS), trec)
    assert not ta.tied.any()
    for m in METRICS:
        assert ta.values[m].tolist() == trec[m].tolist()
    # The closed forms on a tie-free order give the same values (not only a copy of them).
    from medbench_core.evaluation.ties import Groups, expected

    g = run.join(pl.DataFrame({"query_id": j.query_ids, "qi": list(range(len(j.query_ids)))}), on="query_id").sort(["qi", "score"], descending=[False, True])
    g = g.with_columns(start=pl.int_range(pl.len()).over("qi")).join(j.positives, on=["query_id", "doc_id"], how="left")
    g = g.with_columns(pl.col("relevance").fill_null(0))
    rel = g["relevance"].to_numpy()
    groups = Groups(g["qi"].to_numpy(), g["start"].to_numpy(), np.ones(g.height, dtype=np.int64), (rel >= 1).astype(np.int64), rel.astype(float))
    again = expected(groups, j.n_rel, j.ideal, supported(METRICS))
    for m in METRICS:
        np.testing.assert_allclose(again[m], trec[m], rtol=0, atol=1e-15)
