"""A write that ran out of space, said as one: the device, its mount point, what is free and the file."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path

from medbench_core.errors import DiskFull

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
