"""Readers of the published layouts (MTEB / HF retrieval, R2MED's repository, the hub cache) on small
same-format fixtures: the same expected task from every layout, the revision recorded, and bad input
named by file and line."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hf_layouts import (
    DOCS,
    EXPECTED_QRELS,
    JUDGED,
    doc_text,
    hub_cache,
    write_jsonl,
    write_mteb_jsonl,
    write_mteb_parquet,
    write_r2med_hub,
    write_r2med_repo,
)

from medbench_core.errors import DataError
from medbench_core.taskdata.catalog import build_task, load_catalog
from medbench_core.taskdata.readers import ReadContext
from medbench_core.taskdata.readers.mteb import MtebOptions, read_mteb
from medbench_core.taskdata.readers.r2med import R2medRepoOptions, read_r2med_repo

SHA = "8b9fec2db9eda4b5742d03732213fbaee8169556"  # MTEB's pin of R2MED/Biology, used here as a fixture sha


def assert_expected_task(task, *, joined_titles: bool = True) -> None:
    assert sorted(task.queries["query_id"].to_list()) == JUDGED  # q9 is unjudged: dropped, as MTEB does
    assert task.corpus["doc_id"].to_list() == [d[0] for d in DOCS]
    assert {(q, d): g for q, d, g in task.qrels.iter_rows()} == EXPECTED_QRELS
    texts = dict(zip(task.corpus["doc_id"].to_list(), task.doc_text()))
    assert texts["d01"] == doc_text("d01") == "Gout Gout is an inflammatory arthritis caused by urate crystals, often in the big toe."
    assert texts["d06"] == "Chronic obstructive pulmonary disease is mostly caused by smoking."
    q1 = task.queries.filter(pl.col("query_id") == "q1").row(0, named=True)
    assert q1["text"] == "What causes gout in the big toe?" and q1["language"] == "en" and q1["modality"] == "text"


@pytest.mark.parametrize("write", [write_mteb_jsonl, write_mteb_parquet, write_r2med_hub], ids=["jsonl+tsv", "parquet-configs", "dataset-card"])
def test_every_mteb_layout_reads_the_same_task(tmp_path, write):
    folder = write(tmp_path / "ds")
    task = read_mteb(folder, MtebOptions(name="t"))
    assert_expected_task(task)
    # No licence anywhere: unknown, which the licence gate admits only for research-only tasks.
    assert set(task.queries["licence"]) | set(task.corpus["licence"]) == {"unknown"} and task.meta.licences == ("unknown",)
    assert task.meta.dataset == "ds" and task.meta.source_revision.startswith("sha256:") and len(task.meta.source_revision) == 23
    assert task.meta.provenance() == {"dataset": "ds", "dataset_revision": task.meta.source_revision}


def test_a_changed_file_changes_the_local_revision(tmp_path):
    folder = write_mteb_jsonl(tmp_path / "ds")
    before = read_mteb(folder, MtebOptions(name="t")).meta.source_revision
    assert read_mteb(folder, MtebOptions(name="t")).meta.source_revision == before
    (folder / "qrels" / "test.tsv").write_text((folder / "qrels" / "test.tsv").read_text().replace("q8\td22\t0", "q8\td22\t1"))
    assert read_mteb(folder, MtebOptions(name="t")).meta.source_revision != before


def test_split_choice(tmp_path):
    folder = write_mteb_parquet(tmp_path / "ds")
    dev = read_mteb(folder, MtebOptions(name="t", split="dev"))
    assert dev.qrels.rows() == [("q9", "d20", 1)] and dev.queries["query_id"].to_list() == ["q9"]
    with pytest.raises(DataError, match=r"default: split 'validation' not found; it has \['dev', 'test'\]"):
        read_mteb(folder, MtebOptions(name="t", split="validation"))


def test_subset_configs_and_subfolders(tmp_path):
    # MTEB's multi-subset naming: <subset>-corpus, <subset>-queries, <subset>-qrels.
    folder = tmp_path / "multi"
    folder.mkdir()
    one = write_mteb_parquet(tmp_path / "one")
    for part, src in (("corpus", "corpus"), ("queries", "queries"), ("qrels", "default")):
        (one / src).rename(folder / f"Biology-{part}")
    task = read_mteb(folder, MtebOptions(name="t", subset="Biology"))
    assert_expected_task(task)
    assert task.meta.subset == "Biology"
    # A subfolder per subset.
    write_mteb_jsonl(tmp_path / "tree" / "Cardiology")
    task = read_mteb(tmp_path / "tree", MtebOptions(name="t", subset="Cardiology"))
    assert_expected_task(task)
    assert task.meta.dataset == "tree" and task.meta.subset == "Cardiology"


# --- the hub: pinned revisions, read from the local cache, online only when asked ------------------


def test_hub_dataset_at_a_pinned_revision_from_the_local_cache(tmp_path):
    cache, _ = hub_cache(tmp_path / "hub", "R2MED/Biology", lambda d: write_r2med_hub(d, licence="cc-by-4.0"), sha=SHA)
    task = read_mteb(None, MtebOptions(name="r2med_biology", dataset="R2MED/Biology", revision=SHA), ReadContext(hub_cache=cache))
    assert_expected_task(task)
    assert (task.meta.dataset, task.meta.source_revision) == ("R2MED/Biology", SHA)
    assert task.meta.licences == ("CC-BY-4.0",)  # the dataset card's licence
    # A branch is resolved to the commit it points at, and that commit is what is recorded.
    assert read_mteb(None, MtebOptions(name="t", dataset="R2MED/Biology", revision="main"), ReadContext(hub_cache=cache)).meta.source_revision == SHA


def test_hub_dataset_without_a_revision_is_refused(tmp_path):
    with pytest.raises(DataError) as err:
        read_mteb(None, MtebOptions(name="r2med_biology", dataset="R2MED/Biology"), ReadContext(hub_cache=tmp_path))
    assert str(err.value) == (
        "task r2med_biology: hub dataset 'R2MED/Biology' has no revision; pin one (revision: <40-hex commit sha>) so the task reads the same data every time"
    )


def test_offline_hub_read_never_downloads(tmp_path, monkeypatch):
    import huggingface_hub

    calls = []

    def fake_download(repo_id, **kw):
        calls.append((repo_id, kw["repo_type"], kw["revision"]))
        folder = tmp_path / "downloaded"
        write_r2med_hub(folder)
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    other = "0" * 40
    with pytest.raises(DataError, match=rf"dataset R2MED/Biology@{other}: not in the local hub cache"):
        read_mteb(None, MtebOptions(name="t", dataset="R2MED/Biology", revision=other), ReadContext(hub_cache=tmp_path / "empty"))
    with pytest.raises(DataError, match=r"revision 'main' is not in the local hub cache .* run online once"):
        read_mteb(None, MtebOptions(name="t", dataset="R2MED/Biology", revision="main"), ReadContext(hub_cache=tmp_path / "empty"))
    assert calls == []
    # online=True goes to the hub (here: the patched downloader) at the pinned commit.
    task = read_mteb(None, MtebOptions(name="t", dataset="R2MED/Biology", revision=other), ReadContext(hub_cache=tmp_path / "empty", online=True))
    assert calls == [("R2MED/Biology", "dataset", other)]
    assert task.meta.source_revision == other and task.queries.height == 8


def test_a_local_folder_refuses_a_revision(tmp_path):
    with pytest.raises(DataError, match="'revision' pins a hub dataset; the local folder .* is identified by the hash of its files"):
        read_mteb(write_mteb_jsonl(tmp_path / "ds"), MtebOptions(name="t", revision=SHA))


# --- malformed input: file, line (or row) and id ---------------------------------------------------


def test_malformed_jsonl_names_file_and_line(tmp_path):
    folder = write_mteb_jsonl(tmp_path / "ds")
    lines = (folder / "corpus.jsonl").read_text().splitlines()
    lines[2] = lines[2][:-5]
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as err:
        read_mteb(folder, MtebOptions(name="t"))
    assert str(err.value).startswith(f"{folder / 'corpus.jsonl'}:3: malformed JSON")


def test_parquet_record_without_id_names_file_and_row(tmp_path):
    folder = write_mteb_parquet(tmp_path / "ds")
    path = folder / "queries" / "queries-00000-of-00001.parquet"
    pl.DataFrame({"_id": ["q1", None], "text": ["a", "b"]}).write_parquet(path)
    with pytest.raises(DataError, match=rf"^{path}: row 2: record has no '_id' or 'id'$"):
        read_mteb(folder, MtebOptions(name="t"))


def test_duplicate_ids_name_both_places(tmp_path):
    folder = write_mteb_jsonl(tmp_path / "ds")
    with open(folder / "corpus.jsonl", "a") as f:
        f.write(json.dumps({"_id": "d01", "text": "again"}) + "\n")
    corpus = folder / "corpus.jsonl"
    with pytest.raises(DataError, match=rf"^{corpus}:25: corpus id 'd01' appears twice \(first at {corpus}:1\)$"):
        read_mteb(folder, MtebOptions(name="t"))


@pytest.mark.parametrize(
    "line, message",
    [
        ("q1\td01\thigh", "relevance 'high' is not an integer"),
        ("q1\td01\t0.5", "relevance '0.5' is not an integer"),
        ("q1\td01", "expected 3 tab-separated fields (query-id, corpus-id, score), got 2"),
        ("q1\tghost\t1", "judgment names document id 'ghost', which the corpus"),
        ("q7\td01\t1\nq7\td01\t2", "judgment for query id 'q7' and document id 'd01' appears twice (first at "),
    ],
    ids=["word", "fraction", "short", "unknown-doc", "duplicate"],
)
def test_bad_qrels_lines_name_file_and_line(tmp_path, line, message):
    folder = write_mteb_jsonl(tmp_path / "ds")
    qrels = folder / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + line + "\n")
    n = len(qrels.read_text().splitlines())
    with pytest.raises(DataError) as err:
        read_mteb(folder, MtebOptions(name="t"))
    assert str(err.value).startswith(f"{qrels}:{n}: {message}"), str(err.value)


def test_duplicate_judgments_can_keep_the_higher_grade(tmp_path):
    folder = write_mteb_jsonl(tmp_path / "ds")
    qrels = folder / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "q8\td22\t2\n")
    task = read_mteb(folder, MtebOptions(name="t", duplicate_judgments="max"))
    assert {(q, d): g for q, d, g in task.qrels.iter_rows()} == {**EXPECTED_QRELS, ("q8", "d22"): 2}


def test_missing_parts_and_bad_cards_are_named(tmp_path):
    folder = write_mteb_jsonl(tmp_path / "ds")
    (folder / "qrels" / "test.tsv").unlink()
    with pytest.raises(DataError, match=rf"^{folder}: no qrels found"):
        read_mteb(folder, MtebOptions(name="t"))
    card = write_r2med_hub(tmp_path / "card")
    (card / "data" / "query.jsonl").unlink()
    with pytest.raises(DataError, match=r"README.md: config 'query' split 'query': no file matches 'data/query.jsonl'"):
        read_mteb(card, MtebOptions(name="t"))
    (card / "README.md").write_text("---\nconfigs: [\n---\n")
    with pytest.raises(DataError, match=r"README.md: the dataset card's YAML front matter is not valid"):
        read_mteb(card, MtebOptions(name="t"))
    with pytest.raises(DataError, match=rf"^{tmp_path / 'nowhere'}: dataset folder not found$"):
        read_mteb(tmp_path / "nowhere", MtebOptions(name="t"))


# --- R2MED's repository layout -----------------------------------------------------------------------


def test_r2med_repo_layout_jsonl_and_txt_qrels(tmp_path):
    a = read_r2med_repo(write_r2med_repo(tmp_path / "a", qrels="jsonl"), R2medRepoOptions(name="t"))
    b = read_r2med_repo(write_r2med_repo(tmp_path / "b", qrels="txt"), R2medRepoOptions(name="t"))
    for task in (a, b):
        assert_expected_task(task)
    # body_system becomes the discipline (an empty one is no discipline).
    disc = dict(a.queries.select("query_id", "discipline").iter_rows())
    assert disc["q1"] == "musculoskeletal" and disc["q8"] == "urinary" and disc["q6"] is None
    assert a.meta.dataset == "a" and a.meta.source_revision.startswith("sha256:")


def test_r2med_repo_errors(tmp_path):
    folder = write_r2med_repo(tmp_path / "a", qrels="jsonl")
    (folder / "qrels.txt").write_text("q1 d01 1\n")
    with pytest.raises(DataError, match="expected one qrels file, qrels.jsonl or qrels.txt; found both"):
        read_r2med_repo(folder, R2medRepoOptions(name="t"))
    (folder / "qrels.jsonl").unlink()
    (folder / "qrels.txt").write_text("q1 0 d01 2\nq1 d03\n")  # TREC form on line 1, a short line 2
    with pytest.raises(DataError, match=rf"^{folder / 'qrels.txt'}:2: expected 3 fields"):
        read_r2med_repo(folder, R2medRepoOptions(name="t"))
    write_jsonl(folder / "qrels.jsonl", [{"q_id": "q1", "p_id": "d01"}])
    (folder / "qrels.txt").unlink()
    with pytest.raises(DataError, match=rf"^{folder / 'qrels.jsonl'}:1: judgment \(q1, d01\) has no 'score'$"):
        read_r2med_repo(folder, R2medRepoOptions(name="t"))
    (folder / "query.jsonl").unlink()
    with pytest.raises(DataError, match=rf"^{folder / 'query.jsonl'}: file not found"):
        read_r2med_repo(folder, R2medRepoOptions(name="t"))


# --- licences under the existing gate ----------------------------------------------------------------


def test_unknown_licence_is_research_only_under_the_licence_gate(tmp_path):
    from medbench_core.taskdata.contracts import validate_task

    folder = write_r2med_repo(tmp_path / "a")
    refused = validate_task(read_r2med_repo(folder, R2medRepoOptions(name="r2med_a")))
    assert not refused.passed and refused.licences == {"unknown": 32}
    assert {o.aspect for o in refused.failures} == {"licence"}
    admitted = validate_task(read_r2med_repo(folder, R2medRepoOptions(name="r2med_a", research_only=True)))
    assert admitted.passed and admitted.research_only
    assert "research-only task: admits licence(s) unknown (32 records) outside the allowlist" in admitted.message
    # A configured licence replaces unknown; then the task passes without research_only.
    assert validate_task(read_r2med_repo(folder, R2medRepoOptions(name="r2med_a", licence="CC BY 4.0"))).passed


# --- the catalogue: subsets, hub entries, build_task -----------------------------------------------


def write_catalog(path: Path, body: str) -> Path:
    path.write_text("benchmark: t\ntasks:\n" + body)
    return path


def test_catalogue_subsets_become_one_task_each(tmp_path):
    cat = write_catalog(
        tmp_path / "tasks.yaml",
        """
  - name: r2med
    reader: mteb
    dataset: "R2MED/{subset}"
    research_only: true
    description: "R2MED {subset}"
    subsets:
      Biology: 8b9fec2db9eda4b5742d03732213fbaee8169556
      Medical-Sciences: {revision: 1b48911514c80bf9182222d99752ad75e23b4b47, task_type: qa_reference}
      IIYi-Clinical: {revision: 974abbc9bc281c3169180a6aa5d7586cfd2f5877, task_type: clinical_case}
  - name: local
    reader: r2med_repo
    path: r2med_copy
    subsets: [PMC-Treatment]
