"""The DVC cache and the data versions git records: objects by md5, a version's listing, what a pull may remove.

What :mod:`medbench_release.workspace` (``medbench data pull``) and :mod:`medbench_release.gc` ask of the cache: an
object's path, whether it is intact (re-hashed to its name), a version's listing from its directory object, the
versions git records (``data.dvc`` at every tag, branch and HEAD) and which of their files the cache can give back.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from medbench_release.vcs import VersioningError, data_version, dvc, git

_CHUNK = 1 << 20


def md5_file(path: Path) -> str:
    """Hex md5 of a file's bytes (DVC's object names)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()


def cache_dir(root: Path) -> Path:
    """The DVC cache of the checkout (``dvc cache dir``: ``.dvc/cache`` unless configured elsewhere)."""
    return Path(dvc(root, "cache", "dir").stdout.strip())


def cache_object(cache: Path, md5: str) -> Path:
    return cache / "files" / "md5" / md5[:2] / md5[2:]


def version_listing(cache: Path, version: str) -> dict[str, str] | None:
    """relpath -> md5 of every file of ``version``, from its directory object; None when the cache lacks it intact."""
    obj = cache_object(cache, version)
    if not obj.is_file() or md5_file(obj) != version.removesuffix(".dir"):
        return None
    return {e["relpath"]: e["md5"] for e in json.loads(obj.read_text())}


def recorded_versions(root: Path) -> set[str]:
    """The data versions git records: ``data.dvc`` at every tag, every local branch and HEAD."""
    refs = git(root, "for-each-ref", "--format=%(refname)", "refs/tags", "refs/heads", check=False).split() + ["HEAD"]
    out = set()
    for ref in refs:
        try:
            out.add(data_version(root, rev=ref))
        except VersioningError:
            continue  # a commit from before DVC versioning, or without a release
    return out


def restorable(root: Path, cache: Path, versions: set[str] | None = None) -> set[tuple[str, str]]:
    """``(relpath, md5)`` of every file a recorded version names (:func:`recorded_versions`) whose object the cache holds intact:
    what a pull may remove from data/, because checking that version out gives it back."""
    seen: dict[str, bool] = {}
    out: set[tuple[str, str]] = set()
    for version in sorted(versions if versions is not None else recorded_versions(root)):
        listing = version_listing(cache, version)
        for rel, md5 in (listing or {}).items():
            if _intact(cache, md5, seen):
                out.add((rel, md5))
    return out


def _intact(cache: Path, md5: str, seen: dict[str, bool]) -> bool:
    if md5 not in seen:
        obj = cache_object(cache, md5)
        seen[md5] = obj.is_file() and md5_file(obj) == md5
    return seen[md5]


def copy_checked(src: Path, dst: Path, md5: str) -> bool:
    """Copy ``src`` to ``dst`` hashing the bytes on the way; False (and nothing left at ``dst``) when they are not ``md5``.

    Not :func:`hashlib.file_digest`: that reads the file for the hash alone, and this reads it once for both."""
    h = hashlib.md5()
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while chunk := fin.read(_CHUNK):
            h.update(chunk)
            fout.write(chunk)
        fout.flush()
        os.fsync(fout.fileno())
    if h.hexdigest() != md5:
        dst.unlink()
        return False
    return True


def store_in_cache(cache: Path, md5: str, src: Path) -> None:
    """Put ``src`` (already hashed to ``md5``) into the cache under its name, atomically and read-only as DVC keeps it."""
    obj = cache_object(cache, md5)
    obj.parent.mkdir(parents=True, exist_ok=True)
    tmp = obj.with_name(f".{obj.name}.medbench.tmp")
    if copy_checked(src, tmp, md5):
        os.chmod(tmp, 0o444)
        os.replace(tmp, obj)
