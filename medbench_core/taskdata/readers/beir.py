"""BEIR folders: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import polars as pl

from medbench_core.errors import DataError
from medbench_core.taskdata.readers.base import ReadContext, Reader, ReaderOptions
from medbench_core.taskdata.readers.common import SeenIds, first_present, id_of, iter_jsonl, need_file, read_qrels_tsv, refuse_unmapped
from medbench_core.taskdata.task import Task, TaskMeta, check_referential_integrity, make_task

# Fields of a BEIR record: the id, the text (and the corpus's title); ``metadata`` is BEIR's free-form
# mapping (SciFact's and LiveQA's carry one), which no task field holds.
QUERY_FIELDS = frozenset({"_id", "id", "text", "metadata"})
CORPUS_FIELDS = frozenset({"_id", "id", "title", "text", "metadata"})


@dataclass(frozen=True, kw_only=True)
class BeirOptions(ReaderOptions):
    """Options of the ``beir`` reader.

    Licences are given per side because BEIR files carry none. With ``only_judged_queries`` the
    queries are those that the split's qrels judge, as BEIR and MTEB evaluate them.
    ``duplicate_judgments: max`` keeps the highest grade of a pair judged twice (``error``
    refuses it); with ``require_positive`` queries that no judgment grades above 0 are dropped
    with their judgments (the data contract requires a positive judgment per query).
    ``qrels_holes: mark`` keeps qrels rows naming documents absent from the corpus and lets the
    contract pass queries without a judged or positive document, each reported (docs/trust.md);
    ``refuse`` (the default) refuses the task.
    """

    query_licence: str
    doc_licence: str
    split: str = "test"
    language: str = "en"
    discipline: str | None = None
    only_judged_queries: bool = True
    duplicate_judgments: Literal["error", "max"] = "error"
    require_positive: bool = False
    qrels_holes: Literal["refuse", "mark"] = "refuse"


def read_beir(folder: str | Path, options: BeirOptions, context: ReadContext | None = None) -> Task:
    """Read a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``); see :class:`BeirOptions`."""
    o = options
    folder = Path(folder)
    corpus_path = folder / "corpus.jsonl"
    queries_path = folder / "queries.jsonl"
    qrels_path = folder / "qrels" / f"{o.split}.tsv"
    for p in (corpus_path, queries_path, qrels_path):
        need_file(p)

    def records(path: Path, what: str, key: str, fields: frozenset[str]) -> list[dict]:
        rows = []
        seen = SeenIds(what)
        with_title = "title" in fields
        for lineno, obj in iter_jsonl(path):
            rid = id_of(obj, path, lineno)
            seen.add(rid, obj[first_present(obj, ("_id", "id"))], path, lineno)
            text, title = obj.get("text"), obj.get("title") if with_title else None
            for name, value in (("text", text), ("title", title)):
                if value is not None and not isinstance(value, str):
                    raise DataError(f"{path}:{lineno}: {what} {rid}: {name!r} is {type(value).__name__}, not a string")
            if (not text or text.isspace()) and (not title or title.isspace()):
                refuse_unmapped(obj, fields, f"{path}:{lineno}: {what} {rid}", "no text")
                raise DataError(f"{path}:{lineno}: {what} {rid} has no text")
            rows.append({key: rid, "title": title or "", "text": text or ""} if with_title else {key: rid, "text": text or ""})
        return rows

    docs = records(corpus_path, "document", "doc_id", CORPUS_FIELDS)
    queries = records(queries_path, "query", "query_id", QUERY_FIELDS)
    qrels = read_qrels_tsv(qrels_path, duplicates=o.duplicate_judgments)
    if o.require_positive:
        positive = qrels.filter(pl.col("relevance") > 0)["query_id"].unique()
        qrels = qrels.filter(pl.col("query_id").is_in(positive.implode()))

    qdf = pl.DataFrame(queries, schema={"query_id": pl.Utf8, "text": pl.Utf8})
    if o.only_judged_queries:
        judged = set(qrels["query_id"].to_list())
        unknown = sorted(judged - set(qdf["query_id"].to_list()))
        if unknown:
            raise DataError(f"{qrels_path}: names {len(unknown)} query id(s) not in {queries_path}: {unknown[:10]}")
        qdf = qdf.filter(pl.col("query_id").is_in(list(judged)))
    qdf = qdf.with_columns(
        pl.lit(o.language).alias("language"),
        pl.lit("text").alias("modality"),
        pl.lit(o.discipline, dtype=pl.Utf8).alias("discipline"),
        pl.lit(o.query_licence).alias("licence"),
    )
    ddf = pl.DataFrame(docs, schema={"doc_id": pl.Utf8, "title": pl.Utf8, "text": pl.Utf8}).with_columns(
        pl.lit(o.language).alias("language"),
        pl.lit("text").alias("modality"),
        pl.lit(o.discipline, dtype=pl.Utf8).alias("discipline"),
        pl.lit(o.doc_licence).alias("licence"),
    )
    meta = TaskMeta(
        name=o.name,
        source=o.source or str(folder.name),
        description=o.description,
        licences=tuple(sorted({o.query_licence, o.doc_licence})),
        languages=(o.language,),
        research_only=o.research_only,
    )
    task = make_task(meta, qdf, ddf, qrels)
    try:
        check_referential_integrity(task, qrels_holes=o.qrels_holes)
    except DataError as exc:
        raise DataError(f"{qrels_path}: {exc}") from exc
    return task


READER = Reader("beir", BeirOptions, read_beir, ignore_identical_ids=True)  # BEIR's EvaluateRetrieval.evaluate drops them by default
