"""Atomic writes of files and folders, and the temporaries killed writers leave.

Every artifact is written to a temporary name in its final folder, fsynced and renamed, so a reader sees either
the old or the new file, never a truncated one; a folder is built beside its final place and swapped in.

A writer holds an exclusive ``flock`` on its temporary file or folder until it is renamed into place or removed.
The kernel drops that lock when the writer dies, however it dies (SIGKILL included), so
:func:`remove_abandoned_temporaries` can tell a temporary that a live writer is filling from one a killed writer
left, and remove only the latter.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from medbench_core.storage.full_disk import disk_full


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; on success fsync it and rename it into place.

    On an exception the temporary file is removed and ``final`` is left as it was. The caller
    writes into the path it is given (not a new file renamed over it): the lock that marks the
    temporary as this live writer's is on that file.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp, held = _new_temporary(final, folder=False)
    try:
        try:
            yield tmp
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        except Exception as exc:  # a full disk is said as one, with the device and the file
            full = disk_full(exc, final)
            if full is not None:
                raise full from exc
            raise
        os.replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        try:
            if tmp.exists():
                tmp.unlink()
        finally:
            os.close(held)


def write_bytes_atomic(final: str | os.PathLike[str], data: bytes) -> Path:
    with atomic_path(final) as tmp:
        tmp.write_bytes(data)
    return Path(final)


def write_text_atomic(final: str | os.PathLike[str], text: str) -> Path:
    return write_bytes_atomic(final, text.encode("utf-8"))


def write_json_atomic(final: str | os.PathLike[str], obj: Any) -> Path:
    return write_text_atomic(final, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_with(final: str | os.PathLike[str], writer: Callable[[Path], None]) -> Path:
    """Call ``writer(tmp_path)`` and rename the result into place atomically."""
    with atomic_path(final) as tmp:
        writer(tmp)
    return Path(final)


def replace_dir_atomic(final: str | os.PathLike[str], build: Callable[[Path], None]) -> Path:
    """Build a whole folder in a temporary sibling, then swap it into place.

    ``build(tmp_dir)`` writes every file (manifest included). The swap is one atomic
    ``renameat2(RENAME_EXCHANGE)`` where the OS offers it, so ``final`` names a complete folder
    at every instant, even if the process is killed. Elsewhere it takes two renames (old aside,
    new in); a crash between them leaves ``.<name>.old``, which the next writer or reader puts back.
    A temporary folder a killed writer of ``final`` left beside it is removed first.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    _recover_interrupted_swap(final)
    remove_abandoned_temporaries(final.parent, name=final.name)  # what a killed writer of this folder left
    tmp, held = _new_temporary(final, folder=True)
    try:
        try:
            build(tmp)
            _fsync_tree(tmp)
        except Exception as exc:  # a full disk is said as one, with the device and the folder (numpy says only "N requested and M written")
            full = disk_full(exc, final)
            if full is not None:
                raise full from exc
            raise
        if final.exists():
            if not _exchange(tmp, final):  # on success tmp holds the old folder, removed below
                _swap_by_two_renames(tmp, final)
        else:
            os.replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        try:
            _remove_tree(tmp)  # after an exchange, the old folder: unlocked, a sweeper may be removing it too
        finally:
            os.close(held)
    return final


