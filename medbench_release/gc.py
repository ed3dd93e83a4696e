"""Garbage collection that never loses a tagged version, and checks of a DVC cache or local remote."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from medbench_release.remote import configure_remote, local_remote_path
from medbench_release.vcs import DATA, REMOTE, Log, VersioningError, data_version, dvc, git, repo_root


def _md5_file(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


_DVC_TEMP = re.compile(r"^\.[A-Za-z0-9_-]+\.tmp\Z")


def leftover_temp_files(store: Path) -> list[Path]:
    """DVC's temporary files (``.<token>.tmp``) in a cache: what a killed transfer leaves.

    They never carry an object's name, so DVC never reads them; `dvc gc` (and so :func:`gc`)
    removes them.
    """
    base = store / "files" / "md5"
    return sorted(p for p in base.glob("??/*") if _DVC_TEMP.match(p.name)) if base.is_dir() else []


def rehash_objects(store: Path) -> tuple[int, list[str]]:
    """Re-hash every object of a DVC cache or local remote (``files/md5/xx/rest[.dir]``).

    Returns ``(count, problems)``: an object whose bytes do not hash to its name, or a file that
    is neither an object nor a DVC temporary file, is a problem. Partial transfers never carry an
    object's name (DVC renames them in when complete).
    """
    base = store / "files" / "md5"
    n, bad = 0, []
    if not base.is_dir():
        return 0, []
    for p in sorted(base.glob("??/*")):
        if not p.is_file() or _DVC_TEMP.match(p.name):
            continue
        name = p.parent.name + p.name.removesuffix(".dir")
        if not re.fullmatch(r"[0-9a-f]{32}", name):
            bad.append(f"{p}: not an object name (a leftover temporary file?)")
            continue
        n += 1
        got = _md5_file(p)
        if got != name:
            bad.append(f"{p}: bytes hash to {got}")
    return n, bad


def tagged_versions(root: Path) -> dict[str, str]:
    """tag -> data hash, for every git tag whose commit has a data.dvc."""
    out = {}
    for tag in git(root, "tag", "--list").split():
        text = git(root, "show", f"{tag}:data.dvc", check=False)
        if text:
            out[tag] = data_version(root, rev=tag)
    return out


def missing_on_remote(root: Path, remote_dir: Path, versions: dict[str, str]) -> list[str]:
    """Objects a tagged version needs that a local remote folder lacks (one line per object)."""
    problems = []
    base = remote_dir / "files" / "md5"
    for tag, version in sorted(versions.items()):
        dir_obj = base / version[:2] / version[2:]
        if not dir_obj.exists():
            problems.append(f"{tag}: directory object {version} missing from {remote_dir}")
            continue
        for item in json.loads(dir_obj.read_text()):
            obj = base / item["md5"][:2] / item["md5"][2:]
            if not obj.exists():
                problems.append(f"{tag}: {DATA}/{item['relpath']} (object {item['md5']}) missing from {remote_dir}")
    return problems


def gc(root: str | Path, *, cloud: bool = False, remote: str | None = None, fetch_tags: bool = True, log: Log = print) -> dict[str, Any]:
    """Remove cache (and with ``cloud`` remote) objects that no tag, branch or the workspace uses.

    Tags are fetched from ``origin`` first, so that a version tagged in another clone is known
    (a clone that has not seen a tag would otherwise delete its objects from a shared remote).
    DVC's temporary files left by a killed transfer go too. For a local remote every tagged
    version is checked complete afterwards. (DVC's own ``--not-in-remote`` is not used: it
    drops objects the workspace uses as soon as the remote has them.)
    """
    root = repo_root(root)
    if fetch_tags and "origin" in git(root, "remote").split():
        git(root, "fetch", "-q", "--tags", "origin")
    url = configure_remote(root, remote)
    args = ["gc", "--workspace", "--all-tags", "--all-branches", "--force", "-r", REMOTE, *(["--cloud"] if cloud else [])]
    versions = tagged_versions(root)
    remote_dir = local_remote_path(root, url)
    before = missing_on_remote(root, remote_dir, versions) if remote_dir else []
    proc = dvc(root, *args)
    log(f"[gc] {proc.stdout.strip()}")
    summary: dict[str, Any] = {"tags": sorted(versions), "remote": url, "checked": bool(remote_dir)}
    if remote_dir:
        after = missing_on_remote(root, remote_dir, versions)
        lost = sorted(set(after) - set(before))
        if lost:
            raise VersioningError("garbage collection removed objects a tagged version needs:\n" + "\n".join(lost[:20]), exit_code=1)
        if after:
            log(f"[gc] warning: already incomplete before gc: {after[:5]}")
        log(f"[gc] every tagged version ({', '.join(sorted(versions)) or 'none'}) is complete on {remote_dir}")
    return summary
