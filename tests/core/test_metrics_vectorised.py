"""The vectorised evaluator gives the very bits of the scalar one it replaced (and so of every published metric).

``versioning reproduce`` demands bit-identical metrics, so "equal to 1e-9" is not enough here:
the reference below is the scalar code medbench used before (one query at a time, Python sums
in rank order), and values are compared with ``==``. Inputs cover the paths the vectorised code
takes: rows grouped by query or shuffled, every query cut at one depth or not, few grades or
many, heavy ties, -0.0, judged queries missing from the run, run queries nobody judged.
"""

import math
import random

import numpy as np
import polars as pl
import pytest

from medbench_core.evaluation.metrics import DEFAULT_METRICS, TREC_METRICS, evaluate, evaluate_frame, parse_metric


# --- the scalar evaluator medbench used up to this change (medbench_core/evaluation/metrics.py) -----------
def _rank(docs):
    ids = sorted(docs, reverse=True)
    ids.sort(key=lambda d: docs[d], reverse=True)
    return ids


def _ndcg(ranked, rels, k):
    ideal = sorted((r for r in rels.values() if r > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    if idcg == 0:
        return 0.0
    dcg = 0.0
    for i, d in enumerate(ranked[:k]):
        g = rels.get(d, 0)
        if g > 0:
            dcg += g / math.log2(i + 2)
    return dcg / idcg


def _recall(ranked, rels, k):
    n_rel = sum(1 for r in rels.values() if r >= 1)
    return 0.0 if n_rel == 0 else sum(1 for d in ranked[:k] if rels.get(d, 0) >= 1) / n_rel


def _mrr(ranked, rels, k):
    for i, d in enumerate(ranked[:k]):
        if rels.get(d, 0) >= 1:
            return 1.0 / (i + 1)
    return 0.0


def _map(ranked, rels, k):
    n_rel = sum(1 for r in rels.values() if r >= 1)
    if n_rel == 0:
        return 0.0
    hits, total = 0, 0.0
    for i, d in enumerate(ranked[:k]):
        if rels.get(d, 0) >= 1:
            hits += 1
            total += hits / (i + 1)
    return total / n_rel


KERNELS = {"ndcg": _ndcg, "recall": _recall, "mrr": _mrr, "map": _map}


def scalar_evaluate(qrels, run, metrics):
    parsed = [(m, *parse_metric(m)) for m in metrics]
    per_query = {}
    for qid, rels in qrels.items():
        ranked = _rank(run.get(qid, {}))
        per_query[qid] = {m: KERNELS[base](ranked, rels, k) for m, base, k in parsed}
    n = len(per_query)
    return per_query, {m: (sum(v[m] for v in per_query.values()) / n if n else 0.0) for m in metrics}


# --- inputs ----------------------------------------------------------------------------------
def random_case(seed: int, *, depth_mix: bool, grades: int, n_queries: int = 60):
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(400)] + ["D7", "a", "é1", "z"]  # mixed case and non-ASCII ids: byte order
    qrels, run = {}, {}
    for q in range(n_queries):
        qid = f"q{q}"
        if q % 11 != 5:  # some judged queries are missing from the run
            n = rng.choice([3, 40, 150]) if depth_mix else 150
            run[qid] = {d: rng.choice([0.0, -0.0, 1.0, 0.5, 0.25, round(rng.random(), 2)]) for d in rng.sample(docs, n)}
        judged = rng.sample(docs, rng.randint(1, 60))
        qrels[qid] = {d: rng.choice(range(-1, grades)) for d in judged}
    run["unjudged"] = {"d1": 1.0}
    return qrels, run


def frames(qrels, run, shuffle_seed=None):
    q = pl.DataFrame(
        {
            "query_id": [q for q, r in qrels.items() for _ in r],
            "doc_id": [d for r in qrels.values() for d in r],
            "relevance": [v for r in qrels.values() for v in r.values()],
        }
    )
    r = pl.DataFrame(
        {
            "query_id": [q for q, d in run.items() for _ in d],
            "doc_id": [x for d in run.values() for x in d],
            "score": [float(s) for d in run.values() for s in d.values()],
        }
    )
    if shuffle_seed is not None:
        r = r.sample(fraction=1.0, shuffle=True, seed=shuffle_seed)  # qrels keep their order: it fixes the mean's
    return q, r


METRICS = (*TREC_METRICS, "ndcg_at_3", "map_at_5", "recall_at_1")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("depth_mix,grades", [(False, 4), (True, 4), (True, 40)])
def test_bit_identical_to_the_scalar_evaluator(seed, depth_mix, grades):
    qrels, run = random_case(seed, depth_mix=depth_mix, grades=grades)
    want_per_query, want_mean = scalar_evaluate(qrels, run, METRICS)
    assert sum(v["ndcg_at_10"] > 0 for v in want_per_query.values()) > 10  # not a degenerate case

    ev = evaluate(qrels, run, METRICS)
    assert ev.per_query == want_per_query and list(ev.per_query) == list(want_per_query)
    assert ev.mean == want_mean
    for shuffle in (None, seed):
        ev_frame = evaluate_frame(*frames(qrels, run, shuffle), METRICS)
        assert ev_frame.per_query == want_per_query and ev_frame.mean == want_mean
    # Asked beside the hole-aware measures (which join every judgment, not only the positives), the
    # trec_eval measures keep their bits.
    together = evaluate(qrels, run, DEFAULT_METRICS)
    assert {q: {m: v[m] for m in TREC_METRICS} for q, v in together.per_query.items()} == {
        q: {m: v[m] for m in TREC_METRICS} for q, v in want_per_query.items()
    }


def test_every_query_cut_at_one_depth_takes_the_partition_path_and_agrees():
    # 30 queries x 200 rows each, grouped: the reshape-and-partition branch; depth 100 < 200.
    rng = np.random.default_rng(1)
    run = {f"q{q}": {f"d{d}": float(s) for d, s in zip(rng.choice(1000, 200, replace=False), np.round(rng.random(200), 2))} for q in range(30)}
    qrels = {q: {d: int(g) for d, g in zip(list(docs)[::3], rng.integers(0, 4, 200))} for q, docs in run.items()}
    want_per_query, want_mean = scalar_evaluate(qrels, run, TREC_METRICS)
    ev = evaluate_frame(*frames(qrels, run), TREC_METRICS)
    assert ev.per_query == want_per_query and ev.mean == want_mean


def test_a_qrels_pair_judged_twice_is_refused():
    from medbench_core.errors import DataError

    qrels = pl.DataFrame({"query_id": ["q", "q"], "doc_id": ["a", "a"], "relevance": [1, 2]})
    run = pl.DataFrame({"query_id": ["q"], "doc_id": ["a"], "score": [1.0]})
    with pytest.raises(DataError, match="judge the same"):
        evaluate_frame(qrels, run)


def test_every_judgment_against_the_top_100_keeps_every_match():
    # Far more judgments than ranked rows (70 queries x 1,000 judged, runs 150 deep): the hole-aware
    # measures join every judgment, and a table per query drops those naming no ranked document
    # before the sort. No match may be dropped with them: the trec_eval measures keep their bits
    # and the judged share of the top 10 is what a count by hand gives.
    rng = np.random.default_rng(5)
    qrels, run = {}, {}
    for q in range(70):
        docs = [f"d{d}" for d in rng.choice(5000, 1000, replace=False)]
        qrels[f"q{q}"] = {d: int(g) for d, g in zip(docs, rng.choice(4, 1000, p=[0.7, 0.15, 0.1, 0.05]))}
        ranked = [f"d{d}" for d in rng.choice(5000, 150, replace=False)]
        run[f"q{q}"] = {d: float(s) for d, s in zip(ranked, np.round(rng.random(150), 2))}
    want_per_query, _ = scalar_evaluate(qrels, run, TREC_METRICS)
    got = evaluate_frame(*frames(qrels, run), DEFAULT_METRICS).per_query
    assert {q: {m: v[m] for m in TREC_METRICS} for q, v in got.items()} == want_per_query
    for q, docs in run.items():
        judged_top10 = sum(d in qrels[q] for d in _rank(docs)[:10])
        assert got[q]["judged_at_10"] == judged_top10 / 10 and got[q]["holes_at_10"] == 10 - judged_top10


def test_equal_keys_finds_every_pair_when_keys_repeat():
    # Keys drawn from a small pool: runs of equal keys of every length, on one side or both (a hash
    # collision beside a match, a pair judged twice). Every left x right pair of equal keys, by brute force.
    from medbench_core.evaluation.ranked_gains import _equal_keys

    rng = np.random.default_rng(3)
    for _ in range(200):
        n, m = (int(x) for x in rng.integers(1, 80, 2))
        pool = rng.integers(0, 2**20, int(rng.integers(1, 30))).astype(np.uint64) << np.uint64(40)
        left, right = pool[rng.integers(0, len(pool), n)], pool[rng.integers(0, len(pool), m)]
        i, j = _equal_keys(left, right)
        want = sorted((a, b) for a in range(n) for b in range(m) if left[a] == right[b])
        assert sorted(zip(i.tolist(), j.tolist())) == want
