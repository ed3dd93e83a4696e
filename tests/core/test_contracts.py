"""Data contracts: licences, the per-task gate, the cross-task overlap gate and gate records.

Every bad input is a small task built here; each must fail with a message naming the rows at
fault. The real-data tests at the end check the gate outcome each shared dataset's licences
and contents dictate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from medbench_core.errors import ContractError
from medbench_core.layout import Layout
from medbench_core.taskdata.contracts import (
    ALL_TASKS,
    NEAR_DUPLICATE_THRESHOLD,
    gate_refusal,
    gate_status_path,
    near_duplicates,
    normalise_query,
    overlap_gate_path,
    read_gate,
    record_gate,
    record_overlap_gate,
    validate_task,
    validate_tasks,
)
from medbench_core.taskdata.licences import (
    DEFAULT_ALLOWLIST,
    PERMISSIVE,
    RESTRICTED,
    LicencePolicy,
    normalise_licence,
)
from medbench_core.taskdata.task import Task, TaskMeta, make_task

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
if not SHARED.exists():
    SHARED = Path("/work/shared/data")


# --- fixtures ----------------------------------------------------------------------------


def text_task(name="t", queries=None, docs=None, qrels=None, candidates=None, research_only=False) -> Task:
    """Three queries, four documents, each query judging one document relevant."""
    queries = (
        queries
        if queries is not None
        else [
            {"query_id": "q1", "text": "Does aspirin reduce fever in children?", "licence": "CC-BY-4.0"},
            {"query_id": "q2", "text": "Statins lower LDL cholesterol.", "licence": "CC-BY-4.0"},
            {"query_id": "q3", "text": "What causes iron deficiency anaemia?", "licence": "CC-BY-4.0"},
        ]
    )
    docs = (
        docs
        if docs is not None
        else [
            {"doc_id": "d1", "title": "Aspirin", "text": "Antipyretic use of aspirin.", "licence": "ODC-By-1.0"},
            {"doc_id": "d2", "title": "Statins", "text": "LDL reduction trial.", "licence": "ODC-By-1.0"},
            {"doc_id": "d3", "title": "", "text": "Iron deficiency and blood loss.", "licence": "ODC-By-1.0"},
            {"doc_id": "d4", "title": "Unrelated", "text": "Knee arthroscopy outcomes.", "licence": "ODC-By-1.0"},
        ]
    )
    qrels = (
        qrels
        if qrels is not None
        else [
            {"query_id": "q1", "doc_id": "d1", "relevance": 1},
            {"query_id": "q2", "doc_id": "d2", "relevance": 2},
            {"query_id": "q3", "doc_id": "d3", "relevance": 1},
            {"query_id": "q3", "doc_id": "d4", "relevance": 0},
        ]
    )
    meta = TaskMeta(name=name, source="test", research_only=research_only)
    s = pl.Utf8
    return make_task(
        meta,
        pl.DataFrame(queries, schema={"query_id": s, "text": s, "licence": s}),
        pl.DataFrame(docs, schema={"doc_id": s, "title": s, "text": s, "licence": s}),
        pl.DataFrame(qrels, schema={"query_id": s, "doc_id": s, "relevance": pl.Int32}),
        None if candidates is None else pl.DataFrame(candidates, schema={"query_id": s, "doc_id": s}),
    )


def write_png(path: Path, value: int, size: int = 8) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((size, size), value, dtype=np.uint8), mode="L").save(path)
    return path


PROMPTS = {
    "img": ("chest x-ray showing pneumonia", "chest x-ray with no finding"),
    "a": ("opacity in the left lower lobe", "clear lung fields"),
    "b": ("fractured femur on radiograph", "intact long bones"),
}


def image_task(root: Path, name="img", refs=("a.png", "b.png"), write=True, concept=None) -> Task:
    """Two text prompts ranking image documents (no text) stored under ``root/images``."""
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    if write:
        for i, ref in enumerate(refs):
            write_png(images / ref, 40 * (i + 1))
    docs = [
        {"doc_id": f"i{i}", "image": ref, "modality": "image", "licence": "CC-BY-4.0", "concept_ids": [concept] if concept else []}
        for i, ref in enumerate(refs)
    ]
    queries = [
        {"query_id": "p0", "text": PROMPTS[name][0], "modality": "text", "licence": "CC-BY-4.0"},
        {"query_id": "p1", "text": PROMPTS[name][1], "modality": "text", "licence": "CC-BY-4.0"},
    ]
    qrels = [{"query_id": f"p{i % 2}", "doc_id": f"i{i}", "relevance": 1} for i in range(len(refs))]
    return make_task(
        TaskMeta(name=name, source="test", query_modality="text", doc_modality="image"),
        pl.DataFrame(queries),
        pl.DataFrame(docs, schema={"doc_id": pl.Utf8, "image": pl.Utf8, "modality": pl.Utf8, "licence": pl.Utf8, "concept_ids": pl.List(pl.Utf8)}),
        pl.DataFrame(qrels, schema_overrides={"relevance": pl.Int32}),
        image_root=images,
    )


def failed_rules(result) -> set[str]:
    return {o.rule for o in result.failures}


def failure(result, rule_part: str, table: str | None = None):
    hits = [o for o in result.failures if rule_part in o.rule and (table is None or o.table == table)]
    assert len(hits) == 1, f"expected one failure matching {rule_part!r}, got {[o.rule for o in result.failures]}"
    return hits[0]


# --- licences ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, canonical",
    [
        ("CC-BY-4.0", "CC-BY-4.0"),
        ("CC BY 4.0", "CC-BY-4.0"),
        ("Creative Commons Attribution 4.0 International", "CC-BY-4.0"),
        ("cc-by", "CC-BY"),
        ("cc-by-nc-nd", "CC-BY-NC-ND"),
        ("cc-by-nc", "CC-BY-NC"),
        ("CC BY-SA 3.0", "CC-BY-SA-3.0"),
        ("https://creativecommons.org/licenses/by-nc-nd/4.0/", "CC-BY-NC-ND-4.0"),
        ("http://creativecommons.org/publicdomain/zero/1.0/", "CC0-1.0"),
        ("CC0", "CC0-1.0"),
        ("ODC-BY", "ODC-By-1.0"),
        ("ODC-By-1.0", "ODC-By-1.0"),
        ("PDDL", "ODC-PDDL-1.0"),
        ("Apache License, Version 2.0", "Apache-2.0"),
        ("apache-2.0", "Apache-2.0"),
        ("MIT License", "MIT"),
        ("Public Domain", "public-domain"),
        (None, "unknown"),
        ("", "unknown"),
        ("  ", "unknown"),
        (float("nan"), "unknown"),
        ("none", "unknown"),
        # Unrecognised values come back as given so the gate names them.
        ("elsevier-specific", "elsevier-specific"),
        (" implied-oa ", "implied-oa"),
    ],
)
def test_normalise_licence(raw, canonical):
    assert normalise_licence(raw) == canonical


def test_default_allowlist_is_the_permissive_licences():
    assert {"CC0-1.0", "CC-BY-4.0", "CC-BY-SA-4.0", "ODC-By-1.0", "ODC-PDDL-1.0", "Apache-2.0", "MIT", "public-domain"} <= DEFAULT_ALLOWLIST
    assert not DEFAULT_ALLOWLIST & {"unknown", "CC-BY-NC-ND", "CC-BY-NC-4.0", "CC-BY-ND-4.0"}
    assert normalise_licence("CC BY 4.0") in PERMISSIVE and normalise_licence(None) not in PERMISSIVE
    assert {normalise_licence("cc-by-nc-nd"), normalise_licence("CC BY-ND 4.0")} <= RESTRICTED - PERMISSIVE
    assert normalise_licence("CC-BY-4.0") not in RESTRICTED


def test_policy_research_only_admits_unknown_nc_nd_but_not_unrecognised():
    p = LicencePolicy()
    assert p.allows("ODC-By-1.0") and p.allows("cc0")
    for lic in (None, "unknown", "cc-by-nc-nd", "CC-BY-NC-4.0"):
        assert not p.allows(lic)
        assert p.allows(lic, research_only=True)
        assert p.needs_research_only(lic)
    assert not p.allows("elsevier-specific", research_only=True)
    assert not p.needs_research_only("CC-BY-4.0")


def test_policy_from_config_normalises_and_defaults():
    p = LicencePolicy.from_config(["CC BY 4.0", "mit"])
    assert p.allowlist == frozenset({"CC-BY-4.0", "MIT"})
    assert not p.allows("ODC-By-1.0")
    assert LicencePolicy.from_config(None) == LicencePolicy() == LicencePolicy.from_config([])


# --- the per-task gate: passing cases ----------------------------------------------------


def test_clean_text_task_passes_and_stores_reports(tmp_path):
    out = tmp_path / "gate"
    res = validate_task(text_task(), out)
    assert res.passed, res.message
    assert res.failures == ()
    assert res.licences == {"CC-BY-4.0": 3, "ODC-By-1.0": 4}
    assert res.research_only is False
    assert res.message.startswith("task t: gate passed")
    # GX results: one validation per table (queries, corpus, qrels), all successful.
    gx = json.loads(res.results_path.read_text())
    assert [v["success"] for v in gx] == [True, True, True]
    assert res.data_docs_path == out / "data_docs" / "index.html" and res.data_docs_path.is_file()
    assert list((out / "data_docs" / "validations").rglob("*.html"))
    contract = json.loads((out / "contract.json").read_text())
    assert contract["passed"] is True and contract["name"] == "t"


def test_image_records_need_no_text(tmp_path):
    res = validate_task(image_task(tmp_path))
    assert res.passed, res.message


def test_candidate_task_passes_when_pools_hold_positives():
    cands = [{"query_id": q, "doc_id": d} for q in ("q1", "q2", "q3") for d in ("d1", "d2", "d3", "d4")]
    res = validate_task(text_task(candidates=cands))
    assert res.passed, res.message
    assert "candidates" in {o.table for o in res.outcomes}


# --- the per-task gate: every bad input fails, naming rows -------------------------------


def test_empty_frames_fail():
    res = validate_task(text_task(queries=[], qrels=[]))
    assert not res.passed
    q = failure(res, "queries.parquet has at least one row")
    assert q.observed == "0"
    r = failure(res, "qrels.parquet has at least one row")
    assert r.observed == "0"
    assert "queries.parquet: queries.parquet has at least one row: observed 0" in res.message


def test_empty_corpus_fails_and_names_unknown_docs():
    t = text_task(docs=[])
    res = validate_task(t)
    assert not res.passed
    assert failure(res, "corpus.parquet has at least one row").observed == "0"
    known = failure(res, "every doc_id names a row of corpus.parquet")
    assert sorted(known.rows) == ["q1 -> d1", "q2 -> d2", "q3 -> d3", "q3 -> d4"]


def test_all_null_licence_column_fails_even_when_research_only():
    docs = [{"doc_id": f"d{i}", "text": f"doc {i}", "licence": None} for i in range(1, 5)]
    for research_only in (False, True):
        res = validate_task(text_task(docs=docs), research_only=research_only)
        assert not res.passed
        o = failure(res, "every record carries a licence", table="corpus")
        assert o.file == "corpus.parquet"
        assert sorted(o.rows) == ["d1", "d2", "d3", "d4"]
        assert "corpus.parquet: every record carries a licence" in res.message and "d1, d2, d3, d4" in res.message


def test_missing_column_fails_naming_it():
    t = text_task()
    t = Task(meta=t.meta, queries=t.queries.drop("licence"), corpus=t.corpus, qrels=t.qrels)
    res = validate_task(t)
    assert not res.passed
    o = failure(res, "column 'licence' is present", table="queries")
    assert "column 'licence' missing" in o.observed
    assert "queries.parquet: column 'licence' is present" in res.message


def test_missing_id_column_names_rows_by_position():
    t = text_task()
    t = Task(meta=t.meta, queries=t.queries, corpus=t.corpus, qrels=t.qrels.drop("doc_id"))
    res = validate_task(t)
    assert not res.passed
    assert failure(res, "column 'doc_id' is present", table="qrels")


def test_wrong_column_type_fails():
    t = text_task()
    t = Task(meta=t.meta, queries=t.queries, corpus=t.corpus, qrels=t.qrels.with_columns(pl.col("relevance").cast(pl.Utf8)))
    res = validate_task(t)
    o = failure(res, "column 'relevance' has type", table="qrels")
    assert o.observed == "str"


def test_licence_outside_allowlist_fails_naming_rows_and_values():
    docs = [
        {"doc_id": "d1", "text": "a", "licence": "ODC-By-1.0"},
        {"doc_id": "d2", "text": "b", "licence": "cc-by-nc-nd"},
        {"doc_id": "d3", "text": "c", "licence": "proprietary"},
        {"doc_id": "d4", "text": "d", "licence": "unknown"},
    ]
    res = validate_task(text_task(docs=docs))
    assert not res.passed
    o = failure(res, "every licence is in the licence allowlist", table="corpus")
    assert dict(zip(o.rows, o.values)) == {"d2": "CC-BY-NC-ND", "d3": "proprietary", "d4": "unknown"}
    assert "'CC-BY-NC-ND' (d2)" in res.message and "'proprietary' (d3)" in res.message
    # Research-only admits NC/ND and unknown, never an unrecognised licence.
    ro = validate_task(text_task(docs=docs, research_only=True))
    assert ro.research_only and not ro.passed
    o = failure(ro, "research-only", table="corpus")
    assert dict(zip(o.rows, o.values)) == {"d3": "proprietary"}


def test_research_only_task_passes_and_says_so():
    docs = [{"doc_id": f"d{i}", "text": f"doc {i}", "licence": lic} for i, lic in enumerate(["CC-BY-NC-ND", "unknown", "CC-BY-4.0", "CC-BY-4.0"], 1)]
    assert not validate_task(text_task(docs=docs)).passed
    res = validate_task(text_task(docs=docs), research_only=True)
    assert res.passed, res.message
    assert res.research_only
    assert "research-only task: admits licence(s) CC-BY-NC-ND (1 records), unknown (1 records)" in res.message


def test_configured_allowlist_is_used():
    policy = LicencePolicy.from_config(["CC-BY-4.0"])
    res = validate_task(text_task(), policy=policy)
    o = failure(res, "allowlist", table="corpus")
    assert sorted(o.rows) == ["d1", "d2", "d3", "d4"] and set(o.values) == {"ODC-By-1.0"}


def test_qrels_naming_missing_document_and_query_fail():
    qrels = [
        {"query_id": "q1", "doc_id": "d1", "relevance": 1},
        {"query_id": "q2", "doc_id": "d2", "relevance": 1},
        {"query_id": "q3", "doc_id": "d99", "relevance": 1},
        {"query_id": "q3", "doc_id": "d3", "relevance": 1},
        {"query_id": "q42", "doc_id": "d3", "relevance": 0},
    ]
    res = validate_task(text_task(qrels=qrels))
    assert not res.passed
    assert failure(res, "every doc_id names a row of corpus.parquet").rows == ("q3 -> d99",)
    assert failure(res, "every query_id names a row of queries.parquet").rows == ("q42 -> d3",)
    assert "qrels.parquet: every doc_id names a row of corpus.parquet: 1 of 5 row(s) at fault -- rows: q3 -> d99" in res.message


def test_query_without_positive_judgment_fails():
    qrels = [
        {"query_id": "q1", "doc_id": "d1", "relevance": 1},
        {"query_id": "q2", "doc_id": "d2", "relevance": 0},
        {"query_id": "q3", "doc_id": "d3", "relevance": 1},
    ]
    res = validate_task(text_task(qrels=qrels))
    assert failure(res, "at least one positive judgment").rows == ("q2",)


def test_duplicate_ids_and_pairs_fail():
    docs = [{"doc_id": d, "text": "x", "licence": "MIT"} for d in ("d1", "d2", "d3", "d4", "d2")]
    qrels = [{"query_id": "q1", "doc_id": "d1", "relevance": 1}] * 2 + [
        {"query_id": "q2", "doc_id": "d2", "relevance": 1},
        {"query_id": "q3", "doc_id": "d3", "relevance": 1},
    ]
    res = validate_task(text_task(docs=docs, qrels=qrels))
    assert set(failure(res, "doc_id is unique").rows) == {"d2"}
    assert set(failure(res, "no (query_id, doc_id) pair appears twice").rows) == {"q1 -> d1"}


def test_empty_query_and_document_text_fail():
    queries = [
        {"query_id": "q1", "text": "fine", "licence": "MIT"},
        {"query_id": "q2", "text": "   ", "licence": "MIT"},
        {"query_id": "q3", "text": None, "licence": "MIT"},
    ]
    docs = [{"doc_id": "d1", "title": "", "text": "", "licence": "MIT"}] + [{"doc_id": f"d{i}", "title": "T", "text": "", "licence": "MIT"} for i in (2, 3, 4)]
    res = validate_task(text_task(queries=queries, docs=docs))
    assert failure(res, "every query has non-empty text or an image").rows == ("q2", "q3")
    # A title alone is text enough (BEIR joins title and body).
    assert failure(res, "every document has non-empty text or an image").rows == ("d1",)


def test_candidates_naming_unknown_ids_and_positives_outside_pool_fail():
    cands = [
        {"query_id": "q1", "doc_id": "d1"},
        {"query_id": "q2", "doc_id": "d1"},
        {"query_id": "q3", "doc_id": "d3"},
        {"query_id": "q3", "doc_id": "d77"},
    ]
    res = validate_task(text_task(candidates=cands))
    assert failure(res, "every doc_id names a row of corpus.parquet", table="candidates").rows == ("q3 -> d77",)
    assert failure(res, "inside its query's candidate pool").rows == ("q2 -> d2",)


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "symlinked_dir", "missing", "garbage"])
def test_image_reference_that_leaves_the_folder_or_is_unreadable_fails(tmp_path, kind):
    root = tmp_path / "task"
    outside = write_png(tmp_path / "outside.png", 200)
    t = image_task(root, refs=("a.png", "b.png"))
    images = root / "images"
    bad = {
        "dotdot": "../../outside.png",
        "absolute": str(outside),
        "symlink": "link.png",
        "symlinked_dir": "sub/outside.png",
        "missing": "nope.png",
        "garbage": "garbage.png",
    }[kind]
    if kind == "symlink":
        os.symlink(outside, images / "link.png")
    if kind == "symlinked_dir":
        os.symlink(tmp_path, images / "sub")
    if kind == "garbage":
        (images / "garbage.png").write_bytes(b"not a png at all")
    corpus = t.corpus.with_columns(pl.when(pl.col("doc_id") == "i1").then(pl.lit(bad)).otherwise(pl.col("image")).alias("image"))
    t = Task(meta=t.meta, queries=t.queries, corpus=corpus, qrels=t.qrels, image_root=images)
    res = validate_task(t)
    assert not res.passed
    o = failure(res, "every image reference resolves", table="corpus")
    assert o.rows == ("i1",)
    expected = {
        "dotdot": "contains '..'",
        "absolute": "is an absolute path",
        "symlink": "is a symbolic link",
        "symlinked_dir": "is a symbolic link",
        "missing": "file not found",
        "garbage": "not an image format PIL can read",
    }[kind]
    assert expected in o.values[0], o.values[0]
    assert "i1" in res.message and "corpus.parquet: every image reference resolves" in res.message
    # The task cannot be hashed through a refused or missing reference; a garbage file can.
    assert (res.content_hash is None) == (kind != "garbage")


# --- the cross-task gate -----------------------------------------------------------------


def test_normalise_query():
    assert normalise_query("  Does ASPIRIN\treduce fever?! ") == "does aspirin reduce fever"
    # NFKC folds full-width letters and punctuation; case folding handles ß.
    assert normalise_query("Ｄｏｅｓ aspirin reduce fever？") == "does aspirin reduce fever"
    assert normalise_query("Straße—Test") == "strasse test"
    assert normalise_query(None) == "" and normalise_query("...") == ""


def test_normalise_query_of_ascii_text_replaces_exactly_the_punctuation_categories():
    # ASCII text takes a translation table: every character of category P* becomes a space, no other.
    import unicodedata

    every = "".join(map(chr, range(32, 127)))
    punct = {c for c in every if unicodedata.category(c).startswith("P")}
    assert punct == set("!\"#%&'()*,-./:;?@[\\]_{}")  # $ + < = > ^ ` | ~ are symbols (S*), kept
    want = " ".join("".join(" " if c in punct else c for c in every.lower()).split())
    assert normalise_query(every) == want


def test_distinct_tasks_pass_the_overlap_gate(tmp_path):
    a = text_task("a")
    b = text_task(
        "b",
        queries=[
            {"query_id": "x1", "text": "Effect of vitamin D on bone density", "licence": "MIT"},
            {"query_id": "x2", "text": "Is metformin safe in pregnancy?", "licence": "MIT"},
            {"query_id": "x3", "text": "Hypertension screening intervals", "licence": "MIT"},
        ],
    )
    res = validate_tasks([a, b], tmp_path / "all")
    assert res.passed, res.message
    assert res.name == ALL_TASKS and res.failed_tasks == () and res.near_duplicates == ()
    assert set(res.task_hashes) == {"a", "b"} and res.task_hashes["a"] == a.content_hash()
    assert (tmp_path / "all" / "data_docs" / "index.html").is_file()
    assert len(json.loads(res.results_path.read_text())) == 5  # tasks, shared queries, near-duplicates, concepts, images


def test_query_shared_between_tasks_fails_after_normalisation():
    a = text_task("a")
    shared = [
        {"query_id": "x1", "text": "DOES  aspirin reduce fever in children", "licence": "MIT"},  # case, spaces, no '?'
        {"query_id": "x2", "text": "Ｓｔａｔｉｎｓ lower LDL cholesterol", "licence": "MIT"},  # full-width (NFKC)
        {"query_id": "x3", "text": "Unrelated question about knees", "licence": "MIT"},
    ]
    b = text_task("b", queries=shared, qrels=[{"query_id": q, "doc_id": "d1", "relevance": 1} for q in ("x1", "x2", "x3")])
    res = validate_tasks([a, b])
    assert not res.passed
    o = failure(res, "no query text shared between tasks")
    assert dict(zip(o.rows, o.values)) == {
        "a:q1": "does aspirin reduce fever in children",
        "b:x1": "does aspirin reduce fever in children",
        "a:q2": "statins lower ldl cholesterol",
        "b:x2": "statins lower ldl cholesterol",
    }
    assert res.failed_tasks == ("a", "b")
    assert "'does aspirin reduce fever in children' (a:q1, b:x1)" in res.message
    # Exact overlaps are not double-reported as near-duplicates.
    assert res.near_duplicates == ()


def test_query_repeated_inside_one_task_is_not_an_overlap():
    q = [
        {"query_id": "q1", "text": "Same question?", "licence": "MIT"},
        {"query_id": "q2", "text": "same question", "licence": "MIT"},
        {"query_id": "q3", "text": "Another one", "licence": "MIT"},
    ]
    res = validate_tasks([text_task("a", queries=q), other_task("b")])
    assert res.passed, res.message


def other_task(name):
    """A text task whose queries share nothing with :func:`text_task`'s."""
    return text_task(
        name,
        queries=[
            {"query_id": "z1", "text": "Entirely different wording here", "licence": "MIT"},
            {"query_id": "z2", "text": "Zebra stripes and thermoregulation", "licence": "MIT"},
            {"query_id": "z3", "text": "Mitochondrial DNA inheritance", "licence": "MIT"},
        ],
        qrels=[{"query_id": q, "doc_id": d, "relevance": 1} for q, d in (("z1", "d1"), ("z2", "d2"), ("z3", "d3"))],
    )


