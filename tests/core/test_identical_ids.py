"""``ignore_identical_ids``: a retrieved document whose id is the query's id, dropped before scoring
as BEIR's ``EvaluateRetrieval.evaluate`` drops it (R2MED's dense evaluation, eval_retrieval.py line
110 at 62b7074), kept as pytrec_eval and mteb 2.x keep it (R2MED's BM25 and reranker scripts); the
default is the reader's, the entry's option overrides it (``dense``: R2MED's rule, per retriever
family), and the task contract counts such pairs."""

from __future__ import annotations

import json

import polars as pl
import pytest
import pytrec_eval

from medbench_core.taskdata.catalog import build_task, load_catalog
from medbench_core.taskdata.contracts import validate_task
from medbench_core.taskdata.readers import get_reader


def beir_folder(root):
    """Four documents; query "d2" has the id of a document (judged not relevant), query "q1" none."""
    root.mkdir()
    docs = {"d1": "aspirin and heart attacks", "d2": "statins lower cholesterol", "d3": "aspirin bleeding risk", "d4": "exercise and falls"}
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items()))
    queries = {"q1": "aspirin heart", "d2": "cholesterol statins aspirin"}
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nd2\td3\t1\n")


def catalog(tmp_path, **option):
    extra = "".join(f", {k}: {json.dumps(v)}" for k, v in option.items())
    (tmp_path / "tasks.yaml").write_text(
        f"tasks:\n  - {{name: t, reader: beir, path: src, split: test, query_licence: CC0-1.0, doc_licence: CC0-1.0{extra}}}\n"
    )
    return load_catalog(tmp_path / "tasks.yaml").task("t")


def test_defaults_per_reader_are_the_seed_evaluators():
    assert get_reader("beir").ignore_identical_ids is True  # BEIR's evaluate(ignore_identical_ids=True)
    # R2MED: dense runs scored by BEIR (eval_retrieval.py l.109-110), BM25 and reranker runs by pytrec_eval (eval_BM25.py l.35-37)
    assert get_reader("r2med_repo").ignore_identical_ids == "dense"
    assert get_reader("mteb").ignore_identical_ids is False  # mteb 2.x keeps them
    assert get_reader("multilingual").ignore_identical_ids is False


def test_the_option_the_contract_count_and_the_scores(tmp_path):
    from medbench_core.evaluation.scoring import score

    beir_folder(tmp_path / "src")
    dropping = build_task(catalog(tmp_path), tmp_path, tmp_path / "w1")
    keeping = build_task(catalog(tmp_path, ignore_identical_ids=False), tmp_path, tmp_path / "w2")
    assert (dropping.meta.ignore_identical_ids, keeping.meta.ignore_identical_ids) == (True, False)
    assert dropping.content_hash() != keeping.content_hash()  # the option keys what is built from the task

    verdict = validate_task(dropping)
    assert verdict.passed and verdict.identical_ids == {"queries": 1, "judged_relevant": 0, "ignored": True}
    assert "1 query id(s) are also document ids" in verdict.message
    assert validate_task(keeping).identical_ids["ignored"] is False

    # query d2 retrieves document d2 first, then d3 (its relevant document)
    run = pl.DataFrame(
        {"query_id": ["q1", "q1", "d2", "d2", "d2"], "doc_id": ["d1", "d3", "d2", "d3", "d1"], "score": [3.0, 1.0, 5.0, 4.0, 1.0], "rank": [1, 2, 1, 2, 3]}
    )
    qrels = {"q1": {"d1": 1}, "d2": {"d3": 1}}
    results = {q: dict(zip(g["doc_id"], g["score"])) for (q,), g in run.group_by("query_id")}
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"})
    kept = ev.evaluate(results)
    popped = ev.evaluate({q: {d: s for d, s in r.items() if d != q} for q, r in results.items()})  # BEIR's evaluate
    for task, expected in ((dropping, popped), (keeping, kept)):
        out = tmp_path / f"m{task.meta.ignore_identical_ids}"
        out.mkdir()
        got = score(task, run, out)
        assert got["mean"]["ndcg_at_10"] == pytest.approx(sum(v["ndcg_cut_10"] for v in expected.values()) / 2, abs=1e-12)
    assert popped["d2"]["ndcg_cut_10"] == 1.0 and kept["d2"]["ndcg_cut_10"] < 1.0


