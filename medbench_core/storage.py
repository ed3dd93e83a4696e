"""Atomic artifact writes and sha256 manifests.

Every artifact is written to a temporary name in its final folder, fsynced and renamed, so a
reader sees either the old or the new file, never a truncated one. A ``MANIFEST.json`` beside
the files records their sha256 and size; readers verify it before use because some formats
(FAISS) load corrupted bytes silently.

A writer holds an exclusive ``flock`` on its temporary file or folder until it is renamed into
place or removed. The kernel drops that lock when the writer dies, however it dies (SIGKILL
included), so :func:`remove_abandoned_temporaries` can tell a temporary that a live writer is
filling from one a killed writer left, and remove only the latter.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from medbench_core.errors import DiskFull, IntegrityError

MANIFEST = "MANIFEST.json"


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# --- files already hashed -----------------------------------------------------------------------
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


def write_manifest(folder: str | os.PathLike[str], files: list[str], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Record sha256 and size of ``files`` (names relative to ``folder``) in its manifest.

    The manifest is written last, so a folder with a valid manifest is a complete artifact.
    """
    folder = Path(folder)
    entries = {}
    for name in sorted(files):
        p = folder / name
        entries[name] = {"sha256": sha256_noting(p), "size": p.stat().st_size}
    manifest = {"files": entries, **(extra or {})}
    write_json_atomic(folder / MANIFEST, manifest)
    return manifest


def update_manifest(folder: str | os.PathLike[str], **extra: Any) -> dict[str, Any]:
    """Set fields of ``folder``'s manifest other than ``files`` (the files are not re-read), atomically."""
    manifest = {**read_manifest(folder), **extra}
    write_json_atomic(Path(folder) / MANIFEST, manifest)
    return manifest


def read_manifest(folder: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(folder) / MANIFEST
    if not path.exists() and _recover_interrupted_swap(Path(folder)):
        path = Path(folder) / MANIFEST
    if not path.exists():
        raise IntegrityError(f"{path}: no manifest; the artifact is incomplete or was never written")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise IntegrityError(f"{path}: manifest is not valid JSON ({exc})") from exc


def verify_manifest(folder: str | os.PathLike[str], names: list[str] | None = None) -> dict[str, Any]:
    """Check every file listed in the manifest (or only ``names``) against its sha256 and size.

    A file whose stat is unchanged since its bytes were hashed is not read again (see
    :func:`sha256_noting`). Raises IntegrityError naming the first file that is missing, truncated or changed.
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    entries = manifest.get("files", {})
    for name in names if names is not None else sorted(entries):
        if name not in entries:
            raise IntegrityError(f"{folder / name}: not listed in {folder / MANIFEST}")
        p = folder / name
        want = entries[name]
        if not p.exists():
            raise IntegrityError(f"{p}: missing (listed in {MANIFEST}); run `dvc pull` or rematerialise")
        size = p.stat().st_size
        if size != want["size"]:
            raise IntegrityError(f"{p}: size {size} bytes, manifest says {want['size']}: truncated or replaced")
        digest = sha256_noting(p)
        if digest != want["sha256"]:
            raise IntegrityError(f"{p}: sha256 {digest[:12]} does not match manifest {want['sha256'][:12]}: corrupted")
    return manifest


def is_complete(folder: str | os.PathLike[str]) -> bool:
    """True when ``folder`` holds a manifest whose files all verify."""
    try:
        verify_manifest(folder)
    except IntegrityError:
        return False
    return True


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


# --- a full disk ----------------------------------------------------------------------------------

_FULL_TEXT = re.compile(r"no space left on device|database or disk is full|disk is full|os error 28|\d+ requested and \d+ written", re.IGNORECASE)
_NEARLY_FULL = 1 << 20  # bytes free below which an error that names no cause is taken for a full disk


def mount_of(path: str | os.PathLike[str]) -> tuple[str, Path]:
    """The device (as /proc/self/mounts names it, e.g. ``tmpfs`` or ``/dev/sdb1``) and mount point holding ``path``
    (its nearest existing folder)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    p = p.resolve()
    mount = p
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    device = ""
    with contextlib.suppress(OSError):
        with open("/proc/self/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 2 and fields[1].replace("\\040", " ") == str(mount):
                    device = fields[0]  # the last mount on a point is the one in use
    return device or "the device", mount


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes an unprivileged write may still use on the file system of ``path`` (its nearest existing folder)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def disk_full(exc: BaseException, *paths: str | os.PathLike[str]) -> DiskFull | None:
    """A :class:`DiskFull` for ``exc`` when it is a write that ran out of space, else None.

    Out of space: an ENOSPC or EDQUOT anywhere in its chain; a message that says so (SQLite's "database or disk
    is full", Rust's "os error 28"); or an error naming no cause (numpy: "7522 requested and 5088 written")
    while the file system of one of ``paths`` has less than 1 MiB free. The line names the device, its mount
    point, what is free, and the file (the error's own, else the first of ``paths``)."""
    if isinstance(exc, DiskFull):
        return exc
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and len(chain) < 20:
        chain.append(e)
        e = e.__cause__ or e.__context__
    said = any(isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) for e in chain) or any(_FULL_TEXT.search(str(e)) for e in chain)
    nearly = [p for p in paths if (free_bytes(p) or 0) < _NEARLY_FULL]
    if not said and not (nearly and isinstance(exc, (OSError, RuntimeError)) and getattr(exc, "errno", None) is None):
        return None
    named = next((os.fsdecode(e.filename) for e in chain if isinstance(e, OSError) and isinstance(e.filename, (str, bytes)) and e.filename), None)
    path = Path(named) if named else Path(nearly[0] if nearly else paths[0]) if paths else None
    if path is None:
        return None
    device, mount = mount_of(path)
    free = free_bytes(path)
    room = f", {free} bytes free" if free is not None else ""
    # What the writer itself said of it (SQLite, numpy, the OS), not a wrapper's first line.
    cause = next((m.group(0) for e in chain if (m := _FULL_TEXT.search(str(e)))), None) or next((str(e) for e in chain if str(e)), type(exc).__name__)
    return DiskFull(f"ENOSPC: no space left on {device} (mounted at {mount}{room}) while writing {path} ({cause.splitlines()[0][:200]})", str(path))


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