def test_near_duplicate_is_reported_and_fails_by_default():
    a = text_task("a")
    qs = [
        {"query_id": "y1", "text": "Does aspirin reduce fevers in children?", "licence": "MIT"},  # one letter more than a:q1
        {"query_id": "y2", "text": "Zebra stripes and thermoregulation", "licence": "MIT"},
        {"query_id": "y3", "text": "Mitochondrial DNA inheritance", "licence": "MIT"},
    ]
    b = text_task("b", queries=qs)
    dups = near_duplicates([a, b])
    assert [(d.task_a, d.query_a, d.task_b, d.query_b) for d in dups] == [("a", "q1", "b", "y1")]
    assert NEAR_DUPLICATE_THRESHOLD <= dups[0].similarity < 1.0
    res = validate_tasks([a, b])
    assert not res.passed and res.failed_tasks == ("a", "b")
    o = failure(res, "near-duplicate")
    assert set(o.rows) == {"a:q1 ~ b:y1", "b:y1 ~ a:q1"}
    assert "a:q1 ~ b:y1" in res.message and "Does aspirin reduce fevers in children?" in res.message
    # Configured as a warning: still reported, not blocking.
    warn = validate_tasks([a, b], fail_on_near_duplicates=False)
    assert warn.passed and len(warn.near_duplicates) == 1 and len(warn.warnings) == 1
    assert "warning:" in warn.message
    # Above the pair's similarity nothing is reported.
    assert near_duplicates([a, b], threshold=0.999) == []


