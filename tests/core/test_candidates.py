"""Candidate-set tasks: each query is ranked only against its own pool, and metrics follow.

A deterministic fake encoder (a lookup table of 2-d vectors) gives rankings that are worked
out by hand below; FAISS search, BM25 search and the metrics must reproduce them.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from medbench_core.errors import DataError
from medbench_core.evaluation.metrics import evaluate, qrels_to_dict, run_to_dict
from medbench_core.retrieval import bm25_index
from medbench_core.retrieval.index import build_index, search
from medbench_core.retrieval.ranking import rank_scores
from medbench_core.retrieval.records import candidate_pools, encode_side
from medbench_core.taskdata.task import TaskMeta, make_task

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
if not DATA.exists():
    DATA = Path("/work/shared/data")


class TableEncoder:
    """Fake RecordEncoder: each text maps to a fixed vector, L2-normalised."""

    def __init__(self, table: dict[str, list[float]]):
        self.table = table

    def encode_records(self, texts, images, languages, role):
        v = np.array([self.table[t] for t in texts], dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


class HashEncoder:
    """Fake RecordEncoder for real text: counts of word hashes in 64 buckets, L2-normalised."""

    def encode_records(self, texts, images, languages, role):
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, int(hashlib.sha256(w.encode()).hexdigest(), 16) % 64] += 1.0
            out[i, 63] += 0.5  # never a zero vector
        return out / np.linalg.norm(out, axis=1, keepdims=True)


# Vectors (before normalisation they already have unit length):
#   q1 = (1, 0), q2 = (0, 1)
#   d1 = (.6, .8)  d2 = (.8, .6)  d3 = (0, 1)  d4 = (1, 0)  d5 = (.6, .8)  d6 = (-1, 0)
# Scores q1: d1 .6, d2 .8, d3 0, d4 1, d5 .6, d6 -1
#        q2: d1 .8, d2 .6, d3 1, d4 0, d5 .8, d6 0
TABLE = {
    "q one": [1, 0],
    "q two": [0, 1],
    "doc one": [0.6, 0.8],
    "doc two": [0.8, 0.6],
    "doc three": [0, 1],
    "doc four": [1, 0],
    "doc five": [0.6, 0.8],
    "doc six": [-1, 0],
}
DOCS = {"d1": "doc one", "d2": "doc two", "d3": "doc three", "d4": "doc four", "d5": "doc five", "d6": "doc six"}
POOLS = {"q1": ["d1", "d2", "d3"], "q2": ["d1", "d4", "d5", "d6"]}
QRELS = {"q1": {"d1": 1, "d2": 0, "d3": 2}, "q2": {"d4": 1, "d5": 0, "d6": 1}}

# Hand-worked rankings. Equal scores are ordered by doc id descending (trec_eval's rule).
# q1 in its pool: d2 (.8), d1 (.6), d3 (0).
# q2 in its pool: d5 and d1 tie at .8 -> d5, d1; d6 and d4 tie at 0 -> d6, d4.
EXPECTED_RUN = {"q1": ["d2", "d1", "d3"], "q2": ["d5", "d1", "d6", "d4"]}
# q1: gains 0, 1, 2 at ranks 1-3; ideal 2, 1.
NDCG_Q1 = (1 / math.log2(3) + 2 / math.log2(4)) / (2 + 1 / math.log2(3))
# q2: relevant d6 at rank 3 and d4 at rank 4; ideal ranks 1, 2.
NDCG_Q2 = (1 / math.log2(4) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
EXPECTED = {
    "q1": {"ndcg_at_10": NDCG_Q1, "mrr_at_10": 1 / 2, "recall_at_1": 0.0, "recall_at_10": 1.0, "map_at_100": (1 / 2 + 2 / 3) / 2},
    "q2": {"ndcg_at_10": NDCG_Q2, "mrr_at_10": 1 / 3, "recall_at_1": 0.0, "recall_at_10": 1.0, "map_at_100": (1 / 3 + 2 / 4) / 2},
}
METRICS = list(EXPECTED["q1"])


def hand_task(candidates: bool = True):
    queries = pl.DataFrame(
        {"query_id": ["q1", "q2"], "text": ["q one", "q two"], "language": ["en", "en"], "modality": ["text", "text"], "licence": ["CC0-1.0"] * 2}
    )
    corpus = pl.DataFrame({"doc_id": list(DOCS), "text": list(DOCS.values()), "language": ["en"] * 6, "modality": ["text"] * 6, "licence": ["CC0-1.0"] * 6})
    qrels = pl.DataFrame(
        [(q, d, r) for q, rel in QRELS.items() for d, r in rel.items()], schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "relevance": pl.Int32}, orient="row"
    )
    cands = pl.DataFrame([(q, d) for q, ds in POOLS.items() for d in ds], schema={"query_id": pl.Utf8, "doc_id": pl.Utf8}, orient="row")
    return make_task(TaskMeta(name="hand", source="test"), queries, corpus, qrels, cands if candidates else None)


def ranked(run: pl.DataFrame) -> dict[str, list[str]]:
    return {q: g.sort("rank")["doc_id"].to_list() for (q,), g in run.group_by("query_id")}


@pytest.mark.parametrize("index_type", ["flat", "hnsw"])
def test_faiss_candidate_search_matches_hand_ranking_and_metrics(index_type):
    task = hand_task()
    enc = TableEncoder(TABLE)
    q, d = encode_side(enc, task, "query"), encode_side(enc, task, "passage")
    index, _ = build_index(d, {"type": index_type})
    run = search(index, q, ["q1", "q2"], task.corpus["doc_id"].to_list(), 10, doc_emb=d, candidates=candidate_pools(task))
    assert ranked(run) == EXPECTED_RUN
    assert run.filter(pl.col("query_id") == "q1")["score"].to_list() == pytest.approx([0.8, 0.6, 0.0], abs=1e-6)
    ev = evaluate(qrels_to_dict(task.qrels), run_to_dict(run), METRICS)
    for qid, vals in EXPECTED.items():
        assert ev.per_query[qid] == pytest.approx(vals, abs=1e-12)
    assert ev.mean["ndcg_at_10"] == pytest.approx((NDCG_Q1 + NDCG_Q2) / 2, abs=1e-12)


def test_without_pools_the_whole_corpus_competes():
    task = hand_task(candidates=False)
    assert candidate_pools(task) is None
    enc = TableEncoder(TABLE)
    q, d = encode_side(enc, task, "query"), encode_side(enc, task, "passage")
    index, _ = build_index(d)
    run = search(index, q, ["q1", "q2"], task.corpus["doc_id"].to_list(), 10)
    # q1: d4 1, d2 .8, d5 = d1 .6 (d5 first), d3 0, d6 -1.
    assert ranked(run)["q1"] == ["d4", "d2", "d5", "d1", "d3", "d6"]
    ev = evaluate(qrels_to_dict(task.qrels), run_to_dict(run), ["ndcg_at_10"])
    # d1 (gain 1) at rank 4, d3 (gain 2) at rank 5.
    assert ev.per_query["q1"]["ndcg_at_10"] == pytest.approx((1 / math.log2(5) + 2 / math.log2(6)) / (2 + 1 / math.log2(3)), abs=1e-12)


def test_k_smaller_than_the_pool_cuts_after_tie_break():
    task = hand_task()
    enc = TableEncoder(TABLE)
    q, d = encode_side(enc, task, "query"), encode_side(enc, task, "passage")
    run = search(build_index(d)[0], q, ["q1", "q2"], task.corpus["doc_id"].to_list(), 1, doc_emb=d, candidates=candidate_pools(task))
    assert ranked(run) == {"q1": ["d2"], "q2": ["d5"]}


def test_score_rows_path_used_by_bm25_respects_pools():
    task = hand_task()
    enc = TableEncoder(TABLE)
    q, d = encode_side(enc, task, "query"), encode_side(enc, task, "passage")
    run = rank_scores(["q1", "q2"], task.corpus["doc_id"].to_list(), q @ d.T, 10, candidates=candidate_pools(task))
    assert ranked(run) == EXPECTED_RUN


def test_bm25_candidate_search_by_hand():
    # Lucene BM25 as bm25s computes it: idf = ln(1 + (N - df + .5) / (df + .5)),
    # score = idf * tf / (tf + k1 * (1 - b + b * len / avglen)), k1 = 1.5, b = .75.
    docs = ["aspirin", "aspirin aspirin ibuprofen", "ibuprofen", "paracetamol"]
    ids = ["d1", "d2", "d3", "d4"]
    idf = math.log(1 + (4 - 2 + 0.5) / (2 + 0.5))
    avg = (1 + 3 + 1 + 1) / 4
    s1 = idf * 1 / (1 + 1.5 * (0.25 + 0.75 * 1 / avg))
    s2 = idf * 2 / (2 + 1.5 * (0.25 + 0.75 * 3 / avg))
    retriever = bm25_index.fit(docs)
    full = bm25_index.search(retriever, ["q"], ["aspirin"], ids, 10)
    assert full["doc_id"].to_list()[:2] == ["d1", "d2"]
    assert full["score"].to_list()[:2] == pytest.approx([s1, s2], abs=1e-6)
    pooled = bm25_index.search(retriever, ["q"], ["aspirin"], ids, 10, candidates={"q": np.array([1, 2, 3])})
    # d1 (the best document) is outside the pool; the zero-score tie d3/d4 goes by id descending.
    assert pooled["doc_id"].to_list() == ["d2", "d4", "d3"]
    assert pooled["score"].to_list() == pytest.approx([s2, 0.0, 0.0], abs=1e-6)


def test_candidate_pools_dedupes_and_refuses_gaps():
    task = hand_task()
    dup = pl.concat([task.candidates, pl.DataFrame({"query_id": ["q1"], "doc_id": ["d2"]})])
    pools = candidate_pools(make_task(task.meta, task.queries, task.corpus, task.qrels, dup))
    assert pools["q1"].tolist() == [0, 1, 2] and pools["q2"].tolist() == [0, 3, 4, 5]
    unknown = pl.concat([task.candidates, pl.DataFrame({"query_id": ["q1"], "doc_id": ["d9"]})])
    with pytest.raises(DataError, match=r"candidate \(q1, d9\) names an unknown document"):
        candidate_pools(make_task(task.meta, task.queries, task.corpus, task.qrels, unknown))
    only_q1 = task.candidates.filter(pl.col("query_id") == "q1")
    with pytest.raises(DataError, match=r"1 query id\(s\) have no candidates, e\.g\. \['q2'\]"):
        candidate_pools(make_task(task.meta, task.queries, task.corpus, task.qrels, only_q1))
    with pytest.raises(DataError, match="candidate-set search needs the document embeddings"):
        search(None, np.zeros((2, 2), np.float32), ["q1", "q2"], list(DOCS), 10, candidates=candidate_pools(task))


def test_frenchmedmcqa_each_question_ranks_only_its_options_and_metrics_match_pytrec_eval():
    import pytrec_eval

    from medbench_core.taskdata.readers.frenchmedmcqa import FrenchMedMCQAOptions, read_frenchmedmcqa

    task = read_frenchmedmcqa(DATA / "frenchmedmcqa", FrenchMedMCQAOptions(split="test"))
    enc = HashEncoder()
    q, d = encode_side(enc, task, "query"), encode_side(enc, task, "passage")
    doc_ids = task.corpus["doc_id"].to_list()
    run = search(build_index(d)[0], q, task.queries["query_id"].to_list(), doc_ids, 10, doc_emb=d, candidates=candidate_pools(task))
    assert run.height == 622 * 5
    assert run.filter(~pl.col("doc_id").str.starts_with(pl.col("query_id") + ":")).height == 0
    assert {tuple(r) for r in run.group_by("query_id").agg(pl.col("rank").sort())["rank"].to_list()} == {(1, 2, 3, 4, 5)}
    metrics = ["ndcg_at_10", "recall_at_1", "mrr_at_10", "map_at_100"]
    ours = evaluate(qrels_to_dict(task.qrels), run_to_dict(run), metrics)
    ref = pytrec_eval.RelevanceEvaluator(qrels_to_dict(task.qrels), {"ndcg_cut.10", "recall.1", "recip_rank", "map_cut.100"}).evaluate(run_to_dict(run))
    names = {"ndcg_at_10": "ndcg_cut_10", "recall_at_1": "recall_1", "mrr_at_10": "recip_rank", "map_at_100": "map_cut_100"}
    for qid, vals in ours.per_query.items():
        for m in metrics:
            assert vals[m] == pytest.approx(ref[qid][names[m]], abs=1e-9), (qid, m)
    # Against the whole corpus the same encoder would pull in other questions' options.
    full = search(build_index(d)[0], q[:50], task.queries["query_id"].to_list()[:50], doc_ids, 5)
    assert full.filter(~pl.col("doc_id").str.starts_with(pl.col("query_id") + ":")).height > 0


def test_bm25_text_side_of_multimodal_records():
    # A query with no indexable text (image-only, or stopwords only) matches nothing: all
    # documents score 0 and keep the doc-id order; a corpus without any text is refused.
    retriever = bm25_index.fit(["aspirin", "ibuprofen", ""])
    run = bm25_index.search(
        retriever,
        ["img", "stop", "asp"],
        ["", "the of", "aspirin"],
        ["d1", "d2", "d3"],
        10,
        candidates={"img": np.array([0, 1]), "stop": np.array([0, 1, 2]), "asp": np.array([0, 1, 2])},
    )
    assert ranked(run) == {"img": ["d2", "d1"], "stop": ["d3", "d2", "d1"], "asp": ["d1", "d3", "d2"]}
    assert run.filter(pl.col("query_id") != "asp")["score"].to_list() == [0.0] * 5
    with pytest.raises(DataError, match="no document has indexable text"):
        bm25_index.fit(["", "  "])


def test_errors_from_encoders_name_the_record(tmp_path):
    import shutil

    from medbench_core.retrieval.records import TextOnly
    from medbench_core.taskdata.readers.medicat import read_medicat

    class NeverCalled:
        def encode(self, texts, *, role, languages=None):
            raise AssertionError("the text encoder must not see records without text")

    task = read_medicat(DATA / "medicat_sample")
    with pytest.raises(DataError, match=r"reads text only, but 10 passage record\(s\) have no text \(e\.g\. figure:26491ab7\w+/Figure4\)"):
        encode_side(TextOnly(NeverCalled(), "minilm"), task, "passage")
    # An encoder without an ``ids`` parameter still works (positions only).
    assert encode_side(TableEncoder(TABLE), hand_task(), "query").shape == (2, 2)
    src = tmp_path / "medicat"
    shutil.copytree(DATA / "medicat_sample", src)
    for d in (src, src / "figures"):
        d.chmod(0o755)  # the shared source is read-only, and so is its copy
    task = read_medicat(src)
    (src / "figures" / "b362a19e4c4b1854f7cbe246a19502a56f52c2b5_3-Figure2-1.png").unlink()

    class ImageLoader:
        """Fake encoder that loads every image like the CLIP encoder does."""

        def encode_records(self, texts, images, languages, role, ids=None):
            from medbench_core.taskdata.images import load_image

            for p, rid in zip(images, ids):
                if p is not None:
                    load_image(p, rid)
            return np.ones((len(texts), 1), np.float32)

    with pytest.raises(DataError, match=r"record figure:b362a19e\w+/Figure2: image .*file not found"):
        encode_side(ImageLoader(), task, "passage")
