"""Holes in the qrels themselves (issue 33): refused by default, kept and reported with ``qrels_holes: mark``.

A BEIR folder whose qrels name a document absent from the corpus (d9, relevant), judge q2 with no
positive and leave q3 unjudged (``only_judged_queries: false`` keeps it): the reader refuses it,
naming the ids and the option; with ``mark`` the task is read, its contract passes with three
warnings and counts each hole, GATE.json records them, and scoring keeps d9 as a relevant document
no model retrieves (as trec_eval does with such qrels).
"""

import json

import pytest

from medbench_core.errors import DataError
from medbench_core.evaluation.metrics import evaluate_frame
from medbench_core.taskdata.catalog import build_task, load_catalog
from medbench_core.taskdata.contracts import read_gate, record_gate, validate_task


def beir_folder(root):
    src = root / "holes"
    (src / "qrels").mkdir(parents=True)
    (src / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": f"text of {d}"}) + "\n" for d in ("d1", "d2", "d3")))
    (src / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": f"query {q}"}) + "\n" for q in ("q1", "q2", "q3")))
    (src / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td9\t1\nq2\td2\t0\n")
    return src


def catalog(root, mode: str | None):
    option = f", qrels_holes: {mode}" if mode else ""
    (root / "tasks.yaml").write_text(
        "tasks:\n  - {name: holes, reader: beir, path: holes, query_licence: CC-BY-4.0, doc_licence: CC-BY-4.0, only_judged_queries: false" + option + "}\n"
    )
    return load_catalog(root / "tasks.yaml").task("holes")


def test_refused_by_default_naming_the_ids_and_the_option(tmp_path):
    beir_folder(tmp_path)
    with pytest.raises(DataError, match=r"qrels name 1 unknown document id\(s\): \['d9'\]; set qrels_holes: mark"):
        build_task(catalog(tmp_path, None), tmp_path, tmp_path / "work")


def test_an_unknown_value_is_refused_by_the_catalogue(tmp_path):
    beir_folder(tmp_path)
    with pytest.raises(DataError, match="qrels_holes"):
        catalog(tmp_path, "ignore")


def test_marked_holes_pass_the_gate_as_warnings_counted_per_task(tmp_path):
    beir_folder(tmp_path)
    task = build_task(catalog(tmp_path, "mark"), tmp_path, tmp_path / "work")
    assert task.qrels.height == 3  # d9 kept: a relevant document no model can retrieve

    refused = validate_task(task)  # the same task judged under the default rule
    assert not refused.passed
    assert {o.rule for o in refused.failures} == {
        "every doc_id names a row of corpus.parquet",
        "every query has at least one judged document in qrels.parquet (a query without any is not scored)",
        "every query has at least one positive judgment in qrels.parquet",
    }

    marked = validate_task(task, tmp_path / "gate", qrels_holes="mark")
    assert marked.passed and len(marked.warnings) == 3
    assert marked.holes == {
        "mode": "mark", "n_absent_doc_rows": 1, "n_absent_relevant_rows": 1, "absent_doc_ids": ["d9"],
        "n_queries_without_judgment": 1, "queries_without_judgment": ["q3"],
        "n_queries_without_positive": 1, "queries_without_positive": ["q2"], "n_queries": 3,
    }  # fmt: skip
    assert "qrels holes: 1 qrels row(s) name documents absent from the corpus (1 relevant)" in marked.message
    assert "kept and marked (qrels_holes: mark)" in marked.message
    task_dir = tmp_path / "curated"
    task_dir.mkdir()
    record_gate(task_dir, marked)
    assert read_gate(task_dir / "GATE.json")["holes"]["queries_without_judgment"] == ["q3"]

    # Scoring: q3 is not scored (no judgment), q2 scores 0 (no positive), q1's ideal counts d9.
    import polars as pl

    run = pl.DataFrame({"query_id": ["q1", "q2", "q3"], "doc_id": ["d1", "d2", "d3"], "score": [1.0, 1.0, 1.0]})
    ev = evaluate_frame(task.qrels, run, ["ndcg_at_10", "recall_at_10"])
    assert set(ev.per_query) == {"q1", "q2"}
    assert ev.per_query["q1"]["recall_at_10"] == 0.5 and ev.per_query["q2"]["ndcg_at_10"] == 0.0
