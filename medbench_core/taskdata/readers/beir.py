"""BEIR folders: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from medbench_core.errors import DataError
from medbench_core.taskdata.task import Task, TaskMeta, check_referential_integrity, make_task
from medbench_core.taskdata.readers.common import id_of, iter_jsonl, need_file, read_qrels_tsv


def read_beir(
    folder: str | Path,
    *,
    name: str,
    split: str = "test",
    query_licence: str,
    doc_licence: str,
    language: str = "en",
    discipline: str | None = None,
    source: str = "",
    description: str = "",
    research_only: bool = False,
    only_judged_queries: bool = True,
    duplicate_judgments: str = "error",
    require_positive: bool = False,
) -> Task:
    """Read a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``).

    Licences are given per side because BEIR files carry none. With ``only_judged_queries``
    the queries are those that the split's qrels judge, as BEIR and MTEB evaluate them.
    ``duplicate_judgments`` is passed to :func:`read_qrels_tsv`; with ``require_positive``
    queries that no judgment grades above 0 are dropped with their judgments (the data
    contract requires a positive judgment per query).
    """
    folder = Path(folder)
    corpus_path = folder / "corpus.jsonl"
    queries_path = folder / "queries.jsonl"
    qrels_path = folder / "qrels" / f"{split}.tsv"
    for p in (corpus_path, queries_path, qrels_path):
        need_file(p)

    docs = []
    for lineno, obj in iter_jsonl(corpus_path):
        docs.append({"doc_id": id_of(obj, corpus_path, lineno), "title": obj.get("title") or "", "text": obj.get("text") or ""})
    queries = []
    for lineno, obj in iter_jsonl(queries_path):
        queries.append({"query_id": id_of(obj, queries_path, lineno), "text": obj.get("text") or ""})
    qrels = read_qrels_tsv(qrels_path, duplicates=duplicate_judgments)
    if require_positive:
        positive = qrels.filter(pl.col("relevance") > 0)["query_id"].unique()
        qrels = qrels.filter(pl.col("query_id").is_in(positive.implode()))

    qdf = pl.DataFrame(queries, schema={"query_id": pl.Utf8, "text": pl.Utf8})
    if only_judged_queries:
        judged = set(qrels["query_id"].to_list())
        unknown = sorted(judged - set(qdf["query_id"].to_list()))
        if unknown:
            raise DataError(f"{qrels_path}: names {len(unknown)} query id(s) not in {queries_path}: {unknown[:10]}")
        qdf = qdf.filter(pl.col("query_id").is_in(list(judged)))
    common = {"language": language, "discipline": discipline}
    qdf = qdf.with_columns(
        pl.lit(language).alias("language"),
        pl.lit("text").alias("modality"),
        pl.lit(discipline, dtype=pl.Utf8).alias("discipline"),
        pl.lit(query_licence).alias("licence"),
    )
    ddf = pl.DataFrame(docs, schema={"doc_id": pl.Utf8, "title": pl.Utf8, "text": pl.Utf8}).with_columns(
        pl.lit(common["language"]).alias("language"),
        pl.lit("text").alias("modality"),
        pl.lit(discipline, dtype=pl.Utf8).alias("discipline"),
        pl.lit(doc_licence).alias("licence"),
    )
    meta = TaskMeta(
        name=name,
        source=source or str(folder.name),
        description=description,
        licences=tuple(sorted({query_licence, doc_licence})),
        languages=(language,),
        research_only=research_only,
    )
    task = make_task(meta, qdf, ddf, qrels)
    try:
        check_referential_integrity(task)
    except DataError as exc:
        raise DataError(f"{qrels_path}: {exc}") from exc
    return task
