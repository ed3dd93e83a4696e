"""The Hugging Face retrieval layout (MTEB, R2MED, M3Retrieve, M-BEIR): read the records of the three parts.

A dataset has three parts, each a *config* on the hub or a file / folder locally:

- ``corpus``: ``_id`` or ``id``, optional ``title``, ``text`` (and, in image layouts, an image);
- ``queries`` (R2MED calls it ``query``): ``_id`` or ``id``, ``text`` (optional image, language);
- ``qrels`` (MTEB's config ``default``): ``query-id``/``q_id``, ``corpus-id``/``p_id``, ``score``.

Where each part is found: :mod:`medbench_core.taskdata.readers.hf_files`. Which record fields a
layout maps to the task's text, title and image is its :class:`Layout`; a record left with no
text that carries text in a field the layout does not map is refused, naming the field.

Records are read from JSON lines (``.jsonl``, ``.jsonl.gz``), Parquet, and for qrels also BEIR's
TSV (with its header) and whitespace-separated text (``q d score``, TREC's ``q 0 d score``, or
M-BEIR's ``q 0 d score task_id``).
Errors name the file and the line (Parquet: the row) and, where there is one, the record's id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import polars as pl

from medbench_core.errors import DataError
from medbench_core.taskdata.licences import UNKNOWN, normalise_licence
from medbench_core.taskdata.readers.base import ReaderOptions
from medbench_core.taskdata.readers.common import (
    SeenIds,
    add_judgment,
    build_task_from_rows,
    first_present,
    id_value,
    iter_jsonl,
    iter_lines,
    iter_qrels_tsv,
    need_file,
    refuse_unmapped,
    relevance,
)
from medbench_core.taskdata.readers.hf_files import dataset_card, suffix_of
from medbench_core.taskdata.readers.hf_images import FolderImages, ImageSource
from medbench_core.taskdata.task import Task, TaskMeta

ID_FIELDS = ("_id", "id")
QID_FIELDS = ("query-id", "q_id", "query_id", "qid")
DID_FIELDS = ("corpus-id", "p_id", "corpus_id", "doc_id", "pid")
SCORE_FIELDS = ("score", "relevance")
LANGUAGE_FIELDS = ("language", "lang")
LICENCE_FIELDS = ("licence", "license")


# --- options ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FilesOptions(ReaderOptions):
    """Options of the readers built on :func:`read_retrieval_files`.

    Licences: a record's own ``licence``/``license`` field, else ``query_licence`` /
    ``doc_licence``, else ``licence``, else the dataset card's ``license``, else ``unknown``
    (which the licence gate admits only for a task marked ``research_only``). ``dataset``,
    ``subset`` and ``task_type`` are recorded in the task metadata (``task_type`` may choose an
    instruction template). ``only_judged_queries`` keeps the queries the qrels judge (as MTEB
    evaluates); ``duplicate_judgments: max`` keeps the higher grade of a pair judged twice;
    ``require_positive`` drops queries without a positive judgment. ``ignore_fields`` names
    record fields that may hold text the task does not use (otherwise a record left with no text
    that carries text in an unknown field is refused). ``qrels_holes: mark`` keeps qrels rows
    naming documents absent from the corpus, reported by the task's contract (docs/trust.md).
    """

    licence: str | None = None
    query_licence: str | None = None
    doc_licence: str | None = None
    language: str = "en"
    discipline: str | None = None
    dataset: str = ""
    subset: str = ""
    task_type: str = ""
    only_judged_queries: bool = True
    duplicate_judgments: Literal["error", "max"] = "error"
    require_positive: bool = False
    ignore_fields: tuple[str, ...] = ()
    qrels_holes: Literal["refuse", "mark"] = "refuse"


@dataclass(frozen=True, kw_only=True)
class HubOptions(FilesOptions):
    """:class:`FilesOptions` of a dataset read from a local folder or a hub dataset (``dataset`` + ``revision``).

    ``revision`` pins a hub dataset (a commit sha, or a branch resolved to one and recorded); a
    local folder is identified by the hash of its files instead. ``split`` is the split read.
    """

    revision: str = ""
    split: str = "test"


# --- reading records ----------------------------------------------------------------------------


def iter_records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(where, record)`` for each record of a JSON-lines or Parquet file; ``where`` is ``file:line`` or ``file: row n``."""
    path = need_file(Path(path))
    suffix = suffix_of(path)
    if suffix == ".parquet":
        if path.stat().st_size == 0:
            raise DataError(f"{path}: file is empty (0 bytes)")
        try:
            df = pl.read_parquet(path)
        except Exception as exc:  # polars raises several types for a damaged file
            raise DataError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from exc
        if df.height == 0:
            raise DataError(f"{path}: no records (the Parquet file has 0 rows)")
        for i, row in enumerate(df.iter_rows(named=True), start=1):
            yield f"{path}: row {i}", row
        return
    if suffix not in (".jsonl", ".jsonl.gz"):
        raise DataError(f"{path}: unsupported file type {suffix!r}; use .jsonl, .jsonl.gz or .parquet")
    for lineno, obj in iter_jsonl(path, gz=suffix == ".jsonl.gz"):
        yield f"{path}:{lineno}", obj


