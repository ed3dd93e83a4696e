"""The Hugging Face retrieval layout (MTEB, R2MED, M3Retrieve-style folders): find the files, read the records.

A dataset has three parts, each a *config* on the hub or a file / folder locally:

- ``corpus``: ``_id`` or ``id``, optional ``title``, ``text`` (and, in image layouts, an image);
- ``queries`` (R2MED calls it ``query``): ``_id`` or ``id``, ``text`` (optional image, language);
- ``qrels`` (MTEB's config ``default``): ``query-id``/``q_id``, ``corpus-id``/``p_id``, ``score``.

Where each part is found: :mod:`medbench_core.taskdata.readers.hf_files`.

Records are read from JSON lines (``.jsonl``, ``.jsonl.gz``), Parquet, and for qrels also BEIR's
TSV and whitespace-separated text (``q d score`` or TREC's ``q 0 d score``). Errors name the file
and the line (Parquet: the row) and, where there is one, the record's id.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.taskdata.licences import UNKNOWN, normalise_licence
from medbench_core.taskdata.task import Task, TaskMeta, resolve_inside
from medbench_core.taskdata.readers.common import build_task_from_rows, write_png_if_changed
from medbench_core.taskdata.readers.hf_files import dataset_card, suffix_of

ID_FIELDS = ("_id", "id")
QID_FIELDS = ("query-id", "q_id", "query_id", "qid")
DID_FIELDS = ("corpus-id", "p_id", "corpus_id", "doc_id", "pid")
SCORE_FIELDS = ("score", "relevance")
TEXT_FIELDS = ("text", "txt")  # ``txt``: M3Retrieve's records
IMAGE_FIELDS = ("image", "img", "img_path", "image_path")
LANGUAGE_FIELDS = ("language", "lang")
LICENCE_FIELDS = ("licence", "license")


# --- reading records ---------------------------------------------------------------------------


def iter_records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(where, record)`` for each record of a JSON-lines or Parquet file; ``where`` is ``file:line`` or ``file: row n``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    suffix = suffix_of(path)
    if suffix == ".parquet":
        try:
            df = pl.read_parquet(path)
        except Exception as exc:  # polars raises several types for a damaged file
            raise DataError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from exc
        for i, row in enumerate(df.iter_rows(named=True), start=1):
            yield f"{path}: row {i}", row
        return
    if suffix not in (".jsonl", ".jsonl.gz"):
        raise DataError(f"{path}: unsupported file type {suffix!r}; use .jsonl, .jsonl.gz or .parquet")
    opener = gzip.open if suffix == ".jsonl.gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from exc
                if not isinstance(obj, dict):
                    raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
                yield f"{path}:{lineno}", obj
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except (OSError, EOFError) as exc:  # a truncated .gz
        raise DataError(f"{path}: cannot be read ({exc})") from exc


def first_field(obj: dict[str, Any], names: tuple[str, ...]) -> Any:
    for n in names:
        if n in obj and obj[n] is not None:
            return obj[n]
    return None


def record_id(obj: dict[str, Any], where: str, names: tuple[str, ...] = ID_FIELDS) -> str:
    raw = first_field(obj, names)
    if raw is None or str(raw).strip() == "":
        raise DataError(f"{where}: record has no {' or '.join(repr(n) for n in names)}")
    return str(raw).strip()


def relevance(raw: Any, where: str) -> int:
    """An integer grade; ``1.0`` and ``"2"`` are accepted, ``0.5`` and ``"high"`` are not."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value != int(value):
        raise DataError(f"{where}: relevance {raw!r} is not an integer")
    return int(value)


def iter_qrels(path: Path) -> Iterator[tuple[str, str, str, int]]:
    """Yield ``(where, query_id, doc_id, grade)`` from a qrels file in any of the supported formats."""
    path = Path(path)
    suffix = suffix_of(path)
    if suffix in (".tsv", ".txt"):
        if not path.is_file():
            raise DataError(f"{path}: file not found")
        with open(path, encoding="utf-8", newline="") as f:
            rows = csv.reader(f, delimiter="\t") if suffix == ".tsv" else (line.split() for line in f)
            for lineno, row in enumerate(rows, start=1):
                if not row or not "".join(row).strip():
                    continue
                if lineno == 1 and row[0].strip().lower() in {"query-id", "query_id", "q_id", "qid"}:
                    continue
                where = f"{path}:{lineno}"
                if len(row) == 4 and suffix == ".txt":  # TREC qrels: query, iteration, document, grade
                    row = [row[0], row[2], row[3]]
                if len(row) != 3:
                    raise DataError(f"{where}: expected 3 fields (query id, document id, score), got {len(row)}")
                yield where, row[0].strip(), row[1].strip(), relevance(row[2].strip(), where)
        return
    for where, obj in iter_records(path):
        qid = record_id(obj, where, QID_FIELDS)
        did = record_id(obj, where, DID_FIELDS)
        score = first_field(obj, SCORE_FIELDS)
        if score is None:
            raise DataError(f"{where}: judgment ({qid}, {did}) has no 'score'")
        yield where, qid, did, relevance(score, where)


