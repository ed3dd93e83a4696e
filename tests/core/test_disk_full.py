"""A full disk is said as one (issue 44.10): ENOSPC, the device, where it is mounted, and the file being written, on a
real tmpfs filled up (tests/mounts.py; skipped, the reason printed, where the test cannot mount one). numpy's short
write says only "N requested and M written", SQLite only "database or disk is full": neither names the disk."""

import os

import numpy as np
import pytest

from medbench_core.errors import DiskFull
from medbench_core.storage import disk_full, replace_dir_atomic, write_bytes_atomic
from tests.mounts import fill, tmpfs


def test_an_artifact_folder_written_by_numpy_on_a_full_disk(tmp_path):
    with tmpfs(tmp_path / "disk", "256k") as disk:
        final = disk / "artifacts" / "bm25" / "scifact" / "embeddings" / "k1"
        replace_dir_atomic(final, lambda tmp: (tmp / "old.txt").write_text("the last good output\n"))
        with pytest.raises(DiskFull) as full:
            replace_dir_atomic(final, lambda tmp: np.save(tmp / "corpus.npy", np.zeros(200_000, dtype=np.float32), allow_pickle=False))
        said = str(full.value)
        assert said.startswith(f"ENOSPC: no space left on tmpfs (mounted at {disk}, "), said
        assert f" bytes free) while writing {final} (" in said and "requested and" in said, said  # numpy's own words, kept at the end
        assert isinstance(full.value, OSError) and full.value.errno == 28 and full.value.filename == str(final)
        # Nothing lost: the last good folder as it was, no temporary left.
        assert [p.name for p in final.iterdir()] == ["old.txt"] and (final / "old.txt").read_text() == "the last good output\n"
        assert sorted(p.name for p in final.parent.iterdir()) == ["k1"]


def test_a_file_written_on_a_full_disk(tmp_path):
    with tmpfs(tmp_path / "disk", "256k") as disk:
        fill(disk, leave=4096)
        target = disk / "reports" / "leaderboard.json"
        with pytest.raises(DiskFull) as full:
            write_bytes_atomic(target, b"x" * 65536)
        assert str(full.value).startswith(f"ENOSPC: no space left on tmpfs (mounted at {disk}, ") and f"while writing {target} (" in str(full.value)
        assert not target.exists() and sorted(os.listdir(disk / "reports")) == []


def test_sqlite_on_a_full_disk(tmp_path):
    import sqlite3

    with tmpfs(tmp_path / "disk", "256k") as disk:
        db = disk / "mlflow.db"
        with sqlite3.connect(db) as con:
            con.execute("CREATE TABLE t (x BLOB)")
        fill(disk, leave=0)
        with pytest.raises(sqlite3.OperationalError) as refused:
            with sqlite3.connect(db) as con:
                con.execute("INSERT INTO t VALUES (?)", (b"x" * 200_000,))
        assert str(refused.value) == "database or disk is full"
        said = str(disk_full(refused.value, db))
        assert said == f"ENOSPC: no space left on tmpfs (mounted at {disk}, 0 bytes free) while writing {db} (database or disk is full)"


def test_other_errors_are_left_alone(tmp_path):
    assert disk_full(FileNotFoundError(2, "No such file or directory", "x"), tmp_path) is None
    assert disk_full(ValueError("bad value"), tmp_path) is None
