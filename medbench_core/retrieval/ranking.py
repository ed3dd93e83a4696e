"""Top-k selection with a defined tie-break.

Equal scores are ordered by document id in descending byte order, the order trec_eval uses
when it reads a run (``comp_sim_docno``), so the rank written in a TREC file is the rank
trec_eval evaluates. Neither FAISS nor bm25s define an order among ties; this module does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

RUN_SCHEMA = {"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64, "rank": pl.Int32}


def doc_order(doc_ids: list[str]) -> np.ndarray:
    """Position of each doc id in descending id order (0 = largest id), used as a tie key.

    Ids are unique within a task (its contract), so polars' sort (byte order, the code point
    order Python compares in) gives the order ``sorted(..., reverse=True)`` gives, 10x faster.
    """
    order = pl.Series(doc_ids, dtype=pl.Utf8).arg_sort(descending=True).to_numpy()
    pos = np.empty(len(doc_ids), dtype=np.int64)
    pos[order] = np.arange(len(doc_ids))
    return pos


BOUND_BLOCK = 1024  # scores per block whose maximum bounds the k-th best from below (halved for shorter rows)
MIN_BOUND_BLOCK = 128  # no smaller: below it the rows are short enough to partition whole


def topk(scores: np.ndarray, tie_key: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` best scores, ties by ascending ``tie_key``; exact, O(n log k)."""
    n = scores.shape[0]
    if k >= n:
        cand = np.arange(n)
    else:
        pre = _above_bound(scores, k)
        sub = scores if pre is None else scores[pre]
        kth = np.partition(sub, sub.shape[0] - k)[sub.shape[0] - k]
        cand = np.flatnonzero(sub >= kth) if pre is None else pre[sub >= kth]  # keeps every tie at the boundary
    order = np.lexsort((tie_key[cand], -scores[cand].astype(np.float64)))
    return cand[order[:k]]


def _above_bound(scores: np.ndarray, k: int) -> np.ndarray | None:
    """Positions of the scores at least the k-th largest block maximum; None where that bound cannot be used.

    The k largest maxima of disjoint blocks belong to k different scores, so at least k scores
    reach the k-th largest maximum: the k-th best score is at or above it, and every score the
    selection keeps (ties included) is among these positions. Partitioning them instead of all n
    scores cut the top-k of a 1.2M-document BM25 row about tenfold (bench/bench_topk.py).
    A NaN (whose order partition and comparison do not share) takes the plain path. Rows with
    fewer than k blocks of BOUND_BLOCK scores (100K documents for k = 100) get blocks halved until
    there are k of them (at least MIN_BOUND_BLOCK scores each): any block size keeps the argument.
    """
    n, block = scores.shape[0], BOUND_BLOCK
    while n // block < k and block > MIN_BOUND_BLOCK:
        block //= 2
    blocks = n // block
    if blocks < k:
        return None
    maxima = scores[: blocks * block].reshape(blocks, block).max(axis=1)
    if np.isnan(maxima).any() or np.isnan(scores[blocks * block :]).any():
        return None
    bound = np.partition(maxima, blocks - k)[blocks - k]
    return np.flatnonzero(scores >= bound)


def run_frame(query_ids: list[str], hits: list[tuple[np.ndarray, np.ndarray]], doc_ids: list[str]) -> pl.DataFrame:
    """Assemble a run (query_id, doc_id, score, rank) from per-query (indices, scores)."""
    hits = hits[: len(query_ids)]
    counts = np.array([len(idx) for idx, _ in hits], dtype=np.int64)
    total = int(counts.sum())
    idx = np.concatenate([np.asarray(i, dtype=np.int64) for i, _ in hits]) if total else np.zeros(0, dtype=np.int64)
    score = np.concatenate([np.asarray(sc, dtype=np.float64) for _, sc in hits]) if total else np.zeros(0)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    return pl.DataFrame(
        {
            "query_id": pl.Series(query_ids[: len(hits)], dtype=pl.Utf8).gather(np.repeat(np.arange(len(hits)), counts)),
            "doc_id": pl.Series([doc_ids[i] for i in idx.tolist()], dtype=pl.Utf8),  # not all n ids: runs are k per query
            "score": score,
            "rank": (np.arange(total) - first + 1).astype(np.int32),
        },
        schema=RUN_SCHEMA,
    )


def rank_scores(
    query_ids: list[str],
    doc_ids: list[str],
    score_rows,
    k: int,
    candidates: dict[str, np.ndarray] | None = None,
) -> pl.DataFrame:
    """Rank documents for each query from an iterable of full score rows (one per query).

    With ``candidates`` (query id -> doc indices) each query ranks only its own pool.
    """
    tie = doc_order(doc_ids)
    hits = []
    for qid, row in zip(query_ids, score_rows):
        row = np.asarray(row)
        if candidates is not None:
            pool = candidates.get(qid, np.empty(0, dtype=np.int64))
            sel = topk(row[pool], tie[pool], k)
            idx = pool[sel]
        else:
            idx = topk(row, tie, k)
        hits.append((idx, row[idx]))
    return run_frame(query_ids, hits, doc_ids)


TREC_BLOCK = 100_000  # rows formatted at a time: a 164K-query run holds 16M lines


def write_trec(run: pl.DataFrame, tag: str) -> str:
    """TREC run format: ``qid Q0 docid rank score tag``, scores with full float precision."""
    lines = [f"{q} Q0 {d} {r} {s!r} {tag}" for q, d, s, r in run.select("query_id", "doc_id", "score", "rank").iter_rows()]
    return "\n".join(lines) + ("\n" if lines else "")


def write_trec_file(run: pl.DataFrame, path: str | Path, tag: str) -> None:
    """:func:`write_trec` into ``path``, a block of rows at a time (the same bytes, without the whole text in memory)."""
    with open(path, "w") as f:
        for start in range(0, run.height, TREC_BLOCK):
            f.write(write_trec(run.slice(start, TREC_BLOCK), tag))