# --- building the task -------------------------------------------------------------------------


@dataclass
class Layout:
    """Options of :func:`read_retrieval_files` that differ between the published layouts."""

    images: bool = False  # records may carry an image (M3Retrieve-style)
    query_language_required: bool = False  # every query names its language (MMed-Bench-IR style)
    discipline_field: str | None = None  # a record field giving the discipline (R2MED's body_system)
    extra: dict[str, Any] = field(default_factory=dict)


def _image_bytes_name(rid: str, data: bytes, hint: str | None) -> str:
    suffix = Path(hint).suffix.lower() if hint else ""
    if not suffix:
        suffix = ".png" if data[:8] == b"\x89PNG\r\n\x1a\n" else ".jpg" if data[:2] == b"\xff\xd8" else ".img"
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", rid)[:80]
    return f"{safe}-{hashlib.sha256(rid.encode()).hexdigest()[:8]}{suffix}"


class _Images:
    """Image references of records: paths inside the dataset folder, or bytes written to the scratch folder."""

    def __init__(self, root: Path | None, scratch: Path | None):
        self.root = root
        self.scratch = scratch
        self.written: set[str] = set()

    def ref(self, value: Any, side: str, rid: str, where: str) -> tuple[str, Path]:
        """(reference relative to the task's image folder, the folder it is relative to)."""
        if isinstance(value, dict) and value.get("bytes"):
            if self.scratch is None:
                raise DataError(f"{where}: record {rid} carries image bytes but the reader has no folder to write them to")
            name = f"{side}/{_image_bytes_name(rid, value['bytes'], value.get('path'))}"
            write_png_if_changed(self.scratch / name, bytes(value["bytes"]))
            self.written.add(name)
            return name, self.scratch
        path = value.get("path") if isinstance(value, dict) else value
        if not isinstance(path, str) or not path.strip():
            raise DataError(f"{where}: record {rid}: image {value!r} is neither a relative path nor {{bytes, path}}")
        if self.root is None:
            raise DataError(f"{where}: record {rid}: image path {path!r} but the dataset has no local folder")
        full = resolve_inside(self.root, path.strip(), what=f"{where}: record {rid}")
        if not full.is_file():
            raise DataError(f"{where}: record {rid}: image {path!r} not found under {self.root}")
        return path.strip(), self.root


def _licence(obj: dict[str, Any], default: str) -> str:
    raw = first_field(obj, LICENCE_FIELDS)
    return normalise_licence(raw) if raw is not None else default


