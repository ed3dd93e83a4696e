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
    monkeypatch.setattr(audit_module, "_SIGNATURES", {})
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


# Seven queries and nine documents, some empty once normalised ("", "!!!"), so that a block's stored signatures
# start after the empty texts of the blocks before it.
BLOCK_QUERIES = {
    "q1": "Aspirin lowers the risk of a second heart attack", "q2": "!!!", "q3": "Sleep loss impairs memory in students",
    "q4": "Statins and ischaemic stroke in diabetes", "q5": "", "q6": "Vitamin D and bone fractures in the elderly",
    "q7": "Antibiotic prophylaxis before caesarean section",
}  # fmt: skip
BLOCK_DOCS = {
    "d1": "A randomised trial of aspirin after myocardial infarction", "d2": "", "d3": "Memory and sleep deprivation",
    "d4": "???", "d5": "Bone density, vitamin D supplements and fractures in older adults", "d6": "Unrelated text about the weather",
    "d7": "Statin therapy lowers ischaemic stroke incidence in diabetic patients", "d8": "Hand hygiene in surgical wards",
    "d9": "Caesarean section and wound infection after antibiotic prophylaxis",
}  # fmt: skip


def test_the_task_audited_in_blocks_gives_the_pairs_of_one_block(tmp_path, minhashed):
    task = _task("blocky", tmp_path / "blocky", BLOCK_QUERIES, BLOCK_DOCS, {}, {})
    other = _task("other", tmp_path / "other", {"o1": "SLEEP LOSS impairs memory in students!"}, {"e1": "Hand hygiene in surgical wards."}, {}, {})
    manifest = tmp_path / "train.txt"
    lines = ("aspirin lowers the risk of a second heart-attack", "vitamin d and bone fractures in the elderly",
             "caesarean section and wound infection after antibiotic prophylaxis")  # fmt: skip
    manifest.write_text("".join(t + "\n" for t in lines))
    # By hand: q1, q6 and d9 are in the manifest (lines 1, 2, 3), q3 and d8 in the other task (o1, e1); nothing else is near.
    expected = [
        ("doc", "d8", "task:other", "e1"), ("doc", "d9", f"texts:{manifest}", "line 3"),
        ("query", "q1", f"texts:{manifest}", "line 1"), ("query", "q3", "task:other", "o1"), ("query", "q6", f"texts:{manifest}", "line 2"),
    ]  # fmt: skip
    whole, _ = audit_task(task, [other], [("texts", str(manifest))], block=1_000)
    assert whole.select("side", "id", "source", "other_id").rows() == expected
    # The task's 5 non-empty queries and 7 non-empty documents were MinHashed once each, in one block per side.
    assert sorted(minhashed) == [1, 1, 3, 5, 7]
    for block in (1, 2, 3):
        # From scratch (signatures computed per block), then again from the signatures kept by that audit.
        audit_module._SIGNATURES.clear()
        minhashed.clear()
        assert audit_task(task, [other], [("texts", str(manifest))], block=block)[0].equals(whole)
        minhashed.remove(3)  # the manifest's texts, read again by each audit
        assert sum(minhashed) == 5 + 7 and max(minhashed) <= block
        minhashed.clear()
        assert audit_task(task, [other], [("texts", str(manifest))], block=block)[0].equals(whole)
        assert minhashed == [3]
    # The kept signatures are the whole task's, and serve a later audit that compares another task with this one.
    kept = audit_module._SIGNATURES[("blocky", task.content_hash())]
    assert (kept["query"] == tx.text_set("t", "query", list(BLOCK_QUERIES), list(BLOCK_QUERIES.values())).sigs).all()
    assert kept["doc"].shape == (7, tx.NUM_PERM)
    minhashed.clear()
    pairs, _ = audit_task(other, [task], [], block=1)
    assert minhashed == [] and pairs.select("id", "other_id").rows() == [("e1", "d8"), ("o1", "q3")]