@contextlib.contextmanager
def staging_folder(final: str | os.PathLike[str]) -> Iterator[Path]:
    """A new temporary folder beside ``final``, named and locked as this module's temporaries (a killed writer's is
    removed by the next sweep), removed with whatever is left in it when the block ends: files are written there
    first and moved into place (:func:`move_into`) only once everything that had to accept them did."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp, held = _new_temporary(final, folder=True)
    try:
        yield tmp
    finally:
        try:
            _remove_tree(tmp)
        finally:
            os.close(held)


def move_into(staged: str | os.PathLike[str], dest: str | os.PathLike[str], names: Iterable[str]) -> None:
    """Move each of ``names`` (files or folders) from ``staged`` into ``dest`` (same file system), each replacing its
    old version in one step (a folder by an atomic exchange where the OS offers it); a name absent from ``staged`` is
    removed from ``dest``. What was replaced is left in ``staged``, removed with it."""
    staged, dest = Path(staged), Path(dest)
    for name in names:
        src, dst = staged / name, dest / name
        if src.is_dir():
            if not dst.exists():
                os.replace(src, dst)
            elif not (dst.is_dir() and _exchange(src, dst)):
                _swap_by_two_renames(src, dst)
        elif src.exists():
            os.replace(src, dst)
        elif dst.is_dir() and not dst.is_symlink():
            _remove_tree(dst)
        else:
            with contextlib.suppress(FileNotFoundError):
                dst.unlink()
    _fsync_dir(dest)


def _remove_tree(path: Path) -> None:
    def gone_is_fine(function, name, exc_info) -> None:
        if not issubclass(exc_info[0], FileNotFoundError):
            raise exc_info[1]

    shutil.rmtree(path, onerror=gone_is_fine)


def _swap_by_two_renames(tmp: Path, final: Path) -> None:
    old = _old_path(final)
    if old.exists():  # debris of a crash after a completed swap: ``final`` is the newer one
        shutil.rmtree(old)
    for _ in range(10):
        os.replace(final, old)
        try:
            os.replace(tmp, final)
            break
        except OSError as exc:
            # A reader saw ``final`` missing and put the old folder back: set it aside again.
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    else:
        raise OSError(f"{final}: could not swap in the new folder; readers kept restoring the old one")
    shutil.rmtree(old, ignore_errors=True)


def _old_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.old")


def _recover_interrupted_swap(final: Path) -> bool:
    """Put back the old folder of a two-rename swap that was killed between its renames.

    Readers call it too: if the writer is alive after all, it sets the old folder aside again.
    """
    old = _old_path(final)
    if final.exists() or not old.is_dir():
        return False
    try:
        os.replace(old, final)
    except FileNotFoundError:  # another process recovered it first
        pass
    return final.exists()


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2``); False where the OS or filesystem cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # glibc older than 2.28, or another libc
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), str(b))


def _fsync_tree(folder: Path) -> None:
    for p in folder.rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    _fsync_dir(folder)


# --- temporaries of interrupted writes ------------------------------------------------------------

# What tempfile names them: ``.<final name>.`` + 8 random characters + ``.tmp``. DVC's own temporaries
# (``<name>.<22-character token>.tmp``) never match, so a pull running beside a sweep keeps its files.
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp\Z")


def _new_temporary(final: Path, folder: bool) -> tuple[Path, int]:
    """A new temporary file or folder beside ``final`` and an open descriptor holding its lock.

    The lock is taken blocking: a sweeper examining the new temporary holds it for an instant
    and may remove it (it was not locked yet); then the path names another inode or nothing,
    and a new temporary is made.
    """
    while True:
        if folder:
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
            try:
                fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                continue
        else:
            fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
            tmp = Path(name)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(tmp, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                return tmp, fd
        except FileNotFoundError:
            pass
        os.close(fd)


def remove_abandoned_temporaries(folder: str | os.PathLike[str], name: str | None = None, recursive: bool = False) -> list[Path]:
    """Remove the temporary files and folders that killed writers left in ``folder``; returns them.

    Only temporaries of this module's writes (``.<name>.<8 characters>.tmp``; with ``name``, only
    those of that final name), and only those no live writer holds: each is locked before it is
    removed, so a writer still filling one keeps it. With ``recursive``, every folder below too
    (links are not followed).
    """
    root = Path(folder)
    removed: list[Path] = []
    for current, dirs, files in os.walk(root) if recursive else [_listing(root)]:
        for entry in [*dirs, *files]:
            match = _TEMPORARY.match(entry)
            if match is None or (name is not None and match["name"] != name):
                continue
            if entry in dirs:
                dirs.remove(entry)  # nothing of ours inside it to look for
            path = Path(current) / entry
            if _remove_unless_held(path):
                removed.append(path)
    return sorted(removed)


def _listing(folder: Path) -> tuple[str, list[str], list[str]]:
    """One folder as ``os.walk`` yields it (empty when it does not exist)."""
    dirs, files = [], []
    try:
        with os.scandir(folder) as it:
            for e in it:
                (dirs if e.is_dir(follow_symlinks=False) else files).append(e.name)
    except (FileNotFoundError, NotADirectoryError):
        pass
    return str(folder), dirs, files


def _remove_unless_held(path: Path) -> bool:
    """Remove the temporary ``path`` when no live writer holds its lock (held by us while removing it)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        return False  # a link or a device named like ours: not ours
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | (os.O_DIRECTORY if stat.S_ISDIR(mode) else 0))
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live writer's
        if stat.S_ISDIR(mode):
            _remove_tree(path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        return not os.path.lexists(path)
    finally:
        os.close(fd)


def exchange_paths(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Swap two paths (files or folders) in one atomic step, Linux ``renameat2(RENAME_EXCHANGE)``.

    Returns False where the OS or filesystem cannot; the caller then swaps another way.
    """
    return _exchange(Path(a), Path(b))
