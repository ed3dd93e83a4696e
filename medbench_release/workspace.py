"""Put a benchmark version's data into ``data/`` without ever losing what ``data/`` held.

``dvc pull`` checks out in place, and when an object is corrupted in the cache and the remote
cannot give it intact, ``dvc checkout`` deletes it and leaves the whole ``data/`` folder missing
(RELIABILITY.md; issue 29: 89 intact files gone). :func:`pull_data` never lets DVC write into
``data/``:

1. ``dvc fetch`` brings the version's objects into the cache. The remote has ``verify = true``,
   so a corrupted remote object is not kept, but fetch can still exit 0: nothing is taken on
   its word.
2. Every file of the version (its directory object's listing) is looked for intact: in ``data/``
   as it is (same md5), else in the cache (re-hashed to its name while it is copied). An object
   the cache lacks whose bytes ``data/`` holds is put back into the cache from there. A file
   found intact nowhere is refused with its path and object, and ``data/`` is left as it was.
3. The version is built in a staging folder on the same filesystem (hard links to ``data/``'s own
   files, copies of cache objects) and checked complete: every file of the listing, nothing else.
4. One atomic exchange (``renameat2``) puts it in place of ``data/``. Of the old tree, the files
   that neither the new ``data/`` nor the cache holds (changes never added to DVC) are moved to
   ``.medbench/pull/kept/<time>/`` and named; only bytes that can be restored are removed.

A pull killed at any point leaves ``data/`` as it was or as the version; the next pull finishes
or undoes the interrupted one from its journal (:func:`_recover`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from medbench_core.storage import exchange_paths
from medbench_release.vcs import DATA, REMOTE, Log, PullError, VersioningError, data_version, dvc

AREA = Path(".medbench") / "pull"  # staging, journal and kept files, under the checkout (git ignores .medbench/)
_JOURNAL = "journal.json"
_CHUNK = 1 << 20


@dataclass
class PullResult:
    """What :func:`pull_data` did: how many files the version has and where each came from, what was kept aside."""

    version: str
    files: int
    from_data: int = 0  # hard-linked from data/ as it was
    from_cache: int = 0  # copied from the DVC cache
    changed: bool = True  # False when data/ already held exactly the version
    kept: Path | None = None
    kept_files: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)  # cache objects put back from data/

    def summary(self) -> str:
        if not self.changed:
            out = f"data/ already holds data {self.version} ({self.files} files, each re-hashed); nothing changed"
            return out + (f"; {len(self.repaired)} object(s) missing from the cache put back from data/" if self.repaired else "")
        out = f"data/ now holds data {self.version}: {self.files} files ({self.from_data} kept from data/, {self.from_cache} from the DVC cache), swapped in at once"
        if self.kept_files:
            out += f"; {len(self.kept_files)} file(s) of the old data/ that no version in the cache holds moved to {self.kept} (e.g. {self.kept_files[0]})"
        if self.repaired:
            out += f"; {len(self.repaired)} object(s) missing from the cache put back from data/"
        return out


def md5_file(path: Path) -> str:
    """Hex md5 of a file's bytes (DVC's object names)."""
    h = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


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


def tree_md5(folder: Path) -> dict[str, str]:
    """relpath -> md5 of every file under ``folder`` (symbolic links are not followed into)."""
    out: dict[str, str] = {}
    if not folder.is_dir():
        return out
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            p = Path(dirpath, name)
            if p.is_file():
                out[str(p.relative_to(folder))] = md5_file(p)
    return out


def _intact(cache: Path, md5: str, seen: dict[str, bool]) -> bool:
    if md5 not in seen:
        obj = cache_object(cache, md5)
        seen[md5] = obj.is_file() and md5_file(obj) == md5
    return seen[md5]


def _copy_checked(src: Path, dst: Path, md5: str) -> bool:
    """Copy ``src`` to ``dst`` hashing the bytes on the way; False (and nothing left at ``dst``) when they are not ``md5``."""
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


def _store_in_cache(cache: Path, md5: str, src: Path) -> None:
    """Put ``src`` (already hashed to ``md5``) into the cache under its name, atomically and read-only as DVC keeps it."""
    obj = cache_object(cache, md5)
    obj.parent.mkdir(parents=True, exist_ok=True)
    tmp = obj.with_name(f".{obj.name}.medbench.tmp")
    if _copy_checked(src, tmp, md5):
        os.chmod(tmp, 0o444)
        os.replace(tmp, obj)


def _area(root: Path, real: Path) -> Path:
    """The staging area: ``.medbench/pull`` in the checkout, or beside ``data/``'s real folder when that is on another filesystem."""
    area = root / AREA
    area.mkdir(parents=True, exist_ok=True)
    parent = real.parent
    if os.stat(area).st_dev != os.stat(parent).st_dev:  # hard links and the exchange need one filesystem
        area = parent / ".medbench-pull"
        area.mkdir(exist_ok=True)
    return area