def test_concept_id_in_two_tasks_fails(tmp_path):
    a = image_task(tmp_path / "a", name="a", refs=("a1.png",), concept="finding:pneumonia")
    # Other pixel values than a's image, so only the concept is shared.
    write_png(tmp_path / "b" / "images" / "b1.png", 99)
    b = image_task(tmp_path / "b", name="b", refs=("b1.png",), concept="finding:pneumonia", write=False)
    res = validate_tasks([a, b])
    assert not res.passed
    o = failure(res, "no concept id shared between tasks")
    assert dict(zip(o.rows, o.values)) == {"a:i0": "finding:pneumonia", "b:i0": "finding:pneumonia"}
    assert res.failed_tasks == ("a", "b")
    assert failed_rules(res) == {"no concept id shared between tasks"}


def test_same_image_bytes_in_two_tasks_fails(tmp_path):
    a = image_task(tmp_path / "a", name="a", refs=("x.png", "y.png"))
    b = image_task(tmp_path / "b", name="b", refs=("other_name.png",), write=False)
    # b's image is a byte copy of a's x.png under another name.
    (tmp_path / "b" / "images" / "other_name.png").write_bytes((tmp_path / "a" / "images" / "x.png").read_bytes())
    res = validate_tasks([a, b])
    assert not res.passed
    o = failure(res, "no image (sha256 of its bytes) shared between tasks")
    assert set(o.rows) == {"a:x.png", "b:other_name.png"}
    assert "a:x.png" in res.message and "b:other_name.png" in res.message
    assert failed_rules(res) == {"no image (sha256 of its bytes) shared between tasks"}


