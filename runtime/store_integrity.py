"""Is the local MLflow store sound? Asked before anything reads an answer from it or writes into it (issue 29.4).

MLflow answers from a damaged SQLite file as long as the pages a query touches happen to be intact:
16 KB of random bytes written into ``mlflow.db`` left ``medbench run`` saying "logged to MLflow and
verified", and ``--force`` wrote FAILED runs into it. SQLite's own ``PRAGMA quick_check``
(https://www.sqlite.org/pragma.html#pragma_quick_check: every page and b-tree is read, "O(N)", without
the index-content check of integrity_check) decides instead, plus MLflow's ``experiments`` table, which
every MLflow store has. No Dagster, no MLflow: the warm path calls it too.
"""

from __future__ import annotations

from pathlib import Path

from medbench_core.errors import IntegrityError


class CorruptStore(IntegrityError):
    """The MLflow store file is not a sound MLflow SQLite database; the message names it and what SQLite said."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"the MLflow store {path} is corrupt ({problem})")
        self.path, self.problem = path, problem


def sqlite_path(tracking_uri: str) -> Path | None:
    """The file of a local SQLite tracking URI (``sqlite:///PATH``), None for any other store."""
    return Path(tracking_uri[len("sqlite:///") :]) if tracking_uri.startswith("sqlite:///") else None


def store_problem(db: Path) -> str:
    """What is wrong with the SQLite MLflow store ``db`` in SQLite's words, or "" when it is sound.

    A file that does not exist has no problem (a new store is created). Opened read-write, as MLflow
    opens it, so that a journal left by a killed writer is rolled back rather than taken for damage;
    nothing else is written.
    """
    import sqlite3

    if not db.exists():
        return ""
    if not db.is_file():
        return "not a file"
    try:
        con = sqlite3.connect(db, timeout=30)
    except sqlite3.Error as exc:
        return f"SQLite cannot open it: {exc}"
    try:
        rows = con.execute("PRAGMA quick_check(1)").fetchall()
        said = " ".join(" ".join(str(r[0]) for r in rows).split())  # its report spans lines: one line here
        if said != "ok":
            return f"SQLite's quick_check: {said[:300]}"
        if not con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'experiments'").fetchone():
            return "SQLite reads it, but it holds no MLflow tables (no 'experiments' table)"
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
        return f"SQLite: {exc}"
    finally:
        con.close()
    return ""


def verify_store(tracking_uri: str) -> None:
    """Raise :class:`CorruptStore` when ``tracking_uri`` is a local SQLite store that is not sound; other stores pass."""
    db = sqlite_path(tracking_uri)
    if db is None:
        return
    problem = store_problem(db)
    if problem:
        raise CorruptStore(db, problem)
