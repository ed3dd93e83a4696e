"""Files already hashed are not read again while their stat is unchanged (medbench_core/storage/hashes.py),
within a process and, through the notes kept with the state (runtime/verified.py), across processes;
any write is seen, and a file written in the same clock tick as it was read is never trusted."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import polars as pl
import pytest

from medbench_core import storage
from medbench_core.errors import IntegrityError
from tests.core.hash_reads import count_hash_reads, write_artifact


@pytest.fixture
def counted(monkeypatch):
    """Forget every note, and count the files whose bytes are read to hash them."""
    return count_hash_reads(monkeypatch)


def _artifact(folder, files: dict[str, bytes]):
    return write_artifact(folder, files)


def test_a_file_hashed_once_is_verified_by_its_stat_and_any_write_is_seen(tmp_path, counted):
    folder = tmp_path / "a"
    manifest = _artifact(folder, {"x.bin": b"abc" * 1000, "y.json": b"{}"})
    assert sorted(counted) == ["x.bin", "y.json"]  # hashed when the manifest was written
    assert storage.known_sha256(folder / "x.bin") == manifest["files"]["x.bin"]["sha256"]
    counted.clear()
    storage.verify_manifest(folder)
    assert storage.is_complete(folder) and counted == []  # nothing read again

    original = os.stat(folder / "x.bin")
    time.sleep(0.01)
    (folder / "x.bin").write_bytes(b"abd" * 1000)  # same size, other bytes
    os.utime(folder / "x.bin", ns=(original.st_atime_ns, original.st_mtime_ns))  # mtime set back: ctime still moved
    assert os.stat(folder / "x.bin").st_mtime_ns == original.st_mtime_ns
    with pytest.raises(IntegrityError, match=r"x\.bin: sha256 .* corrupted"):
        storage.verify_manifest(folder)
    assert counted == ["x.bin"]


def test_a_file_written_in_the_tick_it_was_read_is_never_trusted(tmp_path, counted):
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "x.bin").write_bytes(b"1" * 100)
    storage.write_manifest(folder, ["x.bin"])  # at once: racily clean, not noted (a small file is not waited for)
    assert storage.known_sha256(folder / "x.bin") is None
    (folder / "x.bin").write_bytes(b"2" * 100)  # maybe within the same timestamp tick: same stat
    assert not storage.is_complete(folder)  # read again, so seen


def test_notes_kept_with_the_state_spare_a_new_process_the_reading(tmp_path, counted, monkeypatch):
    from runtime import settings, verified

    monkeypatch.setattr(settings, "STATE", tmp_path / "state")
    monkeypatch.setattr(verified, "_KEPT", {})
    folder = tmp_path / "c"
    _artifact(folder, {"index.bin": os.urandom(4096), "info.json": b'{"n": 1}'})
    verified.remember(folder)
    assert verified.notes_file(folder).is_file()

    monkeypatch.setattr(storage.hashes, "_NOTED", {})  # a new process: nothing noted
    counted.clear()
    assert verified.complete(folder) and counted == []  # every stat as noted: no byte read

    # Bytes that changed without their stat (bit rot, or a forged note): trusted by the notes, caught from the bytes.
    data = bytearray((folder / "index.bin").read_bytes())
    data[0] ^= 0xFF
    st = os.stat(folder / "index.bin")
    (folder / "index.bin").write_bytes(bytes(data))
    time.sleep(0.06)
    notes = verified.notes_file(folder)
    kept = json.loads(notes.read_text())
    now = os.stat(folder / "index.bin")
    assert now.st_size == st.st_size
    kept["files"]["index.bin"][:5] = [now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns, now.st_ctime_ns]
    notes.write_text(json.dumps(kept))
    monkeypatch.setattr(storage.hashes, "_NOTED", {})
    monkeypatch.setattr(verified, "_KEPT", {})
    assert verified.complete(folder)  # the warm path trusts the stat it was told about...
    monkeypatch.setattr(storage.hashes, "_NOTED", {})
    assert not storage.is_complete(folder)  # ...what every step of `--recheck` does reads the bytes

    # Notes about another folder, or unreadable ones, are ignored.
    notes.write_text("{not json")
    monkeypatch.setattr(storage.hashes, "_NOTED", {})
    verified.recall(folder)
    assert storage.hashes._NOTED == {}


def test_a_curated_task_is_read_once_per_process_while_its_files_are_unchanged(tmp_path, counted, monkeypatch):
    from medbench_core import layout as layout_module
    from medbench_core.layout import Layout

    folder = tmp_path / "data" / "tasks" / "t"
    frames = {
        "queries.parquet": pl.DataFrame({"query_id": ["q1"], "text": ["a"]}),
        "corpus.parquet": pl.DataFrame({"doc_id": ["d1"], "text": ["b"]}),
        "qrels.parquet": pl.DataFrame({"query_id": ["q1"], "doc_id": ["d1"], "relevance": [1]}),
    }
    folder.mkdir(parents=True)
    for name, df in frames.items():
        df.write_parquet(folder / name)
    loads: list[str] = []
    monkeypatch.setattr(layout_module, "_LOADED", {})
    monkeypatch.setattr(layout_module, "load_task", lambda f: loads.append(str(f)) or _FakeTask(str(f)))
    (folder / "task.json").write_text("{}")
    time.sleep(0.06)
    storage.write_manifest(folder, [*frames, "task.json"])
    lay = Layout(tmp_path / "data")
    first, second = lay.load_task("t"), lay.load_task("t")
    assert len(loads) == 1 and first == second and first is not second  # a copy of the one read

    time.sleep(0.01)
    pl.DataFrame({"doc_id": ["d2"], "text": ["c"]}).write_parquet(folder / "corpus.parquet")
    with pytest.raises(IntegrityError):
        lay.load_task("t")


@dataclass
class _FakeTask:
    """Stands for the Task that load_task reads (its frames are not the point here)."""

    folder: str
