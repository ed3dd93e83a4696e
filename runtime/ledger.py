"""medbench's own record of the last complete ``medbench run``: what it read and what it left behind.

Written by the command line after a run in which every requested partition was evaluated and no
task was refused (``<state>/last_complete_run.json``, atomically). The warm path of the next
``medbench run`` (:mod:`medbench_cli.uptodate`) answers from it: same inputs (registry, catalogue,
code, weights, each task's source files), every curated task and artifact at the recorded keys
complete, the leaderboard the one this run wrote, and MLflow holding a FINISHED run for every
metrics key. Nothing here reads Dagster's or MLflow's tables: Dagster shows the same partitions
fresh through the data versions the stages record (their keys).
"""

from __future__ import annotations

import json
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
    written_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    format: int = FORMAT


def ledger_path(state: Path) -> Path:
    return Path(state) / LEDGER_FILE


def record(state: Path, run: CompleteRun) -> Path:
    """Write ``run`` as the last complete run (atomically: a killed write leaves the previous record)."""
    from medbench_core.storage import write_text_atomic

    path = ledger_path(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(asdict(run), indent=2, sort_keys=True) + "\n")
    return path


def forget(state: Path) -> None:
    """Drop the record (a run that failed or was refused leaves no claim that everything is done)."""
    ledger_path(state).unlink(missing_ok=True)


def last_complete_run(state: Path) -> CompleteRun | None:
    """The recorded last complete run, or None (none yet, or a record this version cannot read)."""
    try:
        doc: dict[str, Any] = json.loads(ledger_path(state).read_text())
        if doc.get("format") != FORMAT:
            return None
        return CompleteRun(**doc)
    except (OSError, ValueError, TypeError):
        return None
