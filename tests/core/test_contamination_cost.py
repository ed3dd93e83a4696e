"""The contamination audit's cost grows with what there is to compare (issue 51).

A task's texts are compared with other tasks' texts and with declared text manifests, never within the task. With
neither, the audit must not normalise or MinHash the task's texts at all (a cold single-task run paid ~41 s for it
on SciFact), yet write the same artifact: no pairs, the same counts. With something to compare, the pairs are found
as before (hand-made near-duplicate below).
"""

from __future__ import annotations

import polars as pl
import pytest

from medbench_core.evaluation.contamination import audit as audit_module
from medbench_core.evaluation.contamination import texts as tx
from medbench_core.evaluation.contamination.audit import PAIRS_SCHEMA, audit_task
from tests.core.test_contamination import _task


@pytest.fixture
def minhashed(monkeypatch) -> list[int]:
    """The number of texts each call of ``texts.signatures`` MinHashed, counted; the per-process signature cache emptied."""
    calls: list[int] = []
    real = tx.signatures

    def counting(texts, **kw):
        calls.append(len(texts))
        return real(texts, **kw)

    monkeypatch.setattr(tx, "signatures", counting)
    monkeypatch.setattr(audit_module, "_TEXTS", {})
    return calls


QUERIES = {"s1": "Aspirin lowers the risk of a second heart attack", "s2": "Sleep loss impairs memory in students"}
DOCS = {"d1": "A randomised trial of aspirin after myocardial infarction", "d2": "Memory and sleep deprivation", "d3": "Unrelated"}


def test_one_task_and_no_manifest_minhashes_nothing_and_stores_the_same_empty_audit(tmp_path, minhashed):
    solo = _task("solo", tmp_path / "solo", QUERIES, DOCS, {}, {})
    pairs, info = audit_task(solo, [], [])
    assert minhashed == []  # neither the task's 2 queries nor its 3 documents were MinHashed
    assert pairs.schema == pl.Schema(PAIRS_SCHEMA) and pairs.height == 0
    assert (info["n_queries"], info["n_docs"], info["n_images"], info["others"], info["manifests"], info["pairs"]) == (2, 3, 0, [], [], {})


def test_a_manifest_or_another_task_is_compared_and_its_near_duplicate_found(tmp_path, minhashed):
    solo = _task("solo", tmp_path / "solo", QUERIES, DOCS, {}, {})
    manifest = tmp_path / "train.txt"
    manifest.write_text("aspirin lowers the risk of a second heart-attack\n")
    pairs, _ = audit_task(solo, [], [("texts", str(manifest))])
    # The manifest's 1 text, then the task's 2 queries and 3 documents.
    assert sorted(minhashed) == [1, 2, 3]
    assert pairs.select("side", "id", "source", "other_id", "jaccard").rows() == [("query", "s1", f"texts:{manifest}", "line 1", 1.0)]

    minhashed.clear()
    other = _task("other", tmp_path / "other", {"o1": "SLEEP LOSS impairs memory in students!"}, {"e1": "x"}, {}, {})
    pairs, _ = audit_task(solo, [other], [])
    assert sorted(minhashed) == [1, 1]  # the other task's query and document; solo's signatures are kept from above
    assert pairs.select("side", "id", "source", "other_id", "jaccard").rows() == [("query", "s2", "task:other", "o1", 1.0)]
