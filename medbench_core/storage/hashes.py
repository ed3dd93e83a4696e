"""The sha256 of a file, and the files already hashed whose bytes cannot have changed since (not read again)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# A file's bytes cannot change while its stat stays the same: every write sets its mtime and ctime
# (ctime cannot be set back from user space), a replacement has another inode. So a file whose
# (device, inode, size, mtime, ctime) equal those it had when its sha256 was computed is not read
# again: the steps of one process verify what an earlier step wrote or verified, and the warm path
# of ``medbench run`` verifies by the notes kept with its state (runtime/verified.py). Like git, files
# that are "racily clean" are never noted: one whose mtime or ctime lies within the timestamps'
# granularity of the moment its bytes were read could be written again in the same tick, stat
# unchanged. Hashing ignores the notes (``sha256_file``); ``--recheck`` starts a new process.
_RACY_NS = 50_000_000  # kernel file timestamps come from a coarse clock (1-10 ms ticks); well above it
_RACY_COARSE_NS = 2_000_000_000  # whole-second timestamps (FAT, some network filesystems)
_WAIT_FOR_BYTES = 16 << 20  # hashing 16 MB again costs about what waiting out the margin does
_NOTED: dict[tuple[int, int], tuple[int, int, int, str]] = {}  # (dev, ino) -> (size, mtime_ns, ctime_ns, sha256)

FileStat = tuple[int, int, int, int, int]


def file_stat(path: str | os.PathLike[str]) -> FileStat:
    """(device, inode, size, mtime_ns, ctime_ns) of ``path``: what changes whenever its bytes can have."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _racy_margin(st: FileStat) -> int:
    return _RACY_COARSE_NS if st[3] % 1_000_000_000 == 0 and st[4] % 1_000_000_000 == 0 else _RACY_NS


def known_sha256(path: str | os.PathLike[str], stat: FileStat | None = None) -> str | None:
    """The sha256 noted for ``path`` when its stat is still the one it had when hashed; None otherwise."""
    st = stat if stat is not None else file_stat(path)
    noted = _NOTED.get(st[:2])
    return noted[3] if noted is not None and noted[:3] == st[2:] else None


def sha256_noting(path: str | os.PathLike[str]) -> str:
    """sha256 of ``path``: the noted one while its stat is unchanged; otherwise read, and noted
    unless the file changed while being read or is racily clean (a large file written in the last
    few milliseconds is waited for first: reading it again later would cost more than the wait)."""
    before = file_stat(path)
    digest = known_sha256(path, before)
    if digest is not None:
        return digest
    margin = _racy_margin(before)
    wait = max(before[3], before[4]) + margin - time.time_ns()
    if 0 < wait <= _RACY_NS and before[2] >= _WAIT_FOR_BYTES:
        time.sleep(wait / 1e9)
    read_at = time.time_ns()
    digest = sha256_file(path)
    after = file_stat(path)
    if after == before and max(after[3], after[4]) + margin <= read_at:
        _NOTED[after[:2]] = (*after[2:], digest)
    return digest


def noted(folder: str | os.PathLike[str], names: Iterable[str]) -> dict[str, list[Any]]:
    """For each of ``names`` in ``folder`` whose sha256 is noted and whose stat is unchanged:
    ``[device, inode, size, mtime_ns, ctime_ns, sha256]`` (what :func:`add_notes` takes back)."""
    out: dict[str, list[Any]] = {}
    for name in names:
        try:
            st = file_stat(Path(folder) / name)
        except OSError:
            continue
        digest = known_sha256(Path(folder) / name, st)
        if digest is not None:
            out[name] = [*st, digest]
    return out


def add_notes(entries: Iterable[list[Any]]) -> None:
    """Take back notes made by another process (:func:`noted`), e.g. kept with the project's state."""
    for dev, ino, size, mtime, ctime, digest in entries:
        _NOTED[(int(dev), int(ino))] = (int(size), int(mtime), int(ctime), str(digest))