def first_field(obj: dict[str, Any], names: tuple[str, ...]) -> Any:
    field = first_present(obj, names)
    return None if field is None else obj[field]


def record_id(obj: dict[str, Any], where: str, names: tuple[str, ...] = ID_FIELDS) -> str:
    field = first_present(obj, names)
    if field is None or (isinstance(obj[field], str) and not obj[field].strip()):
        raise DataError(f"{where}: record has no {' or '.join(repr(n) for n in names)}")
    return id_value(obj[field], where, field)


def iter_qrels(path: Path) -> Iterator[tuple[str, str, str, int]]:
    """Yield ``(where, query_id, doc_id, grade)`` from a qrels file in any of the supported formats."""
    path = Path(path)
    suffix = suffix_of(path)
    if suffix == ".tsv":
        for where, qid, did, grade in iter_qrels_tsv(path):
            yield where, qid, did, grade
        return
    if suffix == ".txt":
        for lineno, line in iter_lines(path):
            row = line.split()
            if not row:
                continue
            where = f"{path}:{lineno}"
            if lineno == 1 and row[0].lower() in QID_FIELDS:
                continue
            if len(row) == 4:  # TREC qrels: query, iteration, document, grade
                row = [row[0], row[2], row[3]]
            elif len(row) == 5 and row[1] == "0":  # M-BEIR's: query, 0, document, grade, task id
                row = [row[0], row[2], row[3]]
            if len(row) != 3:
                raise DataError(f"{where}: expected 3 fields (query id, document id, score), got {len(row)}")
            yield where, row[0], row[1], relevance(row[2], where)
        return
    for where, obj in iter_records(path):
        qid = record_id(obj, where, QID_FIELDS)
        did = record_id(obj, where, DID_FIELDS)
        score = first_field(obj, SCORE_FIELDS)
        if score is None:
            raise DataError(f"{where}: judgment ({qid}, {did}) has no 'score'")
        yield where, qid, did, relevance(score, where)


