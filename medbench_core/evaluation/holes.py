"""Hole-aware kernels: what a cell's score rests on when some ranked documents are unjudged.

A *hole* is a document no judgment grades for the query (trec_eval counts it as non-relevant), or
one the qrels grade negative: trec_eval's "in the pool, unjudged" (``form_res_rels.c``), never a
judged non-relevant document (:func:`medbench_core.evaluation.metrics.evaluate_frame`). The
kernels here (registered in :data:`medbench_core.evaluation.metrics.METRICS` like the others) see
the whole judged ranking, :class:`JudgedRanking`, not only the gains, because they tell judged
from unjudged documents:

- ``judged_at_k``: the share of the top ``min(k, n_ranked)`` documents that have a judgment
  (ir_measures ``Judged@k``, OpenNIR's definition; 0 for a query with nothing ranked). A negative
  grade is unjudged here, as trec_eval's ``unj`` measure counts it (``m_unjudged.c``); ir_measures'
  Judged counts any qrels row.
- ``holes_at_k``: how many of the top ``min(k, n_ranked)`` documents are unjudged.
- ``bpref_at_k``: Buckley & Voorhees' bpref (SIGIR 2004) as trec_eval's ``m_bpref.c`` computes
  it over the top ``k`` ranked: ``1/R * sum over relevant d_i of (1 - min(n_i, R) / min(N, R))``,
  ``n_i`` the judged non-relevant documents ranked above ``d_i``, ``R`` and ``N`` the relevant and
  judged non-relevant documents in the qrels; unjudged documents are skipped; 0 when R = 0.
  With k at least the run's depth it is ir_measures' ``Bpref``.
- ``ndcg_condensed_at_k``: nDCG@k on the condensed list (Sakai, SIGIR 2007): unjudged documents
  are removed from the ranking before the cut, the ideal is unchanged (trec_eval ``-J``,
  ir_measures ``nDCG(judged_only=True)@k``). It reads the ranking past rank k, to the run's depth.
- ``ndcg_lower_at_k`` / ``ndcg_upper_at_k``: the exact lowest and highest nDCG@k over every
  completion of the judgments, i.e. whatever grade (0 to the task's top grade G) each unjudged
  document turns out to have. Both are reached: each is the nDCG@k of one completion, which
  :func:`ndcg_bound_completion` returns. An unjudged document is a *hole* when it is ranked in the
  top k (its grade counts in the DCG and the ideal) and an *extra* otherwise (its grade counts in
  the ideal only): ``u`` = the query's unjudged documents in its universe (the corpus or its
  candidate pool) less the holes; when the universe is not given, as many as could count (k).

  Why it is exact (proof in docs/trust.md, "The bounds"). For any multiset of hole grades the
  ideal is fixed, so the DCG decides: the highest nDCG gives the highest of those grades to the
  best-ranked holes (rearrangement inequality), the lowest gives them to the worst-ranked; extras
  only raise the ideal, so they are all 0 for the upper bound and all G for the lower one. With
  the grades cut into layers (``v_1 < ... < v_L``: the positive grades in the judged ideals and
  G; a hole's grade can be taken among them without loss: between two of them nDCG is a ratio of
  two affine functions of a block of equal grades, monotone, so an end does at least as well),
  a completion is the chain ``h >= Q_1 >= ... >= Q_L >= 0``, ``Q_l`` the holes at grade >= v_l,
  and

      DCG  = DCG0 + sum_l (v_l - v_{l-1}) * W(Q_l)
      IDCG = sum_l (v_l - v_{l-1}) * CD(min(C_l + E + Q_l, k))

  with W the summed discounts of the first (upper) or last (lower) Q_l holes, C_l the judged
  documents at grade >= v_l, E the extras at G (0 for the upper bound) and CD the summed ideal
  discounts. The best ratio is found by Dinkelbach's method: for a trial value x, maximise
  ``DCG - x IDCG`` (upper; ``x IDCG - DCG`` for the lower) over the chains by a dynamic
  programme over the layers (each layer's term depends on its own Q_l only); the completion it
  picks has a ratio better than x unless x is the optimum, and becomes the next x. Cost per
  query: O(L * k) per step, a few steps (at most one per completion value it passes, in practice
  2-5), against (G + 1)^holes completions to enumerate. A binary task has one layer: its k + 1
  chains are compared at once, no search. trec_eval's value (every hole and extra
  non-relevant) is one completion, so it lies between the bounds.

Ranks are trec_eval's (score descending, doc id descending), as in every metric here; sums run
left to right (``np.cumsum``) as in :mod:`medbench_core.evaluation.kernels`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class JudgedRanking:
    """Each judged query's ranking to ``depth`` (the deepest cut any requested metric needs).

    ``gains``: grades of the ranked documents (0 for judged non-relevant and for unjudged), in
    rank order; ``judged``: whether each ranked document has a judgment; ``ranked``: whether the
    position holds a document (a shorter run leaves the rest empty); ``ideal``: the judged
    positive grades sorted descending; ``n_rel`` / ``n_nonrel``: relevant (grade > 0) and judged
    non-relevant documents in the qrels; ``top_grade``: the task's highest grade (at least 1);
    ``unjudged``: unjudged documents in each query's universe (-1: not known);
    ``discount``: log2(rank + 1); ``condensed``: each query's judged grades in rank order with the
    unjudged documents left out (the condensed list), to the deepest cut a :func:`whole_run`
    kernel asks for, however deep in the run they lie.
    """

    gains: np.ndarray
    judged: np.ndarray
    ranked: np.ndarray
    ideal: np.ndarray
    n_rel: np.ndarray
    n_nonrel: np.ndarray
    top_grade: int
    unjudged: np.ndarray
    discount: np.ndarray
    condensed: np.ndarray | None = None


def takes_ranking(fn):
    """Mark a kernel as one that takes ``(ranking: JudgedRanking, k)`` instead of the gains."""
    fn.takes_ranking = True
    return fn


def whole_run(fn):
    """Mark a kernel that reads the condensed list (``JudgedRanking.condensed``): the ranking past rank k."""
    fn.whole_run = True
    return fn


def _dcg(gains: np.ndarray, discount: np.ndarray) -> np.ndarray:
    if gains.shape[1] == 0:
        return np.zeros(gains.shape[0])
    return np.cumsum(gains / discount, axis=1)[:, -1]


@takes_ranking
def judged(r: JudgedRanking, k: int) -> np.ndarray:
    """Share of the top min(k, n_ranked) that is judged (ir_measures ``Judged@k``); 0 with nothing ranked."""
    n = r.ranked[:, :k].sum(axis=1)
    return np.divide(r.judged[:, :k].sum(axis=1), n, out=np.zeros(len(n)), where=n != 0)


@takes_ranking
def holes(r: JudgedRanking, k: int) -> np.ndarray:
    """Unjudged documents among the top min(k, n_ranked)."""
    return (r.ranked[:, :k] & ~r.judged[:, :k]).sum(axis=1).astype(np.float64)


@takes_ranking
def bpref(r: JudgedRanking, k: int) -> np.ndarray:
    """trec_eval's bpref over the top k ranked (see the module docstring)."""
    judged_, gains = r.judged[:, :k], r.gains[:, :k]
    relevant = judged_ & (gains >= 1)
    nonrel = judged_ & (gains < 1)
    above = np.cumsum(nonrel, axis=1) - nonrel  # judged non-relevant strictly above each position
    R = r.n_rel[:, None].astype(np.float64)
    denom = np.minimum(r.n_nonrel, r.n_rel)[:, None].astype(np.float64)
    # trec_eval adds 1 when no non-relevant document is above, else 1 - min(n, R) / min(N, R).
    term = np.where(above > 0, 1.0 - np.divide(np.minimum(above, R), denom, out=np.zeros(above.shape), where=denom != 0), 1.0)
    total = np.cumsum(np.where(relevant, term, 0.0), axis=1)[:, -1] if k else np.zeros(len(R))
    return np.divide(total, r.n_rel, out=np.zeros(len(r.n_rel)), where=r.n_rel != 0)