@contextlib.contextmanager
def _locked(area: Path) -> Iterator[None]:
    """One pull at a time per checkout (DVC's own lock covers only its commands, not the swap)."""
    with open(area / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _write_journal(area: Path, state: dict) -> None:
    tmp = area / f".{_JOURNAL}.tmp"
    tmp.write_text(json.dumps(state))
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, area / _JOURNAL)


def _stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def _count(folder: Path) -> int:
    return sum(len(files) for _d, _s, files in os.walk(folder)) if folder.is_dir() else 0


def _as_it_was(data_dir: Path) -> str:
    if not data_dir.exists():
        return "data/ absent as before"
    return f"data/ as it was ({_count(data_dir)} files, none changed)"


def retire_tree(old: Path, cache: Path, new_listing: dict[str, str], kept_root: Path, old_md5: dict[str, str] | None = None) -> list[str]:
    """Remove the old data tree ``old`` after a swap, moving to ``kept_root`` every file whose bytes cannot be restored.

    A file can be restored when the new data/ holds the same bytes at the same path
    (``new_listing``) or the cache holds an intact object with its md5. Returns the kept relpaths.
    """
    old_md5 = old_md5 if old_md5 is not None else tree_md5(old)
    seen: dict[str, bool] = {}
    kept = []
    for rel, md5 in sorted(old_md5.items()):
        src = old / rel
        if not src.is_file():
            continue
        if new_listing.get(rel) == md5 or _intact(cache, md5, seen):
            continue
        dst = kept_root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        kept.append(rel)
    shutil.rmtree(old)
    return kept


def _recover(root: Path, area: Path, data_dir: Path, cache: Path, log: Log) -> None:
    """Finish or undo a pull that was killed: a partial staging tree goes, an old tree swapped out is retired."""
    path = area / _JOURNAL
    if not path.exists():
        return
    j = json.loads(path.read_text())
    stage = area / j["stage"]
    swapped = j["state"] == "swapped"
    if j["state"] == "swapping":
        if data_dir.exists():
            swapped = os.stat(data_dir).st_ino == j["stage_ino"]  # the exchange gave data/ the staging folder's inode
        elif (area / j["old"]).is_dir():  # two renames, killed between them: put the old tree back
            os.replace(area / j["old"], data_dir)
    if swapped:
        kept_root = area / "kept" / f"{_stamp()}-interrupted"
        kept = []
        for old in (stage, area / j["old"]):  # the old tree is at one of them (the second with two renames)
            if old.is_dir():
                kept += retire_tree(old, cache, {}, kept_root)
        log("[pull] finished an interrupted pull: its old data/ retired" + (f"; {len(kept)} file(s) kept in {kept_root}" if kept else ""))
    elif stage.is_dir():
        shutil.rmtree(stage)  # hard links to data/'s files and copies of cache objects: nothing of its own
        log("[pull] removed the staging folder of an interrupted pull; data/ was never touched")
    path.unlink()


