"""What the tests of hashing notes share (tests/core/test_storage_notes.py, tests/runtime/test_verified_seal.py): the files
whose bytes are read to hash them, counted, and an artifact folder written past the racy margin of its timestamps."""

from __future__ import annotations

import os
import time
from pathlib import Path

from medbench_core import storage

RACY = 0.06  # past the racy margin (50 ms) of a file's timestamp: a file read in the tick it was written is never trusted


def count_hash_reads(monkeypatch) -> list[str]:
    """Forget every note of this process, and count (by base name) the files whose bytes are read to hash them."""
    monkeypatch.setattr(storage.hashes, "_NOTED", {})
    reads: list[str] = []
    real = storage.hashes.sha256_file

    def sha256_file(path):
        reads.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(storage.hashes, "sha256_file", sha256_file)
    return reads


def write_artifact(folder: Path, files: dict[str, bytes], *, settle_manifest: bool = False) -> Path:
    """``files`` in ``folder`` with their manifest (its path returned); ``settle_manifest`` waits past the manifest's racy margin too."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    time.sleep(RACY)
    manifest = storage.write_manifest(folder, list(files))
    if settle_manifest:
        time.sleep(RACY)
    return manifest