def test_no_tasks_fails():
    res = validate_tasks([])
    assert not res.passed
    assert failure(res, "at least one task to compare").observed == "0"


# --- gate records ------------------------------------------------------------------------


def test_record_gate_and_refusal(tmp_path):
    task_dir = tmp_path / "tasks" / "t"
    task = text_task()
    digest = task.content_hash()
    assert "no data-contract verdict" in gate_refusal(task_dir, digest)

    ok = validate_task(task)
    path = record_gate(task_dir, ok)
    assert path == gate_status_path(task_dir) == task_dir / "GATE.json"
    gate = read_gate(path)
    assert gate["passed"] is True and gate["content_hash"] == digest and gate["task"] == "t"
    assert gate_refusal(task_dir, digest) is None
    # At a project's paths the cross-task verdict is asked for too, and there is none here.
    with pytest.raises(ContractError, match="no cross-task overlap verdict"):
        Layout(tmp_path).require_gate("t", digest)
    # The gate judged other content: refused until the checks run again.
    assert "re-run the checks" in gate_refusal(task_dir, "0" * 64)

    bad = validate_task(text_task(qrels=[{"query_id": "q1", "doc_id": "d99", "relevance": 1}]))
    record_gate(task_dir, bad)
    gate = read_gate(task_dir / "GATE.json")
    assert gate["passed"] is False and gate["failing_rows"]["qrels.parquet"] == ["q1 -> d99"]
    reason = gate_refusal(task_dir, bad.content_hash)
    assert "data contract failed" in reason and "q1 -> d99" in reason
    with pytest.raises(ContractError, match="q1 -> d99"):
        Layout(tmp_path).require_gate("t", bad.content_hash)


