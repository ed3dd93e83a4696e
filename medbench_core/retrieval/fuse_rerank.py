"""Runs computed from other runs: score fusion (RRF, weighted sum; ranx's definitions) and
cross-encoder reranking of an upstream run's top documents.

Ranks and ties follow :mod:`medbench_core.retrieval.ranking`: documents by score descending, equal scores by
document id descending (trec_eval's order), both when an upstream rank is read and when the result
is ordered and cut. The ``fusion`` and ``cross-encoder`` kinds (:mod:`medbench_core.retrieval.kinds`) make their runs with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.progress import resolve as resolve_progress
from medbench_core.retrieval.ranking import RUN_SCHEMA
from medbench_core.taskdata.task import Task

DEFAULT_K = 100  # documents per query kept in a run, as medbench_core.retrieval.stages.DEFAULT_K
FUSION_METHODS = ("rrf", "wsum")
FUSION_NORMS = ("min-max", "max", "zmuv", "none")
_EPS = 1e-9  # ranx's floor on a normaliser's denominator


def ranked(run: pl.DataFrame) -> pl.DataFrame:
    """``run`` with ``rank`` recomputed per query in trec_eval's order (score desc, doc id desc).

    Queries keep their order of first appearance; rows are ordered by query, then rank.
    """
    missing = {"query_id", "doc_id", "score"} - set(run.columns)
    if missing:
        raise DataError(f"a run needs columns query_id, doc_id and score; missing {sorted(missing)}")
    qorder = run.select("query_id").unique(maintain_order=True).with_row_index("_q")
    return (
        run.select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.col("score").cast(pl.Float64))
        .join(qorder, on="query_id", how="left")
        .sort(["_q", "score", "doc_id"], descending=[False, True, True])
        .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("_q").alias("rank"))
        .drop("_q")
    )


def cut_ranked(scored: pl.DataFrame, query_order: list[str], top_k: int) -> pl.DataFrame:
    """``scored`` (query_id, doc_id, score) ranked per query in trec_eval's order, queries in ``query_order``, cut to ``top_k``."""
    qorder = pl.DataFrame({"query_id": query_order}, schema={"query_id": pl.Utf8}).with_row_index("_q")
    out = (
        scored.join(qorder, on="query_id", how="left")
        .sort(["_q", "score", "doc_id"], descending=[False, True, True])
        .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("_q").alias("rank"))
        .filter(pl.col("rank") <= top_k)
        .drop("_q")
    )
    return out.select(list(RUN_SCHEMA)).cast(RUN_SCHEMA)


def _normalised(run: pl.DataFrame, norm: str) -> pl.Expr:
    s = pl.col("score")
    if norm == "min-max":
        lo, hi = s.min().over("query_id"), s.max().over("query_id")
        return (s - lo) / pl.max_horizontal(hi - lo, pl.lit(_EPS))
    if norm == "max":
        return s / pl.max_horizontal(s.max().over("query_id"), pl.lit(_EPS))
    if norm == "zmuv":
        return (s - s.mean().over("query_id")) / pl.max_horizontal(s.std(ddof=0).over("query_id"), pl.lit(_EPS))
    if norm == "none":
        return s
    raise DataError(f"fusion norm {norm!r} unknown; use one of {FUSION_NORMS}")


