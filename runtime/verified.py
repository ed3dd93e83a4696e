"""Which files were already hashed, kept with the project's state, so that a new process need not read them again.

medbench_core/storage/hashes.py notes, within one process, the sha256 of every file it hashes under the
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
import os
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


# --- sealed: a complete run's folders by their files' stat alone ------------------------------------------
# The warm path of `medbench run` checks every artifact of every requested partition: at 50 models x 40 tasks,
# 8,000 folders, each a notes file and a manifest read (about 0.7 ms of CPU each). A complete run seals them
# instead: for each folder it verified, the stat of its MANIFEST.json and of every file that lists, each one
# noted when hashed (storage.sha256_noting: never a racily clean file). While every one of those stats is
# unchanged, neither the manifest nor a file can have changed, so the folder is complete as it was: checked
# with a stat per file and no read. Any difference, or a folder not sealed, is checked as before (complete()).


def seal(folders: Iterable[Path], previous: dict[str, list] | None = None) -> dict[str, list]:
    """``{folder: [[name, device, inode, size, mtime_ns, ctime_ns], ...]}`` (MANIFEST.json first) of every folder of
    ``folders`` that is complete, each file's stat the one under which its sha256 was noted; a folder of ``previous``
    (the last seal) whose files all keep their stat is taken as it was, without a read."""
    from medbench_core.errors import MedbenchError
    from medbench_core.storage import MANIFEST, noted, read_manifest, sha256_noting

    out: dict[str, list] = {}
    for folder in folders:
        key = str(folder)
        if previous and key in previous and _unchanged(folder, previous[key]):
            out[key] = previous[key]
            continue
        if not complete(folder):
            continue
        try:
            manifest_sha = sha256_noting(Path(folder) / MANIFEST)
            listed = read_manifest(folder).get("files", {})
        except (OSError, MedbenchError):
            continue
        want = {MANIFEST: manifest_sha, **{name: entry.get("sha256") for name, entry in listed.items()}}
        found = noted(folder, want)
        # Each one hashed under its present stat (none racily clean), to the sha256 the manifest lists, and the manifest
        # read is the one hashed: a file written since complete() above is left out, and so is its folder.
        if all(name in found and found[name][5] == sha for name, sha in want.items()) and _unchanged(folder, _entries(found, want)):
            out[key] = _entries(found, want)
    return out


def _entries(found: dict[str, list], names: Iterable[str]) -> list[list]:
    return [[name, *found[name][:5]] for name in names]


def _unchanged(folder: Path, entries: list) -> bool:
    """Whether every file of a seal's entries keeps its stat (an unreadable entry: no)."""
    try:
        for name, dev, ino, size, mtime, ctime in entries:
            st = os.stat(os.path.join(folder, name))
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != (dev, ino, size, mtime, ctime):
                return False
    except (OSError, TypeError, ValueError):
        return False
    return bool(entries)


class Sealed:
    """:func:`complete`, answered from a seal (:func:`seal`) for each folder whose files keep the stat sealed."""

    def __init__(self, sealed: dict[str, list] | None) -> None:
        self.sealed = sealed or {}

    def sealed_as_is(self, folder: Path) -> bool:
        """Whether ``folder`` is sealed and every file of its seal keeps the stat sealed."""
        entries = self.sealed.get(str(folder))
        return entries is not None and _unchanged(folder, entries)

    def complete(self, folder: Path) -> bool:
        if self.sealed_as_is(folder):
            return True
        return complete(folder)
