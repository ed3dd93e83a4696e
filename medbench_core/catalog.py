"""The task catalogue (``tasks.yaml``): which source datasets become which curated tasks.

Each entry names a reader and its arguments; ``research_only`` marks tasks whose licences
are not permissive (they run, and everything they produce says so).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from medbench_core.errors import DataError
from medbench_core.model import Task
from medbench_core.readers import READERS, RENDERS_FILES, reader

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")


@dataclass(frozen=True)
class TaskEntry:
    name: str
    reader: str
    path: str
    research_only: bool = False
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Catalog:
    benchmark: str
    tasks: tuple[TaskEntry, ...]
    licence_allowlist: tuple[str, ...]

    def task(self, name: str) -> TaskEntry:
        for t in self.tasks:
            if t.name == name:
                return t
        raise DataError(f"task {name!r} is not in the catalogue; known: {[t.name for t in self.tasks]}")

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tasks]


def load_catalog(path: str | Path) -> Catalog:
    """Read ``tasks.yaml``; errors name the file and the entry at fault."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: task catalogue not found")
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise DataError(f"{path}: not valid YAML ({exc})") from exc
    entries = doc.get("tasks")
    if not isinstance(entries, list) or not entries:
        raise DataError(f"{path}: expected a non-empty top-level 'tasks:' list")
    tasks = []
    seen = set()
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not {"name", "reader", "path"} <= set(e):
            raise DataError(f"{path}: tasks[{i}] needs 'name', 'reader' and 'path'")
        name = e["name"]
        if not _NAME_RE.match(name):
            raise DataError(f"{path}: task name {name!r}: use lowercase letters, digits and '_'")
        if name in seen:
            raise DataError(f"{path}: task {name!r} appears twice")
        seen.add(name)
        if e["reader"] not in READERS:
            raise DataError(f"{path}: task {name!r}: unknown reader {e['reader']!r}; known: {sorted(READERS)}")
        opts = {k: v for k, v in e.items() if k not in {"name", "reader", "path", "research_only"}}
        tasks.append(TaskEntry(name=name, reader=e["reader"], path=e["path"], research_only=bool(e.get("research_only", False)), options=opts))
    allow = doc.get("licence_allowlist") or []
    return Catalog(benchmark=str(doc.get("benchmark", "medbench")), tasks=tuple(tasks), licence_allowlist=tuple(allow))


def build_task(entry: TaskEntry, data_root: str | Path, work_dir: str | Path) -> Task:
    """Read the source dataset of ``entry`` (under ``data_root``) into a Task.

    ``work_dir`` is a scratch folder for readers that must render files (PneumoniaMNIST images).
    """
    src = Path(data_root) / entry.path
    if not src.exists():
        raise DataError(f"task {entry.name}: source {src} not found (is ../shared/data beside the checkout?)")
    read = reader(entry.reader)
    args = (src, Path(work_dir) / "images") if entry.reader in RENDERS_FILES else (src,)
    return read(*args, name=entry.name, research_only=entry.research_only, **entry.options)
