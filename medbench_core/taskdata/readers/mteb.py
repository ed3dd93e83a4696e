"""MTEB / Hugging Face retrieval datasets (R2MED's hub datasets among them), from a local folder or the hub."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medbench_core.taskdata.readers.base import ReadContext, Reader
from medbench_core.taskdata.readers.hf_files import Source, files_revision, find_part, locate
from medbench_core.taskdata.readers.hf_images import ImageSource
from medbench_core.taskdata.readers.hf_retrieval import FilesOptions, HubOptions, Layout, read_retrieval_files, side_licences
from medbench_core.taskdata.task import Task


@dataclass(frozen=True, kw_only=True)
class MtebOptions(HubOptions):
    """Options of the ``mteb`` reader (:class:`~.hf_retrieval.HubOptions`).

    A ``subset`` is a subfolder when the dataset has one of that name, otherwise the prefix of
    MTEB's ``<subset>-corpus`` configs.
    """


def subset_root(source: Source, subset: str) -> tuple[Path, str]:
    """``(folder, config prefix)``: the subset's subfolder, or the root with ``subset`` as MTEB's config prefix."""
    if subset and (source.root / subset).is_dir():
        return source.check(source.root / subset, f"subset {subset!r}"), ""
    return source.root, subset


def read_parts(
    source: Source,
    folder: Path,
    prefix: str,
    options: HubOptions,
    layout: Layout,
    *,
    images: ImageSource | None = None,
    card_folders: tuple[Path, ...] = (),
    default_source: str = "",
) -> Task:
    """Find the three parts in ``folder`` (:func:`~.hf_files.find_part`) and read them with :func:`read_found`."""
    parts = {part: find_part(folder, part, split=options.split, subset=prefix) for part in ("corpus", "queries", "qrels")}
    return read_found(source, parts, options, layout, images=images, card_folders=(folder, *card_folders), default_source=default_source)


def read_found(
    source: Source,
    parts: dict[str, list[Path]],
    options: FilesOptions,
    layout: Layout,
    *,
    images: ImageSource | None = None,
    card_folders: tuple[Path, ...] = (),
    default_source: str = "",
) -> Task:
    """Read the files of the three parts (shared by the readers of HF-layout datasets).

    ``card_folders``: where a dataset card's licence is looked for, in order. ``default_source``
    formats ``{dataset}`` and ``{revision}``. The revision of a local folder is ``sha256:`` of the
    files read, ``images.files()`` (an image archive) among them.
    """
    o = options
    parts = {part: [source.check(p) for p in paths] for part, paths in parts.items()}
    q_lic, d_lic = side_licences(list(card_folders), o.licence, o.query_licence, o.doc_licence)
    sha = source.revision or files_revision([p for ps in parts.values() for p in ps] + (images.files() if images else []), source.root)
    shown = sha[:19] if sha.startswith("sha256:") else sha[:12]
    meta: dict[str, Any] = {
        "source": o.source
        or (default_source or "{dataset}@{revision}").format(dataset=source.dataset, revision=shown) + (f" ({o.subset})" if o.subset else ""),
        "description": o.description,
        "dataset": source.dataset,
        "source_revision": sha,
        "subset": o.subset,
        "task_type": o.task_type,
    }
    return read_retrieval_files(
        options=o,
        corpus_files=parts["corpus"],
        query_files=parts["queries"],
        qrels_files=parts["qrels"],
        layout=layout,
        meta=meta,
        query_licence=q_lic,
        doc_licence=d_lic,
        images=images,
    )


def read_mteb(folder: str | Path | None, options: MtebOptions, context: ReadContext | None = None) -> Task:
    """Read an MTEB-format retrieval dataset (corpus, queries/query, qrels: see :mod:`.hf_retrieval`).

    ``folder``: a local copy (files, config subfolders, or a dataset card naming the files).
    Without it, ``options.dataset`` is a hub dataset id read at the pinned ``revision`` (refused
    without one); only ``context.online`` may download it, otherwise it must be in the local hub
    cache (``context.hub_cache``, default huggingface_hub's). The task metadata records the
    dataset, the revision read (commit sha, or ``sha256:`` of a local folder's files) and the subset.
    """
    context = context or ReadContext()
    source = locate(folder, name=options.name, dataset=options.dataset, revision=options.revision, online=context.online, hub_cache=context.hub_cache)
    root, prefix = subset_root(source, options.subset)
    return read_parts(source, root, prefix, options, Layout(), card_folders=(source.root,))


READER = Reader("mteb", MtebOptions, read_mteb)
