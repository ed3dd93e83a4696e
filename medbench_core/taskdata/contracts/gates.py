"""Gate records: what makes a failed gate hold across separate runs (``GATE.json``, ``OVERLAP_GATE.json``, :func:`gate_refusal`).

:func:`gate_refusal` is the one gate rule; :class:`medbench_core.layout.Layout` applies it at a
project's paths (``gate_refusal``, ``require_gate``, ``task_refusal``).
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

from medbench_core.storage import write_json_atomic
from medbench_core.taskdata.contracts.results import ALL_TASKS, GATE_FILE, OVERLAP_GATE_FILE, ContractResult


def gate_status_path(task_dir: str | Path) -> Path:
    """Where the verdict of a task's gate is kept: ``<task dir>/GATE.json``."""
    return Path(task_dir) / GATE_FILE


def overlap_gate_path(tasks_root: str | Path) -> Path:
    """Where the cross-task verdict is kept: ``<tasks root>/OVERLAP_GATE.json``."""
    return Path(tasks_root) / OVERLAP_GATE_FILE


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def record_gate(task_dir: str | Path, result: ContractResult, *, judged_with: str = "") -> Path:
    """Write a task gate's verdict atomically to ``GATE.json`` beside the task it judged.

    Fields: ``task``, ``passed``, ``content_hash`` (of the task judged), ``research_only``,
    ``message``, ``failing_rows``, ``licences``, report paths, ``recorded_at`` and ``holes`` (the
    task's qrels holes: :func:`medbench_core.taskdata.contracts.holes.qrels_holes_report`).
    """
    if result.name == ALL_TASKS:
        raise ValueError("record_gate takes a task's result; use record_overlap_gate for validate_tasks")
    return write_json_atomic(
        gate_status_path(task_dir),
        {
            "task": result.name,
            "passed": result.passed,
            "content_hash": result.content_hash,
            "research_only": result.research_only,
            "message": result.message,
            "failing_rows": result.failing_rows(),
            "licences": dict(result.licences),
            "results_path": str(result.results_path) if result.results_path else None,
            "data_docs_path": str(result.data_docs_path) if result.data_docs_path else None,
            "judged_with": judged_with,
            "recorded_at": _now(),
            "holes": dict(result.holes),
        },
    )


def record_overlap_gate(tasks_root: str | Path, result: ContractResult, *, judged_with: str = "") -> Path:
    """Write the cross-task verdict atomically: which tasks (at which content hash) it judged and which failed."""
    if result.name != ALL_TASKS:
        raise ValueError("record_overlap_gate takes the result of validate_tasks")
    return write_json_atomic(
        overlap_gate_path(tasks_root),
        {
            "passed": result.passed,
            "task_hashes": dict(result.task_hashes),
            "failed_tasks": list(result.failed_tasks),
            "message": result.message,
            "failing_rows": result.failing_rows(),
            "results_path": str(result.results_path) if result.results_path else None,
            "data_docs_path": str(result.data_docs_path) if result.data_docs_path else None,
            "judged_with": judged_with,
            "recorded_at": _now(),
        },
    )


def read_gate(path: str | Path) -> dict[str, Any] | None:
    """A recorded verdict, or None when there is none (or it cannot be read, which counts as none)."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def gate_refusal(task_dir: str | Path, content_hash: str, *, overlap_gate: str | Path | None = None) -> str | None:
    """Why a step must not build on the task in ``task_dir`` (None when it may).

    Refused when the task has no recorded verdict, its gate failed, or the gate judged other
    content than ``content_hash``; with ``overlap_gate`` (path of ``OVERLAP_GATE.json``), also
    when the cross-task check has not judged this content or named this task in a failure.
    """
    task_dir = Path(task_dir)
    name = task_dir.name
    gate = read_gate(gate_status_path(task_dir))
    if gate is None:
        return f"task {name}: no data-contract verdict at {gate_status_path(task_dir)}; run the task's checks first"
    if gate.get("content_hash") != content_hash:
        return f"task {name}: its gate judged content {str(gate.get('content_hash'))[:12]}, the task is now {content_hash[:12]}; re-run the checks"
    if not gate.get("passed"):
        return f"task {name}: data contract failed, refusing to build on it: {gate.get('message', '')}"
    if overlap_gate is not None:
        over = read_gate(overlap_gate)
        if over is None:
            return f"task {name}: no cross-task overlap verdict at {overlap_gate}; run the all-tasks check first"
        judged = (over.get("task_hashes") or {}).get(name)
        if judged != content_hash:
            return f"task {name}: the cross-task overlap check judged {'no version' if judged is None else 'content ' + str(judged)[:12]} of this task, it is now {content_hash[:12]}; re-run the all-tasks check"
        if name in (over.get("failed_tasks") or []):
            return f"task {name}: cross-task overlap check failed for this task: {over.get('message', '')}"
    return None
