"""The M3Retrieve release as published: one folder per discipline, captions, images in ``images.zip``.

What the release holds (dataset cards of ``Tensorists/M3Retrieve`` / ``ArkaAcharya/M3Retrieve`` on the
Hugging Face hub, and the authors' evaluation scripts, github.com/AkashGhosh/M3Retrieve ``Code/``;
docs/tasks_and_readers.md lists what was read where):

- one folder per discipline (``Cardiology/``, ``Anatomy and Physiology/``, ``Pubmed/``, ...), each with
  ``queries.jsonl`` (``_id``, ``caption``, ``image_path``), ``corpus.jsonl`` (``_id``, ``text``, in
  an earlier card revision also ``title``) and ``qrels/test.tsv`` (``query-id``, ``corpus-id``,
  ``score`` declared float64);
- the images in ``images.zip`` ("sorted based on their medical disciplines", the card says);
- the licence in the card's front matter at the repository root (``license: cc-by-sa-4.0``);
- the case-study collection (``ArkaAcharya/M3Retrieve_CaseStudyRetrieval``) keeps its discipline
  folders under ``Case_Study_Retrieval/``: set ``disciplines_folder: Case_Study_Retrieval``. Its
  psychiatry folder is spelled two ways in the authors' scripts ("Psychiatry and Behavioral Health",
  "... Behavioral Sciences"): either subset name finds either folder (:func:`discipline_folder`).

A query's text is its ``caption`` (``text`` and ``txt`` are read too; two of them holding
different texts are refused), its image its ``image_path``; a document's text is ``title`` and
``text`` joined as BEIR joins them. Each discipline is one task (``subsets:`` in the catalogue),
its records' discipline the subset's name unless ``discipline`` is given.

Where an ``image_path`` is found, first rule that matches (the authors' scripts join it to the
folder above the discipline folders, ``Code/run_flmr.py``):

1. a file ``<folder>/<image_path>`` for ``folder`` = ``images`` (when that option names a
   folder), the discipline folder, ``disciplines_folder``, the dataset's root;
2. a member of the image archive (``images`` when it names a ``.zip``/``.tar``, else the first
   ``images.zip`` in the discipline folder, ``disciplines_folder`` or the root) named
   ``<image_path>`` or ``<discipline>/<image_path>``, either one possibly under the archive's
   single top folder; two members matching is refused as ambiguous.

Every image is written into the reader's scratch folder under its ``image_path`` (from an archive
after the archive's members are checked by :func:`medbench_core.taskdata.archives.safe_extract`),
so the task's images hold no links and the same record gives the same task from a local folder
or from a hub snapshot. An image found nowhere is refused naming file, line, record and path.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError
from medbench_core.taskdata.readers.base import ReadContext, Reader
from medbench_core.taskdata.readers.common import write_bytes_if_changed
from medbench_core.taskdata.readers.hf_files import Source, locate, relative_path
from medbench_core.taskdata.readers.hf_images import ImageSource
from medbench_core.taskdata.readers.hf_retrieval import HubOptions, Layout, Side
from medbench_core.taskdata.readers.mteb import read_parts
from medbench_core.taskdata.task import Task, resolve_inside

IMAGE_FIELDS = ("image_path", "image", "img_path", "img")
LAYOUT = Layout(
    queries=Side(text=("caption", "text", "txt"), image=IMAGE_FIELDS),
    corpus=Side(text=("text", "txt"), title=("title",), image=IMAGE_FIELDS),
)
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
# One case-study folder, two spellings in the authors' scripts (github.com/AkashGhosh/M3Retrieve at 94c83da):
# "Psychiatry and Behavioral Health" in Code/e5_large.py l.124, Code/get_medImageInsight_results.py l.182,
# Code/get_results_mteb_format_nvembed.py l.152; "Psychiatry and Behavioral Sciences" in Code/mm_embed_new (1).py l.132.
SPELLINGS = (("Psychiatry and Behavioral Health", "Psychiatry and Behavioral Sciences"),)


@dataclass(frozen=True, kw_only=True)
class M3RetrieveOptions(HubOptions):
    """Options of the ``m3retrieve`` reader (:class:`~.hf_retrieval.HubOptions` and these two).

    ``disciplines_folder``: the folder of the dataset holding the discipline folders (empty: its
    root; ``Case_Study_Retrieval`` in the case-study collection). ``images``: where the images
    are, a path inside the dataset to an archive or a folder (empty: ``images.zip`` found as the
    module docstring says).
    """

    disciplines_folder: str = ""
    images: str = ""


class ReleaseImages(ImageSource):
    """M3Retrieve's images: files beside the discipline folders or members of ``images.zip`` (module docstring)."""

    def __init__(self, source: Source, dirs: list[str], subset: str, images: str, scratch: Path, where: str):
        self.source = source
        self.subset = subset
        self.scratch = scratch
        self.dirs = list(dict.fromkeys(dirs))  # relative to the root, "" for the root itself
        self.archive: Path | None = None
        if images:
            if images.lower().endswith(ARCHIVE_SUFFIXES):
                self.archive = source.file(images, f"{where}: option 'images'")
                if self.archive is None:
                    raise DataError(f"{where}: option 'images': no archive {images!r} in {source.root}")
            else:
                rel = relative_path(images, f"{where}: option 'images'").as_posix()
                if not (source.root / rel).is_dir():
                    raise DataError(f"{where}: option 'images': {images!r} is neither an archive nor a folder in {source.root}")
                self.dirs.insert(0, rel)
        else:
            self.archive = next((a for d in self.dirs if (a := source.file(f"{d}/images.zip" if d else "images.zip", where)) is not None), None)
        self._members: set[str] | None = None
        self._tops: list[str] = []
        self.copies: dict[str, Path] = {}
        self.extract: dict[str, str] = {}
        self.written: dict[str, str] = {}

    def members(self) -> set[str]:
        if self._members is None:
            from medbench_core.taskdata.archives import member_names

            names = member_names(self.archive) if self.archive else []
            self._members = set(names)
            tops = {n.split("/", 1)[0] for n in names}
            self._tops = sorted(tops) if len(tops) == 1 and all("/" in n for n in names) else []
        return self._members

    def ref(self, value: Any, side: str, rid: str, where: str) -> str:
        at = f"{where}: record {rid}"
        if isinstance(value, dict) and value.get("bytes"):
            from medbench_core.taskdata.readers.hf_images import image_bytes_name

            name = f"{side}/{image_bytes_name(rid, value['bytes'], value.get('path'))}"
            write_bytes_if_changed(resolve_inside(self.scratch, name, what=at), bytes(value["bytes"]))
            self.written[name] = name
            return name
        path = value.get("path") if isinstance(value, dict) else value
        if not isinstance(path, str) or not path.strip():
            raise DataError(f"{at}: image {value!r} is neither a relative path nor {{bytes, path}}")
        ref = relative_path(path, f"{at}: image").as_posix()
        if ref in self.copies or ref in self.extract:
            return ref
        for d in self.dirs:
            found = self.source.file(f"{d}/{ref}" if d else ref, f"{at}: image")
            if found is not None:
                self.copies[ref] = found
                return ref
        if self.archive is not None:
            members = self.members()
            names = [ref, f"{self.subset}/{ref}"] if self.subset else [ref]
            names += [f"{t}/{n}" for t in self._tops for n in names]
            hits = list(dict.fromkeys(n for n in names if n in members))
            if len(hits) > 1:
                raise DataError(f"{at}: image {ref!r} matches {len(hits)} members of {self.archive}: {hits}; refusing to guess")
            if hits:
                self.extract[ref] = hits[0]
                return ref
        looked = ", ".join(str(self.source.root / d) if d else str(self.source.root) for d in self.dirs)
        inside = ""
        if self.archive is not None:
            example = next(iter(sorted(self.members())), None)
            inside = f" and in {self.archive}" + (f" (members such as {example!r})" if example else " (empty)")
        raise DataError(f"{at}: image {ref!r} not found: looked in {looked}{inside}")

    def finish(self) -> Path | None:
        for ref, found in sorted(self.copies.items()):
            write_bytes_if_changed(resolve_inside(self.scratch, ref, what=f"image {ref!r}"), found.read_bytes())
        if self.extract:
            from medbench_core.taskdata.archives import safe_extract

            self.scratch.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".m3retrieve-", dir=self.scratch.parent))
            try:
                safe_extract(self.archive, tmp / "x", only=set(self.extract.values()))
                for ref, member in sorted(self.extract.items()):
                    write_bytes_if_changed(resolve_inside(self.scratch, ref, what=f"image {ref!r}"), (tmp / "x" / member).read_bytes())
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return self.scratch if (self.copies or self.extract or self.written) else None

    def files(self) -> list[Path]:
        return [self.archive] if self.archive is not None else []


