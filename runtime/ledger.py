"""medbench's own record of the last complete ``medbench run``: what it read and what it left behind.

Written by the command line after a run in which every requested partition was evaluated and no
task was refused (``<state>/last_complete_run.json``, atomically). The warm path of the next
``medbench run`` (:mod:`medbench_cli.uptodate`) answers from it: same inputs (registry, catalogue,
code, weights, each task's source files), every curated task and artifact at the recorded keys
complete, the leaderboard the one this run wrote, and MLflow holding a FINISHED run for every
metrics key. Nothing here reads Dagster's or MLflow's tables: Dagster shows the same partitions
fresh through the data versions the stages record (their keys). Once the run's end has found all
its MLflow runs FINISHED, the store file's fingerprint is recorded too: while the file is that
file, unwritten since, the warm path need not import MLflow to ask again.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

FORMAT = 1
LEDGER_FILE = "last_complete_run.json"


@dataclass(frozen=True)
class CompleteRun:
    """What a complete run read and wrote (see the module docstring)."""

    dagster_run_id: str
    inputs_key: str
    sources: dict[str, str]
    models: list[str]
    tasks: list[str]
    curated: dict[str, str]  # task -> content hash of the curated task
    leaderboard_sha256: str
    leaderboard_mlflow_run_id: str
    # store_fingerprint() of MLflow's SQLite store once every run above was found FINISHED in it; empty: not verified.
    mlflow_store: dict[str, int] = field(default_factory=dict)
    # The metrics keys (tag medbench.run_key) of those FINISHED runs: while the store is that file, the run plan
    # confirms them without asking MLflow (orchestration/plan.py).
    logged: list[str] = field(default_factory=list)
    # The folders the warm path checks (curated tasks, each partition's artifacts) by their files' stat (runtime/verified.py, seal).
    sealed: dict[str, list] = field(default_factory=dict)
    written_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    format: int = FORMAT


def store_fingerprint(tracking_uri: str) -> dict[str, int]:
    """Identity of a local SQLite MLflow store's file and of its last committed write, without
    opening it as a database: size, inode, mtime and SQLite's file change counter (header bytes
    24-27, "incremented whenever the database file is unlocked after having been modified" in
    rollback-journal mode: https://www.sqlite.org/fileformat2.html, "File change counter"). Empty when the
    store is not such a file or a write may be under way (a journal or WAL file beside it)."""
    if not tracking_uri.startswith("sqlite:///"):
        return {}
    db = Path(tracking_uri[len("sqlite:///") :])
    try:
        if any(Path(f"{db}{suffix}").exists() for suffix in ("-journal", "-wal")):
            return {}
        with open(db, "rb") as f:
            header = f.read(100)
            st = os.fstat(f.fileno())
    except OSError:
        return {}
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        return {}
    return {"size": st.st_size, "inode": st.st_ino, "mtime_ns": st.st_mtime_ns, "change_counter": int.from_bytes(header[24:28], "big")}


def ledger_path(state: Path) -> Path:
    return Path(state) / LEDGER_FILE


def record(state: Path, run: CompleteRun) -> Path:
    """Write ``run`` as the last complete run (atomically: a killed write leaves the previous record)."""
    from medbench_core.storage import write_text_atomic

    path = ledger_path(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(asdict(run), indent=2, sort_keys=True) + "\n")
    return path


def last_complete_run(state: Path) -> CompleteRun | None:
    """The recorded last complete run, or None (none yet, or a record this version cannot read)."""
    try:
        doc: dict[str, Any] = json.loads(ledger_path(state).read_text())
        if doc.get("format") != FORMAT:
            return None
        return CompleteRun(**doc)
    except (OSError, ValueError, TypeError):
        return None
