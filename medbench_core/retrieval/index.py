"""FAISS indices: build (on a GPU where one exists), save, load and exact search with ties by doc id.

FAISS loads a file with a flipped data byte silently, so callers verify the artifact's sha256
manifest (:mod:`medbench_core.storage`) before :func:`load_index`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.progress import bar
from medbench_core.retrieval.ranking import doc_order, run_frame, topk
from medbench_core.storage import atomic_path

INDEX_TYPES = ("flat", "ivf", "hnsw")
ADD_CHUNK = 16_384  # vectors per add() of a flat index: one progress step


def index_settings(spec: dict[str, Any] | None, n_rows: int) -> dict[str, Any]:
    """A models.yaml ``index:`` with FAISS's defaults filled in for ``n_rows`` vectors: the one place an index type is
    checked and its parameters chosen (:func:`build_index` builds it, :func:`index_bytes` sizes it).

    flat: no parameter; ivf: ``nlist`` (default sqrt(n), 1 to 4096) and ``nprobe`` (default min(nlist, 8));
    hnsw: ``m`` (32), ``ef_construction`` (200), ``ef_search`` (128).
    """
    spec = dict(spec or {"type": "flat"})
    index_type = spec.get("type", "flat")
    if index_type not in INDEX_TYPES:
        raise DataError(f"index type {index_type!r} unknown; use one of {INDEX_TYPES}")
    if index_type == "ivf":
        nlist = int(spec.get("nlist", max(1, min(4096, int(np.sqrt(max(n_rows, 1)))))))
        return {"type": index_type, "nlist": nlist, "nprobe": int(spec.get("nprobe", min(nlist, 8)))}
    if index_type == "hnsw":
        return {
            "type": index_type,
            "m": int(spec.get("m", 32)),
            "ef_construction": int(spec.get("ef_construction", 200)),
            "ef_search": int(spec.get("ef_search", 128)),
        }
    return {"type": index_type}


def index_bytes(n_rows: int, dim: int, spec: dict[str, Any] | None = None) -> int:
    """Memory a FAISS index over ``n_rows`` x ``dim`` float32 vectors holds, by type.

    flat: the vectors; ivf: the vectors, their ids (8 bytes each) and the centroids; hnsw: the
    vectors and about ``2 * m`` neighbour links (4 bytes) per vector on level 0, 10 % more above.
    """
    settings = index_settings(spec, n_rows)
    vectors = n_rows * dim * 4
    if settings["type"] == "ivf":
        return vectors + n_rows * 8 + settings["nlist"] * dim * 4
    if settings["type"] == "hnsw":
        return vectors + int(n_rows * 2 * settings["m"] * 4 * 1.1)
    return vectors


def _add(index: Any, emb: np.ndarray, index_type: str, progress: bool | None) -> None:
    # A flat add only appends, so chunks give the same index. IVF assigns through a FAISS search
    # and HNSW links each vector to those added before it: FAISS picks its kernels by batch size,
    # so they are added in one call (one progress step), exactly as before.
    step = ADD_CHUNK if index_type == "flat" else max(emb.shape[0], 1)
    for i in bar(range(0, emb.shape[0], step), desc=f"faiss {index_type} add", unit="chunk", progress=progress):
        index.add(emb[i : i + step])


def gpu_available() -> bool:
    import faiss

    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def build_index(
    emb: np.ndarray,
    spec: dict[str, Any] | None = None,
    use_gpu: bool | None = None,
    progress: bool | None = False,
    add_blocks: Callable[[], Iterable[np.ndarray]] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Build an inner-product index over ``emb``; returns ``(cpu_index, info)``.

    ``spec``: ``{"type": "flat"}``, ``{"type": "ivf", "nlist": 64, "nprobe": 8}`` or
    ``{"type": "hnsw", "m": 32, "ef_search": 128}``. With a GPU (``use_gpu`` None means
    "if present") flat and IVF are built there and copied back with ``index_gpu_to_cpu``;
    HNSW has no GPU build in FAISS and is always built on the CPU. ``info`` records the choice.
    ``progress``: a bar over the vectors added (see :mod:`medbench_core.progress`).

    ``add_blocks`` (optional) yields ``emb``'s rows again, block by block, for a CPU flat or IVF
    index to add them that way (same index bytes; ``emb`` may then be a memory map that only
    IVF training reads). HNSW adds all rows at once: blocks would change its graph.
    """
    import faiss

    spec = dict(spec or {"type": "flat"})
    index_type = index_settings(spec, 0)["type"]  # refuses an unknown type before the vectors are read
    source = emb  # a memory map (np.load(mmap_mode="r")) stays one: see _drop_mapped_pages
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] == 0:
        raise DataError(f"cannot index embeddings of shape {emb.shape}")
    n, dim = emb.shape
    settings = index_settings(spec, n)
    if index_type == "flat":
        index = faiss.IndexFlatIP(dim)
    elif index_type == "ivf":
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, settings["nlist"], faiss.METRIC_INNER_PRODUCT)
        index.nprobe = settings["nprobe"]
    else:
        index = faiss.IndexHNSWFlat(dim, settings["m"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = settings["ef_construction"]
        index.hnsw.efSearch = settings["ef_search"]

    want_gpu = gpu_available() if use_gpu is None else use_gpu
    on_gpu = bool(want_gpu and index_type != "hnsw")
    if on_gpu:
        res = faiss.StandardGpuResources()
        gpu_index = faiss.index_cpu_to_gpu(res, 0, index)
        if index_type == "ivf":
            gpu_index.train(emb)
        _add(gpu_index, emb, index_type, progress)
        index = faiss.index_gpu_to_cpu(gpu_index)
    else:
        if index_type == "ivf":
            index.train(emb)
            _drop_mapped_pages(source)
        if add_blocks is not None and index_type != "hnsw":
            if index_type == "flat":  # room for every vector at once: growing block by block would copy them (peak 2x)
                index.codes.resize(n * index.code_size)
                index.codes.resize(0)
            for block in bar(add_blocks(), desc=f"faiss {index_type} add", unit="block", progress=progress):
                index.add(np.ascontiguousarray(block, dtype=np.float32))
            if index.ntotal != n:
                raise DataError(f"index blocks held {index.ntotal} vectors for {n} embeddings")
        else:
            _add(index, emb, index_type, progress)
    info = {
        "type": index_type,
        "params": spec,
        "built_on": "gpu" if on_gpu else "cpu",
        "ntotal": int(index.ntotal),
        "dim": dim,
        "faiss_version": faiss.__version__,
    }
    return index, info


def _drop_mapped_pages(emb: Any) -> None:
    """Give back the file pages IVF training read through a read-only memory map (they are charged to
    this process until unmapped); the blocks added next are read anew, one at a time."""
    import mmap

    handle = getattr(emb, "_mmap", None)  # numpy.memmap keeps its mmap object here
    if handle is not None and hasattr(mmap, "MADV_DONTNEED"):
        handle.madvise(mmap.MADV_DONTNEED)


def save_index(index: Any, path: str | Path) -> None:
    import faiss

    with atomic_path(path) as tmp:
        faiss.write_index(index, str(tmp))


def load_index(path: str | Path, mmap: bool = False) -> Any:
    """Read a FAISS index; with ``mmap`` its stored vectors stay in the file, paged in as searched.

    Map only a file whose manifest was verified: a mapped file truncated later faults on access.
    """
    import faiss

    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: index file not found")
    try:
        return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC) if mmap else faiss.read_index(str(path))
    except RuntimeError as exc:
        raise DataError(f"{path}: FAISS could not read the index ({str(exc).splitlines()[0]})") from exc


def search(
    index: Any,
    queries: np.ndarray,
    query_ids: list[str],
    doc_ids: list[str],
    k: int,
    *,
    doc_emb: np.ndarray | None = None,
    candidates: dict[str, np.ndarray] | None = None,
    progress: bool | None = False,
) -> pl.DataFrame:
    """Top ``k`` documents per query, ties broken by doc id (see :mod:`medbench_core.retrieval.ranking`).

    FAISS's own order among equal scores is undefined, so each query asks for a margin beyond
    ``k`` and asks again for everything when a tie reaches the margin. With ``candidates`` the
    query scores only its own pool against ``doc_emb`` (exact). ``progress``: a bar over the
    queries as they are ranked (FAISS searches them in one call: it picks its kernels by batch
    size, and a split batch could change the last bits of a score).
    """
    import faiss

    queries = np.ascontiguousarray(queries, dtype=np.float32)
    n = len(doc_ids)
    hits: list[tuple[np.ndarray, np.ndarray]] = []
    if candidates is not None:
        tie = doc_order(doc_ids)
        if doc_emb is None:
            raise DataError("candidate-set search needs the document embeddings")
        for qi, qid in enumerate(bar(query_ids, desc="search", unit="query", progress=progress)):
            pool = candidates.get(qid, np.empty(0, dtype=np.int64))
            sc = doc_emb[pool] @ queries[qi]
            sel = topk(sc, tie[pool], k)
            hits.append((pool[sel], sc[sel]))
        return run_frame(query_ids, hits, doc_ids)

    k2 = min(n, k + 32)
    scores, idx = index.search(queries, k2)
    exact = isinstance(index, faiss.IndexFlat)
    # Rows FAISS filled whose k-th score is not tied with the margin's last: one row-wise sort for
    # all of them (score descending, then the doc id order), as topk sorts each.
    easy = (idx >= 0).all(axis=1)
    if exact and k <= k2 < n:
        easy &= scores[:, -1] != scores[:, k - 1]
    # FAISS returns each row by descending score: a row with no two equal scores within its first
    # k + 1 is already in the final order. Rows with ties are sorted again with tie keys: the
    # returned documents' rank among themselves by descending id, which orders any two of them as
    # the whole corpus's doc_order does, without sorting all n ids.
    head = min(k + 1, k2)
    tied = (scores[:, 1:head] == scores[:, : head - 1]).any(axis=1) | ~easy
    returned, where = np.unique(np.maximum(idx[tied], 0), return_inverse=True)
    local = np.empty(len(returned), dtype=np.int64)
    local[pl.Series([doc_ids[i] for i in returned.tolist()], dtype=pl.Utf8).arg_sort(descending=True).to_numpy()] = np.arange(len(returned))
    top_i, top_s = idx[:, :k].copy(), scores[:, :k].copy()
    if tied.any():
        order = np.lexsort((local[where].reshape(-1, k2), -scores[tied]), axis=-1)[:, :k]
        top_i[tied], top_s[tied] = np.take_along_axis(idx[tied], order, axis=1), np.take_along_axis(scores[tied], order, axis=1)
    tie = None
    for qi in bar(range(len(query_ids)), desc="rank", unit="query", progress=progress):
        if easy[qi]:
            hits.append((top_i[qi], top_s[qi]))
            continue
        sc, ix = scores[qi], idx[qi]
        valid = ix >= 0
        sc, ix = sc[valid], ix[valid]
        if exact and k2 < n and len(sc) >= k and sc[-1] == sc[min(k, len(sc)) - 1]:
            full_s, full_i = index.search(queries[qi : qi + 1], n)
            sc, ix = full_s[0], full_i[0]
            tie = doc_order(doc_ids) if tie is None else tie  # a tie past the margin: every id may matter
            sel = topk(sc, tie[ix], k)
        else:
            sel = topk(sc, local[np.searchsorted(returned, ix)], k)
        hits.append((ix[sel], sc[sel]))
    return run_frame(query_ids, hits, doc_ids)
