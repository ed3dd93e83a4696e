"""Safe extraction of zip and tar archives.

An archive member named ``../x`` or ``/etc/x``, or a symbolic or hard link followed by a member
written through it, can write outside the destination (RELIABILITY.md). Python's own
``extractall`` resolves some of these and not others, depending on version and filter. Here
every member is checked before anything is written: only regular files and folders with
relative names that stay inside the destination are accepted; links, devices and FIFOs are
refused. Files are then written one by one into a fresh temporary folder beside the
destination (``O_EXCL | O_NOFOLLOW``), which is renamed into place only when complete, so a
refused or failed extraction leaves nothing behind.
"""

from __future__ import annotations

import os
import re
import stat
import tarfile
import zipfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from medbench_core.errors import DataError
from medbench_core.storage import replace_dir_atomic

_DRIVE = re.compile(r"^[A-Za-z]:")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class _Member:
    name: str  # normalised relative POSIX path
    is_dir: bool
    size: int
    source: object  # the ZipInfo or TarInfo to read it from


def _clean_name(archive: Path, raw: str) -> str:
    """The member's relative path, or DataError when it could leave the destination."""
    where = f"{archive}: member {raw!r}"
    if not raw or "\x00" in raw:
        raise DataError(f"{where}: empty name or NUL byte; refusing the archive")
    if "\\" in raw:
        raise DataError(f"{where}: backslash in the name (a Windows path?); refusing the archive")
    if raw.startswith("/") or _DRIVE.match(raw):
        raise DataError(f"{where}: absolute path; refusing the archive (nothing was extracted)")
    parts = [p for p in PurePosixPath(raw).parts if p not in ("", ".")]
    if ".." in parts:
        raise DataError(f"{where}: '..' would leave the destination; refusing the archive (nothing was extracted)")
    if not parts:
        return ""
    return "/".join(parts)


def _zip_members(archive: Path, zf: zipfile.ZipFile) -> list[_Member]:
    out = []
    for info in zf.infolist():
        name = _clean_name(archive, info.filename)
        mode = info.external_attr >> 16
        kind = stat.S_IFMT(mode)
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            what = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file or folder"
            raise DataError(f"{archive}: member {info.filename!r} is {what}; refusing the archive (nothing was extracted)")
        out.append(_Member(name, info.is_dir() or kind == stat.S_IFDIR, info.file_size, info))
    return out


def _tar_members(archive: Path, tf: tarfile.TarFile) -> list[_Member]:
    out = []
    for info in tf.getmembers():
        name = _clean_name(archive, info.name)
        if info.issym() or info.islnk():
            kind = "symbolic link" if info.issym() else "hard link"
            raise DataError(
                f"{archive}: member {info.name!r} is a {kind} to {info.linkname!r}; refusing the archive (nothing was extracted)"
            )
        if not (info.isfile() or info.isdir()):
            raise DataError(f"{archive}: member {info.name!r} is a device, FIFO or other special file; refusing the archive")
        out.append(_Member(name, info.isdir(), info.size, info))
    return out


def _check_layout(archive: Path, members: list[_Member], max_bytes: int | None) -> None:
    files: set[str] = set()
    total = 0
    for m in members:
        if not m.name:
            continue
        if not m.is_dir:
            if m.name in files:
                raise DataError(f"{archive}: member {m.name!r} appears twice; refusing an ambiguous archive")
            files.add(m.name)
            total += m.size
    for f in files:
        for parent in PurePosixPath(f).parents:
            if str(parent) in files:
                raise DataError(f"{archive}: {str(parent)!r} is both a file and the folder of {f!r}; refusing the archive")
    if max_bytes is not None and total > max_bytes:
        raise DataError(f"{archive}: members total {total} bytes, over the limit of {max_bytes}; refusing the archive")


def _write_member(root: Path, m: _Member, reader) -> None:
    target = root.joinpath(*m.name.split("/"))
    # Belt and braces: the name was checked, the resolved path must still be inside root.
    if not target.resolve().is_relative_to(root.resolve()):
        raise DataError(f"member {m.name!r} resolves outside {root}")
    if m.is_dir:
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "wb") as out, reader(m) as src:
        written = 0
        while chunk := src.read(_CHUNK):
            written += len(chunk)
            if written > m.size:
                raise DataError(f"member {m.name!r} holds more bytes than its header says ({m.size}); refusing the archive")
            out.write(chunk)


def safe_extract(
    archive: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    replace: bool = False,
    only: Collection[str] | None = None,
) -> list[str]:
    """Extract a zip or tar (plain, gz, bz2, xz) archive into ``dest``; return the file names written.

    Refuses, before writing anything, any member that is absolute, contains ``..``, is a
    symbolic or hard link, a device or FIFO, appears twice, or makes the total exceed
    ``max_bytes``; the DataError names the archive and the member. ``dest`` must not exist
    unless ``replace`` is true, in which case it is swapped for the new folder only once the
    extraction is complete. With ``only`` (member names, as :func:`member_names` gives them)
    every member is still checked, and only those files are written; a name the archive does
    not hold is refused.
    """
    archive = Path(archive)
    dest = Path(dest)
    if not archive.is_file():
        raise DataError(f"{archive}: archive not found")
    if dest.exists() and not replace:
        raise DataError(f"{dest}: already exists; extract into a new folder or pass replace=True")
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            members = _select(archive, _zip_members(archive, zf), only)
            _check_layout(archive, members, max_bytes)
            return _extract(dest, members, lambda m: zf.open(m.source))
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            members = _select(archive, _tar_members(archive, tf), only)
            _check_layout(archive, members, max_bytes)
            return _extract(dest, members, lambda m: _tar_reader(tf, m))
    raise DataError(f"{archive}: neither a zip nor a tar archive")


def member_names(archive: str | os.PathLike[str]) -> list[str]:
    """The (normalised, checked) names of the files in a zip or tar archive, without extracting anything."""
    archive = Path(archive)
    if not archive.is_file():
        raise DataError(f"{archive}: archive not found")
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            members = _zip_members(archive, zf)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            members = _tar_members(archive, tf)
    else:
        raise DataError(f"{archive}: neither a zip nor a tar archive")
    _check_layout(archive, members, None)
    return sorted(m.name for m in members if m.name and not m.is_dir)


def _select(archive: Path, members: list[_Member], only: Collection[str] | None) -> list[_Member]:
    if only is None:
        return members
    files = {m.name: m for m in members if m.name and not m.is_dir}
    missing = sorted(set(only) - set(files))
    if missing:
        raise DataError(f"{archive}: holds no member {missing[0]!r}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    _check_layout(archive, members, None)  # a bad member anywhere refuses the archive, chosen or not
    return [files[n] for n in sorted(set(only))]


def _tar_reader(tf: tarfile.TarFile, m: _Member):
    f = tf.extractfile(m.source)
    if f is None:  # cannot happen for a regular file; refuse rather than write nothing
        raise DataError(f"member {m.name!r} has no data")
    return f


def _extract(dest: Path, members: list[_Member], reader) -> list[str]:
    names: list[str] = []

    def build(tmp: Path) -> None:
        for m in members:
            if m.name:
                _write_member(tmp, m, reader)
                if not m.is_dir:
                    names.append(m.name)

    try:
        replace_dir_atomic(dest, build)
    except (OSError, zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:
        raise DataError(f"extracting into {dest} failed ({exc}); nothing was written") from exc
    return sorted(names)

