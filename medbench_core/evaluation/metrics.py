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
from medbench_core.evaluation.ranked_gains import CONDENSED_RANKED, condensed_gains, id_runs, ideal_gains, index_rows, pair_join, top_ranked
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
    q_values, q_lengths = id_runs(qrels.get_column("query_id"))
    query_ids = q_values.unique(maintain_order=True).to_list()
    nq = len(query_ids)
    qrel_q = index_rows(q_values, q_lengths, query_ids)
    run_q = index_rows(*id_runs(run.get_column("query_id")), query_ids)
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
    ideal = ideal_gains(pos_q, pos_rel, nq, depth)
    holes_asked = any(getattr(fn, "takes_ranking", False) for fn in fns.values())

    gains = np.zeros((nq, depth), dtype=np.int64)
    judged = np.zeros((nq, depth), dtype=bool)
    ranked = top_ranked(run, run_q, depth)
    if ranked.height and (len(pos) or holes_asked and len(rel)):
        doc_ids = qrels.get_column("doc_id").cast(pl.Utf8)
        if holes_asked:  # every judgment (the column as it is: no copy of the ids)
            judgments = pl.DataFrame({"qi": qrel_q, "doc_id": doc_ids, "rel": rel})
        else:
            judgments = pl.DataFrame({"qi": qrel_q[pos], "doc_id": doc_ids.gather(pos), "rel": pos_rel})
        hits = pair_join(ranked, judgments)
        if hits.height > ranked.height:
            raise DataError("qrels judge the same (query, document) pair twice; a curated task's contract forbids it")
        qi, rank = hits.get_column("qi").to_numpy(), hits.get_column("rank").to_numpy()
        hit_rel = hits.get_column("rel").to_numpy()
        gains[qi, rank] = np.maximum(hit_rel, 0)
        judged[qi, rank] = hit_rel >= 0
    condensed = None
    if condensed_depth:
        condensed = condensed_gains(gains, judged, run, run_q, judgments if ranked.height and len(rel) else None, depth, condensed_depth)

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