@whole_run
@takes_ranking
def ndcg_condensed(r: JudgedRanking, k: int) -> np.ndarray:
    """nDCG@k on the condensed list: unjudged documents removed before the cut (Sakai 2007; trec_eval -J)."""
    dcg = _dcg(r.condensed[:, :k], r.discount[:k])
    idcg = _dcg(r.ideal[:, :k], r.discount[:k])
    return np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg != 0)


def _unjudged_at_top(r: JudgedRanking, k: int) -> np.ndarray:
    return r.ranked[:, :k] & ~r.judged[:, :k]


_BLOCK_CELLS = 4_000_000  # (queries x layers x (k + 1)) values per block of the bounds' search: its memory
_MAX_STEPS = 200  # Dinkelbach steps; each passes at least one completion value, in practice 2-4


@takes_ranking
def ndcg_lower(r: JudgedRanking, k: int) -> np.ndarray:
    """The lowest nDCG@k of any completion of the judgments (module docstring): exact, and reached."""
    return _ndcg_bound(r, k, upper=False)


@takes_ranking
def ndcg_upper(r: JudgedRanking, k: int) -> np.ndarray:
    """The highest nDCG@k of any completion of the judgments (module docstring): exact, and reached."""
    return _ndcg_bound(r, k, upper=True)


