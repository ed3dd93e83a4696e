"""The released versions side by side (``versions/*.json``, then the current leaderboard), and why a cell moved.

A cell *moved* between two neighbouring columns when its figure differs at the four places the
pages show. The reason is what the two records' provenance says changed: the task's data (its
content hash), the model's revision or settings, the code (the stage versions and the core digest a
version records), or only the artifact keys; where nothing recorded changed, it says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medbench_core.site.views import SiteData, number

STAGES = ("embeddings", "index", "run", "metrics")
CURRENT = "current"


@dataclass
class Column:
    """One version (or the current leaderboard): its cells' figures and provenance."""

    name: str
    released_at: str = ""
    code_commit: str = ""
    data_version: str = ""
    code_versions: dict[str, str] = field(default_factory=dict)
    cells: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # value, task_content_hash, model_revision, settings, keys, mlflow_run_id
    note: str = ""


@dataclass
class Moved:
    before: float
    after: float
    reasons: list[str]


def read_versions(folder: Path | None, metric: str) -> tuple[list[Column], list[str]]:
    """Every ``*.json`` of ``folder`` that is a version record, oldest first (by ``released_at``); and a note per file that is not."""
    if folder is None or not Path(folder).is_dir():
        return [], []
    columns, notes = [], []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            notes.append(f"{path.name}: not read ({exc})")
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
            notes.append(f"{path.name}: no runs list; not a version record")
            continue
        col = Column(
            str(doc.get("tag") or path.stem), str(doc.get("released_at") or ""), str(doc.get("code_commit") or ""), str(doc.get("data_version") or ""),
            {str(k): str(v) for k, v in (doc.get("code_versions") or {}).items()},
        )  # fmt: skip
        for r in doc["runs"]:
            value = number((r.get("metrics") or {}).get(metric))
            col.cells[(str(r.get("model")), str(r.get("task")))] = {
                "value": value,
                "task_content_hash": r.get("task_content_hash"),
                "model_revision": r.get("model_revision"),
                "settings": r.get("model_settings"),
                "keys": dict(r.get("keys") or {}),
                "mlflow_run_id": r.get("mlflow_run_id"),
            }
        columns.append(col)
    columns.sort(key=lambda c: (c.released_at, c.name))
    return columns, notes


def current_column(site: SiteData, code_versions: Mapping[str, str]) -> Column:
    col = Column(CURRENT, str(site.build.get("built_at") or ""), str(site.build.get("git") or ""), "", dict(code_versions))
    col.note = "the leaderboard this site was built from"
    for (m, t), c in site.cells.items():
        if c.value is None:
            continue
        p = c.provenance
        col.cells[(m, t)] = {
            "value": c.value,
            "task_content_hash": p.get("task_content_hash"),
            "model_revision": p.get("model_revision"),
            "settings": None,
            "keys": {s: p[f"{s}_key"] for s in STAGES if p.get(f"{s}_key")},
            "mlflow_run_id": c.mlflow.get("run_id"),
        }
    return col


def why_moved(a: Mapping[str, Any], b: Mapping[str, Any], before: Column, after: Column) -> list[str]:
    """What the provenance of two records of one cell says changed between them."""
    out = []
    if a.get("task_content_hash") and b.get("task_content_hash") and a["task_content_hash"] != b["task_content_hash"]:
        out.append(f"data: the task's content hash {str(a['task_content_hash'])[:12]} → {str(b['task_content_hash'])[:12]}")
    if a.get("model_revision") and b.get("model_revision") and a["model_revision"] != b["model_revision"]:
        out.append(f"model revision {a['model_revision']} → {b['model_revision']}")
    if a.get("settings") is not None and b.get("settings") is not None and a["settings"] != b["settings"]:
        out.append("model settings changed")
    code = sorted(k for k in set(before.code_versions) & set(after.code_versions) if before.code_versions[k] != after.code_versions[k])
    if code:
        out.append("code: " + ", ".join(f"{k} {before.code_versions[k]} → {after.code_versions[k]}" for k in code))
    keys = [s for s in STAGES if a.get("keys", {}).get(s) and b.get("keys", {}).get(s) and a["keys"][s] != b["keys"][s]]
    if keys and not out:
        out.append("artifact keys changed (" + ", ".join(keys) + "); no recorded input says why")
    if not out:
        same = [s for s in STAGES if a.get("keys", {}).get(s) and a["keys"].get(s) == b.get("keys", {}).get(s)]
        out.append("same artifact keys (" + ", ".join(same) + ")" if same else "no recorded cause")
    return out


@dataclass
class VersionTable:
    columns: list[Column]
    rows: list[tuple[str, str]]
    moved: dict[tuple[int, str, str], Moved]  # (column index, model, task) -> how it moved from the column before
    notes: list[str]


def version_table(site: SiteData, folder: Path | None, code_versions: Mapping[str, str]) -> VersionTable:
    columns, notes = read_versions(folder, site.metric)
    columns.append(current_column(site, code_versions))
    order_m = {m.name: i for i, m in enumerate(site.models)}
    order_t = {t.name: i for i, t in enumerate(site.tasks)}
    keys = {k for c in columns for k, v in c.cells.items() if v.get("value") is not None}
    rows = sorted(keys, key=lambda k: (order_m.get(k[0], len(order_m)), k[0], order_t.get(k[1], len(order_t)), k[1]))
    moved: dict[tuple[int, str, str], Moved] = {}
    for i in range(1, len(columns)):
        before, after = columns[i - 1], columns[i]
        for k in rows:
            a, b = before.cells.get(k), after.cells.get(k)
            if not a or not b or a.get("value") is None or b.get("value") is None:
                continue
            if round(a["value"], 4) != round(b["value"], 4):
                moved[(i, *k)] = Moved(a["value"], b["value"], why_moved(a, b, before, after))
    return VersionTable(columns, rows, moved, notes)


def moved_rows(table: VersionTable) -> Sequence[tuple[Column, Column, str, str, Moved]]:
    """Every move as (from column, to column, model, task, move), in column then row order."""
    out = []
    for (i, m, t), mv in sorted(table.moved.items(), key=lambda kv: (kv[0][0], table.rows.index((kv[0][1], kv[0][2])))):
        out.append((table.columns[i - 1], table.columns[i], m, t, mv))
    return out
