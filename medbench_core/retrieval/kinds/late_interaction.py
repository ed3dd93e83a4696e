"""What late-interaction kinds share (ColBERT, code folders returning token vectors): one vector per token,
stored per document, searched by MaxSim exactly or through a PLAID index. Not a kind itself:
:mod:`.colbert` and :mod:`.code_folder` register them.

The encoder a kind loads has ``encode_multi(texts, images, languages, role, ids=None, instruction=None)``
returning one ``(tokens, dim)`` float32 array per record. The entry's ``index:`` is ``{type: flat}``
(exact MaxSim over every document, the default) or ``{type: plaid, nbits, n_ivf_probe, n_full_scores, searcher,
kmeans_niters, max_points_per_centroid, n_centroids, seed}`` (:mod:`medbench_core.retrieval.multivector`);
like FAISS's settings they key the index stage (and the runs searched through it), not the embeddings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.retriever_base import RetrieverKind
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.kinds.stage_inputs import StoredCorpus
from medbench_core.taskdata.task import Task

INDEX_TYPES = ("flat", "plaid")
QUERY_SCORE_BYTES = 64 << 20  # the (queries x documents) scores held at once by an exact search


def index_settings(spec: ModelSpec, where: str = "") -> dict[str, Any]:
    """The entry's ``index:`` checked: ``{"type": "flat"}`` or the PLAID settings with their defaults."""
    from medbench_core.retrieval.multivector import plaid_settings

    where = where or f"model {spec.name}"
    index_type = (spec.index or {}).get("type", "flat")
    if index_type not in INDEX_TYPES:
        raise DataError(f"{where}: index type {index_type!r} is not one for late interaction; use flat (exact MaxSim) or plaid")
    if index_type == "flat":
        extra = sorted(set(spec.index or {}) - {"type"})
        if extra:
            raise DataError(f"{where}: index type flat (exact MaxSim) takes no settings, not {extra[0]!r}")
        return {"type": "flat"}
    return {"type": "plaid", **plaid_settings(dict(spec.index), where)}


