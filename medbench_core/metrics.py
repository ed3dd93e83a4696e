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

Queries that are judged but absent from the run score 0 (trec_eval ``-c``); the mean is over
every judged query.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import polars as pl

from medbench_core.errors import DataError

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]

DEFAULT_METRICS = ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_100")


def _rank(docs: Mapping[str, float]) -> list[str]:
    # Two stable sorts: doc id descending, then score descending (trec_eval's order).
    ids = sorted(docs, reverse=True)
    ids.sort(key=lambda d: docs[d], reverse=True)
    return ids


def _ndcg(ranked: list[str], rels: Mapping[str, int], k: int) -> float:
    ideal = sorted((r for r in rels.values() if r > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    if idcg == 0:
        return 0.0
    dcg = 0.0
    for i, d in enumerate(ranked[:k]):
        g = rels.get(d, 0)
        if g > 0:
            dcg += g / math.log2(i + 2)
    return dcg / idcg


def _recall(ranked: list[str], rels: Mapping[str, int], k: int) -> float:
    n_rel = sum(1 for r in rels.values() if r >= 1)
    if n_rel == 0:
        return 0.0
    return sum(1 for d in ranked[:k] if rels.get(d, 0) >= 1) / n_rel


def _mrr(ranked: list[str], rels: Mapping[str, int], k: int) -> float:
    for i, d in enumerate(ranked[:k]):
        if rels.get(d, 0) >= 1:
            return 1.0 / (i + 1)
    return 0.0


def _map(ranked: list[str], rels: Mapping[str, int], k: int) -> float:
    n_rel = sum(1 for r in rels.values() if r >= 1)
    if n_rel == 0:
        return 0.0
    hits = 0
    total = 0.0
    for i, d in enumerate(ranked[:k]):
        if rels.get(d, 0) >= 1:
            hits += 1
            total += hits / (i + 1)
    return total / n_rel


_KERNELS = {"ndcg": _ndcg, "recall": _recall, "mrr": _mrr, "map": _map}


def parse_metric(name: str) -> tuple[str, int]:
    """``"ndcg_at_10"`` -> ``("ndcg", 10)``; unknown names raise with the known ones listed."""
    base, sep, k = name.partition("_at_")
    if not sep or base not in _KERNELS or not k.isdigit() or int(k) <= 0:
        raise ValueError(f"unknown metric {name!r}; use one of ndcg/recall/mrr/map followed by _at_K, e.g. ndcg_at_10")
    return base, int(k)


@dataclass(frozen=True)
class Evaluation:
    """Per-query values (query id -> metric -> value) and their means over judged queries."""

    per_query: dict[str, dict[str, float]]
    mean: dict[str, float]

    def per_query_frame(self) -> pl.DataFrame:
        rows = [{"query_id": q, **vals} for q, vals in sorted(self.per_query.items())]
        return pl.DataFrame(rows)


def evaluate(qrels: Qrels, run: Run, metrics: Iterable[str] = DEFAULT_METRICS) -> Evaluation:
    """Score ``run`` against ``qrels`` (see the module docstring for the definitions)."""
    metrics = list(metrics)
    parsed = [(m, *parse_metric(m)) for m in metrics]
    extra = sorted(set(run) - set(qrels))
    if extra and len(extra) == len(run):
        raise DataError(f"no run query id matches a judged query (run has e.g. {extra[:5]}); check the task the run was made for")
    per_query: dict[str, dict[str, float]] = {}
    for qid, rels in qrels.items():
        ranked = _rank(run.get(qid, {}))
        per_query[qid] = {m: _KERNELS[base](ranked, rels, k) for m, base, k in parsed}
    n = len(per_query)
    mean = {m: (sum(v[m] for v in per_query.values()) / n if n else 0.0) for m in metrics}
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


def cross_lingual_gap(per_language: Mapping[str, Mapping[str, float]], metric: str = "ndcg_at_10") -> dict[str, float]:
    """Best language's value minus each language's value (0 for the best)."""
    if not per_language:
        return {}
    best = max(v[metric] for v in per_language.values())
    return {lang: best - v[metric] for lang, v in per_language.items()}
