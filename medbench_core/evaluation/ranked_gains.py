"""From a run frame and a qrels frame to the gain matrices the metric kernels read, in trec_eval's order.

:func:`medbench_core.evaluation.metrics.evaluate_frame` asks this module for each judged query's top ``depth``
run rows ranked as trec_eval ranks them (score descending, then document id descending in byte order:
``comp_sim_docno``), joined with their judgments (:func:`pair_join`), the ideal gains (:func:`ideal_gains`) and,
for the condensed list, each query's judged grades in rank order (:func:`condensed_gains`). Everything is
vectorised over all queries at once; the sums themselves are the kernels' (``kernels.py``, ``holes.py``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

CONDENSED_RANKED = 10  # how many times its cut the condensed list's query is ranked before its whole run is joined


def condensed_gains(
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
    hits = pair_join(theirs, judgments.filter(pl.Series(wanted)))
    hq = hits.get_column("qi").to_numpy()
    score = run.get_column("score").cast(pl.Float64).to_numpy()[hits.get_column("rank").to_numpy()]
    keep = _at_or_above_depth(hq, score, k)
    order, qi, rank = _ranked_prefix(hq[keep], score[keep], hits.get_column("doc_id").gather(keep), k)
    out[deep] = 0
    out[qi, rank] = np.maximum(hits.get_column("rel").to_numpy()[keep][order], 0)
    return out


def id_runs(ids: pl.Series) -> tuple[pl.Series, np.ndarray]:
    """Run-length encoding of an id column: (the value of each run, its length)."""
    runs = ids.cast(pl.Utf8).rle()
    return runs.struct.field("value"), runs.struct.field("len").to_numpy()


def index_rows(values: pl.Series, lengths: np.ndarray, query_ids: list[str]) -> np.ndarray:
    """Each row's position in ``query_ids`` (-1 when absent), from its run-length encoding."""
    # 32-bit indices when they fit: half the memory to write (and fault in) for a run of 10M rows.
    dtype, pl_dtype = (np.int32, pl.Int32) if len(query_ids) < 2**31 else (np.int64, pl.Int64)
    known = pl.DataFrame({"query_id": query_ids, "qi": np.arange(len(query_ids), dtype=dtype)}, schema={"query_id": pl.Utf8, "qi": pl_dtype})
    per_run = pl.DataFrame({"query_id": values}).join(known, on="query_id", how="left", maintain_order="left").get_column("qi")
    return np.repeat(per_run.fill_null(-1).to_numpy(), lengths)


def top_ranked(run: pl.DataFrame, run_q: np.ndarray, depth: int) -> pl.DataFrame:
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


def pair_join(ranked: pl.DataFrame, judgments: pl.DataFrame) -> pl.DataFrame:
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


def ideal_gains(pos_q: np.ndarray, pos_rel: np.ndarray, nq: int, depth: int) -> np.ndarray:
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
