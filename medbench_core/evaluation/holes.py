"""Hole-aware kernels: what a cell's score rests on when some ranked documents are unjudged.

A *hole* is a document no judgment grades for the query (trec_eval counts it as non-relevant). The
kernels here (registered in :data:`medbench_core.evaluation.metrics.METRICS` like the others) see
the whole judged ranking, :class:`JudgedRanking`, not only the gains, because they tell judged
from unjudged documents:

- ``judged_at_k``: the share of the top ``min(k, n_ranked)`` documents that have a judgment
  (ir_measures ``Judged@k``, OpenNIR's definition; 0 for a query with nothing ranked).
- ``holes_at_k``: how many of the top ``min(k, n_ranked)`` documents are unjudged.
- ``bpref_at_k``: Buckley & Voorhees' bpref (SIGIR 2004) as trec_eval's ``m_bpref.c`` computes
  it over the top ``k`` ranked: ``1/R * sum over relevant d_i of (1 - min(n_i, R) / min(N, R))``,
  ``n_i`` the judged non-relevant documents ranked above ``d_i``, ``R`` and ``N`` the relevant and
  judged non-relevant documents in the qrels; unjudged documents are skipped; 0 when R = 0.
  With k at least the run's depth it is ir_measures' ``Bpref``.
- ``ndcg_condensed_at_k``: nDCG@k on the condensed list (Sakai, SIGIR 2007): unjudged documents
  are removed from the ranking before the cut, the ideal is unchanged (trec_eval ``-J``,
  ir_measures ``nDCG(judged_only=True)@k``). It reads the ranking past rank k, to the run's depth.
- ``ndcg_lower_at_k`` / ``ndcg_upper_at_k``: bounds on nDCG@k over every completion of the
  judgments, i.e. whatever grade (0 to the task's top grade G) any unjudged document turns out
  to have. With DCG0 / IDCG0 the trec_eval values (every hole non-relevant) and DCG_G / IDCG_G
  those of the completion where every hole is relevant at grade G (the holes of the top k count
  in DCG_G; IDCG_G adds ``u`` documents of grade G to the judged ideal, ``u`` = the query's
  unjudged documents in its universe, the corpus or its candidate pool, at most k):

      lower = DCG0 / IDCG_G            upper = min(1, DCG_G / IDCG0)

  Every completion's DCG lies in [DCG0, DCG_G] and its IDCG in [IDCG0, IDCG_G], so its nDCG
  lies in [lower, upper]; the point value (trec_eval's) too. The two extreme completions are
  not themselves the bounds: nDCG is not monotone in a hole's grade (a hole at rank 10 made
  relevant raises the ideal more than the DCG), so each bound takes the extreme end of each part.
  When the universe is not given, ``u`` is k (as if at least k documents were unjudged).

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
    ``discount``: log2(rank + 1).
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


def takes_ranking(fn):
    """Mark a kernel as one that takes ``(ranking: JudgedRanking, k)`` instead of the gains."""
    fn.takes_ranking = True
    return fn


def whole_run(fn):
    """Mark a kernel that reads the ranking past rank k (to the run's depth)."""
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


@whole_run
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
    # Each query's judged documents moved to the front in rank order, then cut at k.
    order = np.argsort(~r.judged, axis=1, kind="stable")
    condensed = np.take_along_axis(np.where(r.judged, r.gains, 0), order, axis=1)[:, :k]
    dcg = _dcg(condensed, r.discount[: condensed.shape[1]])
    idcg = _dcg(r.ideal[:, :k], r.discount[:k])
    return np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg != 0)


def _unjudged_at_top(r: JudgedRanking, k: int) -> np.ndarray:
    return r.ranked[:, :k] & ~r.judged[:, :k]


def _ideal_with_top_grade(r: JudgedRanking, k: int) -> np.ndarray:
    """IDCG_G@k's gains: ``u`` documents of the top grade in front of the judged ideal (u = unjudged in the universe, at most k)."""
    u = np.where(r.unjudged < 0, k, np.minimum(r.unjudged, k))
    position = np.arange(k)[None, :]
    shifted = np.take_along_axis(r.ideal[:, :k], np.clip(position - u[:, None], 0, None), axis=1)
    return np.where(position < u[:, None], r.top_grade, shifted)


@takes_ranking
def ndcg_lower(r: JudgedRanking, k: int) -> np.ndarray:
    """DCG0@k / IDCG_G@k: no completion of the judgments scores lower (module docstring)."""
    dcg = _dcg(r.gains[:, :k], r.discount[:k])
    idcg = _dcg(_ideal_with_top_grade(r, k), r.discount[:k])
    return np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg != 0)


@takes_ranking
def ndcg_upper(r: JudgedRanking, k: int) -> np.ndarray:
    """min(1, DCG_G@k / IDCG0@k): no completion of the judgments scores higher (module docstring)."""
    filled = np.where(_unjudged_at_top(r, k), r.top_grade, r.gains[:, :k])
    dcg = _dcg(filled, r.discount[:k])
    idcg = _dcg(r.ideal[:, :k], r.discount[:k])
    ratio = np.divide(dcg, idcg, out=np.where(dcg > 0, 1.0, 0.0), where=idcg != 0)
    return np.minimum(ratio, 1.0)


def unjudged_in_universe(task, qrels=None) -> dict[str, int]:
    """Query id -> how many documents of its universe (its candidate pool, else the corpus) no judgment grades.

    The bounds' lower end lets every one of them (at most k) be relevant at the top grade. A qrels
    row naming a document absent from the universe is not a judged document of it. ``qrels``: the
    judgments to count (default the task's own; a filled layer passes human + LLM).
    """
    import polars as pl

    qrels = (task.qrels if qrels is None else qrels).select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8))
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
