"""What every reader shares: JSONL and JSON with file:line errors, BEIR-style qrels, text concept ids,
rows to a checked Task, PNG bytes written only when they change.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.taskdata.task import (
    CANDIDATES_SCHEMA,
    CORPUS_SCHEMA,
    QRELS_SCHEMA,
    QUERY_SCHEMA,
    Task,
    TaskMeta,
    check_referential_integrity,
    make_task,
)
from medbench_core.storage import write_bytes_atomic


def need_file(path: Path) -> Path:
    if not path.exists():
        raise DataError(f"{path}: file not found")
    return path


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; malformed lines name file and line."""
    path = need_file(Path(path))
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


def id_of(obj: dict[str, Any], path: Path, lineno: int) -> str:
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
    path = need_file(Path(path))
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


def normalise_text(text: str) -> str:
    """Unicode NFKC, case folded, punctuation (Unicode category P*) to spaces, whitespace collapsed.

    The same rule as the cross-task query comparison of the data contracts. Symbols such as
    ``+`` or ``°`` are kept: ``Na+`` and ``Na`` are different concepts.
    """
    s = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return " ".join("".join(" " if unicodedata.category(c).startswith("P") else c for c in s).split())


def text_concept_id(text: str) -> str:
    """Concept id of a concept written as text: ``txt:`` + 16 hex digits of sha256(normalised text)."""
    return "txt:" + hashlib.sha256(normalise_text(text).encode("utf-8")).hexdigest()[:16]


def load_json(path: Path) -> Any:
    if not path.exists():
        raise DataError(f"{path}: file not found")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from exc
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def build_task_from_rows(meta: TaskMeta, queries: list[dict], corpus: list[dict], qrels: list[dict], candidates: list[dict] | None, image_root: Path | None, where: str) -> Task:
    """Build and integrity-check a task from row dicts (make_task fills the columns a side lacks)."""

    def frame(rows: list[dict], schema: dict) -> pl.DataFrame:
        if not rows:
            return pl.DataFrame(schema=schema)
        return pl.DataFrame(rows, schema={k: v for k, v in schema.items() if k in rows[0]})

    task = make_task(
        meta,
        frame(queries, QUERY_SCHEMA),
        frame(corpus, CORPUS_SCHEMA),
        frame(qrels, QRELS_SCHEMA),
        None if candidates is None else frame(candidates, CANDIDATES_SCHEMA),
        image_root=image_root,
    )
    try:
        check_referential_integrity(task)
    except DataError as exc:
        raise DataError(f"{where}: {exc}") from exc
    return task



def png_bytes(arr: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    # Stored (level 0) deflate: the bytes depend only on the pixels, not on the zlib version,
    # so the task's content hash is stable across machines.
    Image.fromarray(arr).save(buf, format="PNG", compress_level=0)
    return buf.getvalue()


def write_png_if_changed(path: Path, data: bytes) -> bool:
    """Write ``data`` atomically unless ``path`` already holds exactly these bytes; True if written."""
    if path.is_file() and not path.is_symlink() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return False
    write_bytes_atomic(path, data)
    return True