def fuse(
    runs: Mapping[str, pl.DataFrame],
    method: str = "rrf",
    *,
    k: int = 60,
    weights: list[float] | None = None,
    norm: str = "min-max",
    top_k: int = DEFAULT_K,
) -> pl.DataFrame:
    """Fuse two or more runs of one task into one run (medbench's run schema), top ``top_k`` per query.

    - ``rrf`` (Cormack et al., 2009): score(d) = sum over runs of 1 / (k + rank(d)), rank in
      trec_eval's order; a run that did not retrieve d adds nothing. ``weights``/``norm`` do not apply.
    - ``wsum``: score(d) = sum over runs of w_i * norm_i(d), each run's scores normalised per query
      (``min-max``: (s - min) / max(max - min, 1e-9); ``max``: s / max(max, 1e-9); ``zmuv``:
      (s - mean) / max(std, 1e-9), population std; ``none``), 0 for a run that did not retrieve d.
      ``weights`` default to 1 each.

    These are ranx's definitions (``ranx.fuse(method="rrf"|"wsum", norm=...)``), summed in the same
    order; the fused run is ordered by score, ties by doc id descending, and cut to ``top_k``.
    """
    names = list(runs)
    if len(names) < 2:
        raise DataError(f"fusion needs at least two runs, got {names}")
    if method == "rrf":
        if weights is not None:
            raise DataError("fusion method rrf takes no weights; use method wsum for weighted fusion")
        if k <= 0:
            raise DataError(f"RRF k must be positive, not {k}")
        contrib = [pl.lit(1.0) / (pl.lit(float(k)) + pl.col("rank").cast(pl.Float64)) for _ in names]
    elif method == "wsum":
        weights = [1.0] * len(names) if weights is None else [float(w) for w in weights]
        if len(weights) != len(names):
            raise DataError(f"fusion wsum: {len(weights)} weights for {len(names)} runs ({names})")
        contrib = [pl.lit(w) * _normalised(runs[n], norm) for n, w in zip(names, weights)]
    else:
        raise DataError(f"fusion method {method!r} unknown; use rrf or wsum")

    parts = []
    for i, (name, expr) in enumerate(zip(names, contrib)):
        r = ranked(runs[name])
        dup = r.filter(pl.struct("query_id", "doc_id").is_duplicated())
        if dup.height:
            q, d = dup.row(0)[:2]
            raise DataError(f"fusion: run {name!r} lists document {d} twice for query {q}")
        parts.append(r.select("query_id", "doc_id", expr.alias(f"_c{i}")))
    acc = parts[0]
    for p in parts[1:]:
        acc = acc.join(p, on=["query_id", "doc_id"], how="full", coalesce=True)
    # Left to right, as ranx sums: ((0 + c0) + c1) + ...; a run without d contributes 0.
    total = pl.col("_c0").fill_null(0.0)
    for i in range(1, len(parts)):
        total = total + pl.col(f"_c{i}").fill_null(0.0)
    scored = acc.select("query_id", "doc_id", total.alias("score"))
    query_order = pl.concat([runs[n].select(pl.col("query_id").cast(pl.Utf8)) for n in names])["query_id"].unique(maintain_order=True).to_list()
    return cut_ranked(scored, query_order, top_k)


# --- cross-encoder reranking --------------------------------------------------------------


def rerank(
    run: pl.DataFrame,
    task: Task,
    cross_encoder: Any,
    depth: int,
    *,
    upstream_k: int | None = None,
    model: str = "cross-encoder",
    upstream: str = "upstream",
    batch_size: int = 32,
    progress: bool = False,
) -> pl.DataFrame:
    """Re-score the top ``depth`` documents of each query of ``run`` with ``cross_encoder``.

    ``cross_encoder.predict(pairs, batch_size=, show_progress_bar=)`` scores (query text, document
    text) pairs, document text being title and body as the retrievers read them. The result holds
    those ``depth`` documents per query ranked by the new score (ties by doc id descending).
    ``upstream_k`` is the k the upstream run was retrieved with (default: its deepest rank); a
    ``depth`` beyond it raises DataError naming ``model`` and ``upstream``.
    """
    available = upstream_k if upstream_k is not None else int(run["rank"].max() or 0) if run.height else 0
    if depth > available:
        raise DataError(
            f"model {model}: rerank depth {depth} is deeper than upstream run {upstream!r} (k={available}); "
            f"lower rerank.depth to <= {available} or retrieve {upstream} with k >= {depth}"
        )
    top = ranked(run).filter(pl.col("rank") <= depth)
    qtext = dict(zip(task.queries["query_id"].to_list(), task.queries["text"].fill_null("").to_list()))
    dtext = dict(zip(task.corpus["doc_id"].to_list(), task.doc_text()))
    unknown_q = sorted(set(top["query_id"].to_list()) - set(qtext))
    unknown_d = sorted(set(top["doc_id"].to_list()) - set(dtext))
    if unknown_q or unknown_d:
        raise DataError(
            f"model {model}: upstream run {upstream!r} names {len(unknown_q)} query id(s) {unknown_q[:5]} and {len(unknown_d)} "
            f"document id(s) {unknown_d[:5]} that task {task.name} does not have; rematerialise {upstream} on this task"
        )
    empty = sorted({q for q in top["query_id"].to_list() if not qtext[q].strip()})
    if empty:
        raise DataError(f"model {model}: {len(empty)} query(ies) of task {task.name} have no text (e.g. {empty[:5]}); a cross-encoder reads text")
    pairs = [(qtext[q], dtext[d]) for q, d in top.select("query_id", "doc_id").iter_rows()]
    scores = cross_encoder.predict(pairs, batch_size=batch_size, show_progress_bar=resolve_progress(progress), convert_to_numpy=True) if pairs else []
    scored = top.select("query_id", "doc_id").with_columns(pl.Series("score", [float(s) for s in scores], dtype=pl.Float64))
    return cut_ranked(scored, top["query_id"].unique(maintain_order=True).to_list(), depth)
