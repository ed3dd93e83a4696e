"""doc_order and run_frame, vectorised for 1.2M-document corpora, equal the loops they replaced (==, frame for frame)."""

import random

import numpy as np
import polars as pl

from medbench_core.retrieval.ranking import RUN_SCHEMA, doc_order, run_frame


def loop_doc_order(doc_ids):
    order = sorted(range(len(doc_ids)), key=lambda i: doc_ids[i], reverse=True)
    pos = np.empty(len(doc_ids), dtype=np.int64)
    pos[np.asarray(order, dtype=np.int64)] = np.arange(len(doc_ids))
    return pos


def loop_run_frame(query_ids, hits, doc_ids):
    q_col, d_col, s_col, r_col = [], [], [], []
    for qid, (idx, sc) in zip(query_ids, hits):
        for rank, (i, s) in enumerate(zip(idx.tolist(), sc.tolist()), start=1):
            q_col.append(qid)
            d_col.append(doc_ids[i])
            s_col.append(float(s))
            r_col.append(rank)
    return pl.DataFrame({"query_id": q_col, "doc_id": d_col, "score": s_col, "rank": r_col}, schema=RUN_SCHEMA)


def test_doc_order_equals_python_sorted_on_mixed_ids():
    rng = random.Random(0)
    ids = list({rng.choice(["d", "D", "é", "10", "1", "a-", "z"]) + str(rng.randint(0, 10**6)) for _ in range(5000)})
    ids += ["", "ä", "ß", "日本", "a"]
    assert np.array_equal(doc_order(ids), loop_doc_order(ids))


def test_run_frame_equals_the_loop():
    rng = np.random.default_rng(0)
    doc_ids = [f"d{i}" for i in range(500)]
    hits = [(rng.choice(500, n, replace=False), rng.random(n).astype(np.float32)) for n in (10, 0, 3, 100)]
    for query_ids in (["q1", "q2", "q3", "q4"], ["q1", "q2"], ["q1", "q2", "q3", "q4", "q5"]):
        assert run_frame(query_ids, hits, doc_ids).equals(loop_run_frame(query_ids, hits, doc_ids))
    assert run_frame([], [], doc_ids).equals(loop_run_frame([], [], doc_ids))


def loop_search(index, queries, query_ids, doc_ids, k):
    """index.search as it was: one query at a time through ranking.topk."""
    import faiss

    from medbench_core.retrieval.ranking import topk

    n, tie, hits = len(doc_ids), loop_doc_order(doc_ids), []
    k2 = min(n, k + 32)
    scores, idx = index.search(np.ascontiguousarray(queries, dtype=np.float32), k2)
    exact = isinstance(index, faiss.IndexFlat)
    for qi in range(len(query_ids)):
        sc, ix = scores[qi], idx[qi]
        sc, ix = sc[ix >= 0], ix[ix >= 0]
        if exact and k2 < n and len(sc) >= k and sc[-1] == sc[min(k, len(sc)) - 1]:
            full_s, full_i = index.search(queries[qi : qi + 1], n)
            sc, ix = full_s[0], full_i[0]
        sel = topk(sc, tie[ix], k)
        hits.append((ix[sel], sc[sel]))
    return loop_run_frame(query_ids, hits, doc_ids)


def test_search_equals_the_per_query_loop_with_ties_and_short_rows():
    from medbench_core.retrieval.index import build_index, search

    rng = np.random.default_rng(3)
    docs = np.round(rng.standard_normal((3000, 8)), 0).astype(np.float32)  # coarse values: many equal scores
    docs[1000:1400] = docs[0]  # 400 identical documents: ties far past k + 32
    queries = np.concatenate([docs[:5], np.round(rng.standard_normal((40, 8)), 0)]).astype(np.float32)
    doc_ids = [f"d{(i * 7919) % 3000:04d}" for i in range(3000)]  # id order unrelated to row order
    qids = [f"q{i}" for i in range(len(queries))]
    for spec in ({"type": "flat"}, {"type": "ivf", "nlist": 64, "nprobe": 1}):  # IVF nprobe 1: rows FAISS cannot fill (-1)
        index, _ = build_index(docs, spec, use_gpu=False)
        for k in (10, 100):
            assert search(index, queries, qids, doc_ids, k).equals(loop_search(index, queries, qids, doc_ids, k)), (spec, k)
