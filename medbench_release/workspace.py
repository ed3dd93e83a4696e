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
4. One atomic exchange (``renameat2``) puts it in place of ``data/``. Of the old tree, a file is
   removed only when a recorded version names it, at that path with those bytes, and those bytes
   can be restored: the new version itself, or a version whose ``data.dvc`` git holds (a tag, a
   branch, HEAD) with the object intact in the cache. Everything else (a user's own file, whatever
   its bytes: a copy of a tracked file in ``data/mine/`` too; a link; an empty folder) is moved to
   ``.medbench/pull/kept/<time>/`` and named.

``data/`` on a volume of its own (a mount point) cannot be renamed or exchanged (EBUSY). There the
staging folder is made inside it (``data/.medbench-pull/``, which DVC ignores) and the *contents*
are swapped: every entry of the old top level moved aside, then every entry of the version moved
in, each step undone or finished from the journal if the pull is killed between them.

A pull killed at any point leaves ``data/`` as it was or as the version; the next pull finishes
or undoes the interrupted one from its journal (:func:`_recover`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from medbench_core.storage import exchange_paths
from medbench_release.dvc_cache import cache_dir, cache_object, copy_checked, md5_file, restorable, store_in_cache, version_listing
from medbench_release.vcs import DATA, REMOTE, Log, PullError, VersioningError, data_version, dvc

AREA = Path(".medbench") / "pull"  # staging, journal and kept files, under the checkout (git ignores .medbench/)
INSIDE_AREA = ".medbench-pull"  # the same, inside data/ when data/ is a mount point (.dvcignore leaves it out of versions)
_JOURNAL = "journal.json"


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
        out = (
            f"data/ now holds data {self.version}: {self.files} files ({self.from_data} kept from data/, {self.from_cache} from the DVC cache), "
            "swapped in at once"
        )
        if self.kept_files:
            out += (
                f"; {len(self.kept_files)} file(s) of the old data/ that no recorded version names moved to {self.kept}: "
                + ", ".join(self.kept_files[:5])
                + (f", ... ({len(self.kept_files) - 5} more)" if len(self.kept_files) > 5 else "")
            )
        if self.repaired:
            out += f"; {len(self.repaired)} object(s) missing from the cache put back from data/"
        return out


def tree_md5(folder: Path) -> dict[str, str]:
    """relpath -> md5 of every file under ``folder`` (symbolic links are not followed into; a pull's own area inside is left out)."""
    out: dict[str, str] = {}
    if not folder.is_dir():
        return out
    for dirpath, dirs, files in os.walk(folder):
        if Path(dirpath) == folder:
            dirs[:] = [d for d in dirs if d != INSIDE_AREA]
        for name in files:
            p = Path(dirpath, name)
            if p.is_file():
                out[str(p.relative_to(folder))] = md5_file(p)
    return out


_MOUNT_ESCAPE = re.compile(r"\\([0-7]{3})")


def is_mount_point(path: Path) -> bool:
    """Whether ``path`` is where a filesystem is mounted (a volume, a tmpfs, a bind mount): it cannot be renamed or exchanged."""
    if os.path.ismount(path):
        return True
    try:
        table = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return False
    want = str(path.resolve())
    for line in table.splitlines():
        fields = line.split()
        if len(fields) > 4 and _MOUNT_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[4]) == want:
            return True  # a bind mount of a folder of the same filesystem (ismount sees the same device)
    return False


def _area(root: Path, real: Path) -> Path:
    """The staging area: ``.medbench/pull`` in the checkout, or beside ``data/``'s real folder when that is on another
    filesystem, or inside it when it is a mount point (the only place on its filesystem)."""
    if real.is_dir() and is_mount_point(real):
        area = real / INSIDE_AREA
        area.mkdir(exist_ok=True)
        return area
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
    if not folder.is_dir():
        return 0
    return sum(len(files) for d, _s, files in os.walk(folder) if Path(d) != folder / INSIDE_AREA and folder / INSIDE_AREA not in Path(d).parents)


