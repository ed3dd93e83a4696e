"""What the kinds that encode records into vectors share (text encoders, open_clip): the corpus as float32
vectors written block by block, a FAISS index over them, queries encoded with the model, exact or
approximate inner-product search, and the memory check that refuses a corpus too large for this
host before any work starts. Not a kind itself: :mod:`.dense` and :mod:`.open_clip` are.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.chunking import LongText
from medbench_core.retrieval.kinds.retriever_base import RetrieverKind
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.kinds.stage_inputs import StoredCorpus
from medbench_core.taskdata.task import Task


def require_memory(task: str, n: int, dim: int, spec: ModelSpec, available: Any) -> None:
    """Refuse (MemoryBudgetError) a corpus whose index would not fit in ``available`` memory."""
    from medbench_core.retrieval.vectors import check_memory, corpus_bytes

    needed, what = corpus_bytes(n, dim, spec.index)
    check_memory(task, what, needed, available=available)


def load_chunk_map(folder: Path) -> np.ndarray | None:
    """Chunk -> document position of a chunked corpus, or None for one vector per document."""
    path = Path(folder) / "chunk_doc.npy"
    return np.load(path, allow_pickle=False) if path.exists() else None


def load_corpus_embeddings(folder: Path) -> tuple[list[str], np.ndarray]:
    """Doc ids and the corpus vectors, memory-mapped (one per document, or one per chunk with ``chunk_doc.npy``)."""
    import json

    doc_ids = json.loads((Path(folder) / "doc_ids.json").read_text())
    emb = np.load(Path(folder) / "corpus.npy", mmap_mode="r", allow_pickle=False)
    owner = load_chunk_map(folder)
    rows = len(doc_ids) if owner is None else len(owner)
    if emb.shape[0] != rows:
        what = "doc ids" if owner is None else "chunks in chunk_doc.npy"
        raise DataError(f"{folder}: corpus.npy has {emb.shape[0]} rows for {rows} {what}")
    return doc_ids, emb


class EncoderKind(RetrieverKind):
    """A retriever whose model encodes records into unit vectors searched by inner product.

    The dense defaults live here, not in :class:`~medbench_core.retrieval.kinds.base.Kind`: the
    index stage keyed by the entry's ``index:`` (a FAISS index, flat by default), text beyond the
    model's length truncated (or chunked: :meth:`long_text`), and mteb's model type ``dense``.
    """

    loads_weights = True

    def index_identity(self, spec: ModelSpec) -> Any:
        """The FAISS index settings (the entry's ``index:``, default ``{type: flat}``)."""
        return spec.index

    def long_text(self, spec: ModelSpec) -> LongText:
        """What the model does with passages beyond its length limit (text encoders may chunk)."""
        return LongText(mode="truncate", max_length=None)

    def long_text_params(self, spec: ModelSpec, model: Any = None) -> dict[str, Any]:
        info = self.long_text(spec).describe()
        if info.get("max_length") is None and model is not None:
            info["max_length"] = getattr(model, "max_length", None)
        return info

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        return {**super().mteb_meta(spec, registry), "model_type": ["dense"]}

    def embed_corpus(self, spec: ModelSpec, task: Task, out: Path, *, model: Any, progress: bool, available: Any) -> dict[str, Any]:
        """Dense vectors (``corpus.npy``), written batch by batch; with ``long_text: chunk`` one per chunk and ``chunk_doc.npy``."""
        from medbench_core.retrieval.records import encode_chunks
        from medbench_core.retrieval.vectors import encode_side_to

        lt = self.long_text(spec)
        files = ["corpus.npy"]
        if lt.mode == "chunk":
            emb, owner = encode_chunks(model, task, lt)
            require_memory(task.name, emb.shape[0], emb.shape[1], spec, available)
            np.save(out / "corpus.npy", emb, allow_pickle=False)
            np.save(out / "chunk_doc.npy", owner, allow_pickle=False)
            files.append("chunk_doc.npy")
            n_rows, dim = emb.shape
        else:
            n_rows, dim = encode_side_to(
                out / "corpus.npy", model, task, "passage", before_encoding=lambda n, d: require_memory(task.name, n, d, spec, available)
            )
        info = {"representation": "dense", "n_docs": task.corpus.height, "dim": int(dim), "dtype": "float32", **self.long_text_params(spec, model)}
        if lt.mode == "chunk":
            info["n_chunks"] = int(n_rows)
        return {**info, "files": files}

    def build_index(self, spec: ModelSpec, emb_dir: Path, out: Path, *, use_gpu: bool | None, progress: bool | None, available: Any) -> dict[str, Any]:
        """FAISS index over the corpus vectors (``index.faiss``), filled block by block."""
        from medbench_core.retrieval.index import build_index, save_index
        from medbench_core.retrieval.vectors import iter_blocks, npy_shape

        if load_chunk_map(emb_dir) is not None and (spec.index or {}).get("type", "flat") != "flat":
            raise DataError(f"model {spec.name}: long_text: chunk is searched exactly; use index type flat, not {spec.index.get('type')!r}")
        require_memory(Path(emb_dir).parents[1].name, *npy_shape(Path(emb_dir) / "corpus.npy"), spec, available)  # .../<task>/embeddings/<key>
        _, emb = load_corpus_embeddings(emb_dir)
        blocks = lambda: (block for _, block in iter_blocks(Path(emb_dir) / "corpus.npy"))  # noqa: E731
        index, info = build_index(emb, spec.index, use_gpu=use_gpu, progress=progress, add_blocks=blocks)
        save_index(index, out / "index.faiss")
        return {**info, "files": ["index.faiss"]}

    def before_search(self, spec: ModelSpec, task: Task, corpus: StoredCorpus, available: Any) -> None:
        from medbench_core.retrieval.vectors import npy_shape

        require_memory(task.name, *npy_shape(Path(corpus.embeddings) / "corpus.npy"), spec, available)

    def represent_queries(self, spec: ModelSpec, task: Task, model: Any, *, prompt: tuple[str, str] | None, expansion: Any = None) -> np.ndarray:
        """Query vectors: the queries (formatted with ``prompt``) or, for an expanded model, the expanded queries."""
        from medbench_core.retrieval.records import encode_side

        if expansion is None:
            return encode_side(model, task, "query", prompt=prompt)
        from medbench_core.retrieval.expansion.combine import dense_query_vectors
        from medbench_core.retrieval.instructions import format_queries
        from medbench_core.retrieval.records import _accepts_ids

        expansions, combine = expansion
        ids, langs = task.queries["query_id"].to_list(), task.queries["language"].to_list()
        extra = {"ids": ids} if _accepts_ids(model) else {}
        if "allow_empty" in inspect.signature(model.encode_records).parameters:
            extra["allow_empty"] = True  # an empty expansion is embedded as "", as R2MED embeds it

        def encode(texts: list[str], role: str, query_prompt: tuple[str, str] | None) -> np.ndarray:
            # role "query": the encoder's query prefix; "expansion": none unless an expansion_prefix is set
            texts = format_queries(texts, query_prompt) if query_prompt is not None else texts
            return model.encode_records(texts, [None] * len(texts), langs, role, **extra)

        return dense_query_vectors(
            encode, task.queries["text"].fill_null("").to_list(), expansions, combine, prompt, normalize=bool(getattr(spec.settings, "normalize", True))
        )

    def query_files(self, queries: Any, out: Path) -> list[str]:
        np.save(out / "query_embeddings.npy", queries, allow_pickle=False)
        return ["query_embeddings.npy"]

    def search(self, spec: ModelSpec, task: Task, corpus: StoredCorpus, queries: Any, k: int, *, pools: Any, progress: bool) -> pl.DataFrame:
        """Inner-product search of the index (memory-mapped); a chunked corpus is scored chunk by chunk and pooled per document."""
        from medbench_core.retrieval import chunking
        from medbench_core.retrieval.index import load_index, search
        from medbench_core.retrieval.ranking import rank_scores

        query_ids, doc_ids = task.queries["query_id"].to_list(), task.corpus["doc_id"].to_list()
        index = load_index(Path(corpus.index) / "index.faiss", mmap=True)  # its manifest was verified by the caller
        owner = load_chunk_map(corpus.embeddings)
        if owner is not None:
            rows = chunking.chunk_doc_scores(index, queries, owner, len(doc_ids), self.long_text(spec).pooling)
            return rank_scores(query_ids, doc_ids, rows, k, candidates=pools)
        _, demb = load_corpus_embeddings(corpus.embeddings) if pools is not None else (None, None)
        return search(index, queries, query_ids, doc_ids, k, doc_emb=demb, candidates=pools, progress=progress)
