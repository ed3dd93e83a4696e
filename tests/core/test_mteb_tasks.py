"""MTEB tasks by name: ``reader: mteb, task: <MTEB name>`` (or ``benchmark:``) takes the dataset, its pinned
revision, the eval split, subsets, languages, main score, domains and licence from the locked mteb
package, and reads the data from the local hub cache at that revision.

Fixtures are laid out as huggingface_hub's cache holds the two real datasets at MTEB's pins (mteb
2.26.24: mteb/tasks/retrieval/eng/r2_med_retrieval.py and the NFCorpus task): R2MED/Biology with the
card configs corpus/query/qrels, and mteb/nfcorpus with configs corpus, queries and default (the
qrels, one file per split under qrels/, as its card at ec0fa4f names them), with the small content
of tests/core/hf_layouts.py.
"""

from __future__ import annotations

import json

import pytest
from hf_layouts import DOCS, EXPECTED_QRELS, JUDGED, QRELS, QUERIES, hub_cache, write_jsonl, write_r2med_hub

from medbench_core.errors import DataError
from medbench_core.taskdata.catalog import build_task, load_catalog
from medbench_core.taskdata.mteb_tasks import expand_entries, task_slug

pytestmark = pytest.mark.slow  # imports mteb (seconds)

BIOLOGY = "8b9fec2db9eda4b5742d03732213fbaee8169556"
NFCORPUS = "ec0fa4fe99da2ff19ca1214b7966684033a58814"
R2MED_PINS = {  # mteb 2.26.24's pins, as the README listed them by hand before
    "r2med_biology": BIOLOGY, "r2med_bioinformatics": "6021fce366892cbfd7837fa85a4128ea93315e18",
    "r2med_medical_sciences": "1b48911514c80bf9182222d99752ad75e23b4b47", "r2med_medxpertqa_exam": "b457ea43db9ae5db74c3a3e5be0a213d0f85ac3a",
    "r2med_medqa_diag": "78b585990279cc01a493f876c1b0cf09557fba57", "r2med_pmc_treatment": "53c489a44a3664ba352c07550b72b4525a5968d5",
    "r2med_pmc_clinical": "812829522f7eaa407ef82b96717be85788a50f7e", "r2med_iiyi_clinical": "974abbc9bc281c3169180a6aa5d7586cfd2f5877",
}  # fmt: skip


def write_nfcorpus_hub(folder):
    """mteb/nfcorpus: corpus.jsonl (_id, title, text), queries.jsonl (_id, text), qrels/<split>.jsonl (query-id, corpus-id, score)."""
    write_jsonl(folder / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in DOCS])
    write_jsonl(folder / "queries.jsonl", [{"_id": i, "text": x} for i, x, _ in QUERIES])
    write_jsonl(folder / "qrels" / "test.jsonl", [{"query-id": q, "corpus-id": d, "score": float(g)} for q, d, g in QRELS])
    write_jsonl(folder / "qrels" / "dev.jsonl", [{"query-id": "q9", "corpus-id": "d20", "score": 1.0}])  # read instead of test, it would show
    card = ["---", "configs:", "- config_name: default", "  data_files:", "  - split: dev", "    path: qrels/dev.jsonl", "  - split: test",
            "    path: qrels/test.jsonl", "- config_name: corpus", "  data_files:", "  - split: corpus", "    path: corpus.jsonl",
            "- config_name: queries", "  data_files:", "  - split: queries", "    path: queries.jsonl", "---"]  # fmt: skip
    (folder / "README.md").write_text("\n".join(card) + "\n")
    return folder


def catalog(tmp_path, body: str):
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n" + body)
    return load_catalog(path)


def check_content(task) -> None:
    assert sorted(task.queries["query_id"].to_list()) == JUDGED and task.corpus["doc_id"].to_list() == [d[0] for d in DOCS]
    assert {(q, d): g for q, d, g in task.qrels.iter_rows()} == EXPECTED_QRELS


def test_an_r2med_task_by_its_mteb_name_alone_reads_the_hub_cache_at_mtebs_pin(tmp_path):
    import mteb

    entry = catalog(tmp_path, "  - {reader: mteb, task: R2MEDBiologyRetrieval}\n").task("r2med_biology")
    md = mteb.get_task("R2MEDBiologyRetrieval").metadata
    assert entry.options["dataset"] == md.dataset["path"] == "R2MED/Biology" and entry.options["revision"] == md.revision == BIOLOGY
    assert (entry.options["split"], entry.options["main_metric"], entry.options["language"], entry.options["licence"]) == (
        "test",
        "ndcg_at_10",
        "en",
        "CC-BY-4.0",
    )
    assert entry.options["domains"] == ["Medical"] and entry.options["mteb_task"] == "R2MEDBiologyRetrieval" and not entry.research_only
    cache, _ = hub_cache(tmp_path / "hub", "R2MED/Biology", write_r2med_hub, sha=BIOLOGY)
    task = build_task(entry, tmp_path / "data", tmp_path / "work", hub_cache=cache)  # offline: the cache only
    check_content(task)
    assert (task.meta.mteb_task, task.meta.main_metric, task.meta.domains) == ("R2MEDBiologyRetrieval", "ndcg_at_10", ("Medical",))
    assert task.meta.provenance() == {"dataset": "R2MED/Biology", "dataset_revision": BIOLOGY, "mteb_task": "R2MEDBiologyRetrieval"}
    # MTEB's licence reaches the records (R2MED's files state none), so the licence gate passes without research_only.
    assert set(task.queries["licence"]) == set(task.corpus["licence"]) == {"CC-BY-4.0"}
    # Without the snapshot in the cache, offline: refused, naming what to fetch.
    with pytest.raises(DataError, match=r"R2MED/Biology@8b9fec2db9eda4b5742d03732213fbaee8169556: not in the local hub cache"):
        build_task(entry, tmp_path / "data", tmp_path / "work", hub_cache=tmp_path / "empty")


