"""Safe extraction of zip and tar archives.

An archive member named ``../x`` or ``/etc/x``, or a symbolic or hard link followed by a member
written through it, can write outside the destination (RELIABILITY.md). Python's own
``extractall`` resolves some of these and not others, depending on version and filter. Here
every member is checked before anything is written: only regular files and folders with
relative names that stay inside the destination are accepted; links, devices and FIFOs are
refused. Files are then written one by one into a fresh temporary folder beside the
destination (``O_EXCL | O_NOFOLLOW``), which is renamed into place only when complete, so a
refused or failed extraction leaves nothing behind.

Decompression bombs: what one extraction writes is capped (:data:`MAX_BYTES`, and the free space
of the destination's disk), and so is the compression ratio (:data:`MAX_RATIO`: a zip member's
size over its compressed size, and the bytes written, or a compressed tar's whole stream, over
the archive's size); both are decided from the sizes the archive declares, before anything is
written, and every member is then held to its declared size as it is written. A member or archive
under :data:`RATIO_FLOOR` is not held to the ratio (a small file of zeros compresses 1000:1 and
harms nothing). Listing a compressed tar reads its stream, which stops at the ratio cap too.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from medbench_core.errors import DataError
from medbench_core.storage import replace_dir_atomic

_DRIVE = re.compile(r"^[A-Za-z]:")
_CHUNK = 1 << 20

MAX_BYTES = 16 << 30  # 16 GiB written by one extraction, at most
MAX_RATIO = 100  # uncompressed / compressed size; deflate's own limit is about 1032 (zip bombs sit there)
RATIO_FLOOR = 1 << 20  # members and archives smaller than 1 MiB are not held to the ratio


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
    try:
        infos = tf.getmembers()
    except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:  # a truncated or damaged stream
        raise DataError(f"{archive}: not a readable tar archive ({exc}); refusing it (nothing was extracted)") from exc
    for info in infos:
        name = _clean_name(archive, info.name)
        if info.issym() or info.islnk():
            kind = "symbolic link" if info.issym() else "hard link"
            raise DataError(f"{archive}: member {info.name!r} is a {kind} to {info.linkname!r}; refusing the archive (nothing was extracted)")
        if not (info.isfile() or info.isdir()):
            raise DataError(f"{archive}: member {info.name!r} is a device, FIFO or other special file; refusing the archive")
        out.append(_Member(name, info.isdir(), info.size, info))
    return out


def _check_layout(archive: Path, members: list[_Member], max_bytes: int | None, max_ratio: float | None = None) -> None:
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
            packed = getattr(m.source, "compress_size", None)  # a zip member's; a tar's stream is judged whole
            if max_ratio is not None and packed is not None and m.size > RATIO_FLOOR and m.size > max_ratio * max(packed, 1):
                raise DataError(
                    f"{archive}: member {m.name!r} would expand from {packed} to {m.size} bytes (ratio {m.size / max(packed, 1):.0f}, over the "
                    f"limit of {max_ratio:g}); refusing the archive as a decompression bomb (nothing was extracted)"
                )
    for f in files:
        for parent in PurePosixPath(f).parents:
            if str(parent) in files:
                raise DataError(f"{archive}: {str(parent)!r} is both a file and the folder of {f!r}; refusing the archive")
    if max_bytes is not None and total > max_bytes:
        raise DataError(f"{archive}: members total {total} bytes, over the limit of {max_bytes}; refusing the archive (nothing was extracted)")
    size = archive.stat().st_size
    if max_ratio is not None and total > RATIO_FLOOR and total > max_ratio * max(size, 1):
        raise DataError(
            f"{archive}: its {size} bytes would expand to {total} (ratio {total / max(size, 1):.0f}, over the limit of {max_ratio:g}); "
            "refusing the archive as a decompression bomb (nothing was extracted)"
        )


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
    max_bytes: int | None = MAX_BYTES,
    max_ratio: float | None = MAX_RATIO,
    replace: bool = False,
    only: Collection[str] | None = None,
) -> list[str]:
    """Extract a zip or tar (plain, gz, bz2, xz) archive into ``dest``; return the file names written.

    Refuses, before writing anything, any member that is absolute, contains ``..``, is a
    symbolic or hard link, a device or FIFO, appears twice, or makes the total exceed
    ``max_bytes`` or the free space of ``dest``'s disk, or the compression ratio exceed
    ``max_ratio`` (module docstring; None lifts a cap); the DataError names the archive and the
    member. ``dest`` must not exist unless ``replace`` is true, in which case it is swapped for
    the new folder only once the extraction is complete. With ``only`` (member names, as
    :func:`member_names` gives them) every member is still checked, and only those files are
    written (and counted against the caps); a name the archive does not hold is refused.
    """
    archive = Path(archive)
    dest = Path(dest)
    if not archive.is_file():
        raise DataError(f"{archive}: archive not found")
    if dest.exists() and not replace:
        raise DataError(f"{dest}: already exists; extract into a new folder or pass replace=True")
    if zipfile.is_zipfile(archive):
        with _open_zip(archive) as zf:
            members = _select(archive, _zip_members(archive, zf), only)
            _check_layout(archive, members, max_bytes, max_ratio)
            _check_space(archive, dest, members)
            return _extract(dest, members, lambda m: zf.open(m.source))
    if tarfile.is_tarfile(archive):
        with _open_tar(archive, max_ratio) as tf:
            members = _select(archive, _tar_members(archive, tf), only)
            _check_layout(archive, members, max_bytes, max_ratio)
            _check_space(archive, dest, members)
            return _extract(dest, members, lambda m: _tar_reader(tf, m))
    raise DataError(f"{archive}: neither a zip nor a tar archive")


def _open_zip(archive: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise DataError(f"{archive}: not a readable zip archive ({exc})") from exc


class _CappedStream(io.RawIOBase):
    """A decompressed stream that refuses to be read past ``limit`` bytes (a compressed tar's bomb)."""

    def __init__(self, inner, limit: int, archive: Path, ratio: float) -> None:
        self.inner, self.limit, self.archive, self.ratio = inner, limit, archive, ratio

    def _check(self) -> None:
        if self.inner.tell() > self.limit:
            raise DataError(
                f"{self.archive}: its {self.archive.stat().st_size} bytes decompress to more than {self.limit} "
                f"(ratio over the limit of {self.ratio:g}); refusing the archive as a decompression bomb (nothing was extracted)"
            )

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self.inner.read(size if size is not None and size >= 0 else self.limit + 1 - self.inner.tell())
        self._check()
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        position = self.inner.seek(offset, whence)
        self._check()
        return position

    def tell(self) -> int:
        return self.inner.tell()

    def close(self) -> None:
        self.inner.close()
        super().close()


_COMPRESSED = ((b"\x1f\x8b", gzip.open), (b"BZh", bz2.open), (b"\xfd7zXZ\x00", lzma.open))


def _open_tar(archive: Path, max_ratio: float | None) -> tarfile.TarFile:
    """The tar archive, its decompressed stream (gz, bz2, xz) capped at ``max_ratio`` times the archive's size."""
    with open(archive, "rb") as f:
        head = f.read(6)
    opener = next((o for magic, o in _COMPRESSED if head.startswith(magic)), None)
    try:
        if opener is None or max_ratio is None:
            return tarfile.open(archive)
        limit = int(max(max_ratio * archive.stat().st_size, RATIO_FLOOR))
        return tarfile.open(fileobj=_CappedStream(opener(archive, "rb"), limit, archive, max_ratio), mode="r:")
    except (tarfile.TarError, OSError, EOFError, lzma.LZMAError) as exc:
        raise DataError(f"{archive}: not a readable tar archive ({exc})") from exc


def _check_space(archive: Path, dest: Path, members: list[_Member]) -> None:
    """Refuse an extraction that would not fit on ``dest``'s disk (rather than fill it and fail half-way)."""
    total = sum(m.size for m in members if not m.is_dir)
    where = dest.parent
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    if total > free:
        raise DataError(f"{archive}: its members need {total} bytes, and the disk of {where} has {free} free; refusing the archive (nothing was extracted)")


def member_names(archive: str | os.PathLike[str]) -> list[str]:
    """The (normalised, checked) names of the files in a zip or tar archive, without extracting anything."""
    archive = Path(archive)
    if not archive.is_file():
        raise DataError(f"{archive}: archive not found")
    if zipfile.is_zipfile(archive):
        with _open_zip(archive) as zf:
            members = _zip_members(archive, zf)
    elif tarfile.is_tarfile(archive):
        with _open_tar(archive, MAX_RATIO) as tf:
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