def discipline_folder(base: Path, subset: str, where: str) -> str:
    """The folder of ``subset`` in ``base``: its own name, else its other spelling in the authors' scripts (:data:`SPELLINGS`).

    Both spellings present is refused (two folders could hold different data); neither, refused naming what ``base`` holds.
    """
    names = next((pair for pair in SPELLINGS if subset in pair), (subset,))
    found = [n for n in dict.fromkeys((subset, *names)) if (base / n).is_dir()]
    if len(found) > 1:
        raise DataError(
            f"{where}: {base} holds both {found[0]!r} and {found[1]!r}, the two spellings of one case-study folder in M3Retrieve's scripts; keep one"
        )
    if not found:
        have = sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
        other = f" (or {', '.join(repr(n) for n in names if n != subset)})" if len(names) > 1 else ""
        raise DataError(f"{where}: discipline folder {subset!r}{other} not found in {base}; it holds {have}")
    return found[0]


def read_m3retrieve(folder: str | Path | None, options: M3RetrieveOptions, context: ReadContext | None = None) -> Task:
    """Read one M3Retrieve discipline (``subset``) of the release in ``folder`` or the pinned hub dataset (module docstring)."""
    o = options
    context = context or ReadContext()
    source = locate(folder, name=o.name, dataset=o.dataset, revision=o.revision, online=context.online, hub_cache=context.hub_cache)
    where = f"task {o.name}"
    base_rel = relative_path(o.disciplines_folder, f"{where}: disciplines_folder").as_posix() if o.disciplines_folder else ""
    base = source.root / base_rel if base_rel else source.root
    if not base.is_dir():
        raise DataError(f"{where}: disciplines_folder {base_rel!r} not found in {source.root}")
    if o.subset:
        relative_path(o.subset, f"{where}: subset")
    folder_name = discipline_folder(base, o.subset, where) if o.subset else ""
    discipline = base / folder_name if folder_name else base
    source.check(discipline, where)
    sub_rel = f"{base_rel}/{folder_name}".strip("/") if folder_name else base_rel
    scratch = context.need_scratch(where)
    images: ImageSource = ReleaseImages(source, [sub_rel, base_rel, ""], folder_name, o.images, scratch, where)
    opts = dataclasses.replace(o, discipline=o.discipline or o.subset or None)
    return read_parts(
        source,
        discipline,
        "",
        opts,
        LAYOUT,
        images=images,
        card_folders=(base, source.root),
        default_source="M3Retrieve {dataset}@{revision}",
    )


READER = Reader("m3retrieve", M3RetrieveOptions, read_m3retrieve)

__all__ = ["M3RetrieveOptions", "ReleaseImages", "read_m3retrieve"]
