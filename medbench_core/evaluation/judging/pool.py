"""The pool a judge grades: the holes the chosen models' runs surface, and a calibration sample.

- **fill**: for each judged query, the documents in the top ``depth`` of each pool model's stored
  run (ranks as the runs store them: trec_eval's order) that the human qrels do not judge (or
  grade negative: trec_eval's "in the pool, unjudged"); each pair once, with the models that
  ranked it there and its best rank. Documents retrieved for a query of their own id are not
  pooled when the task ignores them (``ignore_identical_ids``: they are never scored). Queries the humans judged
  nothing for are not pooled: the filled layer scores the same queries as the human one.
- **calibration**: ``calibration`` pairs the humans did judge (grade 0 or more), drawn with ``numpy.random.default_rng(seed)``
  and spread over the grades (each grade's pairs shuffled, then taken in turn from the highest
  grade down), so the agreement is measured on relevant and non-relevant pairs alike. Their LLM
  grades never replace a human grade; they only measure agreement (:mod:`.agreement`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from medbench_core.errors import DataError

POOL_SCHEMA: dict[str, pl.DataType] = {
    "query_id": pl.Utf8, "doc_id": pl.Utf8, "role": pl.Utf8, "human": pl.Int64, "pool_models": pl.Utf8, "best_rank": pl.Int64,
}  # fmt: skip
FILL, CALIBRATION = "fill", "calibration"


def _ranked(run: pl.DataFrame) -> pl.DataFrame:
    """(query_id, doc_id, rank from 1) in trec_eval's order: the stored rank when there is one."""
    run = run.select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), *[pl.col(c) for c in ("rank", "score") if c in run.columns])
    if "rank" in run.columns:
        return run.select("query_id", "doc_id", pl.col("rank").cast(pl.Int64))
    run = run.sort(["query_id", "score", "doc_id"], descending=[False, True, True])
    return run.with_columns(rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("query_id")).select("query_id", "doc_id", "rank")


def build_pool(task, runs: Mapping[str, pl.DataFrame], *, depth: int = 10, calibration: int = 30, seed: int = 0) -> pl.DataFrame:
    """The pairs to judge on ``task`` (:data:`POOL_SCHEMA`): holes in the top ``depth`` of ``runs``
    (model -> its run frame) and ``calibration`` human-judged pairs. Sorted: fill pairs by query and
    best rank, then calibration pairs by query and document."""
    qrels = task.qrels.select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.col("relevance").cast(pl.Int64))
    judged_queries = qrels.select("query_id").unique()
    qrels = qrels.filter(pl.col("relevance") >= 0)  # a negative grade: in the pool, unjudged (trec_eval): a hole to fill
    tops = []
    for model, run in runs.items():
        ranked = _ranked(run)
        if task.meta.ignore_identical_ids:  # never scored (scoring.score): not worth a judgement
            ranked = ranked.filter(pl.col("query_id") != pl.col("doc_id"))
        top = ranked.filter(pl.col("rank") <= depth).join(judged_queries, on="query_id", how="semi")
        tops.append(top.with_columns(pl.lit(model).alias("model")))
    if not tops:
        raise DataError(f"task {task.name}: no pool model's run to pool from")
    top = pl.concat(tops).join(qrels, on=["query_id", "doc_id"], how="anti")
    fill = (
        top.group_by("query_id", "doc_id")
        .agg(pl.col("model").unique().sort().str.join(",").alias("pool_models"), pl.col("rank").min().alias("best_rank"))
        .with_columns(pl.lit(FILL).alias("role"), pl.lit(None, dtype=pl.Int64).alias("human"))
        .sort("query_id", "best_rank", "doc_id")
    )
    calib = calibration_sample(task, qrels, calibration, seed)
    return pl.concat([fill.select(list(POOL_SCHEMA)), calib.select(list(POOL_SCHEMA))]).cast(POOL_SCHEMA)


def calibration_sample(task, qrels: pl.DataFrame, n: int, seed: int) -> pl.DataFrame:
    """``n`` human-judged pairs (documents of the corpus), spread over the grades (module docstring)."""
    empty = pl.DataFrame(schema=POOL_SCHEMA)
    if n <= 0 or not qrels.height:
        return empty
    docs = task.corpus.select(pl.col("doc_id").cast(pl.Utf8))
    present = qrels.join(docs, on="doc_id", how="semi").sort("query_id", "doc_id")
    rng = np.random.default_rng(seed)
    by_grade = []
    for grade in sorted(set(present["relevance"].to_list()), reverse=True):
        rows = present.filter(pl.col("relevance") == grade)
        by_grade.append(rows[rng.permutation(rows.height).tolist()].iter_rows())
    taken: list[tuple[str, str, int]] = []
    while len(taken) < n and by_grade:
        for it in list(by_grade):
            row = next(it, None)
            if row is None:
                by_grade.remove(it)
            elif len(taken) < n:
                taken.append(row)
    out = pl.DataFrame(taken, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "human": pl.Int64}, orient="row")
    return out.with_columns(
        pl.lit(CALIBRATION).alias("role"), pl.lit(None, dtype=pl.Utf8).alias("pool_models"), pl.lit(None, dtype=pl.Int64).alias("best_rank")
    ).sort("query_id", "doc_id")


def pair_texts(task, pool: pl.DataFrame, passage_words: int) -> tuple[list[str], list[str]]:
    """The query text and the passage (title and text, cut to ``passage_words`` words) of each pool pair, in pool order."""
    from medbench_core.evaluation.judging.prompt import cut_words

    queries = dict(zip(task.queries["query_id"].cast(pl.Utf8).to_list(), task.queries["text"].fill_null("").to_list()))
    passages = dict(zip(task.corpus["doc_id"].cast(pl.Utf8).to_list(), task.doc_text()))
    missing = [d for d in pool["doc_id"].to_list() if d not in passages]
    if missing:
        raise DataError(f"task {task.name}: pool names document(s) {missing[:5]} that the corpus does not have")
    return [queries.get(q, "") for q in pool["query_id"].to_list()], [cut_words(passages[d], passage_words) for d in pool["doc_id"].to_list()]
