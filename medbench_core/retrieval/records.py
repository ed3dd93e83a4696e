"""Records as encoders see them: each side's ids, texts, image paths and languages, encoded in frame
order; a corpus cut into chunks; each query's candidate pool.

Dense encoders expose ``encode_records(texts, images, languages, role)`` where ``images`` are
resolved file paths (or None) and ``role`` is ``query`` or ``passage``. Text-only encoders
are wrapped so that they see the text side of each record (the house rule for BM25 and text
encoders on multimodal records).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.taskdata.task import Task


class RecordEncoder(Protocol):
    """Encodes records that may carry text, an image, or both."""

    def encode_records(self, texts: list[str | None], images: list[Path | None], languages: list[str | None], role: str) -> np.ndarray: ...


class TextOnly:
    """Adapts a text encoder (``encode(texts, role=, languages=)``) to :class:`RecordEncoder`."""

    def __init__(self, encoder: Any, model_name: str):
        self.encoder = encoder
        self.model_name = model_name

    @property
    def tokenizer(self) -> Any:
        """The wrapped encoder's tokenizer (chunking cuts passages on its tokens)."""
        return getattr(self.encoder, "tokenizer", None)

    @property
    def max_length(self) -> int | None:
        return getattr(self.encoder, "max_length", None)

    def encode_records(self, texts, images, languages, role, ids=None, allow_empty: bool = False):
        """``allow_empty``: an empty text is encoded as ``""`` (an empty expansion, as R2MED encodes it) instead of refused."""
        if allow_empty:
            texts = ["" if t is None else t for t in texts]
        missing = [] if allow_empty else [i for i, t in enumerate(texts) if not t]
        if missing:
            first = ids[missing[0]] if ids is not None else f"position {missing[0]}"
            raise DataError(f"model {self.model_name} reads text only, but {len(missing)} {role} record(s) have no text (e.g. {first})")
        return self.encoder.encode(list(texts), role=role, languages=list(languages))

    def batch_plan(self, texts, languages, role) -> list[np.ndarray] | None:
        """The wrapped encoder's batches (see :mod:`medbench_core.retrieval.vectors`), or None when it has no plan."""
        plan = getattr(self.encoder, "batch_plan", None)
        return plan([t or "" for t in texts], role=role, languages=list(languages)) if plan else None


def load_encoder(spec: ModelSpec, device: str = "cpu", progress: bool | None = False, *, online: bool = False) -> RecordEncoder:
    """The record encoder of a model whose kind encodes records (text encoders, open_clip); ``progress``: bars while encoding.

    Hub weights come from the local hub cache at the pinned revision; ``online`` lets them download.
    """
    model = spec.plugin.load(spec, device=device, progress=progress, online=online) if hasattr(spec.plugin, "represent_queries") else None
    if model is None or not hasattr(model, "encode_records"):
        raise DataError(f"model {spec.name}: kind {spec.kind} has no dense encoder")
    return model


def side_records(task: Task, side: str) -> tuple[list[str], list[str | None], list[Path | None], list[str | None]]:
    """ids, texts, image paths and languages of the queries or the corpus, in frame order."""
    if side == "query":
        df = task.queries
        ids = df["query_id"].to_list()
        texts = df["text"].to_list()
    elif side == "passage":
        df = task.corpus
        ids = df["doc_id"].to_list()
        texts = [t or None for t in task.doc_text()]
    else:
        raise ValueError(f"side must be 'query' or 'passage', not {side!r}")
    images = [task.resolve_image(r) if r else None for r in df["image"].to_list()]
    return ids, texts, images, df["language"].to_list()


def _accepts_ids(encoder: Any) -> bool:
    try:
        return "ids" in inspect.signature(encoder.encode_records).parameters
    except (TypeError, ValueError):
        return False


def encode_side(encoder: RecordEncoder, task: Task, side: str, *, prompt: tuple[str, str] | None = None) -> np.ndarray:
    """Vectors of the task's queries or documents, in frame order; ``prompt`` (template, instruction) formats query texts."""
    from medbench_core.retrieval.instructions import format_queries

    ids, texts, images, langs = side_records(task, side)
    if prompt is not None and side == "query":
        texts = format_queries(texts, prompt)
    # Encoders that accept ``ids`` get them, so their errors name the record at fault.
    extra = {"ids": ids} if _accepts_ids(encoder) else {}
    emb = encoder.encode_records(texts, images, langs, side, **extra)
    if emb.shape[0] != len(ids):
        raise DataError(f"task {task.name}: encoder returned {emb.shape[0]} vectors for {len(ids)} {side} records")
    return np.ascontiguousarray(emb, dtype=np.float32)


def encode_chunks(encoder: RecordEncoder, task: Task, lt: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(chunk vectors, chunk -> document position)`` of the corpus cut by the encoder's tokenizer (see :mod:`.chunking`)."""
    from medbench_core.retrieval.chunking import split_passages

    ids, texts, images, langs = side_records(task, "passage")
    with_image = [ids[i] for i, im in enumerate(images) if im is not None]
    if with_image:
        raise DataError(f"task {task.name}: long_text: chunk reads text only, but {len(with_image)} documents carry images (e.g. {with_image[0]})")
    tokenizer = getattr(encoder, "tokenizer", None)
    if tokenizer is None:
        raise DataError(f"task {task.name}: long_text: chunk needs the encoder's tokenizer; this encoder exposes none")
    chunks, owner = split_passages([t or "" for t in texts], tokenizer, lt)
    chunk_ids = [f"{ids[o]}#{j}" for j, o in enumerate(owner.tolist())]
    extra = {"ids": chunk_ids} if _accepts_ids(encoder) else {}
    emb = encoder.encode_records(chunks, [None] * len(chunks), [langs[o] for o in owner.tolist()], "passage", **extra)
    if emb.shape[0] != len(chunks):
        raise DataError(f"task {task.name}: encoder returned {emb.shape[0]} vectors for {len(chunks)} chunks")
    return np.ascontiguousarray(emb, dtype=np.float32), owner


def candidate_pools(task: Task) -> dict[str, np.ndarray] | None:
    """query id -> indices into the corpus frame, for tasks that rank each query in its own pool."""
    if task.candidates is None:
        return None
    pos = {d: i for i, d in enumerate(task.corpus["doc_id"].to_list())}
    pools: dict[str, set[int]] = {}
    for q, d in task.candidates.select("query_id", "doc_id").iter_rows():
        if d not in pos:
            raise DataError(f"task {task.name}: candidate ({q}, {d}) names an unknown document")
        # A set: a pair listed twice must not put the same document twice in the ranking.
        pools.setdefault(q, set()).add(pos[d])
    # A query without a pool would be ranked against nothing and silently score 0.
    missing = [q for q in task.queries["query_id"].to_list() if q not in pools]
    if missing:
        raise DataError(f"task {task.name}: {len(missing)} query id(s) have no candidates, e.g. {missing[:5]}; give every query its pool")
    return {q: np.asarray(sorted(ix), dtype=np.int64) for q, ix in pools.items()}
