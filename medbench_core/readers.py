"""Readers that turn source datasets into :class:`~medbench_core.model.Task` objects.

Each reader names the file and line of anything malformed, and the ids of anything that
does not join up.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.model import Task, TaskMeta, check_referential_integrity, make_task


def _need(path: Path) -> Path:
    if not path.exists():
        raise DataError(f"{path}: file not found")
    return path


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; malformed lines name file and line."""
    path = _need(Path(path))
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from exc
            if not isinstance(obj, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def _id_of(obj: dict[str, Any], path: Path, lineno: int) -> str:
    raw = obj.get("_id", obj.get("id"))
    if raw is None or str(raw) == "":
        raise DataError(f"{path}:{lineno}: record has no '_id'")
    return str(raw)


def read_qrels_tsv(path: str | Path, duplicates: str = "error") -> pl.DataFrame:
    """BEIR qrels: a header ``query-id corpus-id score`` then one judgment a line.

    A (query, document) pair judged more than once raises, unless ``duplicates="max"``, which
    keeps its highest grade (LiveQA-MedQuAD judges 168 pairs twice with different grades).
    """
    if duplicates not in ("error", "max"):
        raise ValueError(f"duplicates must be 'error' or 'max', not {duplicates!r}")
    path = _need(Path(path))
    rows: list[tuple[str, str, int]] = []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t")
        for lineno, row in enumerate(reader, start=1):
            if not row or not "".join(row).strip():
                continue
            if lineno == 1 and row[0].strip().lower() in {"query-id", "query_id", "qid"}:
                continue
            if len(row) < 3:
                raise DataError(f"{path}:{lineno}: expected 3 tab-separated fields (query-id, corpus-id, score), got {len(row)}")
            try:
                score = int(row[2])
            except ValueError as exc:
                raise DataError(f"{path}:{lineno}: relevance {row[2]!r} is not an integer") from exc
            rows.append((row[0].strip(), row[1].strip(), score))
    if not rows:
        raise DataError(f"{path}: no judgments")
    df = pl.DataFrame(rows, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "relevance": pl.Int32}, orient="row")
    dup = df.filter(pl.struct("query_id", "doc_id").is_duplicated())
    if dup.height and duplicates == "max":
        return df.group_by("query_id", "doc_id", maintain_order=True).agg(pl.col("relevance").max())
    if dup.height:
        first = dup.row(0)
        raise DataError(f"{path}: judgment for ({first[0]}, {first[1]}) appears more than once; pass duplicates='max' to keep the highest grade")
    return df


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
        _need(p)

    docs = []
    for lineno, obj in iter_jsonl(corpus_path):
        docs.append({"doc_id": _id_of(obj, corpus_path, lineno), "title": obj.get("title") or "", "text": obj.get("text") or ""})
    queries = []
    for lineno, obj in iter_jsonl(queries_path):
        queries.append({"query_id": _id_of(obj, queries_path, lineno), "text": obj.get("text") or ""})
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
