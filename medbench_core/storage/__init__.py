"""Artifacts on disk: atomic writes, sha256 manifests, the files already hashed, a full disk said as one.

Every artifact is written to a temporary name in its final folder, fsynced and renamed, so a reader sees either
the old or the new file, never a truncated one (:mod:`.atomic`). A ``MANIFEST.json`` beside the files records
their sha256 and size; readers verify it before use because some formats (FAISS) load corrupted bytes silently
(:mod:`.manifest`). A file whose stat is unchanged since it was hashed is not read again (:mod:`.hashes`). A write
that runs out of space is said as one, naming the device and the file (:mod:`.full_disk`).

Callers import from here (``from medbench_core import storage``); the modules hold one idea each.
"""

from medbench_core.storage.atomic import (
    atomic_path,
    exchange_paths,
    move_into,
    remove_abandoned_temporaries,
    replace_dir_atomic,
    staging_folder,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
    write_with,
)
from medbench_core.storage.full_disk import disk_full, free_bytes, mount_of
from medbench_core.storage.hashes import FileStat, add_notes, file_stat, known_sha256, noted, sha256_file, sha256_noting
from medbench_core.storage.manifest import MANIFEST, is_complete, read_manifest, update_manifest, verify_manifest, write_manifest

__all__ = [
    "MANIFEST",
    "FileStat",
    "add_notes",
    "atomic_path",
    "disk_full",
    "exchange_paths",
    "file_stat",
    "free_bytes",
    "is_complete",
    "known_sha256",
    "mount_of",
    "move_into",
    "noted",
    "read_manifest",
    "remove_abandoned_temporaries",
    "replace_dir_atomic",
    "sha256_file",
    "sha256_noting",
    "staging_folder",
    "update_manifest",
    "verify_manifest",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_manifest",
    "write_text_atomic",
    "write_with",
]