def pull_data(root: Path, *, log: Log = print) -> PullResult:
    """Fetch the data of ``data.dvc`` and put it into ``data/`` by an atomic swap (see the module docstring).

    Raises PullError (exit 3) naming every file of the version that is intact nowhere (data/, the
    cache, the remote), with DVC's own lines; ``data/`` is then untouched.
    """
    version = data_version(root)
    data_dir = root / DATA
    real = data_dir.resolve() if data_dir.is_symlink() else data_dir
    cache = cache_dir(root)
    area = _area(root, real)
    with _locked(area):
        _recover(root, area, real, cache, log)
        fetch_error = ""
        try:
            dvc(root, "fetch", "-r", REMOTE, "data.dvc")
        except VersioningError as exc:  # a missing object: the files present may still make the version whole
            fetch_error = str(exc)
        listing = version_listing(cache, version)
        if listing is None:
            raise PullError(
                f"data {version}: its directory object is not in the DVC cache intact after `dvc fetch`" + (f"\n{fetch_error}" if fetch_error else ""),
                kept=_as_it_was(real),
            )
        here = tree_md5(real)
        by_md5: dict[str, str] = {}
        for rel, md5 in here.items():
            by_md5.setdefault(md5, rel)
        result = PullResult(version, len(listing))
        for md5 in sorted({m for m in listing.values() if m in by_md5}):
            if not cache_object(cache, md5).is_file():  # the cache lost it: data/ holds the one copy left
                _store_in_cache(cache, md5, real / by_md5[md5])
                result.repaired.append(md5)
        if here == listing:
            result.from_data, result.changed = len(listing), False
            return result

        token = _stamp()
        stage = area / f"stage-{token}"
        _write_journal(area, {"stage": stage.name, "state": "building", "old": f"old-{token}"})
        missing: list[str] = []
        try:
            stage.mkdir()
            for rel, md5 in sorted(listing.items()):
                dst = stage / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                if md5 in by_md5:
                    try:
                        os.link(real / by_md5[md5], dst)
                    except OSError:  # a filesystem without hard links
                        shutil.copyfile(real / by_md5[md5], dst)
                    result.from_data += 1
                elif cache_object(cache, md5).is_file() and _copy_checked(cache_object(cache, md5), dst, md5):
                    result.from_cache += 1
                else:
                    missing.append(rel)
            if missing:
                raise PullError(
                    f"data {version}: {len(missing)} file(s) of the version are intact nowhere here (not in data/, the DVC cache "
                    f"or the remote): "
                    + ", ".join(f"data/{r} (object {listing[r]})" for r in missing[:5])
                    + (f", ... ({len(missing) - 5} more)" if len(missing) > 5 else "")
                    + (f"\n{fetch_error}" if fetch_error else ""),
                    kept=_as_it_was(real),
                )
            built = tree_md5(stage) if result.from_data else None  # copies were hashed as they were written
            if built is not None and built != listing:
                raise PullError(f"data {version}: the staged tree does not match the version's listing", kept=_as_it_was(real))
            _write_journal(area, {"stage": stage.name, "state": "swapping", "old": f"old-{token}", "stage_ino": os.stat(stage).st_ino})
            if real.exists():
                if not exchange_paths(stage, real):  # no renameat2 here: two renames, undone from the journal if cut between
                    os.replace(real, area / f"old-{token}")
                    os.replace(stage, real)
                    os.replace(area / f"old-{token}", stage)
            else:
                os.replace(stage, real)
            _write_journal(area, {"stage": stage.name, "state": "swapped", "old": f"old-{token}"})
        except BaseException:
            if (area / _JOURNAL).exists() and json.loads((area / _JOURNAL).read_text())["state"] == "building":
                shutil.rmtree(stage, ignore_errors=True)
                (area / _JOURNAL).unlink()
            raise
        if stage.is_dir():
            result.kept = area / "kept" / token
            result.kept_files = retire_tree(stage, cache, listing, result.kept, {r: m for r, m in here.items()})
            if not result.kept_files:
                result.kept = None
        (area / _JOURNAL).unlink()
        with contextlib.suppress(OSError):
            os.rmdir(area / "kept")
        return result
