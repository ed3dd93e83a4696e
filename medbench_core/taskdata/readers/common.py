"""What every reader shares: strict text files (UTF-8, file:line:byte errors, empty files, ids and
duplicates), JSONL and JSON, BEIR-style qrels, the no-silent-drop check, text concept ids, rows to a
checked Task, files written only when they change.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import hashlib
import io
import json
import math
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.storage import write_bytes_atomic
from medbench_core.taskdata.source_rules import GRADE_MAX, ID_MAX_CHARS, check_grade, check_id
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

if TYPE_CHECKING:
    import numpy as np


def need_file(path: Path) -> Path:
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if not path.is_file():
        raise DataError(f"{path}: not a regular file")
    return path


# --- strict text files ---------------------------------------------------------------------------
#
# The rules every reader follows (docs/tasks_and_readers.md, "Strict reading"):
# - text files are UTF-8; a byte sequence that is not is refused naming the file, the line, the
#   byte offset in the file and the byte; a UTF-8 BOM at the start and CRLF line ends are accepted;
# - an empty file (0 bytes, or blank lines only) is refused naming the file;
# - ids are strings: a JSON string is used as written (stripped), a JSON integer as its decimal
#   digits; a float, boolean, list, object or null id is refused. Two records whose ids are equal
#   after this (``1`` and ``"1"`` among them) are duplicates, refused naming both lines. An id is
#   then held to the safe alphabet (:func:`~medbench_core.taskdata.source_rules.check_id`: no
#   whitespace, control or format character inside it, 512 characters at most);
# - a JSON record nested deeper than Python's parser goes (a RecursionError) is refused naming the line;
# - grades are whole numbers from 0 to 1000 (:func:`relevance`).


def iter_lines(path: str | Path, *, gz: bool = False) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for each line of a UTF-8 file, line ends (LF or CRLF) removed.

    A BOM at the start is skipped. Bytes that are not UTF-8 raise DataError naming the file, the
    line and the byte offset (in the decompressed stream for ``gz``); an empty file raises too.
    """
    path = need_file(Path(path))
    opener = gzip.open if gz else open
    offset = 0
    lineno = 0
    try:
        with opener(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                start = offset
                offset += len(raw)
                if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw, start = raw[len(codecs.BOM_UTF8) :], start + len(codecs.BOM_UTF8)
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    where = "of the decompressed file" if gz else "in the file"
                    raise DataError(
                        f"{path}:{lineno}: not UTF-8: byte 0x{raw[exc.start]:02x} at byte offset {start + exc.start} {where} "
                        f"(column {exc.start + 1}, {exc.reason}); re-encode the file as UTF-8"
                    ) from None
                yield lineno, text.rstrip("\r\n")
    except (OSError, EOFError) as exc:  # a truncated .gz, an unreadable file
        raise DataError(f"{path}: cannot be read ({exc})") from exc
    if offset == 0:
        raise DataError(f"{path}: file is empty (0 bytes)")


def iter_jsonl(path: str | Path, *, gz: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; malformed lines name file and line.

    A file without a single record (empty, or blank lines only) is refused naming the file.
    """
    path = Path(path)
    records = 0
    for lineno, line in iter_lines(path, gz=gz):
        if not line or line.isspace():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from None
        except RecursionError:
            raise DataError(f"{path}:{lineno}: {TOO_DEEP}") from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        records += 1
        yield lineno, obj
    if not records:
        raise DataError(f"{path}: no records (the file holds only blank lines)")


TOO_DEEP = "JSON nested deeper than the parser can read (RecursionError); a record is a flat object of ids, texts and small lists"


def _plain_id(raw: Any) -> bool:
    """A string id that needs nothing done: no whitespace, control or format character, not too long."""
    return type(raw) is str and 0 < len(raw) <= ID_MAX_CHARS and raw.isprintable() and " " not in raw


def id_value(raw: Any, where: str, field: str = "_id") -> str:
    """A record id as a string, by the rule above; DataError naming ``where``, ``field`` and the id otherwise."""
    if _plain_id(raw):
        return raw  # the common case, first
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        kind = "null" if raw is None else type(raw).__name__
        raise DataError(f"{where}: {field!r} is {kind} {raw!r}; an id must be a string or an integer")
    value = raw.strip() if isinstance(raw, str) else str(raw)
    if not value:
        raise DataError(f"{where}: {field!r} is empty")
    return check_id(value, where, f"{field!r}")


def first_present(obj: dict[str, Any], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` that ``obj`` holds with a value that is not None."""
    for n in names:
        if obj.get(n) is not None:
            return n
    return None


def id_of(obj: dict[str, Any], path: Path, lineno: int, names: tuple[str, ...] = ("_id", "id")) -> str:
    field = first_present(obj, names)
    if field is None:
        raise DataError(f"{path}:{lineno}: record has no {' or '.join(repr(n) for n in names)}")
    raw = obj[field]
    if _plain_id(raw):
        return raw
    return id_value(raw, f"{path}:{lineno}", field)


class SeenIds:
    """Ids already read on one side, to refuse a duplicate naming both places (file:line)."""

    def __init__(self, what: str):
        self.what = what
        self.first: dict[str, Any] = {}  # id -> where it was read (a "file:line" text, or a line of the current file)
        self.numbers: set[str] = set()  # ids read from a JSON integer

    def add(self, rid: str, raw: Any, where: Any, line: int | None = None) -> None:
        """Record ``rid`` read at ``where`` (a ``file:line`` text, or a file with ``line``); a second time raises."""
        first = self.first.get(rid)
        if first is None:
            self.first[rid] = where if line is None else line
            if type(raw) is not str:
                self.numbers.add(rid)
            return
        first_where = first if isinstance(first, str) else f"{where}:{first}"
        here = where if line is None else f"{where}:{line}"
        note = ""
        if (rid in self.numbers) != (type(raw) is not str):
            number, text = (rid, raw) if rid in self.numbers else (raw, rid)
            note = f"; {_shown(int(number))} and {_shown(str(text))} are the same id once ids are read as strings"
        raise DataError(f"{here}: {self.what} id {rid!r} appears twice (first at {first_where}){note}")

    def __contains__(self, rid: str) -> bool:
        return rid in self.first


def _shown(raw: Any) -> str:
    return f"the number {raw}" if isinstance(raw, int) else f"the string {json.dumps(raw)}"


def unmapped_text(obj: dict[str, Any], known: set[str] | frozenset[str]) -> str | None:
    """The first field of ``obj`` outside ``known`` whose value is a non-empty string, or None."""
    return next((k for k, v in obj.items() if k not in known and isinstance(v, str) and v.strip()), None)


def refuse_unmapped(obj: dict[str, Any], known: set[str] | frozenset[str], where: str, left: str, hint: str = "") -> None:
    """No silent drop: raise when a record ``left`` with no text carries text in a field it does not map.

    ``left`` says what the record is left with (e.g. ``"no text"``); the message names the field
    and the fields the reader knows, then ``hint``.
    """
    field = unmapped_text(obj, known)
    if field is not None:
        raise DataError(
            f"{where}: field {field!r} holds text that this reader does not map, and the record would be left with {left}; "
            f"the fields it knows are {', '.join(sorted(known))}{hint}"
        )


def relevance(raw: Any, where: str) -> int:
    """An integer grade from 0 to 1000; ``1``, ``1.0`` and ``"2"`` are accepted, ``0.5``, ``"high"``, ``-1`` and ``1e20`` are not.

    Float scores (M3Retrieve's qrels declare ``score`` float64) are read when they are whole
    numbers; a fractional grade is refused rather than truncated. The bounds
    (:func:`~medbench_core.taskdata.source_rules.check_grade`) keep a grade within the stored Int32.
    """
    if type(raw) is int:
        return check_grade(raw, where)
    if type(raw) is str and raw.isascii() and raw.isdigit():
        digits = raw.lstrip("0") or "0"
        return check_grade(int(digits) if len(digits) < 12 else GRADE_MAX + 1, where, raw)  # no int() of 4,300 hostile digits
    try:
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        value = math.nan
    if isinstance(raw, bool) or not math.isfinite(value) or value != int(value):
        text = repr(raw) if not isinstance(raw, str) or len(raw) <= 40 else repr(raw[:40]) + "..."
        raise DataError(f"{where}: relevance {text} is not an integer")
    return check_grade(int(value), where, raw)


QRELS_HEADER_IDS = ("query-id", "query_id", "q_id", "qid")


def iter_qrels_tsv(path: str | Path) -> Iterator[tuple[str, str, str, int]]:
    """Yield ``(where, query_id, doc_id, grade)`` from a BEIR qrels TSV.

    The first line must be BEIR's header (``query-id<TAB>corpus-id<TAB>score``): MTEB and BEIR
    read that line as the header, so a file without one would lose its first judgment there.
    """
    path = Path(path)
    header = False
    at = [0]

    def lines() -> Iterator[str]:
        for lineno, line in iter_lines(path):
            at[0] = lineno
            yield line

    for row in csv.reader(lines(), delimiter="\t"):
        if not row or not "".join(row).strip():
            continue
        lineno = at[0]
        where = f"{path}:{lineno}"
        if not header:
            if row[0].strip().lower() not in QRELS_HEADER_IDS:
                raise DataError(
                    f"{where}: no header line; a qrels .tsv starts with 'query-id<TAB>corpus-id<TAB>score' (found {chr(9).join(row)[:60]!r}); add the header"
                )
            header = True
            continue
        if len(row) != 3:
            raise DataError(f"{where}: expected 3 tab-separated fields (query-id, corpus-id, score), got {len(row)}")
        qid, did = row[0].strip(), row[1].strip()
        if not qid or not did:
            raise DataError(f"{where}: empty {'query-id' if not qid else 'corpus-id'}")
        yield where, qid, did, relevance(row[2].strip(), where)


def read_qrels_tsv(path: str | Path, duplicates: str = "error") -> pl.DataFrame:
    """BEIR qrels: a header ``query-id corpus-id score`` then one judgment a line.

    A (query, document) pair judged more than once raises naming both lines, unless
    ``duplicates="max"``, which keeps its highest grade (LiveQA-MedQuAD judges 168 pairs twice
    with different grades).
    """
    if duplicates not in ("error", "max"):
        raise ValueError(f"duplicates must be 'error' or 'max', not {duplicates!r}")
    path = Path(path)
    grades: dict[tuple[str, str], int] = {}
    first_at: dict[tuple[str, str], str] = {}
    for where, qid, did, grade in iter_qrels_tsv(path):
        add_judgment(grades, first_at, where, qid, did, grade, duplicates)
    if not grades:
        raise DataError(f"{path}: no judgments")
    rows = [(q, d, g) for (q, d), g in grades.items()]
    return pl.DataFrame(rows, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "relevance": pl.Int32}, orient="row")


def add_judgment(
    grades: dict[tuple[str, str], int], first_at: dict[tuple[str, str], str], where: str, qid: str, did: str, grade: int, duplicates: str = "error"
) -> None:
    """Put the grade of (``qid``, ``did``), read at ``where`` (``file:line``), into ``grades``: the one duplicate-judgement rule.

    A pair judged again raises naming both places and both ids, unless ``duplicates="max"``
    (a task's ``duplicate_judgments: max``), which keeps its highest grade. ``first_at`` holds
    where each pair was first read.
    """
    pair = (qid, did)
    if pair in grades:
        if duplicates == "error":
            raise DataError(
                f"{where}: judgment for query id {qid!r} and document id {did!r} appears twice (first at {first_at[pair]}); "
                "set duplicate_judgments: max to keep the highest grade"
            )
        grades[pair] = max(grades[pair], grade)
    else:
        grades[pair] = grade
        first_at[pair] = where


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
    """A whole JSON file, by the strict rules above (UTF-8 with the line and byte offset of a bad byte, BOM accepted)."""
    data = need_file(Path(path)).read_bytes()
    if not data.strip():
        raise DataError(f"{path}: file is empty" + (" (0 bytes)" if not data else " (only whitespace)"))
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = skip + exc.start
        line = data.count(b"\n", 0, at) + 1
        raise DataError(f"{path}:{line}: not UTF-8: byte 0x{data[at]:02x} at byte offset {at} ({exc.reason}); re-encode the file as UTF-8") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise DataError(f"{path}:{_deep_line(text)}: {TOO_DEEP}") from None


def _deep_line(text: str, depth: int = 200) -> int:
    """The line where the JSON ``text`` first nests deeper than ``depth`` (outside strings); 1 when it never does."""
    level, line, in_string, escaped = 0, 1, False, False
    for c in text:
        if c == "\n":
            line += 1
        elif in_string:
            escaped, in_string = (not escaped and c == "\\"), in_string and not (c == '"' and not escaped)
        elif c == '"':
            in_string = True
        elif c in "[{":
            level += 1
            if level > depth:
                return line
        elif c in "]}":
            level -= 1
    return 1


def build_task_from_rows(
    meta: TaskMeta,
    queries: list[dict],
    corpus: list[dict],
    qrels: list[dict],
    candidates: list[dict] | None,
    image_root: Path | None,
    where: str,
    *,
    qrels_holes: str = "refuse",
) -> Task:
    """Build and integrity-check a task from row dicts (make_task fills the columns a side lacks);
    ``qrels_holes`` as for :func:`~medbench_core.taskdata.task.check_referential_integrity`."""

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
        check_referential_integrity(task, qrels_holes=qrels_holes)
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


def write_bytes_if_changed(path: Path, data: bytes) -> bool:
    """Write ``data`` atomically unless ``path`` already holds exactly these bytes; True if written."""
    if path.is_file() and not path.is_symlink() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return False
    write_bytes_atomic(path, data)
    return True
