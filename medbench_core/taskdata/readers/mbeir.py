"""UniIR's M-BEIR layout: the data the UniIR retrievers (CLIP-SF, BLIP-FF) were trained and evaluated on.

As UniIR's code reads it (github.com/TIGER-AI-Lab/UniIR at 98dc570, ``src/common/mbeir_embedder.py``,
``mbeir_retriever.py``, ``src/data/mbeir_dataset.py``, ``src/common/utils.py``; the M-BEIR card on
the hub, ``TIGER-Lab/M-BEIR``):

- queries ``query/<split>/mbeir_<subset>_<split>.jsonl``: ``qid``, ``query_txt``,
  ``query_img_path``, ``query_modality`` (``text``, ``image`` or ``image,text``),
  ``query_src_content``, ``pos_cand_list``, ``neg_cand_list``, ``task_id``;
- candidates ``cand_pool/local/mbeir_<pool>_cand_pool.jsonl`` (or ``cand_pool/global/``):
  ``did``, ``txt``, ``img_path``, ``modality``, ``src_content``;
- qrels ``qrels/<split>/mbeir_<subset>_<split>_qrels.txt``: ``qid 0 did relevance task_id``;
- image paths relative to the M-BEIR root (``mbeir_images/...``; the images ship as
  ``mbeir_images.tar.gz.part-*``, to be joined and extracted there first).

``subset`` is the dataset and task, e.g. ``cirr_task7`` or ``webqa_task2``; ``pool`` the candidate
pool, by default the subset's own (MSCOCO's pools are per split: ``mscoco_task0_test``). The
qrels file is the judgment (``pos_cand_list`` repeats it). A record's declared modality must match
what it carries: a query declared ``image,text`` with an empty ``query_txt`` is refused. Texts are
kept as published (UniIR's ``format_string`` and instructions belong to the model, not the data).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError
from medbench_core.taskdata.readers.base import ReadContext, Reader
from medbench_core.taskdata.readers.hf_files import locate
from medbench_core.taskdata.readers.hf_images import FolderImages
from medbench_core.taskdata.readers.hf_retrieval import HubOptions, Layout, Side
from medbench_core.taskdata.readers.mteb import read_found
from medbench_core.taskdata.task import Task

MODALITY_FIELDS = {"queries": "query_modality", "corpus": "modality"}


def check_modality(side: str, obj: dict[str, Any], row: dict[str, Any], where: str) -> None:
    """The modality a record declares is the one it carries (no half of a query lost)."""
    declared = obj.get(MODALITY_FIELDS[side])
    if declared is None:
        return
    parts = {p.strip() for p in str(declared).split(",") if p.strip()}
    if not parts <= {"text", "image"}:
        raise DataError(f"{where}: {MODALITY_FIELDS[side]} {declared!r} is not text, image or image,text")
    carried = {"text"} if row["text"].strip() else set()
    carried |= {"image"} if row["image"] else set()
    if parts != carried:
        raise DataError(
            f"{where}: declares {MODALITY_FIELDS[side]} {declared!r} but carries {','.join(sorted(carried)) or 'nothing'}; "
            "the record lost part of its content or mislabels it"
        )


LAYOUT = Layout(
    queries=Side(
        ids=("qid",),
        text=("query_txt",),
        image=("query_img_path",),
        ignored=("query_modality", "query_src_content", "pos_cand_list", "neg_cand_list", "task_id"),
    ),
    corpus=Side(ids=("did",), text=("txt",), image=("img_path",), ignored=("modality", "src_content")),
    check=check_modality,
)


@dataclass(frozen=True, kw_only=True)
class MbeirOptions(HubOptions):
    """Options of the ``mbeir`` reader (:class:`~.hf_retrieval.HubOptions`; ``subset`` is required, e.g. ``cirr_task7``).

    ``pool``: the candidate pool's name (``cand_pool/{local,global}/mbeir_<pool>_cand_pool.jsonl``),
    by default ``subset``, then ``<subset>_<split>``.
    """

    pool: str = ""


def read_mbeir(folder: str | Path | None, options: MbeirOptions, context: ReadContext | None = None) -> Task:
    """Read one M-BEIR dataset (``subset``) of the M-BEIR root ``folder`` or a pinned hub snapshot (module docstring)."""
    o = options
    context = context or ReadContext()
    where = f"task {o.name}"
    if not o.subset:
        raise DataError(f"{where}: reader mbeir needs 'subset', the M-BEIR dataset to read (e.g. cirr_task7, webqa_task2)")
    source = locate(folder, name=o.name, dataset=o.dataset, revision=o.revision, online=context.online, hub_cache=context.hub_cache)
    root = source.root
    queries = root / "query" / o.split / f"mbeir_{o.subset}_{o.split}.jsonl"
    qrels = root / "qrels" / o.split / f"mbeir_{o.subset}_{o.split}_qrels.txt"
    pools = [o.pool] if o.pool else [o.subset, f"{o.subset}_{o.split}"]
    tried = [root / "cand_pool" / scope / f"mbeir_{p}_cand_pool.jsonl" for p in pools for scope in ("local", "global")]
    pool = next((p for p in tried if p.is_file()), None)
    for path, what in ((queries, "queries"), (qrels, "qrels")):
        if not path.is_file():
            raise DataError(f"{path}: file not found (the {what} of M-BEIR dataset {o.subset!r}, split {o.split!r})")
    if pool is None:
        raise DataError(f"{where}: no candidate pool for {o.subset!r}; looked for {', '.join(str(p) for p in tried)} (set 'pool')")
    images = FolderImages(source, root, context.scratch)
    parts = {"corpus": [pool], "queries": [queries], "qrels": [qrels]}
    return read_found(source, parts, o, LAYOUT, images=images, card_folders=(root,), default_source="M-BEIR {dataset}@{revision}")


READER = Reader("mbeir", MbeirOptions, read_mbeir)
