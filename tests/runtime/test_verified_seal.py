"""A complete run's seal (runtime/verified.py, seal and Sealed): the warm path and the run plan confirm a sealed
folder by its files' stat alone, and never confirm one whose bytes or manifest were written since it was sealed."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from medbench_core import storage
from tests.core.hash_reads import count_hash_reads, write_artifact


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """Notes kept under tmp_path/state; nothing noted in this process; the files whose bytes are read counted."""
    from runtime import settings, verified

    monkeypatch.setattr(settings, "STATE", tmp_path / "state")
    monkeypatch.setattr(verified, "_KEPT", {})
    return count_hash_reads(monkeypatch)


def _artifact(folder, files: dict[str, bytes]):
    write_artifact(folder, files, settle_manifest=True)
    return folder


def _new_process(monkeypatch, tmp_path):
    """What a new process knows: no note in memory, none kept with the state."""
    from runtime import verified

    monkeypatch.setattr(storage.hashes, "_NOTED", {})
    monkeypatch.setattr(verified, "_KEPT", {})
    shutil.rmtree(tmp_path / "state" / verified.NOTES, ignore_errors=True)


def test_a_sealed_folder_is_confirmed_by_stat_alone_and_any_write_is_seen(tmp_path, fresh, monkeypatch):
    from runtime import verified

    folder = _artifact(tmp_path / "a", {"index.bin": b"abc" * 1000, "info.json": b'{"n": 1}'})
    sealed = verified.seal([folder])
    # The manifest first, then the files it lists, each with the stat under which it was hashed.
    assert [entry[0] for entry in sealed[str(folder)]] == ["MANIFEST.json", "index.bin", "info.json"]
    st = os.stat(folder / "index.bin")
    assert sealed[str(folder)][1][1:] == [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]

    _new_process(monkeypatch, tmp_path)
    fresh.clear()
    assert verified.Sealed(sealed).complete(folder) and fresh == []  # no byte read, no notes file there to read
    assert not verified.notes_file(folder).exists()

    # Other bytes, same size, mtime set back: the ctime moved, so the seal does not hold and the bytes are read.
    target = folder / "index.bin"
    time.sleep(0.01)
    target.write_bytes(b"abd" * 1000)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(target).st_size == st.st_size and os.stat(target).st_mtime_ns == st.st_mtime_ns
    _new_process(monkeypatch, tmp_path)
    fresh.clear()
    assert not verified.Sealed(sealed).complete(folder)
    assert "index.bin" in fresh


def test_a_folder_written_again_with_the_same_bytes_is_read_again_and_confirmed(tmp_path, fresh, monkeypatch):
    from runtime import verified

    folder = _artifact(tmp_path / "b", {"run.parquet": os.urandom(2048)})
    sealed = verified.seal([folder])
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    shutil.rmtree(folder)
    os.rename(copy, folder)  # as replace_dir_atomic leaves it: other inodes
    _new_process(monkeypatch, tmp_path)
    fresh.clear()
    assert verified.Sealed(sealed).complete(folder)  # by its bytes, as complete() does
    assert sorted(fresh) == ["run.parquet"]


def test_what_is_not_complete_or_too_fresh_to_trust_is_not_sealed(tmp_path, fresh, monkeypatch):
    from runtime import verified

    good = _artifact(tmp_path / "good", {"x.bin": b"1" * 100})
    corrupt = _artifact(tmp_path / "corrupt", {"x.bin": b"1" * 100})
    (corrupt / "x.bin").write_bytes(b"2" * 100)  # same size, other bytes
    missing = _artifact(tmp_path / "missing", {"x.bin": b"1" * 100})
    (missing / "x.bin").unlink()
    racy = tmp_path / "racy"
    racy.mkdir()
    (racy / "x.bin").write_bytes(b"1" * 100)
    storage.write_manifest(racy, ["x.bin"])  # at once: racily clean, never noted, so never sealed
    soon = time.time_ns() + 10_000_000_000  # "at once" whatever the load: its mtime stays within the racy margin of any read
    os.utime(racy / "x.bin", ns=(soon, soon))
    _new_process(monkeypatch, tmp_path)
    sealed = verified.seal([good, corrupt, missing, racy, tmp_path / "never-written"])
    assert sorted(sealed) == [str(good)]

    # A seal entry that does not read (a hand-edited ledger) is ignored: the folder is checked from its files.
    bad = {str(corrupt): [["x.bin", "not", "a", "stat"]], str(good): "garbage"}
    assert not verified.Sealed(bad).complete(corrupt)
    assert verified.Sealed(bad).complete(good)
    assert not verified.Sealed({str(missing): []}).complete(missing)


def test_the_previous_seal_is_carried_over_without_a_read_while_its_files_keep_their_stat(tmp_path, fresh, monkeypatch):
    from runtime import verified

    kept = _artifact(tmp_path / "kept", {"x.bin": b"1" * 500})
    moved = _artifact(tmp_path / "moved", {"x.bin": b"1" * 500})
    first = verified.seal([kept, moved])
    assert sorted(first) == [str(kept), str(moved)]
    time.sleep(0.01)
    (moved / "x.bin").write_bytes(b"3" * 500)
    time.sleep(0.06)
    _new_process(monkeypatch, tmp_path)
    fresh.clear()
    second = verified.seal([kept, moved], first)
    assert second == {str(kept): first[str(kept)]}  # carried over; the changed folder fails its manifest
    assert fresh == ["x.bin"]  # only the changed file was read
