"""Real file systems for fault tests: a small tmpfs (full disk) or a read-only one, mounted for one test.

Mounting needs root (or CAP_SYS_ADMIN); where the test cannot mount, it is skipped with the reason printed."""

from __future__ import annotations

import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(path: Path, size: str = "1m", *, read_only: bool = False):
    """A tmpfs of ``size`` mounted at ``path`` (created if missing) for the ``with`` block; unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size},mode=0755" + (",ro" if read_only else "")
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True, timeout=30)
        failed = done.stderr.strip() or f"mount exited {done.returncode}" if done.returncode else ""
    except FileNotFoundError:
        failed = "no mount command"
    if failed:
        reason = f"cannot mount a tmpfs at {path} ({failed}): mounting needs root or CAP_SYS_ADMIN"
        print(reason)
        pytest.skip(reason)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(folder: Path, leave: int = 0) -> None:
    """Fill the file system holding ``folder`` until at most ``leave`` bytes are free (one file, ``filler``)."""
    import os

    chunk = b"\0" * 65536
    with open(folder / "filler", "wb") as f:
        while True:
            free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
            if free <= leave:
                break
            try:
                f.write(chunk[: max(1, min(len(chunk), free - leave))])
                f.flush()
            except OSError:
                break