def test_an_mteb_medical_task_reads_its_eval_split_and_says_its_licence_is_unknown(tmp_path):
    entry = catalog(tmp_path, "  - {reader: mteb, task: NFCorpus, research_only: true}\n").task("mteb_nfcorpus")
    assert (entry.options["dataset"], entry.options["revision"], entry.options["split"]) == ("mteb/nfcorpus", NFCORPUS, "test")
    assert "licence" not in entry.options and entry.research_only  # MTEB says "not specified"
    assert entry.options["domains"] == ["Medical", "Academic", "Written"]
    cache, _ = hub_cache(tmp_path / "hub", "mteb/nfcorpus", write_nfcorpus_hub, sha=NFCORPUS)
    task = build_task(entry, tmp_path / "data", tmp_path / "work", hub_cache=cache)
    check_content(task)  # the test split's judgments, not dev's
    assert task.meta.mteb_task == "NFCorpus" and task.meta.source_revision == NFCORPUS and set(task.queries["licence"]) == {"unknown"}


def test_a_benchmark_stands_for_its_retrieval_tasks_with_mtebs_pins(tmp_path):
    cat = catalog(tmp_path, "  - {reader: mteb, benchmark: R2MED}\n")
    assert {t.name: t.options["revision"] for t in cat.tasks} == R2MED_PINS
    medical = catalog(tmp_path, "  - {reader: mteb, benchmark: 'MTEB(Medical)', research_only: true}\n")  # the alias of MTEB(Medical, v1)
    tasks = {t.options["mteb_task"] for t in medical.tasks}
    # Its twelve tasks less the reranking and the two clustering ones; CUREv1 is one task per language subset.
    assert tasks == {"CUREv1", "NFCorpus", "TRECCOVID", "TRECCOVID-PL", "SciFact", "SciFact-PL", "MedicalQARetrieval", "PublicHealthQA", "CmedqaRetrieval"}
    cure = {t.name: t.options for t in medical.tasks if t.options["mteb_task"] == "CUREv1"}
    assert sorted(cure) == ["clinia_curev1_en", "clinia_curev1_es", "clinia_curev1_fr"]
    assert cure["clinia_curev1_fr"]["subset"] == "fr" and cure["clinia_curev1_fr"]["language"] == "fr" and cure["clinia_curev1_fr"]["split"] == "all"
    assert next(t for t in medical.tasks if t.options["mteb_task"] == "CmedqaRetrieval").options["split"] == "dev"
    assert all(t.research_only for t in medical.tasks)


def test_options_in_the_entry_narrow_or_override_mtebs(tmp_path):
    cat = catalog(tmp_path, "  - {name: cure_fr, reader: mteb, task: CUREv1, subsets: [fr], split: dermatology, research_only: true}\n")
    (entry,) = cat.tasks
    assert (entry.name, entry.options["subset"], entry.options["split"]) == ("cure_fr", "fr", "dermatology")
    for body, message in (
        ("  - {reader: mteb, task: NoSuchTaskRetrieval}\n", "MTEB has no task 'NoSuchTaskRetrieval'"),
        ("  - {reader: mteb, task: CMedQAv2-reranking}\n", "is a Reranking task; medbench reads retrieval tasks"),
        ("  - {reader: mteb, task: NFCorpus, split: train}\n", r"is evaluated on \['test'\], not split 'train'"),
        ("  - {reader: mteb, task: NFCorpus, dataset: mteb/nfcorpus}\n", "brings its own dataset and revision"),
        ("  - {reader: mteb, task: CUREv1, subsets: [de]}\n", r"has no subset\(s\) \['de'\]"),
        ("  - {reader: mteb, benchmark: 'MTEB(Nope)'}\n", r"MTEB has no benchmark 'MTEB\(Nope\)'.*Did you mean"),
    ):
        with pytest.raises(DataError, match=message):
            catalog(tmp_path, body)


def test_entries_that_name_no_mteb_task_pass_through_without_importing_mteb():
    import subprocess
    import sys

    probe = ("import json, sys; from medbench_core.taskdata.mteb_tasks import expand_entries; "
             "e = [{'name': 'a', 'reader': 'mteb', 'dataset': 'R2MED/Biology', 'revision': 'x'}]; "
             "assert expand_entries(e, 'tasks.yaml') is e; print(json.dumps('mteb' in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) is False
    assert task_slug("R2MEDMedXpertQAExamRetrieval") == "r2med_med_xpert_qa_exam" and task_slug("IIYiClinical") == "iiyi_clinical"
    assert expand_entries([{"name": "x", "reader": "beir", "path": "p"}], "t") == [{"name": "x", "reader": "beir", "path": "p"}]
