"""The one digest of a task's source files (catalog.source_files_digest) and the three places that use it.

Releases record it as ``source_sha256``: its form is fixed, so a recorded release still verifies.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from medbench_core.taskdata.catalog import TaskEntry, changed_inputs, curation_inputs, source_files_digest


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_source(folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_bytes(b'{"_id": "d1", "text": "x"}\n')
    (folder / "qrels" / "test.tsv").write_bytes(b"query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return folder


def test_the_digest_is_sha256_over_relative_names_and_file_sha256s_in_name_order(tmp_path):
    src = write_source(tmp_path / "t")
    # Worked out by hand: names relative to the folder, sorted, each followed by its file's sha256 hex, no separator.
    want = _sha(
        b"corpus.jsonl" + _sha(b'{"_id": "d1", "text": "x"}\n').encode()
        + b"qrels/test.tsv" + _sha(b"query-id\tcorpus-id\tscore\nq1\td1\t1\n").encode()
    )  # fmt: skip
    assert source_files_digest(src) == want
    assert (
        want == "4c0b10f5488ed2332fcf07cc4229aea9a1462c74fcf39497f7b014c6782140e6"
    )  # what medbench_release.record.source_digest gave before it moved (main at ac11004)
    one = src / "corpus.jsonl"
    assert source_files_digest(one) == _sha(b"corpus.jsonl" + _sha(one.read_bytes()).encode())


def test_release_record_warm_path_and_curation_use_the_same_digest(tmp_path):
    from medbench_cli import uptodate
    from medbench_release.record import source_digest

    src = write_source(tmp_path / "data" / "t")
    entry = TaskEntry(name="t", reader="beir", path="t")
    want = source_files_digest(src)
    assert source_digest(tmp_path / "data", {"path": "t"}) == want
    assert uptodate.source_digest(entry, tmp_path / "data") == want
    assert curation_inputs(entry, tmp_path / "data")["files"] == want


def test_changed_inputs_reads_bytes_only_when_the_stat_moved(tmp_path):
    src = write_source(tmp_path / "data" / "t")
    entry = TaskEntry(name="t", reader="beir", path="t")
    recorded = curation_inputs(entry, tmp_path / "data")
    assert changed_inputs(recorded, entry, tmp_path / "data") == ""
    corpus = src / "corpus.jsonl"
    st = corpus.stat()
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched, same bytes: current
    assert changed_inputs(recorded, entry, tmp_path / "data") == ""
    # A digest recorded in the older 16-hex form cannot be compared once the stat moved: said so, not called a change of bytes.
    old = {**recorded, "files": recorded["files"][:16]}
    assert "the digest recorded then is of an older form" in changed_inputs(old, entry, tmp_path / "data")
    corpus.write_bytes(b'{"_id": "d1", "text": "y"}\n')
    assert changed_inputs(recorded, entry, tmp_path / "data") == f"its source files ({src}) changed since it was curated"