def _entries(folder: Path) -> list[str]:
    """The top-level entries of ``folder`` that a pull swaps (not its own area inside)."""
    return sorted(n for n in os.listdir(folder) if n != INSIDE_AREA)


def _as_it_was(data_dir: Path) -> str:
    if not data_dir.exists():
        return "data/ absent as before"
    return f"data/ as it was ({_count(data_dir)} files, none changed)"


def retire_tree(old: Path, new_listing: dict[str, str], kept_root: Path, can_restore: set[tuple[str, str]]) -> list[str]:
    """Remove the old data tree ``old`` after a swap, moving to ``kept_root`` everything no recorded version names.

    A file goes only when the new data/ holds the same bytes at the same path (``new_listing``) or
    ``can_restore`` (:func:`restorable`) has that path with those bytes. Every other file, whatever
    its bytes, every link and every empty folder is moved to ``kept_root`` under its own path.
    Returns the kept relpaths.
    """
    kept = []

    def keep(src: Path) -> None:
        rel = str(src.relative_to(old))
        folder = src.is_dir() and not src.is_symlink()
        dst = kept_root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        kept.append(rel + ("/" if folder else ""))

    for dirpath, dirs, files in os.walk(old):
        here = Path(dirpath)
        for name in sorted(dirs):
            if (here / name).is_symlink():
                keep(here / name)  # a link to a folder: the link itself (nothing behind it is touched)
        dirs[:] = sorted(d for d in dirs if (here / d).is_dir() and not (here / d).is_symlink())
        if not dirs and not files and here != old:
            keep(here)  # a folder made empty: no version has one (DVC lists files only)
            continue
        for name in sorted(files):
            src = here / name
            rel = str(src.relative_to(old))
            if not src.is_symlink() and src.is_file():
                md5 = md5_file(src)
                if new_listing.get(rel) == md5 or (rel, md5) in can_restore:
                    continue
            keep(src)
    shutil.rmtree(old)
    return kept


def _swap_contents(stage: Path, real: Path, old: Path) -> None:
    """data/ is a mount point: its entries go to ``old``, then the stage's come in (the journal says which were planned)."""
    old.mkdir(exist_ok=True)
    for name in _entries(real):
        os.replace(real / name, old / name)
    for name in _entries(stage):
        os.replace(stage / name, real / name)


def _finish_contents_swap(area: Path, j: dict, real: Path) -> bool:
    """After a content swap was cut: finish it (True) once any entry of the version is in data/, else put the old entries back."""
    stage, old = area / j["stage"], area / j["old"]
    new_names = j.get("new", [])
    left = _entries(stage) if stage.is_dir() else []
    if len(left) < len(new_names):  # the old entries were all moved aside before the first new one came in
        for name in left:
            os.replace(stage / name, real / name)
        return True
    if old.is_dir():
        for name in _entries(old):
            os.replace(old / name, real / name)
        old.rmdir()
    return False


def _recover(root: Path, area: Path, data_dir: Path, cache: Path, log: Log) -> None:
    """Finish or undo a pull that was killed: a partial staging tree goes, an old tree swapped out is retired."""
    path = area / _JOURNAL
    if not path.exists():
        return
    j = json.loads(path.read_text())
    stage = area / j["stage"]
    swapped = j["state"] == "swapped"
    if j["state"] == "swapping" and j.get("mode") == "contents":
        swapped = _finish_contents_swap(area, j, data_dir)
    elif j["state"] == "swapping":
        if data_dir.exists():
            swapped = os.stat(data_dir).st_ino == j["stage_ino"]  # the exchange gave data/ the staging folder's inode
        elif (area / j["old"]).is_dir():  # two renames, killed between them: put the old tree back
            os.replace(area / j["old"], data_dir)
    if swapped:
        kept_root = area / "kept" / f"{_stamp()}-interrupted"
        listing = version_listing(cache, j["version"]) if j.get("version") else None
        can_restore = restorable(root, cache)
        kept = []
        for old in (stage, area / j["old"]):  # the old tree is at one of them (the second with two renames or a content swap)
            if old.is_dir():
                kept += retire_tree(old, listing or {}, kept_root, can_restore)
        log("[pull] finished an interrupted pull: its old data/ retired" + (f"; {len(kept)} file(s) kept in {kept_root}" if kept else ""))
    elif stage.is_dir():
        shutil.rmtree(stage)  # hard links to data/'s files and copies of cache objects: nothing of its own
        log("[pull] removed the staging folder of an interrupted pull; data/ was never touched")
    path.unlink()