class LateInteractionKind(RetrieverKind):
    """A retriever whose model encodes a record into token vectors, scored by MaxSim."""

    loads_weights = True

    def check_entry(self, spec: ModelSpec, where: str) -> None:
        index_settings(spec, where)

    def index_identity(self, spec: ModelSpec) -> Any:
        return index_settings(spec)

    def long_text_params(self, spec: ModelSpec, model: object = None) -> dict[str, Any]:
        # an encoder of token vectors: text beyond its length is truncated, as EncoderKind says of one-vector
        # encoders (the base Kind claims nothing); a kind that knows its length says it (colbert)
        return {"long_text": "truncate", "max_length": None}

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        return {**super().mteb_meta(spec, registry), "framework": ["PyTorch"], "model_type": ["late-interaction"], "similarity_fn_name": "MaxSim"}

    # --- compute
    def embed_corpus(self, spec: ModelSpec, task: Task, out: Path, *, model: Any, progress: bool, available: Any) -> dict[str, Any]:
        """Every document's token vectors into ``tokens.npy`` and ``doc_offsets.npy``, one batch at a time."""
        from medbench_core.progress import bar
        from medbench_core.retrieval.multivector import OFFSETS, TOKENS, TokenWriter
        from medbench_core.retrieval.records import side_records

        ids, texts, images, langs = side_records(task, "passage")
        if not ids:
            raise DataError(f"task {task.name}: no documents to encode")
        step = max(1, int(spec.batch_size))
        writer: TokenWriter | None = None
        for start in bar(range(0, len(ids), step), desc=f"{spec.name} documents", unit="batch", progress=progress):
            rows = slice(start, start + step)
            vecs = model.encode_multi(texts[rows], images[rows], langs[rows], "passage", ids=ids[rows])
            if len(vecs) != len(ids[rows]):
                raise DataError(f"model {spec.name}: {len(vecs)} token sets for {len(ids[rows])} documents")
            if writer is None:
                writer = TokenWriter(out, vecs[0].shape[1])
            writer.add(vecs, [f"model {spec.name}: document {i}" for i in ids[rows]])
        assert writer is not None
        n_docs, n_tokens = writer.close()
        return {"representation": "multi-vector", "n_docs": n_docs, "n_tokens": n_tokens, "dim": writer.dim, "dtype": "float32", "files": [TOKENS, OFFSETS]}

    def build_index(self, spec: ModelSpec, emb_dir: Path, out: Path, *, use_gpu: bool | None, progress: bool | None, available: Any) -> dict[str, Any]:
        """Nothing for exact MaxSim; a PLAID index (:func:`~medbench_core.retrieval.multivector.build_plaid`) otherwise."""
        from medbench_core.retrieval.multivector import build_plaid, plaid_bytes
        from medbench_core.retrieval.vectors import check_disk, npy_shape

        settings = index_settings(spec)
        if settings["type"] == "flat":
            return {"type": "flat", "search": "exact MaxSim", "built_on": "cpu", "files": []}
        n_tokens, dim = npy_shape(Path(emb_dir) / "tokens.npy")
        check_disk(Path(emb_dir).parents[1].name, out, plaid_bytes(n_tokens, dim, settings["nbits"], 0))
        return {**build_plaid(Path(emb_dir), out, settings), "built_on": "cpu"}

    def represent_queries(
        self, spec: ModelSpec, task: Task, model: Any, *, prompt: tuple[str, str] | None, expansion: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(queries, lengths)``: each query's token vectors, zero-padded to the longest (a zero vector adds 0 to MaxSim)."""
        from medbench_core.retrieval.multivector import pad_queries
        from medbench_core.retrieval.records import side_records

        if expansion is not None:
            raise DataError(f"model {spec.name}: late-interaction models take no query expansions")
        ids, texts, images, langs = side_records(task, "query")
        vecs = model.encode_multi(texts, images, langs, "query", ids=ids, instruction=prompt)
        if len(vecs) != len(ids):
            raise DataError(f"task {task.name}: encoder returned {len(vecs)} token sets for {len(ids)} queries")
        return pad_queries([np.asarray(v, dtype=np.float32) for v in vecs])

    def query_files(self, queries: Any, out: Path) -> list[str]:
        padded, lengths = queries
        np.save(out / "query_tokens.npy", padded, allow_pickle=False)
        np.save(out / "query_lengths.npy", lengths, allow_pickle=False)
        return ["query_tokens.npy", "query_lengths.npy"]

    def search(self, spec: ModelSpec, task: Task, corpus: StoredCorpus, queries: Any, k: int, *, pools: Any, progress: bool) -> pl.DataFrame:
        """Top ``k`` by MaxSim: exact (every document, or each query's candidate pool) or through the PLAID index; ties by doc id."""
        from medbench_core.progress import bar
        from medbench_core.retrieval.multivector import PlaidIndex, load_tokens, maxsim
        from medbench_core.retrieval.ranking import doc_order, run_frame, topk

        padded, lengths = queries
        query_ids, doc_ids = task.queries["query_id"].to_list(), task.corpus["doc_id"].to_list()
        tokens, offsets = load_tokens(corpus.embeddings)
        if len(offsets) - 1 != len(doc_ids):
            raise DataError(f"{corpus.embeddings}: {len(offsets) - 1} stored documents for {len(doc_ids)} in task {task.name}")
        if padded.shape[2] != tokens.shape[1]:
            raise DataError(f"model {spec.name}: query vectors have {padded.shape[2]} dims, the stored documents {tokens.shape[1]}")
        tie = doc_order(doc_ids)
        settings = index_settings(spec)
        hits: list[tuple[np.ndarray, np.ndarray]] = []
        if pools is not None:
            for qi, qid in enumerate(bar(query_ids, desc="search", unit="query", progress=progress)):
                pool = pools.get(qid, np.empty(0, dtype=np.int64))
                sc = maxsim(padded[qi : qi + 1], tokens, offsets, pool)[0]
                sel = topk(sc, tie[pool], k)
                hits.append((pool[sel], sc[sel]))
        elif settings["type"] == "flat":
            step = max(1, QUERY_SCORE_BYTES // (4 * len(doc_ids)))
            for start in bar(range(0, len(query_ids), step), desc="search", unit="batch", progress=progress):
                for row in maxsim(padded[start : start + step], tokens, offsets):
                    idx = topk(row, tie, k)
                    hits.append((idx, row[idx]))
        else:
            index = PlaidIndex(corpus.index, settings)
            for qi in bar(range(len(query_ids)), desc="search", unit="query", progress=progress):
                docs, sc = index.search(padded[qi, : lengths[qi]], k)
                sel = topk(sc, tie[docs], k)
                hits.append((docs[sel], sc[sel]))
        return run_frame(query_ids, hits, doc_ids)
