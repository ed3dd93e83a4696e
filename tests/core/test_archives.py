"""RELIABILITY 17 (archives): members with ``../``, absolute paths, symbolic or hard links are
refused, and nothing is written outside the destination (nor inside it)."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from medbench_core.errors import DataError
from medbench_core.taskdata.archives import safe_extract


def _tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w") -> Path:
    with tarfile.open(path, mode) as tf:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tf.addfile(m)
            else:
                name, data = m
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


def _zip(path: Path, members: list[tuple[str, bytes] | zipfile.ZipInfo], payload: bytes = b"") -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for m in members:
            if isinstance(m, zipfile.ZipInfo):
                zf.writestr(m, payload)
            else:
                zf.writestr(zipfile.ZipInfo(m[0]), m[1])
    return path


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_a_plain_tar_and_zip_extract_with_their_bytes(tmp_path):
    files = [("a.txt", b"alpha\n"), ("sub/b.bin", bytes(range(256))), ("./sub/deeper/c.txt", b"")]
    for archive in (_tar(tmp_path / "ok.tar.gz", files, "w:gz"), _zip(tmp_path / "ok.zip", files)):
        dest = tmp_path / f"out-{archive.name}"
        names = safe_extract(archive, dest)
        assert names == ["a.txt", "sub/b.bin", "sub/deeper/c.txt"]
        assert (dest / "a.txt").read_bytes() == b"alpha\n"
        assert (dest / "sub" / "b.bin").read_bytes() == bytes(range(256))
        assert (dest / "sub" / "deeper" / "c.txt").read_bytes() == b""


@pytest.mark.parametrize(
    "kind, members, needle",
    [
        ("tar", [("good.txt", b"ok"), ("../escaped.txt", b"evil")], "'..'"),
        ("tar", [("good/../../escaped.txt", b"evil")], "'..'"),
        ("tar", [("ABS", b"evil")], "absolute path"),
        ("tar", [_link("link", "OUTSIDE", tarfile.SYMTYPE), ("link/escaped.txt", b"evil")], "symbolic link"),
        ("tar", [_link("hard", "OUTSIDE/victim.txt", tarfile.LNKTYPE)], "hard link"),
        ("tar", [_link("fifo", "", tarfile.FIFOTYPE)], "FIFO"),
        ("zip", [("good.txt", b"ok"), ("../escaped.txt", b"evil")], "'..'"),
        ("zip", [("ABS", b"evil")], "absolute path"),
        ("zip", [("..\\escaped.txt", b"evil")], "backslash"),
        ("zip", ["SYMLINK"], "symbolic link"),
    ],
)
def test_escaping_members_are_refused_and_nothing_is_written(tmp_path, kind, members, needle):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("untouched")
    work = tmp_path / "work"
    work.mkdir()
    # Absolute members and link targets point into `outside`, where a naive extractor would write.
    fixed: list = []
    for m in members:
        if isinstance(m, tuple) and m[0] == "ABS":
            fixed.append((str(outside / "escaped.txt"), m[1]))
        elif isinstance(m, tarfile.TarInfo) and m.linkname.startswith("OUTSIDE"):
            m.linkname = m.linkname.replace("OUTSIDE", str(outside))
            fixed.append(m)
        elif m == "SYMLINK":
            info = zipfile.ZipInfo("link")
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            fixed.append(info)
        else:
            fixed.append(m)
    if kind == "tar":
        archive = _tar(tmp_path / "bad.tar", fixed)
    else:
        archive = _zip(tmp_path / "bad.zip", fixed, payload=str(outside).encode())
    before_outside, before_tmp = _tree(outside), _tree(tmp_path)
    dest = work / "dest"

    with pytest.raises(DataError) as err:
        safe_extract(archive, dest)

    assert needle in str(err.value) and str(archive) in str(err.value)
    assert not dest.exists()
    assert _tree(outside) == before_outside and (outside / "victim.txt").read_text() == "untouched"
    assert _tree(tmp_path) == before_tmp  # no temporary folder or escaped file left anywhere
    assert list(work.iterdir()) == []


def test_an_existing_destination_is_kept_unless_replace_and_then_swapped_whole(tmp_path):
    archive = _tar(tmp_path / "v2.tar", [("new.txt", b"2")])
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "old.txt").write_text("1")
    with pytest.raises(DataError, match="already exists"):
        safe_extract(archive, dest)
    assert _tree(dest) == {"old.txt"}
    assert safe_extract(archive, dest, replace=True) == ["new.txt"]
    assert _tree(dest) == {"new.txt"}


def test_a_bomb_over_the_size_limit_is_refused_before_writing(tmp_path):
    archive = _zip(tmp_path / "big.zip", [("zeros.bin", b"\0" * 10_000)])
    with pytest.raises(DataError, match="10000 bytes, over the limit of 4096"):
        safe_extract(archive, tmp_path / "dest", max_bytes=4096)
    assert not (tmp_path / "dest").exists()


def test_a_member_that_is_both_file_and_folder_or_twice_is_refused(tmp_path):
    twice = _tar(tmp_path / "twice.tar", [("a.txt", b"1"), ("a.txt", b"2")])
    with pytest.raises(DataError, match="appears twice"):
        safe_extract(twice, tmp_path / "d1")
    clash = _tar(tmp_path / "clash.tar", [("a", b"1"), ("a/b.txt", b"2")])
    with pytest.raises(DataError, match="both a file and the folder"):
        safe_extract(clash, tmp_path / "d2")
    assert not (tmp_path / "d1").exists() and not (tmp_path / "d2").exists()
