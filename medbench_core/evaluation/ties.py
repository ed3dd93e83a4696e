"""Tie-aware scores and chance: each metric's exact expected value over the orders a ranking leaves open.

trec_eval breaks a tie between equal scores by document id (:mod:`medbench_core.evaluation.metrics`),
so where a model's scores tie its figure depends on how the documents happen to be named: BM25 gives
every document 0 for a query that shares no token with any of them, and trec_eval then scores the
doc-id order. Two figures sit beside the trec_eval one:

- **tie-aware** (McSherry & Najork, "Computing information retrieval performance measures efficiently
  in the presence of tied scores", ECIR 2008): the mean of the metric over every order of each run of
  tied documents, all orders equally likely, computed exactly (closed forms below, no sampling). A run
  without ties gets its trec_eval value, bit for bit. A tie that reaches the run's last row is taken to
  continue over every document of the query's universe the run left out (their scores are unknown but
  no higher; bm25 gives every document without a shared token the same 0), so a query that shares no
  token with any document scores its chance value; a last row tied with no other is taken to be above
  the documents left out, which score nothing, as trec_eval has it.
- **chance**: the same expectation for a uniformly random order of the query's whole universe (its
  candidate pool, else the corpus): what a model that knows nothing scores.

Closed forms, for a query whose ranking is a sequence of tied groups (a group of ``n`` documents at
positions ``a .. a+n-1``, 0-based, holding ``r`` relevant ones with grades summing to ``G``), positions
``i < k``, discount ``d_i = 1 / log2(i + 2)``:

- every position of the group holds a relevant document with probability ``p_i = r / n`` and has the
  expected grade ``e_i = G / n``: ``E[DCG@k] = sum e_i d_i``, nDCG@k = that over the ideal DCG@k (trec_eval's
  ``ndcg_cut``); ``E[recall@k] = sum p_i / R`` (``R``: the query's relevant judgments);
- two positions of one group both hold relevant documents with probability ``r (r - 1) / (n (n - 1))``;
  groups are independent, so with ``B_i`` the relevant documents of the groups before position ``i``'s
  and ``o_i = i - a`` its offset in its group,
  ``E[AP@k] = (1 / R) sum (p_i + p_i B_i + o_i r (r - 1) / (n (n - 1))) / (i + 1)`` (trec_eval's ``map_cut``);
- the first relevant document lies in the first group holding one, at offset ``j`` with probability
  ``P(j) = C(n - 1 - j, r - 1) / C(n, r)`` (``P(0) = r / n``, ``P(j + 1) = P(j) (n - j - r) / (n - j - 1)``):
  ``E[RR@k] = sum P(j) / (a + j + 1)`` and ``E[success@k] = sum P(j)`` over ``a + j < k``.

Only the families with a closed form here (:data:`FAMILIES`) get the two figures; the hole-aware
measures describe the judgments, not the order, and get none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

FAMILIES = ("ndcg", "recall", "mrr", "map", "hit_rate")
TIE_AWARE = "tie_aware"  # per_query.parquet column prefix: ``tie_aware.ndcg_at_10``
CHANCE = "chance"
BLOCK_QUERIES = 8192  # queries expanded to (queries x k) matrices at a time


@dataclass(frozen=True)
class Groups:
    """Tied groups of documents, one row per group: its query (index), first position, size,
    relevant documents (grade >= 1) and the sum of their grades."""

    qi: np.ndarray
    start: np.ndarray
    size: np.ndarray
    relevant: np.ndarray
    gain: np.ndarray


def supported(metrics: Iterable[str]) -> list[tuple[str, str, int]]:
    """(name, family, k) of the metrics of ``metrics`` this module computes."""
    from medbench_core.evaluation.metrics import parse_metric

    out = []
    for m in metrics:
        base, k = parse_metric(m)
        if base in FAMILIES:
            out.append((m, base, k))
    return out


def expected(groups: Groups, n_rel: np.ndarray, ideal: np.ndarray, metrics: list[tuple[str, str, int]]) -> dict[str, np.ndarray]:
    """Each metric's expected value per query over the orders within ``groups`` (closed forms of the module docstring).

    ``n_rel``: relevant judgments per query (the recall and AP denominator, trec_eval's); ``ideal``:
    (queries, depth) the judged grades sorted descending (the ideal DCG), depth at least every k.
    Groups must not overlap; a position no group covers holds nothing.
    """
    nq = len(n_rel)
    depth = max((k for _, _, k in metrics), default=0)
    out = {m: np.zeros(nq) for m, _, _ in metrics}
    if not metrics or nq == 0:
        return out
    order = np.lexsort((groups.start, groups.qi))
    g = Groups(*(np.asarray(a)[order] for a in (groups.qi, groups.start, groups.size, groups.relevant, groups.gain)))
    discount = np.array([np.log2(i + 2) for i in range(depth)])
    for lo in range(0, nq, BLOCK_QUERIES):
        hi = min(lo + BLOCK_QUERIES, nq)
        sel = (g.qi >= lo) & (g.qi < hi)
        block = Groups(g.qi[sel] - lo, g.start[sel], g.size[sel], g.relevant[sel], g.gain[sel])
        values = _block(block, hi - lo, depth, n_rel[lo:hi], ideal[lo:hi, :depth], discount, metrics)
        for m in out:
            out[m][lo:hi] = values[m]
    return out


def _block(g: Groups, nq: int, depth: int, n_rel: np.ndarray, ideal: np.ndarray, discount: np.ndarray, metrics) -> dict[str, np.ndarray]:
    size = g.size.astype(np.float64)
    rel = g.relevant.astype(np.float64)
    # Relevant documents in the groups before each group (groups sorted by query, then start).
    first_of_query = np.concatenate(([True], g.qi[1:] != g.qi[:-1])) if len(g.qi) else np.zeros(0, dtype=bool)
    csum = np.cumsum(rel)
    query_base = np.maximum.accumulate(np.where(first_of_query, csum - rel, 0.0)) if len(rel) else rel
    before = csum - rel - query_base
    # The first group of each query holding a relevant document.
    has_rel = rel > 0
    first_rel = np.zeros(len(rel), dtype=bool)
    if has_rel.any():
        idx = np.flatnonzero(has_rel)
        q_of = g.qi[idx]
        keep = np.concatenate(([True], q_of[1:] != q_of[:-1]))
        first_rel[idx[keep]] = True
    # Each group's positions inside the top depth.
    shown = np.clip(np.minimum(g.start + g.size, depth) - g.start, 0, None).astype(np.int64)
    entry_group = np.repeat(np.arange(len(shown)), shown)
    offsets = np.arange(len(entry_group)) - np.repeat(np.cumsum(shown) - shown, shown)
    pos = g.start[entry_group] + offsets
    qi = g.qi[entry_group]
    n, r = size[entry_group], rel[entry_group]
    p = r / n
    e = g.gain[entry_group].astype(np.float64) / n
    pair = np.where(n > 1, r * (r - 1) / np.where(n > 1, n * (n - 1), 1.0), 0.0)
    # P(first relevant at this offset) inside each query's first relevant group, by the recurrence.
    ratio = np.where(offsets == 0, r / n, (n - offsets + 1 - r) / np.where(n - offsets > 0, n - offsets, 1.0))
    ratio = np.where(first_rel[entry_group], np.clip(ratio, 0.0, None), 0.0)
    first = np.zeros(len(ratio))
    if len(ratio):
        # cumulative product within each group's run of entries (a group's entries are contiguous)
        starts = np.flatnonzero(np.concatenate(([True], entry_group[1:] != entry_group[:-1])))
        ends = np.append(starts[1:], len(ratio))
        for s, t in zip(starts[first_rel[entry_group[starts]]].tolist(), ends[first_rel[entry_group[starts]]].tolist()):
            first[s:t] = np.cumprod(ratio[s:t])  # at most one group per query, at most k entries each

    def dense(values: np.ndarray) -> np.ndarray:
        out = np.zeros((nq, depth))
        out[qi, pos] = values
        return out

    P, E = dense(p), dense(e)
    needs = {base for _, base, _ in metrics}
    F = dense(first) if needs & {"mrr", "hit_rate"} else None
    AP = dense((p + p * before[entry_group] + offsets * pair) / (pos + 1)) if "map" in needs else None
    out = {}
    for m, base, k in metrics:
        if base == "ndcg":
            dcg = np.cumsum(E[:, :k] / discount[:k], axis=1)[:, -1]
            idcg = np.cumsum(ideal[:, :k] / discount[:k], axis=1)[:, -1]
            out[m] = np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg != 0)
        elif base == "recall":
            out[m] = np.divide(P[:, :k].sum(axis=1), n_rel, out=np.zeros(nq), where=n_rel != 0)
        elif base == "map":
            out[m] = np.divide(np.cumsum(AP[:, :k], axis=1)[:, -1], n_rel, out=np.zeros(nq), where=n_rel != 0)
        elif base == "mrr":
            out[m] = (F[:, :k] / np.arange(1, k + 1)).sum(axis=1)
        elif base == "hit_rate":
            out[m] = np.minimum(F[:, :k].sum(axis=1), 1.0)
    return out


# --- a task's universe and judgments ----------------------------------------------------------


@dataclass(frozen=True)
class Judged:
    """What the expectations need of a task's judgments, per judged query (in qrels order)."""

    query_ids: list[str]
    n_rel: np.ndarray  # positive judgments (recall and AP denominators)
    ideal: np.ndarray  # (queries, depth) grades sorted descending
    universe: np.ndarray  # documents a query is ranked among: its pool, else the corpus
    relevant_in: np.ndarray  # relevant documents inside the universe
    gain_in: np.ndarray  # the sum of their grades
    positives: pl.DataFrame  # (query_id, doc_id, relevance) of every positive judgment


def judged(task: Any, depth: int, qrels: pl.DataFrame | None = None, *, drop_identical_ids: bool = False) -> Judged:
    """The judged queries of ``task`` with their universe (candidate pool, else corpus; less the document
    that bears the query's own id where scoring drops it: ``drop_identical_ids``) and the relevant documents inside it."""
    q = (task.qrels if qrels is None else qrels).select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.col("relevance").cast(pl.Int64))
    query_ids = q.get_column("query_id").unique(maintain_order=True).to_list()
    index = pl.DataFrame({"query_id": query_ids, "qi": np.arange(len(query_ids), dtype=np.int64)}, schema={"query_id": pl.Utf8, "qi": pl.Int64})
    pos = q.filter(pl.col("relevance") > 0).join(index, on="query_id")
    nq = len(query_ids)
    n_rel = np.bincount(pos.get_column("qi").to_numpy(), minlength=nq).astype(np.float64)
    ideal = np.zeros((nq, depth))
    if pos.height and depth:
        ranked = pos.sort(["qi", "relevance"], descending=[False, True]).with_columns(rank=pl.int_range(pl.len()).over("qi")).filter(pl.col("rank") < depth)
        ideal[ranked.get_column("qi").to_numpy(), ranked.get_column("rank").to_numpy()] = ranked.get_column("relevance").to_numpy()
    if task.candidates is not None:
        pool = task.candidates.select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8)).unique()
        size = pool.group_by("query_id").len().rename({"len": "size"})
        inside = pos.join(pool, on=["query_id", "doc_id"], how="semi")
    else:
        docs = task.corpus.select(pl.col("doc_id").cast(pl.Utf8))
        size = pl.DataFrame({"query_id": query_ids, "size": [docs.height] * nq}, schema={"query_id": pl.Utf8, "size": pl.UInt32})
        inside = pos.join(docs, on="doc_id", how="semi")
        pool = None
    sizes = index.join(size, on="query_id", how="left").get_column("size").fill_null(0).to_numpy().astype(np.int64)
    if drop_identical_ids:  # scoring drops the document that bears the query's id: it is not ranked
        own = index.select("query_id", pl.col("query_id").alias("doc_id"), "qi")
        if pool is not None:
            held = own.join(pool, on=["query_id", "doc_id"], how="semi")
        else:
            held = own.join(task.corpus.select(pl.col("doc_id").cast(pl.Utf8)), on="doc_id", how="semi")
        sizes[held.get_column("qi").to_numpy()] -= 1
        inside = inside.filter(pl.col("query_id") != pl.col("doc_id"))
    agg = inside.group_by("qi").agg(pl.len().alias("r"), pl.col("relevance").sum().alias("g"))
    relevant_in, gain_in = np.zeros(nq), np.zeros(nq)
    relevant_in[agg.get_column("qi").to_numpy()] = agg.get_column("r").to_numpy()
    gain_in[agg.get_column("qi").to_numpy()] = agg.get_column("g").to_numpy()
    return Judged(query_ids, n_rel, ideal, sizes, relevant_in, gain_in, pos.select("query_id", "doc_id", "relevance"))