def _swap_whole(stage: Path, real: Path, old: Path) -> None:
    """Put ``stage`` in place of ``real`` (the old tree ends at ``stage``): one exchange, else two renames."""
    try:
        if not real.exists():
            os.replace(stage, real)
        elif not exchange_paths(stage, real):  # no renameat2 here: two renames, undone from the journal if cut between
            os.replace(real, old)
            os.replace(stage, real)
            os.replace(old, stage)
    except OSError as exc:
        if exc.errno not in (errno.EBUSY, errno.EXDEV, errno.EPERM, errno.EACCES):
            raise
        if old.exists() and not real.exists():
            os.replace(old, real)
        raise _Unswappable(f"{real} cannot be renamed ({exc.strerror}, errno {exc.errno}): {_UNSWAPPABLE}") from exc


_UNSWAPPABLE = (
    "a pull puts the version in place of data/ in one rename; where data/ cannot be renamed (a mount point medbench did not "
    "recognise, a folder it may not rename) make data/ a link to a folder on that volume instead"
)


class _Unswappable(OSError):
    pass


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
                store_in_cache(cache, md5, real / by_md5[md5])
                result.repaired.append(md5)
        if here == listing:
            result.from_data, result.changed = len(listing), False
            return result

        token = _stamp()
        stage = area / f"stage-{token}"
        contents = area.parent == real  # data/ is a mount point: swap what it holds, not the folder
        journal = {"stage": stage.name, "old": f"old-{token}", "version": version, **({"mode": "contents"} if contents else {})}
        _write_journal(area, {**journal, "state": "building"})
        missing: list[str] = []
        try:
            stage.mkdir()
            for rel, md5 in sorted(listing.items()):
                dst = stage / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                if here.get(rel) == md5:
                    try:
                        os.link(real / rel, dst)
                    except OSError:  # a filesystem without hard links
                        shutil.copyfile(real / rel, dst)
                    result.from_data += 1
                elif md5 in by_md5 and copy_checked(real / by_md5[md5], dst, md5):  # a copy: that file may be a user's, kept apart
                    result.from_data += 1
                elif cache_object(cache, md5).is_file() and copy_checked(cache_object(cache, md5), dst, md5):
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
            if contents:
                _write_journal(area, {**journal, "state": "swapping", "new": _entries(stage)})
                _swap_contents(stage, real, area / f"old-{token}")
            else:
                _write_journal(area, {**journal, "state": "swapping", "stage_ino": os.stat(stage).st_ino})
                _swap_whole(stage, real, area / f"old-{token}")
            _write_journal(area, {**journal, "state": "swapped"})
        except _Unswappable as exc:  # nothing was moved: data/ is as it was; the staging copy goes too
            shutil.rmtree(stage, ignore_errors=True)
            (area / _JOURNAL).unlink(missing_ok=True)
            raise VersioningError(f"data {version} not pulled: {exc}; {_as_it_was(real)}") from exc
        except BaseException:
            if (area / _JOURNAL).exists() and json.loads((area / _JOURNAL).read_text())["state"] == "building":
                shutil.rmtree(stage, ignore_errors=True)
                (area / _JOURNAL).unlink()
            raise
        can_restore = restorable(root, cache)
        result.kept = area / "kept" / token
        for old in (stage, area / f"old-{token}"):  # the old tree: the stage after an exchange, old-<token> after a content swap
            if old.is_dir() and (old != stage or not contents):
                result.kept_files += retire_tree(old, listing, result.kept, can_restore)
        if contents and stage.is_dir():
            stage.rmdir()  # every entry moved into data/
        if not result.kept_files:
            result.kept = None
        (area / _JOURNAL).unlink()
        with contextlib.suppress(OSError):
            os.rmdir(area / "kept")
        return result
