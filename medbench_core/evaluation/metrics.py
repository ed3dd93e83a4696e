"""Retrieval metrics with trec_eval's definitions, per query and mean.

Ranking rule (as trec_eval's ``comp_sim_docno``): documents are ordered by score descending,
and equal scores by document id in *descending* byte order. Every function here ranks a run
that way, so values equal pytrec_eval-terrier's on the same run (tests check to 1e-9).

Definitions, for a query with judged relevance ``rel(d)`` and ranking ``d_1, d_2, ...``:

- ``ndcg_at_k``  = DCG@k / IDCG@k, DCG@k = sum_{i<=k} g(d_i) / log2(i+1), gain g = rel if rel > 0
  else 0; IDCG from all judged gains sorted descending (trec_eval ``ndcg_cut``); 0 when IDCG is 0.
- ``recall_at_k`` = |relevant in top k| / |relevant|, relevant meaning rel >= 1.
- ``mrr_at_k``   = 1 / rank of the first relevant document within the top k, else 0.
- ``map_at_k``   = (sum over relevant d_i with i <= k of precision@i) / |relevant|.
- ``hit_rate_at_k`` = 1 when a relevant document is in the top k, else 0 (trec_eval ``success``;
  UniIR's and CLIP's "Recall@k").

Hole-aware measures (what a cell rests on when ranked documents are unjudged; definitions in
:mod:`medbench_core.evaluation.holes`): ``judged_at_k`` (ir_measures ``Judged@k``), ``holes_at_k``,
``bpref_at_k`` (trec_eval's bpref over the top k), ``ndcg_condensed_at_k`` (Sakai's condensed
list, trec_eval ``-J``) and the bounds ``ndcg_lower_at_k`` / ``ndcg_upper_at_k`` over every
completion of the judgments.

Queries that are judged but absent from the run score 0 (trec_eval ``-c``); the mean is over
every judged query.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.metric_names import DEFAULT_METRICS, HOLE_METRICS, TREC_METRICS  # noqa: F401  (re-exported; the names sit below taskdata)

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]


# metric family -> "module:function" under medbench_core.evaluation computing it per query (see
# medbench_core/evaluation/kernels.py for the signature). Adding a metric: its function, one line
# here, its tests against pytrec_eval (docs/contributing/adding_a_metric.md).
METRICS: dict[str, str] = {
    "ndcg": "kernels:ndcg",
    "recall": "kernels:recall",
    "mrr": "kernels:mrr",
    "map": "kernels:average_precision",
    "judged": "holes:judged",
    "holes": "holes:holes",
    "bpref": "holes:bpref",
    "ndcg_condensed": "holes:ndcg_condensed",
    "ndcg_lower": "holes:ndcg_lower",
    "ndcg_upper": "holes:ndcg_upper",
    "hit_rate": "kernels:hit_rate",
}


def parse_metric(name: str) -> tuple[str, int]:
    """``"ndcg_at_10"`` -> ``("ndcg", 10)``; unknown names raise with the known ones listed."""
    base, sep, k = name.rpartition("_at_")
    if not sep or base not in METRICS or not k.isdigit() or int(k) <= 0:
        raise ValueError(f"unknown metric {name!r}; use one of {'/'.join(METRICS)} followed by _at_K, e.g. ndcg_at_10")
    return base, int(k)


def kernel(base: str):
    """The per-query function of metric family ``base`` (:data:`METRICS`)."""
    import importlib

    module, function = METRICS[base].split(":")
    return getattr(importlib.import_module(f"medbench_core.evaluation.{module}"), function)


@dataclass(frozen=True)
class Evaluation:
    """Per-query values (query id -> metric -> value) and their means over judged queries."""

    per_query: dict[str, dict[str, float]]
    mean: dict[str, float]

    def per_query_frame(self) -> pl.DataFrame:
        rows = [{"query_id": q, **vals} for q, vals in sorted(self.per_query.items())]
        return pl.DataFrame(rows)


def evaluate(qrels: Qrels, run: Run, metrics: Iterable[str] = DEFAULT_METRICS, *, unjudged: Mapping[str, int] | None = None) -> Evaluation:
    """Score ``run`` against ``qrels`` (see the module docstring for the definitions).

    The dict form of :func:`evaluate_frame`: same values, bit for bit.
    """
    q_col = [q for q, rels in qrels.items() for _ in rels]
    qrels_df = pl.DataFrame(
        {"query_id": q_col, "doc_id": [d for rels in qrels.values() for d in rels], "relevance": [int(r) for rels in qrels.values() for r in rels.values()]},
        schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "relevance": pl.Int64},
    )
    run_df = pl.DataFrame(
        {
            "query_id": [q for q, docs in run.items() for _ in docs],
            "doc_id": [d for docs in run.values() for d in docs],
            "score": [float(s) for docs in run.values() for s in docs.values()],
        },
        schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64},
    )
    return evaluate_frame(qrels_df, run_df, metrics, unjudged=unjudged)


def evaluate_frame(
    qrels: pl.DataFrame, run: pl.DataFrame, metrics: Iterable[str] = DEFAULT_METRICS, *, unjudged: Mapping[str, int] | None = None
) -> Evaluation:
    """Score a run frame (query_id, doc_id, score) against a qrels frame (query_id, doc_id, relevance).

    Each (query, doc) pair appears at most once in each frame (a curated task's contract and
    medbench's runs guarantee it; the dict form of :func:`evaluate` cannot repeat one).
    Vectorised, yet bit-identical to summing each query's terms in rank order as trec_eval's
    definitions read: only each query's top ``max k`` run rows are ranked (by score, then doc id
    descending; past them, for the condensed list, only the judged rows of a query whose top holds
    too few judged documents), sums accumulate left to right (``np.cumsum``), discounts are
    ``math.log2`` values, and the mean adds queries in their order of first appearance in ``qrels``.
    ``unjudged``: query id -> unjudged documents in its universe (corpus or candidate pool), for
    the bounds of :mod:`medbench_core.evaluation.holes`; a query not in it counts as having at
    least k.
    """
    metrics = list(metrics)
    parsed = [(m, *parse_metric(m)) for m in metrics]
    fns = {base: kernel(base) for _, base, _ in parsed}
    depth = max((k for _, _, k in parsed), default=1)

    # Judged queries in order of first appearance; each row's query as a dense index. Frames are
    # grouped by query in practice (curated qrels, run files), so the ids are hashed once per
    # run of equal ids rather than once per row.
    q_values, q_lengths = _id_runs(qrels.get_column("query_id"))
    query_ids = q_values.unique(maintain_order=True).to_list()
    nq = len(query_ids)
    qrel_q = _index_rows(q_values, q_lengths, query_ids)
    run_q = _index_rows(*_id_runs(run.get_column("query_id")), query_ids)
    if len(run_q) and not (run_q >= 0).any():
        extra = run.get_column("query_id").unique(maintain_order=True).head(5).to_list()
        raise DataError(f"no run query id matches a judged query (run has e.g. {extra}); check the task the run was made for")
    # A kernel that reads the ranking past rank k (the condensed list) gets each query's first k
    # judged documents; the top ``depth`` ranked here hold them for most queries (below).
    condensed_depth = max((k for _, base, k in parsed if getattr(fns[base], "whole_run", False)), default=0)
    # Ranked 10k deep, a query whose run is a tenth judged holds them there: the join of a query's
    # whole run, past it, cost 3.5x more (nDCG@10 condensed alone, bench/bench_metrics.py's data).
    depth = max(depth, CONDENSED_RANKED * condensed_depth)

    # A grade <= 0 and an unjudged document count alike in the classic metrics; the hole-aware
    # kernels also see which ranked documents are judged. A negative grade is trec_eval's "in the
    # pool, unjudged" (form_res_rels.c: RELVALUE_UNJUDGED; m_unjudged.c counts it unjudged): not a
    # judged non-relevant document, so a hole to Judged@k, bpref, the condensed list and the bounds.
    rel = qrels.get_column("relevance").cast(pl.Int64).to_numpy()
    pos = np.flatnonzero(rel > 0)
    pos_q, pos_rel = qrel_q[pos], rel[pos]
    n_rel = np.bincount(pos_q, minlength=nq)
    ideal = _ideal_gains(pos_q, pos_rel, nq, depth)
    holes_asked = any(getattr(fn, "takes_ranking", False) for fn in fns.values())

    gains = np.zeros((nq, depth), dtype=np.int64)
    judged = np.zeros((nq, depth), dtype=bool)
    ranked = _top_ranked(run, run_q, depth)
    if ranked.height and (len(pos) or holes_asked and len(rel)):
        doc_ids = qrels.get_column("doc_id").cast(pl.Utf8)
        if holes_asked:  # every judgment (the column as it is: no copy of the ids)
            judgments = pl.DataFrame({"qi": qrel_q, "doc_id": doc_ids, "rel": rel})
        else:
            judgments = pl.DataFrame({"qi": qrel_q[pos], "doc_id": doc_ids.gather(pos), "rel": pos_rel})
        hits = _pair_join(ranked, judgments)
        if hits.height > ranked.height:
            raise DataError("qrels judge the same (query, document) pair twice; a curated task's contract forbids it")
        qi, rank = hits.get_column("qi").to_numpy(), hits.get_column("rank").to_numpy()
        hit_rel = hits.get_column("rel").to_numpy()
        gains[qi, rank] = np.maximum(hit_rel, 0)
        judged[qi, rank] = hit_rel >= 0
    condensed = None
    if condensed_depth:
        condensed = _condensed_gains(gains, judged, run, run_q, judgments if ranked.height and len(rel) else None, depth, condensed_depth)

    discount = np.array([math.log2(i + 2) for i in range(depth)])
    ranking = None
    if holes_asked:
        from medbench_core.evaluation.holes import JudgedRanking

        filled = np.zeros((nq, depth), dtype=bool)
        if ranked.height:
            filled[ranked.get_column("qi").to_numpy(), ranked.get_column("rank").to_numpy()] = True
        known = unjudged or {}
        ranking = JudgedRanking(
            gains=gains, judged=judged, ranked=filled, ideal=ideal, n_rel=n_rel,
            n_nonrel=np.bincount(qrel_q[rel == 0], minlength=nq), top_grade=max(int(rel.max()) if len(rel) else 1, 1),
            unjudged=np.array([int(known.get(q, -1)) for q in query_ids], dtype=np.int64), discount=discount,
            condensed=condensed,
        )  # fmt: skip
    values = {}
    for m, base, k in parsed:
        fn = fns[base]
        values[m] = (fn(ranking, k) if getattr(fn, "takes_ranking", False) else fn(gains[:, :k], ideal[:, :k], n_rel, discount[:k])).tolist()
    per_query = dict(zip(query_ids, (dict(zip(metrics, row)) for row in zip(*(values[m] for m in metrics)))))
    mean = {m: (sum(values[m]) / nq if nq else 0.0) for m in metrics}  # in query order, as before: same bits
    return Evaluation(per_query=per_query, mean=mean)


CONDENSED_RANKED = 10  # how many times its cut the condensed list's query is ranked before its whole run is joined


def _condensed_gains(
    gains: np.ndarray, judged: np.ndarray, run: pl.DataFrame, run_q: np.ndarray, judgments: pl.DataFrame | None, depth: int, k: int
) -> np.ndarray:
    """(nq, k): each judged query's judged grades in rank order, unjudged documents (a negative grade too) left out, cut at k.

    Read off the ranked top ``depth`` (``gains``, ``judged``) where it holds k judged documents or
    the query's whole run. The other queries' run rows alone are joined with their judgments, and
    their judged rows ranked on their own (trec_eval's order restricted to them is the order of
    the condensed list), so a deep run with sparse judgments costs what those queries hold.
    """
    nq = gains.shape[0]
    out = np.zeros((nq, k), dtype=np.int64)
    position = np.cumsum(judged, axis=1) - 1
    qi, col = np.nonzero(judged & (position < k))
    out[qi, position[qi, col]] = gains[qi, col]
    if judgments is None:
        return out
    short = judged.sum(axis=1) < k
    if not short.any():
        return out
    in_run = np.bincount(run_q[run_q >= 0], minlength=nq)
    deep = short & (in_run > depth)
    if not deep.any():
        return out
    rows = np.flatnonzero(deep[run_q] & (run_q >= 0))
    # "rank" carries each row's position in the run through the join.
    theirs = pl.DataFrame(
        {"qi": run_q[rows].astype(np.int64), "doc_id": run.get_column("doc_id").cast(pl.Utf8).gather(rows), "rank": rows},
        schema={"qi": pl.Int64, "doc_id": pl.Utf8, "rank": pl.Int64},
    )
    # A negative grade is unjudged (trec_eval's "in the pool, unjudged"): not in the condensed list.
    wanted = deep[judgments.get_column("qi").to_numpy()] & (judgments.get_column("rel").to_numpy() >= 0)
    hits = _pair_join(theirs, judgments.filter(pl.Series(wanted)))
    hq = hits.get_column("qi").to_numpy()
    score = run.get_column("score").cast(pl.Float64).to_numpy()[hits.get_column("rank").to_numpy()]
    keep = _at_or_above_depth(hq, score, k)
    order, qi, rank = _ranked_prefix(hq[keep], score[keep], hits.get_column("doc_id").gather(keep), k)
    out[deep] = 0
    out[qi, rank] = np.maximum(hits.get_column("rel").to_numpy()[keep][order], 0)
    return out


def _id_runs(ids: pl.Series) -> tuple[pl.Series, np.ndarray]:
    """Run-length encoding of an id column: (the value of each run, its length)."""
    runs = ids.cast(pl.Utf8).rle()
    return runs.struct.field("value"), runs.struct.field("len").to_numpy()


def _index_rows(values: pl.Series, lengths: np.ndarray, query_ids: list[str]) -> np.ndarray:
    """Each row's position in ``query_ids`` (-1 when absent), from its run-length encoding."""
    # 32-bit indices when they fit: half the memory to write (and fault in) for a run of 10M rows.
    dtype, pl_dtype = (np.int32, pl.Int32) if len(query_ids) < 2**31 else (np.int64, pl.Int64)
    known = pl.DataFrame({"query_id": query_ids, "qi": np.arange(len(query_ids), dtype=dtype)}, schema={"query_id": pl.Utf8, "qi": pl_dtype})
    per_run = pl.DataFrame({"query_id": values}).join(known, on="query_id", how="left", maintain_order="left").get_column("qi")
    return np.repeat(per_run.fill_null(-1).to_numpy(), lengths)