def test_overlap_gate_refuses_tasks_it_failed_or_never_judged(tmp_path):
    root = tmp_path / "tasks"
    a, b = text_task("a"), text_task("b")  # identical queries: overlap fails for both
    c = other_task("c")
    for t in (a, b, c):
        record_gate(root / t.name, validate_task(t))
    over = validate_tasks([a, b, c])
    assert over.failed_tasks == ("a", "b")
    record_overlap_gate(root, over)
    gate_file = overlap_gate_path(root)
    assert gate_file == root / "OVERLAP_GATE.json"
    assert "cross-task overlap check failed" in gate_refusal(root / "a", a.content_hash(), overlap_gate=gate_file)
    assert gate_refusal(root / "c", c.content_hash(), overlap_gate=gate_file) is None
    # Without the overlap file the task cannot pass a precondition that asks for it.
    assert "no cross-task overlap verdict" in gate_refusal(root / "c", c.content_hash(), overlap_gate=tmp_path / "none.json")
    # The latest overlap check did not judge b.
    over2 = validate_tasks([a, c])
    record_overlap_gate(root, over2)
    assert "judged no version" in gate_refusal(root / "b", b.content_hash(), overlap_gate=gate_file)
    with pytest.raises(ValueError):
        record_gate(root / "a", over)
    with pytest.raises(ValueError):
        record_overlap_gate(root, validate_task(a))


