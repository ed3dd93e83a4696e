"""What every source may hold, whichever reader reads it: safe ids, image references and grades, and
links that stay inside the data folder (docs/tasks_and_readers.md, "Safe values" and "Links").

The readers apply :func:`check_id`, :func:`check_reference` and :func:`check_grade` as they read,
so a refusal names the file, the line and the id; :func:`check_task` applies the same rules to a
whole task once it is read (a reader that composes ids from its data is held by it too), and
:func:`check_source_links` refuses a source that leads outside the data folder before it is read.

Ids become whitespace-separated fields of TREC run files (``qid Q0 docid rank score tag``, read by
trec_eval with ``%s``), keys of JSON and Parquet files, and appear in every message and log line that
names them: a space, tab or line break splits a TREC row; a control or format character (NUL, ESC,
a bidi override, a zero-width space) is invisible where it is named. Image references become file
names under the curated task's ``images/`` folder, so each part is one file name (255 bytes at most).
Grades are stored as Int32 and scored with linear gain (pytrec_eval's, trec_eval's).

Nothing here imports polars at module level, so the readers' light modules may use it.
"""

from __future__ import annotations

import os
import stat
import unicodedata
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError

ID_MAX_CHARS = 512
GRADE_MIN, GRADE_MAX = 0, 1000
NAME_MAX_BYTES = 255  # one part of an image reference: a file name on Linux, macOS and Windows
ID_RULE = "an id is 1 to 512 printable characters with no whitespace (docs/tasks_and_readers.md, 'Safe values')"

# What polars' (Rust) regex finds that :func:`id_problem` refuses: Unicode categories C* (control, format,
# surrogate, private use, unassigned) and Z* (separators: the space among them). References allow U+0020.
_ID_BAD = r"[\p{C}\p{Z}]"
_REF_BAD = r"[[\p{C}\p{Z}]&&[^ ]]"

_NAMES = {"\t": "a tab", "\n": "a line feed (newline)", "\r": "a carriage return", " ": "a space", "\x00": "a NUL byte"}
_CATEGORIES = {
    "Cc": "a control character",
    "Cf": "a format character",
    "Cs": "a surrogate",
    "Co": "a private-use character",
    "Cn": "an unassigned code point",
    "Zs": "a space",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}


