"""The expansion contract: a blocking gate on ids and empty answers, and the leakage measure that
flags an expansion copying a relevant passage (a shared run of 30+ words) and passes the others."""

from __future__ import annotations

import polars as pl
import pytest
from _expansion_fixtures import leaky_query, scifact_subset, synthetic_expansions

from medbench_core.retrieval.expansion.contract import COPY_WORDS, longest_shared_run, measure_leakage, validate_expansion, words
from medbench_core.retrieval.expansion.frame import expansion_frame


@pytest.fixture(scope="module")
def task():
    return scifact_subset()


def frame_of(texts: dict[str, str]) -> pl.DataFrame:
    return expansion_frame([{"query_id": q, "raw": t} for q, t in texts.items()])


@pytest.mark.parametrize(
    "a,b,want",
    [
        ("the cat sat on the mat", "a dog sat on the mat today", (4, 2)),  # "sat on the mat"
        ("one two three", "four five six", (0, 0)),
        ("Aspirin, REDUCES fever!", "aspirin reduces fever in children", (3, 0)),  # case and punctuation do not hide a copy
        ("x y x y z", "y x y z", (4, 1)),  # the DP must not stop at the first, shorter match
        ("", "anything", (0, 0)),
    ],
)
def test_longest_shared_run_by_hand(a, b, want):
    assert longest_shared_run(words(a), words(b)) == want


def test_leakage_flags_the_copy_and_passes_the_others(task, tmp_path):
    texts = synthetic_expansions(task)
    leaky = leaky_query(task)
    verdict = validate_expansion(frame_of(texts), task, "hyde-fixture", tmp_path)
    lk = verdict.leakage.sort("query_id")
    by_q = {r["query_id"]: r for r in lk.iter_rows(named=True)}
    # The leaky expansion is 40 consecutive words of its relevant abstract (words 5..44, split on
    # whitespace); normalised words can split a token like "1,000" in two, so at least 40.
    assert by_q[leaky]["longest_shared_words"] >= 40 and by_q[leaky]["copies_relevant"]
    doc = task.corpus.filter(pl.col("doc_id") == by_q[leaky]["doc_id"])["text"][0]
    assert by_q[leaky]["shared_text"].split()[:5] == words(" ".join(doc.split()[5:45]))[:5]
    # Every other expansion carries 12 consecutive words of a relevant abstract: shared, not copied.
    others = [r for q, r in by_q.items() if q != leaky]
    assert all(12 <= r["longest_shared_words"] < COPY_WORDS and not r["copies_relevant"] for r in others), others
    assert verdict.copies == [leaky] and verdict.summary["n_copies"] == 1 and verdict.summary["max_shared_words"] == by_q[leaky]["longest_shared_words"]
    # Leakage warns; it does not block the gate.
    assert verdict.passed
    assert [o.rows for o in verdict.contract.warnings] == [(leaky,)]
    warning = [line for line in verdict.contract.message.splitlines() if line.startswith("- warning:")]
    assert len(warning) == 1 and f"({leaky})" in warning[0] and "30+ words" in warning[0], verdict.contract.message
    assert (tmp_path / "leakage.parquet").exists() and (tmp_path / "contract.json").exists()


def test_leakage_ignores_non_relevant_documents(task):
    # Copying a document judged for another query is not leakage for this one.
    qids = task.queries["query_id"].to_list()
    rel = dict(task.qrels.select("query_id", "doc_id").iter_rows())
    other_doc = task.corpus.filter(pl.col("doc_id") == rel[qids[1]])["text"][0]
    lk = measure_leakage(frame_of({qids[0]: " ".join(other_doc.split()[:50])}), task)
    assert lk["longest_shared_words"][0] < COPY_WORDS


def test_gate_blocks_bad_ids_and_warns_of_empty_answers(task):
    qids = task.queries["query_id"].to_list()
    texts = synthetic_expansions(task)
    rows = [{"query_id": q, "raw": texts[q]} for q in qids if q != qids[2]]
    rows.append({"query_id": qids[0], "raw": "a second expansion for the first query"})
    rows.append({"query_id": "ghost", "raw": "for a query the task does not have"})
    rows.append({"query_id": qids[1], "raw": "<think>only reasoning</think>"})  # answer part empty
    rows = [r for r in rows if not (r["query_id"] == qids[1] and r["raw"] == texts[qids[1]])]
    verdict = validate_expansion(expansion_frame(rows), task, "bad")
    assert not verdict.passed
    failed = {o.rule: o.rows for o in verdict.contract.failures}
    assert set(failed["one expansion per query id"]) == {qids[0]}
    assert failed["every query_id is a query of task scifact_small"] == ("ghost",)
    assert failed["every query of task scifact_small has an expansion"] == (qids[2],)
    assert "gate FAILED (3 of" in verdict.contract.message and "ghost" in verdict.contract.message
    # an empty answer warns: R2MED's code scores that query with the empty string (eval_BM25.py l.124-133)
    warned = {o.rule: o.rows for o in verdict.contract.warnings}
    assert warned["every expansion's answer (after any </think>) has text"] == (qids[1],)
    only_empty = [{"query_id": q, "raw": "<think>only reasoning</think>" if q == qids[1] else texts[q]} for q in qids]
    assert validate_expansion(expansion_frame(only_empty), task, "empty").passed