""",
    )
    catalog = load_catalog(cat)
    assert catalog.names == ["r2med_biology", "r2med_medical_sciences", "r2med_iiyi_clinical", "local_pmc_treatment"]
    e = catalog.task("r2med_medical_sciences")
    assert (e.reader, e.path, e.research_only) == ("mteb", "", True)
    assert e.options == {
        "dataset": "R2MED/Medical-Sciences",
        "description": "R2MED Medical-Sciences",
        "revision": "1b48911514c80bf9182222d99752ad75e23b4b47",
        "task_type": "qa_reference",
        "subset": "Medical-Sciences",
    }
    assert catalog.task("local_pmc_treatment").options == {"subset": "PMC-Treatment"}


@pytest.mark.parametrize(
    "body, message",
    [
        ("  - {name: r2, reader: mteb, dataset: R2MED/Biology}\n", "task 'r2': hub dataset 'R2MED/Biology' has no revision; pin one"),
        ("  - {name: r2, reader: mteb, dataset: 'R2MED/{subset}', subsets: [Biology]}\n", "task 'r2_biology': hub dataset 'R2MED/Biology' has no revision"),
        ("  - {name: s, reader: beir, dataset: BeIR/scifact, revision: abc}\n", "reader 'beir' reads local folders only"),
        ("  - {name: s, reader: beir, path: scifact, subsets: [a]}\n", "reader 'beir' has no subsets"),
        ("  - {name: s, reader: mteb}\n", "tasks[0] needs 'name', 'reader' and 'path' (a local folder) or 'dataset'"),
        ("  - {name: s, reader: mteb, path: x, subsets: 3}\n", "'subsets' must be a non-empty list of names or a mapping"),
    ],
    ids=["no-revision", "subset-no-revision", "local-only-reader", "no-subsets", "no-source", "bad-subsets"],
)
def test_catalogue_errors_name_file_and_entry(tmp_path, body, message):
    cat = write_catalog(tmp_path / "tasks.yaml", body)
    with pytest.raises(DataError) as err:
        load_catalog(cat)
    assert str(err.value).startswith(f"{cat}: ") and message in str(err.value), str(err.value)


def test_build_task_reads_a_catalogued_hub_dataset_offline_from_the_cache(tmp_path):
    cache, _ = hub_cache(tmp_path / "hub", "R2MED/Biology", write_r2med_hub, sha=SHA)
    cat = write_catalog(tmp_path / "tasks.yaml", f"  - {{name: r2med, reader: mteb, dataset: 'R2MED/{{subset}}', subsets: {{Biology: {SHA}}}}}\n")
    entry = load_catalog(cat).task("r2med_biology")
    task = build_task(entry, tmp_path / "data", tmp_path / "work", hub_cache=cache)
    assert_expected_task(task)
    assert task.meta.provenance() == {"dataset": "R2MED/Biology", "dataset_revision": SHA, "subset": "Biology"}
    # The same entry on a local folder: no code, only tasks.yaml.
    write_mteb_jsonl(tmp_path / "data" / "mine")
    cat = write_catalog(tmp_path / "tasks.yaml", "  - {name: mine, reader: mteb, path: mine, research_only: true}\n")
    assert_expected_task(build_task(load_catalog(cat).task("mine"), tmp_path / "data", tmp_path / "work"))
