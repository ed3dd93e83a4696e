"""``MANIFEST.json``: the sha256 and size of an artifact's files, written last and verified before use.

Some formats (FAISS) load corrupted bytes silently, so readers verify the manifest first; a folder with a valid
manifest is a complete artifact (the manifest is written last).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from medbench_core.errors import IntegrityError
from medbench_core.storage.atomic import _recover_interrupted_swap, write_json_atomic
from medbench_core.storage.hashes import sha256_noting

MANIFEST = "MANIFEST.json"


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
