"""The Hugging Face hub, opt-in: revisions resolved to commit shas, snapshots read from the local cache.

Offline is the default everywhere: with ``online=False`` nothing is downloaded and a repository
is read only from the local hub cache (``<cache>/<type>s--<org>--<name>/{refs,snapshots}``, the
layout ``huggingface_hub`` writes). ``online=True`` lets ``huggingface_hub`` download; the caller
decides (the orchestration reads ``MEDBENCH_ONLINE``; this library reads no environment variable,
although ``huggingface_hub`` itself picks its default cache folder from ``HF_HUB_CACHE``).

A revision is pinned when it is a 40-hex commit sha. A branch or tag name is resolved to the
sha it points at (``refs/<name>`` in the cache offline, the hub's answer online), and that sha
is what gets recorded, so a moving branch cannot silently change a result.
"""

from __future__ import annotations

import re
from pathlib import Path

from medbench_core.errors import DataError

REPO_TYPES = ("model", "dataset")
_SHA_RE = re.compile(r"^[0-9a-f]{40}\Z")
_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def is_commit_sha(revision: str) -> bool:
    """True for a full 40-hex commit sha (a pinned revision)."""
    return bool(_SHA_RE.match(revision or ""))


def is_repo_id(value: str) -> bool:
    """True when ``value`` reads as a hub repository id ``org/name`` (not a path, not ``pkg:``)."""
    return bool(_REPO_ID_RE.match(value or "")) and not Path(value).expanduser().exists()


def default_cache_dir() -> Path:
    """The hub cache folder huggingface_hub uses by default."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def repo_folder(repo_id: str, repo_type: str = "model", cache_dir: str | Path | None = None) -> Path:
    """``<cache>/<type>s--<org>--<name>``: where the cache keeps one repository."""
    if repo_type not in REPO_TYPES:
        raise ValueError(f"repo_type must be one of {REPO_TYPES}, not {repo_type!r}")
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    return root / f"{repo_type}s--{repo_id.replace('/', '--')}"


def resolve_revision(repo_id: str, revision: str, *, repo_type: str = "model", online: bool = False, cache_dir: str | Path | None = None) -> str:
    """The commit sha ``revision`` names in ``repo_id``.

    A sha is returned as given. Offline, a branch or tag is looked up in the cache's
    ``refs/<revision>``; online, the hub is asked. Raises DataError when it cannot be resolved.
    """
    what = f"{repo_type} {repo_id}"
    if not revision:
        raise DataError(f"{what}: no revision to resolve; pin one (a commit sha, or a branch such as 'main' to resolve now)")
    if is_commit_sha(revision):
        return revision
    if not online:
        ref = repo_folder(repo_id, repo_type, cache_dir) / "refs" / revision
        if ref.is_file():
            sha = ref.read_text().strip()
            if is_commit_sha(sha):
                return sha
            raise DataError(f"{what}: {ref} holds {sha!r}, not a commit sha; the hub cache is damaged")
        raise DataError(
            f"{what}: revision {revision!r} is not in the local hub cache ({ref.parent.parent}); "
            "run online once (online=True, MEDBENCH_ONLINE=1) to resolve it, or pin a commit sha"
        )
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    try:
        info = HfApi().repo_info(repo_id, revision=revision, repo_type=repo_type)
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise DataError(f"{what}: cannot resolve revision {revision!r} on the hub ({type(exc).__name__}: {exc})") from exc
    return str(info.sha)


def record_ref(repo_id: str, revision: str, sha: str, *, repo_type: str = "model", cache_dir: str | Path | None = None) -> Path:
    """Write ``refs/<revision>`` = ``sha`` into the local hub cache, as huggingface_hub does when it downloads a branch.

    After a revision was resolved on the hub, offline lookups (:func:`resolve_revision` with
    ``online=False``) then give the same commit.
    """
    if not is_commit_sha(sha):
        raise DataError(f"{repo_type} {repo_id}: {sha!r} is not a commit sha; refusing to record it as refs/{revision}")
    from medbench_core.storage import write_text_atomic

    ref = repo_folder(repo_id, repo_type, cache_dir) / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(ref, sha)


def snapshot(
    repo_id: str,
    revision: str,
    *,
    repo_type: str = "model",
    online: bool = False,
    cache_dir: str | Path | None = None,
    ignore_patterns: list[str] | None = None,
) -> tuple[Path, str]:
    """``(folder, sha)``: the repository's files at ``revision``, downloaded only when ``online``.

    Offline, the snapshot must already be in the cache (``snapshots/<sha>/``).
    """
    sha = resolve_revision(repo_id, revision, repo_type=repo_type, online=online, cache_dir=cache_dir)
    what = f"{repo_type} {repo_id}@{sha}"
    if not online:
        folder = repo_folder(repo_id, repo_type, cache_dir) / "snapshots" / sha
        if not folder.is_dir():
            raise DataError(f"{what}: not in the local hub cache ({folder} missing); run online once (online=True, MEDBENCH_ONLINE=1) or give a local folder")
        return folder, sha
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError

    try:
        path = snapshot_download(repo_id, repo_type=repo_type, revision=sha, cache_dir=cache_dir, ignore_patterns=ignore_patterns)
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise DataError(f"{what}: download failed ({type(exc).__name__}: {exc})") from exc
    return Path(str(path)), sha