def shown(value: str, limit: int = 80) -> str:
    """``value`` as a Python literal (escapes make a tab or newline visible), cut at ``limit`` characters."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"... ({len(value)} characters)"


def _char(c: str) -> str:
    name = unicodedata.name(c, "")
    what = _NAMES.get(c) or _CATEGORIES.get(unicodedata.category(c), "a character")
    return f"{what} (U+{ord(c):04X}{' ' + name if name else ''})"


def id_problem(value: str) -> str:
    """Why ``value`` is not a safe id, or ``""`` when it is.

    Safe: 1 to :data:`ID_MAX_CHARS` characters, each printable and none whitespace, i.e. no
    character of Unicode's categories C* (control, format, surrogate, private use, unassigned) or
    Z* (separators, the space among them). Letters of every script, digits and punctuation such
    as ``_ - . : / # ( ) < >`` are fine (SciFact ids are digits, MedQuAD's hold ``_`` and ``.``,
    M-BEIR's ``:``, MedICaT's ``/``).
    """
    if not value:
        return "is empty"
    if len(value) > ID_MAX_CHARS:
        return f"is {len(value)} characters long, over the limit of {ID_MAX_CHARS}"
    if value.isprintable() and " " not in value:
        return ""
    at, c = next((i, c) for i, c in enumerate(value) if c == " " or not c.isprintable())
    return f"holds {_char(c)} at character {at + 1}"


def check_id(value: str, where: str, what: str = "id") -> str:
    """``value`` when it is a safe id (:func:`id_problem`); DataError naming ``where``, ``what`` and the id otherwise."""
    if value and len(value) <= ID_MAX_CHARS and value.isprintable() and " " not in value:
        return value  # the common case, first
    raise DataError(f"{where}: {what} {shown(value)} {id_problem(value)}; {ID_RULE}")


def reference_problem(ref: str) -> str:
    """Why the image reference ``ref`` (a relative path, parts split on ``/``) is not safe, or ``""``.

    Each part is a file name: printable characters (a space is allowed: M3Retrieve's discipline
    folders are named ``Anatomy and Physiology``), at most :data:`NAME_MAX_BYTES` bytes in UTF-8.
    Tabs, line breaks, control and format characters are refused. (``..`` and absolute paths are
    refused by the callers, :func:`~medbench_core.taskdata.task.resolve_inside` and
    :func:`~medbench_core.taskdata.readers.hf_files.relative_path`.)
    """
    for part in ref.split("/"):
        if len(part.encode("utf-8", "surrogatepass")) > NAME_MAX_BYTES:
            return f"has a part {shown(part, 40)} of {len(part.encode('utf-8', 'surrogatepass'))} bytes, over the {NAME_MAX_BYTES} a file name may have"
    if ref.isprintable():
        return ""
    at, c = next((i, c) for i, c in enumerate(ref) if not c.isprintable())
    return f"holds {_char(c)} at character {at + 1}"


def check_reference(ref: str, where: str) -> str:
    """``ref`` when it is a safe image reference (:func:`reference_problem`); DataError naming ``where`` otherwise."""
    problem = reference_problem(ref)
    if problem:
        raise DataError(f"{where}: image {shown(ref)} {problem}; an image reference is a relative path of printable characters")
    return ref


def grade_problem(grade: int) -> str:
    """Why ``grade`` is not a grade medbench stores, or ``""``: grades are whole numbers from
    :data:`GRADE_MIN` to :data:`GRADE_MAX`."""
    if GRADE_MIN <= grade <= GRADE_MAX:
        return ""
    hint = " (TREC's negative grades for junk or spam mean not relevant: write them as 0)" if grade < 0 else ""
    return f"is outside {GRADE_MIN}..{GRADE_MAX}{hint}"


def check_grade(grade: int, where: str, raw: object = None) -> int:
    """``grade`` when it is within the bounds (:func:`grade_problem`); DataError naming ``where`` and the value otherwise."""
    if GRADE_MIN <= grade <= GRADE_MAX:
        return grade
    text = str(raw if raw is not None else grade)
    text = text if len(text) <= 40 else text[:40] + "..."
    raise DataError(f"{where}: relevance {text} {grade_problem(grade)}; grades are whole numbers from {GRADE_MIN} to {GRADE_MAX}")


def check_task(task: Any, where: str) -> None:
    """Every id, image reference and grade of ``task`` (a :class:`~medbench_core.taskdata.task.Task`, which
    imports this module) by the rules above; DataError naming ``where``, the side and the value.

    The readers refuse these as they read, naming file and line; this holds every reader,
    including one that composes ids from its data, to the same rules at one place.
    """
    import polars as pl

    for what, frame, column in (("query id", task.queries, "query_id"), ("document id", task.corpus, "doc_id")):
        ids = frame.get_column(column)
        bad = ids.filter(ids.is_null() | ids.str.contains(_ID_BAD) | (ids.str.len_chars() == 0) | (ids.str.len_chars() > ID_MAX_CHARS))
        if bad.len():
            value = bad[0]
            raise DataError(f"{where}: {what} {'null' if value is None else shown(value)} {id_problem(value or '')}; {ID_RULE}")
    for frame in (task.queries, task.corpus):
        refs = frame.get_column("image").drop_nulls()
        bad = refs.filter(refs.str.contains(_REF_BAD) | refs.str.split("/").list.eval(pl.element().str.len_bytes() > NAME_MAX_BYTES).list.any())
        if bad.len():
            check_reference(bad[0], where)
    grades = task.qrels.get_column("relevance")
    bad = grades.filter(grades.is_null() | (grades < GRADE_MIN) | (grades > GRADE_MAX))
    if bad.len():
        row = task.qrels.filter(pl.col("relevance").is_null() | (pl.col("relevance") < GRADE_MIN) | (pl.col("relevance") > GRADE_MAX)).row(0, named=True)
        raise DataError(
            f"{where}: judgment ({row['query_id']}, {row['doc_id']}): relevance {row['relevance']} is not a whole number from {GRADE_MIN} to {GRADE_MAX}"
        )


# --- links ----------------------------------------------------------------------------------------


def check_source_links(src: Path, data_root: Path | None, where: str) -> Path:
    """``src`` when it, and every link under it, stays inside what it may be read from; DataError otherwise.

    ``data_root`` is the data folder for a source named by a relative path: ``src`` must resolve
    inside it (a task folder, or a single file, that is a link to elsewhere is refused). A source
    named by an absolute path is taken where it is (its path is the task's ``source_path``), and
    ``data_root`` is None. Under a source folder every symbolic link must resolve inside that
    folder, and every entry must be a file, a folder or such a link (a FIFO or device, which a
    reader would block on or read without end, is refused). The refusal names the link, where it
    leads and what to do.
    """
    src = Path(src)
    try:
        real = src.resolve(strict=False)
    except (OSError, RuntimeError) as exc:  # a link loop
        raise DataError(f"{where}: {src} cannot be resolved ({exc}); refusing the source") from None
    if data_root is not None:
        root = Path(data_root).resolve()
        if not real.is_relative_to(root):
            raise DataError(
                f"{where}: {src} leads to {real}, outside the data folder {root}; links must stay inside it: copy the data "
                "into the data folder, or name it by its absolute path in tasks.yaml (recorded as the task's source_path)"
            )
    if not real.is_dir():
        if real.exists() and not real.is_file():
            raise DataError(f"{where}: {src} is not a regular file or folder (a FIFO, socket or device); refusing the source")
        return src
    for folder, dirs, files in os.walk(real):  # links are not followed: each is checked where it is
        for name in (*dirs, *files):
            p = Path(folder) / name
            if p.is_symlink():
                try:
                    target = p.resolve(strict=False)
                except (OSError, RuntimeError) as exc:
                    raise DataError(f"{where}: {p} is a symbolic link that cannot be resolved ({exc}); refusing the source") from None
                if not target.is_relative_to(real):
                    raise DataError(
                        f"{where}: {p} is a symbolic link to {os.readlink(p)!r} ({target}), outside the source folder {real}; "
                        "links in a source folder must stay inside it: copy the file in instead"
                    )
                continue
            mode = p.lstat().st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise DataError(f"{where}: {p} is not a regular file or folder (a FIFO, socket or device); refusing the source")
    return src