def _top_ranked(run: pl.DataFrame, run_q: np.ndarray, depth: int) -> pl.DataFrame:
    """(qi, doc_id, rank from 0) of each judged query's first ``depth`` run rows in trec_eval's order."""
    score = run.get_column("score").cast(pl.Float64).to_numpy()
    judged = run_q >= 0
    rows = None if judged.all() else np.flatnonzero(judged)
    if rows is not None:
        score, run_q = score[rows], run_q[rows]
    # A score threshold per query (its depth-th best) first: only the rows at or above it,
    # ties included, are ranked.
    keep = _at_or_above_depth(run_q, score, depth)
    docs = run.get_column("doc_id").cast(pl.Utf8).gather(keep if rows is None else rows[keep])
    order, qi, rank = _ranked_prefix(run_q[keep].astype(np.int64, copy=False), score[keep], docs, depth)
    return pl.DataFrame({"qi": qi, "doc_id": docs.gather(order), "rank": rank}, schema={"qi": pl.Int64, "doc_id": pl.Utf8, "rank": pl.Int64})


def _ranked_prefix(qi: np.ndarray, score: np.ndarray, docs: pl.Series, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each query's first ``depth`` rows in trec_eval's order: (their positions in the inputs, query index, rank from 0)."""
    order = _trec_order(qi, score, docs)
    qi = qi[order]
    # Rank within each query: position in the sorted rows minus the position of the query's first row.
    first = np.flatnonzero(np.concatenate(([True], qi[1:] != qi[:-1]))) if len(qi) else np.zeros(0, dtype=np.int64)
    rank = np.arange(len(qi), dtype=np.int64) - np.repeat(first, np.diff(np.append(first, len(qi))))
    top = np.flatnonzero(rank < depth)
    return order[top], qi[top], rank[top]


def _trec_order(qi: np.ndarray, score: np.ndarray, docs: pl.Series) -> np.ndarray:
    """The permutation that sorts rows by query index, then score descending, then doc id descending (byte order).

    One integer sort on (query, score rank) keys; only the rows whose key is shared (tied scores
    within a query) are then sorted again by their doc ids.
    """
    if not len(qi):
        return np.zeros(0, dtype=np.int64)
    # Distinct scores ascending (-0.0 equals 0.0; NaN, if any, last), so n - 1 - inv ranks them descending.
    distinct, inv = np.unique(score, return_inverse=True)
    n = len(distinct)
    if int(qi.max()) >= (2**62) // n:  # the key would overflow: sort the rows as they are
        frame = pl.DataFrame({"qi": qi, "score": score + 0.0, "doc_id": docs})
        return frame.with_row_index("i").sort(["qi", "score", "doc_id"], descending=[False, True, True]).get_column("i").to_numpy().astype(np.int64)
    key = qi * n + (n - 1 - inv.astype(np.int64, copy=False))
    order = np.argsort(key)
    sorted_key = key[order]
    same = sorted_key[1:] == sorted_key[:-1]
    if same.any():
        tied = np.zeros(len(key), dtype=bool)
        tied[1:] |= same
        tied[:-1] |= same
        at = np.flatnonzero(tied)
        # The tied rows keep their block (sorted by key); within a key, doc id descending.
        sub = pl.DataFrame({"key": sorted_key[at], "doc_id": docs.gather(order[at])}).with_row_index("i")
        perm = sub.sort(["key", "doc_id"], descending=[False, True]).get_column("i").to_numpy()
        order[at] = order[at][perm]
    return order


def _at_or_above_depth(run_q: np.ndarray, score: np.ndarray, depth: int) -> np.ndarray:
    """Rows whose score is at least their query's ``depth``-th best score (every row of a shorter query)."""
    n = len(run_q)
    if not n:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(run_q[1:] != run_q[:-1]) + 1
    groups = len(starts) + 1
    width = n // groups
    if width * groups == n and (starts == np.arange(1, groups) * width).all() and not np.isnan(score.min()):
        # Rows grouped by query, as many per query (a run file cut at one depth)...
        heads = run_q[::width]
        if len(np.unique(heads)) == groups:  # ...each query in one group: one partition per row
            if width <= depth:
                return np.arange(n)
            rows = score.reshape(-1, width)
            threshold = np.empty(groups)
            step = max(1, (1 << 18) // width)  # blocks of ~2 MB: partition copies its input
            for b in range(0, groups, step):
                threshold[b : b + step] = np.partition(rows[b : b + step], width - depth, axis=1)[:, width - depth]  # the depth-th largest
            return np.flatnonzero(rows >= threshold[:, None])
    sizes = np.bincount(run_q)
    if sizes.max() <= depth:
        return np.arange(n)
    cut = pl.DataFrame({"qi": run_q, "score": score}).group_by("qi").agg(pl.col("score").top_k(depth).min())
    threshold = np.full(len(sizes), np.inf)
    threshold[cut.get_column("qi").to_numpy()] = cut.get_column("score").to_numpy()
    return np.flatnonzero(score >= threshold[run_q])


def _pair_join(ranked: pl.DataFrame, judgments: pl.DataFrame) -> pl.DataFrame:
    """Inner join on (qi, doc_id): (qi, doc_id, rank, rel) of every ranked row that a judgment names.

    Matched through a 64-bit key of each row (its doc id's hash mixed with its query index), then
    checked for exact equality (a hash collision cannot add a row); the strings are compared for
    the matches alone. Every judgment against a run's top 100 (what the hole-aware measures read)
    is mostly judgments that name no ranked document: a table per query drops most of those first.
    """
    ranked_q, ranked_hash = ranked.get_column("qi").to_numpy(), ranked.get_column("doc_id").hash(seed=0).to_numpy()
    judged_q, judged_hash = judgments.get_column("qi").to_numpy(), judgments.get_column("doc_id").hash(seed=0).to_numpy()
    kept = None
    if len(judged_q) > 4 * len(ranked_q) and len(judged_q) > 1 << 16:
        kept = _may_match(judged_q, judged_hash, ranked_q, ranked_hash)
        if kept is not None:
            judged_q, judged_hash = judged_q[kept], judged_hash[kept]
    i, j = _equal_keys(_mixed_key(ranked_q, ranked_hash), _mixed_key(judged_q, judged_hash))
    if kept is not None:
        j = kept[j]
    qi = ranked_q[i]
    docs = ranked.get_column("doc_id").gather(i)
    same = (qi == judgments.get_column("qi").to_numpy()[j]) & (docs == judgments.get_column("doc_id").gather(j)).to_numpy()
    if not same.all():
        i, j, qi, docs = i[same], j[same], qi[same], docs.filter(pl.Series(same))
    return pl.DataFrame(
        {"qi": qi, "doc_id": docs, "rank": ranked.get_column("rank").to_numpy()[i], "rel": judgments.get_column("rel").to_numpy()[j]},
        schema={"qi": pl.Int64, "doc_id": pl.Utf8, "rank": pl.Int64, "rel": pl.Int64},
    )


def _mixed_key(qi: np.ndarray, doc_hash: np.ndarray) -> np.ndarray:
    """A row's 64-bit key: its doc id's hash mixed with its query index (one new array, then in place)."""
    key = qi.astype(np.uint64)
    key *= np.uint64(0x9E3779B97F4A7C15)
    key ^= doc_hash
    return key


def _may_match(many_q: np.ndarray, many_hash: np.ndarray, few_q: np.ndarray, few_hash: np.ndarray) -> np.ndarray | None:
    """Positions in ``many`` whose query and top hash bits some row of ``few`` shares (a superset of its matches); None: no filter fits.

    One small table per query, about 8 slots a row of ``few``, so one in 8 of the others passes.
    Judgments come grouped by query, so the look-ups walk the table in order rather than all over
    it (a random look-up into megabytes costs more than the sort it saves).
    """
    if not len(few_q):
        return np.zeros(0, dtype=np.int64)
    bits = int(np.bincount(few_q).max()).bit_length() + 3
    n_queries = max(int(few_q.max()), int(many_q.max())) + 1
    if n_queries << bits > 2 * len(many_q):
        return None
    shift = np.uint64(64 - bits)
    present = np.zeros(n_queries << bits, dtype=bool)
    present[(few_q.astype(np.int64) << bits) | (few_hash >> shift).view(np.int64)] = True
    slot = many_q.astype(np.int64) << bits
    slot |= (many_hash >> shift).view(np.int64)
    return np.flatnonzero(present[slot])


def _equal_keys(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair (i, j) with ``left[i]`` and ``right[j]`` equal in all but their lowest bits (candidates: callers check them).

    A sort-merge on single integers: each row's number and side replace the low bits of its key,
    both sides go into one array and one plain sort (no argsort) brings equal keys together.
    """
    if not len(left) or not len(right):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    bits = np.uint64(max(len(left), len(right)).bit_length() + 1)
    low = (np.uint64(1) << bits) - np.uint64(1)
    one = np.uint64(1)
    packed = np.concatenate(
        ((left & ~low) | (np.arange(len(left), dtype=np.uint64) << one), (right & ~low) | (np.arange(len(right), dtype=np.uint64) << one) | one)
    )
    packed.sort()
    high = packed >> bits
    same = high[1:] == high[:-1]
    at = np.flatnonzero(same)  # packed[i] and packed[i + 1] share a key
    if not len(at):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    # A run of equal keys is nearly always one match: two entries, one per side. At millions of
    # rows a hash collision beside some match is all but certain, so the longer runs (that, or a
    # pair judged twice) are expanded apart, vectorised too: every left x right pair of the run.
    chained = np.zeros(len(at), dtype=bool)
    chained[1:] = np.diff(at) == 1
    longer = chained.copy()
    longer[:-1] |= chained[1:]
    i, j = _cross_pairs_of_two(packed[at[~longer]], packed[at[~longer] + 1], low, one)
    if not longer.any():
        return i, j
    where = np.unique(np.concatenate((at[longer], at[longer] + 1)))
    opens = np.ones(len(where), dtype=bool)
    opens[where > 0] = ~same[where[where > 0] - 1]
    run_id = np.cumsum(opens) - 1
    entries = packed[where]
    right = (entries & one) == one
    left_rows, left_run = ((entries[~right] & low) >> one).astype(np.int64), run_id[~right]
    right_rows = ((entries[right] & low) >> one).astype(np.int64)
    per_run = np.bincount(run_id[right], minlength=int(run_id[-1]) + 1)
    first_right = np.cumsum(per_run) - per_run  # right entries come in run order
    reps = per_run[left_run]
    offset = np.arange(int(reps.sum())) - np.repeat(np.cumsum(reps) - reps, reps)
    more_i, more_j = np.repeat(left_rows, reps), right_rows[np.repeat(first_right[left_run], reps) + offset]
    return np.concatenate((i, more_i)), np.concatenate((j, more_j))


def _cross_pairs_of_two(a: np.ndarray, b: np.ndarray, low: np.uint64, one: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """(left row, right row) of each run of two equal packed keys ``a``, ``b`` that holds one entry of each side."""
    cross = (a & one) != (b & one)
    a, b = a[cross], b[cross]
    a_left = (a & one) == 0
    lo, hi = np.where(a_left, a, b), np.where(a_left, b, a)
    return ((lo & low) >> one).astype(np.int64), ((hi & low) >> one).astype(np.int64)


def _ideal_gains(pos_q: np.ndarray, pos_rel: np.ndarray, nq: int, depth: int) -> np.ndarray:
    """(nq, depth) matrix: each query's positive grades sorted descending, zero-padded."""
    ideal = np.zeros((nq, depth), dtype=np.int64)
    if not len(pos_q):
        return ideal
    top = int(pos_rel.max())
    # The usual few small grades: counted with bincount (no sort); otherwise the distinct grades sorted.
    grades = np.flatnonzero(np.bincount(pos_rel, minlength=top + 1))[::-1] if top < 1 << 16 else np.unique(pos_rel)[::-1]
    if len(grades) <= 16:  # the usual few grades: count them per query, lay them out best first
        if top < 1 << 16:
            slot = np.zeros(top + 1, dtype=np.int64)
            slot[grades] = np.arange(len(grades))
            which = slot[pos_rel]
        else:
            which = np.searchsorted(-grades, -pos_rel)
        counts = np.bincount(pos_q * len(grades) + which, minlength=nq * len(grades)).reshape(nq, len(grades))
        end = np.cumsum(counts, axis=1)
        position = np.arange(depth)
        for g in range(len(grades) - 1, -1, -1):
            ideal[position < end[:, g : g + 1]] = grades[g]
        return ideal
    df = pl.DataFrame({"qi": pos_q, "rel": pos_rel}).sort(["qi", "rel"], descending=[False, True])
    df = df.with_columns(rank=pl.int_range(pl.len(), dtype=pl.Int64).over("qi")).filter(pl.col("rank") < depth)
    ideal[df.get_column("qi").to_numpy(), df.get_column("rank").to_numpy()] = df.get_column("rel").to_numpy()
    return ideal


def qrels_to_dict(qrels: pl.DataFrame) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for q, d, r in qrels.select("query_id", "doc_id", "relevance").iter_rows():
        out.setdefault(q, {})[d] = int(r)
    return out


def run_to_dict(run: pl.DataFrame) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for q, d, s in run.select("query_id", "doc_id", "score").iter_rows():
        out.setdefault(q, {})[d] = float(s)
    return out


def breakdown(per_query: pl.DataFrame, groups: pl.DataFrame, by: str, metrics: Iterable[str]) -> dict[str, dict[str, float]]:
    """Mean of each metric per value of column ``by`` of ``groups`` (query_id, by).

    Queries whose group is null are left out of the breakdown (not of the overall mean).
    """
    joined = per_query.join(groups.select("query_id", by), on="query_id", how="left").filter(pl.col(by).is_not_null())
    out: dict[str, dict[str, float]] = {}
    for row in joined.group_by(by).agg([pl.col(m).mean() for m in metrics]).sort(by).iter_rows(named=True):
        out[str(row[by])] = {m: float(row[m]) for m in metrics}
    return out
