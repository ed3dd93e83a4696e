"""MTEB / Hugging Face retrieval datasets (R2MED's hub datasets among them), from a local folder or the hub."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medbench_core.errors import DataError
from medbench_core.taskdata.task import Task
from medbench_core.taskdata.readers.hf_files import files_revision, find_part
from medbench_core.taskdata.readers.hf_retrieval import Layout, read_retrieval_files, side_licences


def locate(
    folder: str | Path | None, *, name: str, dataset: str, revision: str, subset: str, online: bool, hub_cache: str | Path | None
) -> tuple[Path, str, str, str]:
    """``(root, config prefix, dataset, revision)`` of a local folder or a pinned hub dataset.

    A local folder's revision is ``sha256:`` of the files read (filled in by the caller); a hub
    dataset's is the commit sha its pinned revision resolves to. A subset is a subfolder when the
    folder has one of that name, otherwise the prefix of MTEB's ``<subset>-corpus`` configs.
    """
    if folder is None or str(folder) == "":
        if not dataset:
            raise DataError(f"task {name}: give 'path' (a local folder) or 'dataset' (a hub dataset id with a pinned revision)")
        if not revision:
            raise DataError(
                f"task {name}: hub dataset {dataset!r} has no revision; pin one (revision: <40-hex commit sha>) "
                "so the task reads the same data every time"
            )
        from medbench_core.hub import snapshot

        root, sha = snapshot(dataset, revision, repo_type="dataset", online=online, cache_dir=hub_cache)
    else:
        root = Path(folder)
        if revision:
            raise DataError(
                f"task {name}: 'revision' pins a hub dataset; the local folder {root} is identified by the hash of its files "
                "(drop 'revision', or read the hub dataset with 'dataset' instead of 'path')"
            )
        if not root.is_dir():
            raise DataError(f"{root}: dataset folder not found")
        dataset = dataset or root.name
        sha = ""
    prefix = subset
    if subset and (root / subset).is_dir():
        root, prefix = root / subset, ""
    return root, prefix, dataset, sha


def read_mteb(
    folder: str | Path | None = None,
    *,
    name: str,
    dataset: str = "",
    revision: str = "",
    subset: str = "",
    split: str = "test",
    online: bool = False,
    hub_cache: str | Path | None = None,
    licence: str | None = None,
    query_licence: str | None = None,
    doc_licence: str | None = None,
    language: str = "en",
    discipline: str | None = None,
    task_type: str = "",
    source: str = "",
    description: str = "",
    research_only: bool = False,
    only_judged_queries: bool = True,
    duplicate_judgments: str = "error",
    require_positive: bool = False,
    layout: Layout | None = None,
    image_scratch: str | Path | None = None,
) -> Task:
    """Read an MTEB-format retrieval dataset (corpus, queries/query, qrels: see :mod:`.hf_retrieval`).

    ``folder``: a local copy (files, config subfolders, or a dataset card naming the files).
    Without it, ``dataset`` is a hub dataset id read at the pinned ``revision`` (refused
    without one); only ``online=True`` may download it, otherwise it must be in the local hub
    cache (``hub_cache``, default huggingface_hub's). The task metadata records the dataset,
    the revision read (commit sha, or ``sha256:`` of a local folder's files) and the subset.

    Licences: a record's own ``licence``/``license`` field, else ``query_licence`` /
    ``doc_licence``, else ``licence``, else the dataset card's ``license``, else ``unknown``
    (which the licence gate admits only for a task marked ``research_only``).
    """
    root, prefix, dataset, sha = locate(folder, name=name, dataset=dataset, revision=revision, subset=subset, online=online, hub_cache=hub_cache)
    parts = {part: find_part(root, part, split=split, subset=prefix) for part in ("corpus", "queries", "qrels")}
    if not sha:
        sha = files_revision([p for ps in parts.values() for p in ps], root)
    q_lic, d_lic = side_licences(root, licence, query_licence, doc_licence)
    meta: dict[str, Any] = {
        "source": source or f"{dataset}@{sha[:19] if sha.startswith('sha256:') else sha[:12]}" + (f" ({subset})" if subset else ""),
        "description": description,
        "dataset": dataset,
        "source_revision": sha,
        "subset": subset,
        "task_type": task_type,
    }
    return read_retrieval_files(
        name=name,
        corpus_files=parts["corpus"],
        query_files=parts["queries"],
        qrels_files=parts["qrels"],
        root=root,
        layout=layout or Layout(),
        meta=meta,
        query_licence=q_lic,
        doc_licence=d_lic,
        language=language,
        discipline=discipline,
        research_only=research_only,
        only_judged_queries=only_judged_queries,
        duplicate_judgments=duplicate_judgments,
        require_positive=require_positive,
        image_scratch=Path(image_scratch) if image_scratch else None,
    )