def test_lead_gate_reader_accepts_record_gate_fields(tmp_path):
    """The gate rule (contracts.gate_refusal, through Layout.gate_refusal) reads passed, content_hash and message."""
    res = validate_task(text_task())
    record_gate(tmp_path, res)
    gate = json.loads((tmp_path / "GATE.json").read_text())
    assert {"passed", "content_hash", "message"} <= set(gate)


def test_importing_contracts_stays_light():
    code = (
        "import sys, medbench_core, medbench_core.taskdata.contracts, medbench_core.taskdata.licences; "
        "heavy = [m for m in ('great_expectations', 'sklearn', 'dagster') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], check=True)
    assert out.stdout.strip() == "[]"


# --- real data ---------------------------------------------------------------------------

needs_data = pytest.mark.skipif(not (SHARED / "scifact").exists(), reason="shared data not present")


def read_scifact():
    from medbench_core.taskdata.readers.beir import BeirOptions, read_beir

    return read_beir(SHARED / "scifact", BeirOptions(name="scifact", split="train", query_licence="CC-BY-4.0", doc_licence="ODC-By-1.0"))


def read_liveqa(**kw):
    from medbench_core.taskdata.readers.beir import BeirOptions, read_beir

    return read_beir(
        SHARED / "liveqa_medquad",
        BeirOptions(name="liveqa_medquad", split="test", query_licence="unknown", doc_licence="CC-BY-4.0", duplicate_judgments="max", **kw),
    )


@pytest.mark.slow
@needs_data
def test_scifact_train_passes(tmp_path):
    res = validate_task(read_scifact(), tmp_path)
    assert res.passed, res.message
    assert res.licences == {"CC-BY-4.0": 809, "ODC-By-1.0": 5183}
    assert res.data_docs_path.is_file()


@pytest.mark.slow
@needs_data
def test_liveqa_fails_default_and_passes_research_only():
    task = read_liveqa(require_positive=True)
    assert task.queries.height == 96  # 103 questions, 7 with no answer graded above 0
    res = validate_task(task)
    assert not res.passed
    o = failure(res, "allowlist", table="queries")
    assert o.unexpected_count == 96 and set(o.values) == {"unknown"}
    assert failed_rules(res) == {"every licence is in the licence allowlist"}
    ro = validate_task(task, research_only=True)
    assert ro.passed, ro.message
    assert "research-only task: admits licence(s) unknown (96 records)" in ro.message


@pytest.mark.slow
@needs_data
def test_liveqa_questions_without_positive_answer_fail_even_research_only():
    res = validate_task(read_liveqa(), research_only=True)
    assert not res.passed
    assert failure(res, "positive judgment").rows == ("16", "19", "20", "45", "48", "52", "77")


def _sources():
    """The non-BEIR readers, as one namespace."""
    from types import SimpleNamespace

    from medbench_core.taskdata.readers.frenchmedmcqa import read_frenchmedmcqa
    from medbench_core.taskdata.readers.medicat import read_medicat
    from medbench_core.taskdata.readers.pneumoniamnist import read_pneumoniamnist
    from medbench_core.taskdata.readers.vqa_rad import read_vqa_rad

    return SimpleNamespace(read_frenchmedmcqa=read_frenchmedmcqa, read_medicat=read_medicat, read_pneumoniamnist=read_pneumoniamnist, read_vqa_rad=read_vqa_rad)


def _pneumonia_args(scratch):
    """The options and the scratch folder of the PneumoniaMNIST reader."""
    from medbench_core.taskdata.readers import ReadContext
    from medbench_core.taskdata.readers.pneumoniamnist import PneumoniaMNISTOptions

    return PneumoniaMNISTOptions(), ReadContext(scratch=scratch)


@pytest.mark.slow
@needs_data
def test_frenchmedmcqa_passes():
    res = validate_task(_sources().read_frenchmedmcqa(SHARED / "frenchmedmcqa"))
    assert res.passed, res.message
    assert set(res.licences) == {"Apache-2.0"}


@pytest.mark.slow
@needs_data
def test_pneumoniamnist_passes(tmp_path):
    res = validate_task(_sources().read_pneumoniamnist(SHARED / "pneumoniamnist", *_pneumonia_args(tmp_path / "images")))
    assert res.passed, res.message
    assert set(res.licences) == {"CC-BY-4.0"}


@pytest.mark.slow
@needs_data
def test_medicat_fails_default_and_passes_research_only():
    task = _sources().read_medicat(SHARED / "medicat_sample")
    res = validate_task(task)
    assert not res.passed
    # sample.jsonl: 6 figures cc-by-nc-nd, 2 cc-by-nc, 2 with no licence; each figure gives
    # 2 queries and 2 documents.
    assert res.licences == {"CC-BY-NC-ND": 24, "CC-BY-NC": 8, "unknown": 8}
    assert {o.table for o in res.failures} == {"queries", "corpus"}
    assert {o.rule for o in res.failures} == {"every licence is in the licence allowlist"}
    assert "'CC-BY-NC-ND'" in res.message and "'unknown'" in res.message
    ro = validate_task(task, research_only=True)
    assert ro.passed, ro.message


@pytest.mark.slow
@needs_data
def test_vqa_rad_passes():
    res = validate_task(_sources().read_vqa_rad(SHARED / "vqa_rad"))
    assert res.passed, res.message


@pytest.mark.slow
@needs_data
def test_real_tasks_do_not_overlap(tmp_path):
    s = _sources()
    tasks = [
        read_scifact(),
        read_liveqa(require_positive=True),
        s.read_frenchmedmcqa(SHARED / "frenchmedmcqa"),
        s.read_pneumoniamnist(SHARED / "pneumoniamnist", *_pneumonia_args(tmp_path / "images")),
        s.read_medicat(SHARED / "medicat_sample"),
        s.read_vqa_rad(SHARED / "vqa_rad"),
    ]
    res = validate_tasks(tasks, tmp_path / "all")
    assert res.passed, res.message
    assert res.near_duplicates == ()
    # The closest cross-task pair is far below the threshold (0.57: a PneumoniaMNIST prompt vs a
    # VQA-RAD question), so the threshold is not tuned to the data.
    assert max(d.similarity for d in near_duplicates(tasks, threshold=0.5)) < 0.6