def _ndcg_bound(r: JudgedRanking, k: int, upper: bool) -> np.ndarray:
    nq = r.gains.shape[0]
    value = np.zeros(nq)
    if not nq or not k:
        return value
    ideal = r.ideal[:, :k]
    # The grade layers: the positive grades of the judged ideals and the top grade, ascending.
    levels = np.union1d(np.unique(ideal[ideal > 0]), [r.top_grade]).astype(np.int64)
    block = max(1, _BLOCK_CELLS // (len(levels) * (k + 1)))
    for lo in range(0, nq, block):
        rows = slice(lo, min(lo + block, nq))
        value[rows] = _bound_block(r, k, upper, levels, rows)
    return value


def _bound_block(r: JudgedRanking, k: int, upper: bool, levels: np.ndarray, rows: slice) -> np.ndarray:
    """The bound of the queries ``rows`` by Dinkelbach's method over the chains of hole counts (module docstring)."""
    discount = r.discount[:k]
    holes = _unjudged_at_top(r, k)[rows]
    gains, ideal = r.gains[rows, :k], r.ideal[rows, :k]
    n, width = holes.shape[0], k + 1
    h = holes.sum(axis=1)
    if upper:
        extra = np.zeros(n, dtype=np.int64)
    else:  # every unjudged document outside the top k at the top grade; an unknown universe: as many as count (k)
        u = r.unjudged[rows]
        extra = np.where(u < 0, k, np.clip(u - h, 0, k))
    # W[:, q]: the summed discounts of the first q holes in rank order (upper) or of the last q (lower):
    # the running sum of the holes' discounts, read at the q-th hole.
    first = np.zeros((n, width))
    rows, at = np.nonzero(holes)
    first[rows, np.cumsum(holes, axis=1)[rows, at]] = np.cumsum(np.where(holes, 1.0 / discount, 0.0), axis=1)[rows, at]
    q = np.arange(width)
    valid = q[None, :] <= h[:, None]
    if upper:
        W = first
    else:
        W = np.take_along_axis(first, h[:, None], axis=1) - np.take_along_axis(first, np.clip(h[:, None] - q[None, :], 0, None), axis=1)
    W = np.where(valid, W, 0.0)
    step = np.diff(levels, prepend=0).astype(np.float64)  # v_l - v_{l-1}
    # C_l + E (judged documents at grade >= v_l, and the extras at the top grade), then CD(min(C_l + E + Q_l, k)) per Q_l.
    at_least = (ideal[:, None, :] >= levels[None, :, None]).sum(axis=2) + extra[:, None]
    cd = np.concatenate(([0.0], np.cumsum(1.0 / discount)))
    ideal_part = cd[np.minimum(at_least[:, :, None] + q[None, None, :], k)]  # (n, layers, k + 1)
    dcg0 = _dcg(gains, discount)

    def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
        return np.divide(num, den, out=np.zeros_like(num), where=den > 0)

    if len(levels) == 1:  # one layer (a binary task): a completion is one count Q_1, every value of it at once
        ratios = np.where(valid, ratio(dcg0[:, None] + step[0] * W, step[0] * ideal_part[:, 0, :]), -np.inf if upper else np.inf)
        x = ratios.max(axis=1) if upper else ratios.min(axis=1)
    else:
        x = _dinkelbach(W, ideal_part, valid, step, dcg0, upper)
    # trec_eval's value (every hole and extra non-relevant) is a completion: the bound includes it to the last bit.
    idcg0 = _dcg(ideal, discount)
    point = np.divide(dcg0, idcg0, out=np.zeros_like(dcg0), where=idcg0 != 0)
    return np.minimum(np.maximum(x, point), 1.0) if upper else np.maximum(np.minimum(x, point), 0.0)


def _dinkelbach(W: np.ndarray, ideal_part: np.ndarray, valid: np.ndarray, step: np.ndarray, dcg0: np.ndarray, upper: bool) -> np.ndarray:
    """The best ratio DCG / IDCG over the chains of hole counts (module docstring), per query."""
    n, layers = ideal_part.shape[:2]

    def dcg_idcg(chain: np.ndarray, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        num = dcg0[sel] + (step * np.take_along_axis(W[sel], chain, axis=1)).sum(axis=1)
        den = (step * np.take_along_axis(ideal_part[sel], chain[:, :, None], axis=2)[:, :, 0]).sum(axis=1)
        return num, den

    def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
        return np.divide(num, den, out=np.zeros_like(num), where=den > 0)

    everyone = np.arange(n)
    # Start from trec_eval's completion: no hole above grade 0 (and, for the lower bound, the extras at G).
    x = ratio(*dcg_idcg(np.zeros((n, layers), dtype=np.int64), everyone))
    sign = 1.0 if upper else -1.0
    active = everyone
    for _ in range(_MAX_STEPS):
        if not len(active):
            break
        # Layer l's term of DCG - x IDCG (upper) or x IDCG - DCG (lower), as a function of Q_l; Q_l > h never chosen.
        terms = sign * step[None, :, None] * (W[active][:, None, :] - x[active, None, None] * ideal_part[active])
        found = _best_chain(np.where(valid[active][:, None, :], terms, -np.inf))
        better = ratio(*dcg_idcg(found, active))
        moved = sign * (better - x[active]) > 1e-15 * np.maximum(1.0, np.abs(x[active]))
        x[active[moved]] = better[moved]
        active = active[moved]
    return x


def _best_chain(terms: np.ndarray) -> np.ndarray:
    """argmax over h >= Q_1 >= ... >= Q_L >= 0 of sum_l terms[:, l, Q_l] (terms: queries x layers x (k + 1); -inf where not allowed).

    A dynamic programme from the top layer down: the best of the layers above for a given Q_l is
    the prefix maximum (over Q_{l+1} <= Q_l) of their best; then back along the stored arguments."""
    m, layers, width = terms.shape
    best = terms[:, -1, :]
    args = []
    position = np.arange(width)[None, :]
    for layer in range(layers - 2, -1, -1):
        prefix = np.maximum.accumulate(best, axis=1)
        # the last Q <= q where best reaches its prefix maximum: an argmax of best[:Q + 1]
        args.append(np.maximum.accumulate(np.where(best >= prefix, position, 0), axis=1))
        best = terms[:, layer, :] + prefix
    chain = np.zeros((m, layers), dtype=np.int64)
    chain[:, 0] = np.argmax(best, axis=1)
    for layer in range(1, layers):
        chain[:, layer] = np.take_along_axis(args[layers - 1 - layer], chain[:, layer - 1 : layer], axis=1)[:, 0]
    return chain


def unjudged_in_universe(task, qrels=None) -> dict[str, int]:
    """Query id -> how many documents of its universe (its candidate pool, else the corpus) no judgment grades.

    The bounds' lower end lets every one of them (at most k) be relevant at the top grade. A qrels
    row naming a document absent from the universe is not a judged document of it, nor is a negative
    grade (trec_eval's "in the pool, unjudged"). ``qrels``: the judgments to count (default the
    task's own; a filled layer passes human + LLM).
    """
    import polars as pl

    qrels = task.qrels if qrels is None else qrels
    if "relevance" in qrels.columns:
        qrels = qrels.filter(pl.col("relevance") >= 0)
    qrels = qrels.select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8))
    if task.candidates is not None:
        pool = task.candidates.select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8)).unique()
        size = pool.group_by("query_id").len().rename({"len": "size"})
        judged = qrels.join(pool, on=["query_id", "doc_id"], how="semi").group_by("query_id").len().rename({"len": "judged"})
        frame = task.queries.select(pl.col("query_id").cast(pl.Utf8)).join(size, on="query_id", how="left").join(judged, on="query_id", how="left")
        return {q: int((s or 0) - (j or 0)) for q, s, j in frame.iter_rows()}
    docs = task.corpus.select(pl.col("doc_id").cast(pl.Utf8))
    judged = qrels.join(docs, on="doc_id", how="semi").unique().group_by("query_id").len()
    counts = dict(zip(judged["query_id"].to_list(), judged["len"].to_list()))
    n = docs.height
    return {q: n - int(counts.get(q, 0)) for q in task.queries["query_id"].cast(pl.Utf8).to_list()}
