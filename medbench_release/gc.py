"""Garbage collection that never loses a recorded version, and checks of a DVC cache or local remote.

What ``medbench gc`` may delete (docs/operating.md): from the DVC cache, objects no tag, branch or
the workspace of this checkout uses, and DVC's temporary files; with ``--cloud``, from the remote,
objects that no version needs (one this checkout names, or one the remote's own index records:
every `release` and `data push` writes ``medbench-versions/<data version>.json`` there) and that were
written more than ``--keep-hours`` ago. Nothing else: not data/, not the index itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import time
from pathlib import Path
from typing import Any

from medbench_release.dvc_cache import md5_file
from medbench_release.remote import configure_remote, open_remote, remote_versions
from medbench_release.vcs import DATA, Log, VersioningError, data_version, dvc, git, repo_root

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
        got = md5_file(p)
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


KEEP_HOURS = 24.0


def _modified(info: dict[str, Any]) -> float | None:
    """When a remote file was last written (seconds since the epoch), from whatever its filesystem reports."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified", "time_modified"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, dt.datetime):
            return (value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)).timestamp()
        try:
            return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
    return None


def _ref_versions(root: Path) -> dict[str, str]:
    """Version -> what names it here: every tag, every local branch, the workspace's data.dvc."""
    out: dict[str, str] = {}
    for tag, version in sorted(tagged_versions(root).items()):
        out.setdefault(version, f"tag {tag}")
    for ref in git(root, "for-each-ref", "--format=%(refname:short)", "refs/heads", check=False).split():
        try:
            out.setdefault(data_version(root, rev=ref), f"branch {ref}")
        except VersioningError:
            continue
    if (root / "data.dvc").exists():
        out.setdefault(data_version(root), "the workspace's data.dvc")
    return out


def _listing(remote: Any, cache: Path, version: str) -> list[str] | None:
    """The object ids of ``version``'s files, from its directory object on the remote or in the local cache; None when neither has it."""
    path = remote.odb.oid_to_path(version)
    try:
        text = remote.fs.cat_file(path)
    except (OSError, FileNotFoundError):
        local = cache / "files" / "md5" / version[:2] / version[2:]
        if not local.is_file():
            return None
        text = local.read_bytes()
    return [e["md5"] for e in json.loads(text)]


def gc_remote(root: Path, *, keep_hours: float = KEEP_HOURS, log: Log = print) -> dict[str, Any]:
    """Remove from the remote the objects that no version needs and that were not written in the last ``keep_hours``.

    A version is needed when this checkout names it (a tag, a branch, the workspace) or the
    remote's own index records it (:func:`record_version_on_remote`: every release and push). When
    the files of a needed version cannot be known (its directory object is neither on the remote nor
    in the cache), nothing is removed. Returns what was kept and why, and what was removed.
    """
    from medbench_release.dvc_cache import cache_dir

    cache = cache_dir(root)
    named = _ref_versions(root)
    indexed = remote_versions(root)
    needed: dict[str, str] = dict(named)
    for version, entry in indexed.items():
        if version not in needed:
            label = entry.get("label") or "pushed"
            needed[version] = f"{label} (the remote's index: pushed {entry.get('pushed_at', '?')} from {entry.get('pushed_from', '?')})"
    repo, remote = open_remote(root)
    with repo:
        keep: set[str] = set()
        for version in sorted(needed):
            files = _listing(remote, cache, version)
            if files is None:
                raise VersioningError(
                    f"gc --cloud: the files of data {version} ({needed[version]}) cannot be known (its directory object is neither on the "
                    "remote nor in the DVC cache); nothing was removed from the remote. `medbench data push` from a checkout that has it, then gc"
                )
            keep.add(version)
            keep.update(files)
        now = time.time()
        base = remote.odb.path
        paths = list(remote.fs.find(base)) if remote.fs.exists(base) else []
        infos = remote.fs.info(paths) if paths else []
        present, remove, recent, unknown_age = set(), [], 0, 0
        for path, info in zip(paths, infos):
            try:
                oid = remote.odb.path_to_oid(path)
            except ValueError:
                oid = None  # a transfer's temporary file
            if oid is not None and re.fullmatch(r"[0-9a-f]{32}(\.dir)?", oid):
                present.add(oid)
                if oid in keep:
                    continue
            written = _modified(info)
            if written is None:
                unknown_age += 1
            elif now - written < keep_hours * 3600:
                recent += 1
            else:
                remove.append(path)
        if remove:
            remote.fs.rm(remove)
    gone = {remote.odb.path_to_oid(p) for p in remove if _is_object(remote, p)}
    incomplete = sorted(v for v in needed if not ({v} | set(_listing_or_empty(remote, cache, v))) <= (present - gone))
    by_reason = [f"{v[:12]} ({why})" for v, why in sorted(needed.items(), key=lambda kv: kv[1])]
    log(f"[gc] remote: kept {len(keep & present)} object(s) that {len(needed)} version(s) need: " + "; ".join(by_reason))
    if recent or unknown_age:
        log(
            f"[gc] remote: kept {recent} object(s) no version here needs, written in the last {keep_hours:g} h (a push may be under way)"
            + (f", and {unknown_age} whose age the remote does not say" if unknown_age else "")
        )
    log(f"[gc] remote: removed {len(remove)} object(s) no version needs, each older than {keep_hours:g} h")
    if incomplete:
        log(f"[gc] warning: already incomplete on the remote before gc (nothing of theirs was removed): {', '.join(needed[v] for v in incomplete[:5])}")
    return {"needed": needed, "removed": len(remove), "recent": recent, "unknown_age": unknown_age, "incomplete": incomplete}


def _is_object(remote: Any, path: str) -> bool:
    try:
        remote.odb.path_to_oid(path)
    except ValueError:
        return False
    return True


def _listing_or_empty(remote: Any, cache: Path, version: str) -> list[str]:
    with contextlib.suppress(Exception):
        return _listing(remote, cache, version) or []
    return []


def gc(
    root: str | Path, *, cloud: bool = False, remote: str | None = None, fetch_tags: bool = True, keep_hours: float = KEEP_HOURS, log: Log = print
) -> dict[str, Any]:
    """Remove cache objects that no tag, branch or the workspace uses; with ``cloud``, remote objects no version needs.

    Tags are fetched from ``origin`` first. DVC's temporary files left by a killed transfer go
    from the cache too. The remote is collected by :func:`gc_remote` (never DVC's ``gc --cloud``,
    which keeps only what this clone's refs name: a version another clone released and pushed but
    whose tag has not reached this one would lose its objects).
    """
    root = repo_root(root)
    if fetch_tags and "origin" in git(root, "remote").split():
        git(root, "fetch", "-q", "--tags", "origin")
    url = configure_remote(root, remote)
    proc = dvc(root, "gc", "--workspace", "--all-tags", "--all-branches", "--force")
    log(f"[gc] cache: {proc.stdout.strip() or 'nothing to remove'}")
    summary: dict[str, Any] = {"tags": sorted(tagged_versions(root)), "remote": url, "checked": False}
    if cloud:
        summary.update(gc_remote(root, keep_hours=keep_hours, log=log), checked=True)
    return summary