# --- how a layout's records map to the task -------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """The fields of one side's records, each list in order of preference.

    ``text`` and ``title`` give the task's text (documents: title and text, joined as BEIR and
    MTEB join them), ``image`` the image (read only when the reader has an image source).
    ``ignored`` lists fields the layout knows and deliberately does not hold in the task.
    """

    text: tuple[str, ...] = ("text",)
    title: tuple[str, ...] = ()
    image: tuple[str, ...] = ()
    ids: tuple[str, ...] = ID_FIELDS
    ignored: tuple[str, ...] = ()

    def known(self, layout: "Layout", extra: tuple[str, ...] = ()) -> frozenset[str]:
        return frozenset(
            (*self.ids, *self.text, *self.title, *self.image, *self.ignored, *LANGUAGE_FIELDS, *LICENCE_FIELDS, *extra)
            + ((layout.discipline_field,) if layout.discipline_field else ())
        )


@dataclass(frozen=True)
class Layout:
    """What differs between the published layouts read by :func:`read_retrieval_files`.

    ``check(side, record, row, where)``, when given, is called on every record after it is read
    (M-BEIR checks a record's declared modality against what it carries).
    """

    queries: Side = Side()
    corpus: Side = Side(title=("title",))
    query_language_required: bool = False  # every query names its language (MMed-Bench-IR style)
    discipline_field: str | None = None  # a record field giving the discipline (R2MED's body_system)
    check: Callable[[str, dict[str, Any], dict[str, Any], str], None] | None = None


def blank(value: Any) -> bool:
    """None, or a string of whitespace only."""
    return value is None or (isinstance(value, str) and (not value or value.isspace()))


def one_value(obj: dict[str, Any], names: tuple[str, ...], where: str, rid: str, what: str) -> Any:
    """The value of the one field of ``names`` that ``obj`` fills; two fields holding different values are refused."""
    field, found = None, None
    for n in names:
        v = obj.get(n)
        if blank(v):
            continue
        if field is None:
            field, found = n, v
        elif v != found:
            raise DataError(f"{where}: record {rid}: fields {field!r} and {n!r} both hold {what}, with different values; keep one of them")
    return found


def text_value(obj: dict[str, Any], names: tuple[str, ...], where: str, rid: str) -> str:
    value = one_value(obj, names, where, rid, "text")
    if value is not None and not isinstance(value, str):
        field = next(n for n in names if obj.get(n) is value)
        raise DataError(f"{where}: record {rid}: {field!r} is {type(value).__name__}, not a string")
    return value or ""


# --- building the task -------------------------------------------------------------------------


def _licence(obj: dict[str, Any], default: str) -> str:
    raw = first_field(obj, LICENCE_FIELDS)
    return normalise_licence(raw) if raw is not None else default


def read_retrieval_files(
    *,
    options: FilesOptions,
    corpus_files: list[Path],
    query_files: list[Path],
    qrels_files: list[Path],
    layout: Layout,
    meta: dict[str, Any],
    query_licence: str,
    doc_licence: str,
    images: ImageSource | None = None,
) -> Task:
    """Read the three parts of an HF-layout dataset into a checked Task (see the module docstring).

    ``query_licence`` / ``doc_licence`` apply to records without a ``licence``/``license`` field
    (``unknown`` when nobody states one). ``meta`` holds the TaskMeta fields that describe the
    source (source, description, dataset, source_revision, subset, task_type). ``images`` reads
    the records' image fields; without it a layout's image fields are not read.
    """
    o = options
    name = o.name

    def records(paths: list[Path], side: str, key: str) -> list[dict[str, Any]]:
        spec = layout.queries if side == "queries" else layout.corpus
        known = spec.known(layout, o.ignore_fields)
        rows: list[dict[str, Any]] = []
        seen = SeenIds(side)
        for path in paths:
            for where, obj in iter_records(path):
                field = first_present(obj, spec.ids)
                rid = record_id(obj, where, spec.ids)
                seen.add(rid, obj[field], where)
                text = text_value(obj, spec.text, where, rid)
                row: dict[str, Any] = {key: rid, "text": text}
                title = ""
                if side == "corpus":
                    title = row["title"] = text_value(obj, spec.title, where, rid) if spec.title else ""
                image = one_value(obj, spec.image, where, rid, "an image") if images is not None and spec.image else None
                has_text = not blank(text) or not blank(title)
                if not has_text:
                    if image is not None:
                        hint = " (if that field is not the record's text, list it in ignore_fields)"
                        refuse_unmapped(obj, known, f"{where}: {side} record {rid}", "no text", hint)
                    else:
                        refuse_unmapped(obj, known, f"{where}: {side} record {rid}", "nothing")
                        raise DataError(f"{where}: {side} record {rid} has no text" + (" and no image" if images is not None else ""))
                row["image"] = images.ref(image, side, rid, where) if image is not None else None
                row["modality"] = "both" if has_text and row["image"] else "image" if row["image"] else "text"
                lang = first_field(obj, LANGUAGE_FIELDS)
                if lang is None and side == "queries" and layout.query_language_required:
                    raise DataError(f"{where}: query {rid} has no 'language'; every query of this layout names its language")
                lang = str(lang).strip() if lang is not None else ""
                row["language"] = lang or o.language
                disc = obj.get(layout.discipline_field) if layout.discipline_field else None
                disc = str(disc).strip() if disc is not None else ""
                row["discipline"] = disc or o.discipline
                row["licence"] = _licence(obj, query_licence if side == "queries" else doc_licence)
                if layout.check is not None:
                    layout.check(side, obj, row, f"{where}: record {rid}")
                rows.append(row)
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
            add_judgment(grades, first_at, where, qid, did, grade, o.duplicate_judgments)
    if not grades:
        raise DataError(f"{', '.join(map(str, qrels_files))}: no judgments")
    if o.require_positive:
        positive = {q for (q, _), g in grades.items() if g > 0}
        grades = {p: g for p, g in grades.items() if p[0] in positive}
    if o.only_judged_queries:
        judged = {q for q, _ in grades}
        queries = [q for q in queries if q["query_id"] in judged]
    qrels = [{"query_id": q, "doc_id": d, "relevance": g} for (q, d), g in grades.items()]
    try:
        image_root = images.finish() if images is not None else None
    except DataError as exc:
        raise DataError(f"task {name}: {exc}") from exc

    def modality(rows: list[dict[str, Any]]) -> str:
        kinds = {r["modality"] for r in rows}
        return kinds.pop() if len(kinds) == 1 else ",".join(sorted(kinds))

    task_meta = TaskMeta(
        name=name,
        licences=tuple(sorted({r["licence"] for r in queries} | {r["licence"] for r in corpus})),
        languages=tuple(sorted({r["language"] for r in queries} | {r["language"] for r in corpus})),
        query_modality=modality(queries),
        doc_modality=modality(corpus),
        research_only=o.research_only,
        **meta,
    )
    where = ", ".join(map(str, qrels_files))
    return build_task_from_rows(task_meta, queries, corpus, qrels, None, image_root, where, qrels_holes=o.qrels_holes)


def card_licence(*folders: Path | None) -> str | None:
    """The ``license`` (normalised) of the first dataset card among ``folders`` that states one."""
    for folder in folders:
        if folder is None:
            continue
        raw = dataset_card(folder).get("license")
        if isinstance(raw, list):
            raw = raw[0] if len(raw) == 1 else None
        if raw not in (None, ""):
            return normalise_licence(raw)
    return None


def side_licences(folders: list[Path], licence: str | None, query_licence: str | None, doc_licence: str | None) -> tuple[str, str]:
    """Licence of records without their own field: per side, else ``licence``, else the card's, else ``unknown``."""
    default = normalise_licence(licence) if licence else (card_licence(*folders) or UNKNOWN)
    return (normalise_licence(query_licence) if query_licence else default, normalise_licence(doc_licence) if doc_licence else default)


__all__ = [
    "FilesOptions",
    "FolderImages",
    "HubOptions",
    "ImageSource",
    "Layout",
    "Side",
    "card_licence",
    "iter_qrels",
    "iter_records",
    "read_retrieval_files",
    "side_licences",
]