def read_retrieval_files(
    *,
    name: str,
    corpus_files: list[Path],
    query_files: list[Path],
    qrels_files: list[Path],
    root: Path | None,
    layout: Layout,
    meta: dict[str, Any],
    query_licence: str,
    doc_licence: str,
    language: str = "en",
    discipline: str | None = None,
    research_only: bool = False,
    only_judged_queries: bool = True,
    duplicate_judgments: str = "error",
    require_positive: bool = False,
    image_scratch: Path | None = None,
) -> Task:
    """Read the three parts of an HF-layout dataset into a checked Task (see the module docstring).

    ``query_licence`` / ``doc_licence`` apply to records without a ``licence``/``license`` field
    (``unknown`` when nobody states one). Only judged queries are kept (as MTEB evaluates).
    ``meta`` holds the TaskMeta fields that describe the source (source, description, dataset,
    source_revision, subset, task_type).
    """
    if duplicate_judgments not in ("error", "max"):
        raise DataError(f"task {name}: duplicate_judgments must be 'error' or 'max', not {duplicate_judgments!r}")
    images = _Images(root, image_scratch)
    image_roots: set[Path] = set()

    def records(paths: list[Path], side: str, key: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        seen: dict[str, str] = {}
        for path in paths:
            for where, obj in iter_records(path):
                rid = record_id(obj, where)
                if rid in seen:
                    raise DataError(f"{where}: {side} id {rid!r} appears twice (first at {seen[rid]})")
                seen[rid] = where
                text = first_field(obj, TEXT_FIELDS)
                if text is not None and not isinstance(text, str):
                    raise DataError(f"{where}: record {rid}: 'text' is {type(text).__name__}, not a string")
                row: dict[str, Any] = {key: rid, "text": text or ""}
                if side == "corpus":
                    title = obj.get("title")
                    row["title"] = title if isinstance(title, str) else ""
                image = first_field(obj, IMAGE_FIELDS) if layout.images else None
                if image is not None:
                    ref, img_root = images.ref(image, side, rid, where)
                    row["image"] = ref
                    image_roots.add(img_root)
                else:
                    row["image"] = None
                has_text = bool(row["text"].strip() or row.get("title", "").strip())
                if not has_text and row["image"] is None:
                    raise DataError(f"{where}: {side} record {rid} has no text" + (" and no image" if layout.images else ""))
                row["modality"] = "both" if has_text and row["image"] else "image" if row["image"] else "text"
                lang = first_field(obj, LANGUAGE_FIELDS)
                if lang is None and side == "queries" and layout.query_language_required:
                    raise DataError(f"{where}: query {rid} has no 'language'; every query of this layout names its language")
                row["language"] = str(lang).strip() if lang is not None and str(lang).strip() else language
                disc = obj.get(layout.discipline_field) if layout.discipline_field else None
                row["discipline"] = str(disc).strip() if disc not in (None, "") and str(disc).strip() else discipline
                row["licence"] = _licence(obj, query_licence if side == "queries" else doc_licence)
                rows.append(row)
        if not rows:
            raise DataError(f"{', '.join(map(str, paths))}: no {side} records")
        return rows

    corpus = records(corpus_files, "corpus", "doc_id")
    queries = records(query_files, "queries", "query_id")
    qids = {q["query_id"] for q in queries}
    dids = {d["doc_id"] for d in corpus}
    grades: dict[tuple[str, str], int] = {}
    first_at: dict[tuple[str, str], str] = {}
    for path in qrels_files:
        for where, qid, did, grade in iter_qrels(path):
            if qid not in qids:
                raise DataError(f"{where}: judgment names query id {qid!r}, which the queries ({', '.join(map(str, query_files))}) do not hold")
            if did not in dids:
                raise DataError(f"{where}: judgment names document id {did!r}, which the corpus ({', '.join(map(str, corpus_files))}) does not hold")
            pair = (qid, did)
            if pair in grades:
                if duplicate_judgments == "error":
                    raise DataError(f"{where}: judgment for ({qid}, {did}) appears again (first at {first_at[pair]}); set duplicate_judgments: max to keep the higher grade")
                grades[pair] = max(grades[pair], grade)
            else:
                grades[pair] = grade
                first_at[pair] = where
    if not grades:
        raise DataError(f"{', '.join(map(str, qrels_files))}: no judgments")
    if require_positive:
        positive = {q for (q, _), g in grades.items() if g > 0}
        grades = {p: g for p, g in grades.items() if p[0] in positive}
    if only_judged_queries:
        judged = {q for q, _ in grades}
        queries = [q for q in queries if q["query_id"] in judged]
    qrels = [{"query_id": q, "doc_id": d, "relevance": g} for (q, d), g in grades.items()]

    if len(image_roots) > 1:
        # Local paths and written bytes in one dataset: keep one image folder by copying refs into the scratch.
        raise DataError(f"task {name}: images come both from {sorted(map(str, image_roots))}; give them in one form (paths or bytes)")
    image_root = next(iter(image_roots)) if image_roots else None

    def modality(rows: list[dict[str, Any]]) -> str:
        kinds = {r["modality"] for r in rows}
        return kinds.pop() if len(kinds) == 1 else ",".join(sorted(kinds))

    task_meta = TaskMeta(
        name=name,
        licences=tuple(sorted({r["licence"] for r in queries} | {r["licence"] for r in corpus})),
        languages=tuple(sorted({r["language"] for r in queries} | {r["language"] for r in corpus})),
        query_modality=modality(queries),
        doc_modality=modality(corpus),
        research_only=research_only,
        **meta,
    )
    where = ", ".join(map(str, qrels_files))
    return build_task_from_rows(task_meta, queries, corpus, qrels, None, image_root, where)


def card_licence(folder: Path | None) -> str | None:
    """The dataset card's ``license`` (normalised), or None when the card states none."""
    if folder is None:
        return None
    raw = dataset_card(folder).get("license")
    if isinstance(raw, list):
        raw = raw[0] if len(raw) == 1 else None
    return None if raw in (None, "") else normalise_licence(raw)


def side_licences(folder: Path | None, licence: str | None, query_licence: str | None, doc_licence: str | None) -> tuple[str, str]:
    """Licence of records without their own field: per side, else ``licence``, else the card's, else ``unknown``."""
    default = normalise_licence(licence) if licence else (card_licence(folder) or UNKNOWN)
    return (normalise_licence(query_licence) if query_licence else default, normalise_licence(doc_licence) if doc_licence else default)


__all__ = [
    "Layout",
    "card_licence",
    "iter_qrels",
    "iter_records",
    "read_retrieval_files",
    "side_licences",
]
