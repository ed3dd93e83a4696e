"""Where the images of a Hugging Face retrieval layout's records come from (:mod:`.hf_retrieval` reads the records):
a path relative to the dataset folder, or an ``Image`` value ``{bytes, path}`` written into the reader's scratch folder."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError
from medbench_core.taskdata.readers.common import write_bytes_if_changed
from medbench_core.taskdata.readers.hf_files import Source, relative_path
from medbench_core.taskdata.task import resolve_inside


def image_bytes_name(rid: str, data: bytes, hint: str | None) -> str:
    suffix = Path(hint).suffix.lower() if hint else ""
    if not suffix:
        suffix = ".png" if data[:8] == b"\x89PNG\r\n\x1a\n" else ".jpg" if data[:2] == b"\xff\xd8" else ".img"
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", rid)[:80]
    return f"{safe}-{hashlib.sha256(rid.encode()).hexdigest()[:8]}{suffix}"


class ImageSource:
    """Where the images of records come from; :meth:`ref` gives a record's image reference."""

    def ref(self, value: Any, side: str, rid: str, where: str) -> str:
        raise NotImplementedError

    def finish(self) -> Path | None:
        """Called once every record is read; returns the task's image folder."""
        raise NotImplementedError

    def files(self) -> list[Path]:
        """Source files read besides the parts (an archive), for the dataset's revision."""
        return []


class FolderImages(ImageSource):
    """Image paths relative to the dataset folder, or Hugging Face ``Image`` values ``{bytes, path}``.

    Bytes are written into the scratch folder. From a hub snapshot (whose files are links into
    the cache's blobs) path images are copied into the scratch folder too, so the task's image
    folder holds no links.
    """

    def __init__(self, source: Source, folder: Path, scratch: Path | None):
        self.source = source
        self.folder = folder
        self.scratch = scratch
        self.roots: set[Path] = set()

    def _scratch(self, where: str, rid: str, why: str) -> Path:
        if self.scratch is None:
            raise DataError(f"{where}: record {rid} {why} but the reader has no folder to write them to")
        self.roots.add(self.scratch)
        return self.scratch

    def ref(self, value: Any, side: str, rid: str, where: str) -> str:
        if isinstance(value, dict) and value.get("bytes"):
            name = f"{side}/{image_bytes_name(rid, value['bytes'], value.get('path'))}"
            write_bytes_if_changed(self._scratch(where, rid, "carries image bytes") / name, bytes(value["bytes"]))
            return name
        path = value.get("path") if isinstance(value, dict) else value
        if not isinstance(path, str) or not path.strip():
            raise DataError(f"{where}: record {rid}: image {value!r} is neither a relative path nor {{bytes, path}}")
        path = path.strip()
        if self.source.hub:
            what = f"{where}: record {rid}: image"
            rel = (self.folder.relative_to(self.source.root) / relative_path(path, what)).as_posix()
            full = self.source.file(rel, what)
            if full is None:
                raise DataError(f"{where}: record {rid}: image {path!r} not found under {self.folder}")
            write_bytes_if_changed(self._scratch(where, rid, "has an image in the hub cache") / path, full.read_bytes())
            return path
        full = resolve_inside(self.folder, path, what=f"{where}: record {rid}")
        if not full.is_file():
            raise DataError(f"{where}: record {rid}: image {path!r} not found under {self.folder}")
        self.roots.add(self.folder)
        return path

    def finish(self) -> Path | None:
        if len(self.roots) > 1:
            raise DataError(f"images come both from {sorted(map(str, self.roots))}; give them in one form (paths or bytes)")
        return next(iter(self.roots)) if self.roots else None