def test_no_identical_pair_leaves_the_task_as_it_was(tmp_path):
    root = tmp_path / "src"
    beir_folder(root)
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "aspirin"}) + "\n" + json.dumps({"_id": "q2", "text": "statins"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    task = build_task(catalog(tmp_path), tmp_path, tmp_path / "w")
    assert task.meta.ignore_identical_ids is False and "ignore_identical_ids" not in task.meta.to_dict()
    assert validate_task(task).identical_ids == {"queries": 0, "judged_relevant": 0, "ignored": False}


def test_r2meds_rule_drops_them_from_dense_runs_and_keeps_them_in_bm25_and_reranked_runs(tmp_path):
    """``ignore_identical_ids: dense``: BEIR's evaluate for a dense retriever's run (eval_retrieval.py l.109-110),
    pytrec_eval for BM25's and a reranker's (eval_BM25.py l.35-37, eval_reranker.py l.34), as R2MED's scripts score them."""
    from medbench_core.evaluation.scoring import score
    from medbench_core.retrieval.kinds.capabilities import scoring_family
    from medbench_core.retrieval.model_registry import model_spec

    beir_folder(tmp_path / "src")
    task = build_task(catalog(tmp_path, ignore_identical_ids="dense"), tmp_path, tmp_path / "w")
    assert task.meta.ignore_identical_ids == "dense"
    bm25 = model_spec(name="bm25", kind="lucene-bm25")
    dense = model_spec(name="bge", kind="transformers", path="x/bge")
    nv = model_spec(name="nv", kind="remote-code-embedder", path="x/nv", settings={"text": {"method": "encode", "texts": 0}})
    registry = {m.name: m for m in (bm25, dense, nv)}
    expanded = {r: model_spec(name=f"{r}+hyde", kind="expanded", retriever=r, expansion="e") for r in registry}
    rerank = model_spec(name="rr", kind="cross-encoder", path="x/ce", rerank={"upstream": "bge", "depth": 10})
    families = {m.name: scoring_family(m, registry) for m in (*registry.values(), *expanded.values(), rerank)}
    assert families == {"bm25": "lexical", "bge": "dense", "nv": "dense", "bm25+hyde": "lexical", "bge+hyde": "dense", "nv+hyde": "dense", "rr": None}

    run = pl.DataFrame(
        {"query_id": ["q1", "q1", "d2", "d2", "d2"], "doc_id": ["d1", "d3", "d2", "d3", "d1"], "score": [3.0, 1.0, 5.0, 4.0, 1.0], "rank": [1, 2, 1, 2, 3]}
    )
    results = {q: dict(zip(g["doc_id"], g["score"])) for (q,), g in run.group_by("query_id")}
    ev = pytrec_eval.RelevanceEvaluator({"q1": {"d1": 1}, "d2": {"d3": 1}}, {"ndcg_cut.10"})
    kept = sum(v["ndcg_cut_10"] for v in ev.evaluate(results).values()) / 2
    popped = sum(v["ndcg_cut_10"] for v in ev.evaluate({q: {d: s for d, s in r.items() if d != q} for q, r in results.items()}).values()) / 2
    for name, family in families.items():
        out = tmp_path / name
        out.mkdir()
        got = score(task, run, out, family=family)
        want = popped if family == "dense" else kept
        assert got["mean"]["ndcg_at_10"] == pytest.approx(want, abs=1e-12), name
        assert got["identical_ids"] == {"rule": "dense", "family": family, "dropped": family == "dense"}
    assert popped != kept
