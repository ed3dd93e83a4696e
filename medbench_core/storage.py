"""Atomic artifact writes and sha256 manifests.

Every artifact is written to a temporary name in its final folder, fsynced and renamed, so a
reader sees either the old or the new file, never a truncated one. A ``MANIFEST.json`` beside
the files records their sha256 and size; readers verify it before use because some formats
(FAISS) load corrupted bytes silently.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from medbench_core.errors import IntegrityError

MANIFEST = "MANIFEST.json"
_CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; on success fsync it and rename it into place.

    On an exception the temporary file is removed and ``final`` is left as it was.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


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
        entries[name] = {"sha256": sha256_file(p), "size": p.stat().st_size}
    manifest = {"files": entries, **(extra or {})}
    write_json_atomic(folder / MANIFEST, manifest)
    return manifest


def read_manifest(folder: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(folder) / MANIFEST
    if not path.exists():
        raise IntegrityError(f"{path}: no manifest; the artifact is incomplete or was never written")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise IntegrityError(f"{path}: manifest is not valid JSON ({exc})") from exc


def verify_manifest(folder: str | os.PathLike[str], names: list[str] | None = None) -> dict[str, Any]:
    """Check every file listed in the manifest (or only ``names``) against its sha256 and size.

    Raises IntegrityError naming the first file that is missing, truncated or changed.
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
        digest = sha256_file(p)
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

    ``build(tmp_dir)`` writes every file (manifest included). The old folder, if any, is
    removed only after the new one is complete.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        build(tmp)
        _fsync_tree(tmp)
        if final.exists():
            old = final.with_name(f".{final.name}.old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old)
        else:
            os.replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return final


def _fsync_tree(folder: Path) -> None:
    for p in folder.rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    _fsync_dir(folder)
