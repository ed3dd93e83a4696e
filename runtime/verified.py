"""Which files were already hashed, kept with the project's state, so that a new process need not read them again.

medbench_core/storage.py notes, within one process, the sha256 of every file it hashes under the
stat the file had then (device, inode, size, mtime, ctime: a write changes mtime and ctime, a
replacement the inode), and verifies a file whose stat is unchanged without reading it. This
module keeps those notes across processes: one small JSON file per folder (an artifact, a curated
task, a task's source files) under ``<state>/verified/``, written when a stage has written or
verified the folder, read back by the warm path of ``medbench run`` (medbench_cli/uptodate.py),
which then reads only the files whose stat changed: at 1.2M documents, none of the gigabytes of
task and index files a complete run left unchanged. ``medbench run --recheck`` does not read them:
each step verifies its inputs from their bytes in a new process (and notes them again).

The notes are an optimisation: one that is missing, unreadable or about another folder is ignored
and the files are read as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from runtime import settings

NOTES = "verified"
_KEPT: dict[Path, dict] = {}  # what this process last read or wrote for each folder: unchanged notes are not written again


def notes_file(folder: Path) -> Path:
    """Where the notes about ``folder``'s files are kept."""
    name = hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:32]
    return settings.STATE / NOTES / f"{name}.json"


def remember(folder: Path, names: Iterable[str] | None = None) -> None:
    """Keep this process's notes about ``folder``'s files (those its manifest lists, or ``names``)."""
    from medbench_core.errors import MedbenchError
    from medbench_core.storage import noted, read_manifest, write_json_atomic

    try:
        listed = list(names) if names is not None else sorted(read_manifest(folder).get("files", {}))
        notes = {"folder": str(Path(folder).resolve()), "files": noted(folder, listed)}
        if _KEPT.get(Path(folder)) != notes:
            write_json_atomic(notes_file(folder), notes)
            _KEPT[Path(folder)] = notes
    except (OSError, MedbenchError):
        pass


def recall(folder: Path) -> None:
    """Take back into this process the notes kept about ``folder``'s files."""
    from medbench_core.storage import add_notes

    try:
        data = json.loads(notes_file(folder).read_text())
        if data.get("folder") == str(Path(folder).resolve()):
            add_notes(data.get("files", {}).values())
            _KEPT[Path(folder)] = data
    except (OSError, ValueError, TypeError, AttributeError):
        pass


def complete(folder: Path) -> bool:
    """:func:`medbench_core.storage.is_complete`, reading only the files whose stat changed since they
    were hashed (the notes kept about ``folder``), then keeping the notes of what it read."""
    from medbench_core.storage import is_complete

    recall(folder)
    if not is_complete(folder):
        return False
    remember(folder)
    return True