def chance(j: Judged, metrics: list[tuple[str, str, int]]) -> dict[str, np.ndarray]:
    """Each metric's expected value per query under a uniformly random order of its universe: one tied group of it all."""
    nq = len(j.query_ids)
    groups = Groups(np.arange(nq), np.zeros(nq, dtype=np.int64), j.universe, j.relevant_in, j.gain_in)
    keep = groups.size > 0
    groups = Groups(*(a[keep] for a in (groups.qi, groups.start, groups.size, groups.relevant, groups.gain)))
    return expected(groups, j.n_rel, j.ideal, metrics)


@dataclass(frozen=True)
class TieAware:
    """Per-query tie-aware values, and which queries had a tie the figure resolved."""

    values: dict[str, np.ndarray]
    tied: np.ndarray  # bool per query: a tied group begins inside the deepest cutoff
    tail: np.ndarray  # bool per query: its last tied group was taken to continue over the documents left out


def tie_aware(j: Judged, run: pl.DataFrame, metrics: list[tuple[str, str, int]], trec: Mapping[str, np.ndarray]) -> TieAware:
    """Each metric's expectation over the tied orders of ``run`` (see the module docstring), per judged query.

    ``trec``: the metrics' trec_eval values per query (same order): a query without a tie inside the
    deepest cutoff keeps its value, which the expectation equals (it is one order).
    """
    nq = len(j.query_ids)
    depth = max((k for _, _, k in metrics), default=0)
    index = pl.DataFrame({"query_id": j.query_ids, "qi": np.arange(nq, dtype=np.int64)}, schema={"query_id": pl.Utf8, "qi": pl.Int64})
    rows = run.select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.col("score").cast(pl.Float64)).join(index, on="query_id")
    empty = TieAware({m: np.asarray(trec[m], dtype=np.float64).copy() for m, _, _ in metrics}, np.zeros(nq, dtype=bool), np.zeros(nq, dtype=bool))
    if rows.height == 0 or depth == 0:
        return empty
    rows = rows.join(j.positives, on=["query_id", "doc_id"], how="left").with_columns(pl.col("relevance").fill_null(0))
    rows = rows.sort(["qi", "score"], descending=[False, True])
    qi = rows.get_column("qi").to_numpy()
    score = rows.get_column("score").to_numpy()
    grade = rows.get_column("relevance").to_numpy()
    new_query = np.concatenate(([True], qi[1:] != qi[:-1]))
    new_group = new_query | np.concatenate(([True], score[1:] != score[:-1]))
    gid = np.cumsum(new_group) - 1
    row_in_query = np.arange(len(qi)) - np.repeat(np.flatnonzero(new_query), np.diff(np.append(np.flatnonzero(new_query), len(qi))))
    heads = np.flatnonzero(new_group)
    g_qi = qi[heads]
    g_start = row_in_query[heads]
    g_size = np.bincount(gid).astype(np.int64)
    g_rel = np.bincount(gid, weights=(grade >= 1)).astype(np.int64)
    g_gain = np.bincount(gid, weights=np.maximum(grade, 0)).astype(np.float64)
    # The last group of each query: continued over the documents the run left out when it is a tie.
    last = np.append(np.flatnonzero(g_qi[1:] != g_qi[:-1]), len(g_qi) - 1)
    ranked = np.bincount(qi, minlength=nq)
    left_out = np.maximum(j.universe - ranked, 0)
    rel_seen = np.bincount(qi, weights=(grade >= 1), minlength=nq)
    gain_seen = np.bincount(qi, weights=np.maximum(grade, 0), minlength=nq)
    q_last = g_qi[last]
    extend = (left_out[q_last] > 0) & (g_size[last] >= 2)
    tail = np.zeros(nq, dtype=bool)
    tail[q_last[extend]] = True
    at = last[extend]
    g_size[at] += left_out[q_last[extend]]
    g_rel[at] += np.maximum(j.relevant_in[q_last[extend]] - rel_seen[q_last[extend]], 0).astype(np.int64)
    g_gain[at] += np.maximum(j.gain_in[q_last[extend]] - gain_seen[q_last[extend]], 0)
    tied_group = (g_size >= 2) & (g_start < depth)
    tied = np.zeros(nq, dtype=bool)
    tied[g_qi[tied_group]] = True
    values = {m: np.asarray(trec[m], dtype=np.float64).copy() for m, _, _ in metrics}
    if tied.any():
        sub = np.flatnonzero(tied)
        renumber = np.full(nq, -1, dtype=np.int64)
        renumber[sub] = np.arange(len(sub))
        pick = tied[g_qi]
        groups = Groups(renumber[g_qi[pick]], g_start[pick], g_size[pick], g_rel[pick], g_gain[pick])
        got = expected(groups, j.n_rel[sub], j.ideal[sub], metrics)
        for m in values:
            values[m][sub] = got[m]
    return TieAware(values, tied, tail)
