"""The task catalogue (``tasks.yaml``): which source datasets become which curated tasks.

Each entry names a reader and its arguments; ``research_only`` marks tasks whose licences
are not permissive (they run, and everything they produce says so).

An entry reads a local folder (``path``, under the shared data folder) or, for the readers in
:data:`~medbench_core.taskdata.readers.HUB_READERS`, a hub dataset (``dataset`` + a pinned ``revision``).
``subsets`` turns one entry into one task per subset: a list of names, or a mapping from name to
that subset's revision or to a mapping of its own options (``revision``, ``task_type``, ...). Each
task is named ``<name>_<subset>`` (lowercase, ``-`` to ``_``), ``{subset}`` in ``path``,
``dataset`` or any text option is replaced by the subset's name, and the reader gets ``subset``::

    - name: r2med
      reader: mteb
      dataset: "R2MED/{subset}"
      subsets: {Biology: {revision: 8b9fec2db9eda4b5742d03732213fbaee8169556}, ...}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError
from medbench_core.taskdata.task import Task
from medbench_core.taskdata.mteb_tasks import expand_entries as expand_mteb_entries, reader_for as mteb_reader_for
from medbench_core.taskdata.readers import HUB_READERS, IMAGE_SCRATCH, READERS, RENDERS_FILES, SUBSET_READERS, reader
from medbench_core.yaml_file import read_yaml_mapping

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
    doc = read_yaml_mapping(path, "task catalogue")
    entries = doc.get("tasks")
    if not isinstance(entries, list) or not entries:
        raise DataError(f"{path}: expected a non-empty top-level 'tasks:' list")
    entries = expand_mteb_entries(entries, path)  # reader: mteb with task:/benchmark: -> entries from mteb's metadata
    tasks = []
    seen = set()
    for i, raw in enumerate(entries):
        if not isinstance(raw, dict) or not {"name", "reader"} <= set(raw) or not ({"path", "dataset"} & set(raw)):
            raise DataError(f"{path}: tasks[{i}] needs 'name', 'reader' and 'path' (a local folder) or 'dataset' (a hub dataset id)")
        if "subsets" in raw and raw["reader"] not in SUBSET_READERS:
            raise DataError(f"{path}: task {raw['name']!r}: reader {raw['reader']!r} has no subsets; readers with subsets: {sorted(SUBSET_READERS)}")
        for e in expand_subsets(raw, f"{path}: task {raw['name']!r}"):
            name = e["name"]
            if not _NAME_RE.match(name):
                raise DataError(f"{path}: task name {name!r}: use lowercase letters, digits and '_'")
            if name in seen:
                raise DataError(f"{path}: task {name!r} appears twice")
            seen.add(name)
            if e["reader"] not in READERS:
                raise DataError(f"{path}: task {name!r}: unknown reader {e['reader']!r}; known: {sorted(READERS)}")
            if e.get("dataset") and not e.get("path"):
                if e["reader"] not in HUB_READERS:
                    raise DataError(f"{path}: task {name!r}: reader {e['reader']!r} reads local folders only; give 'path' (hub readers: {sorted(HUB_READERS)})")
                if not e.get("revision"):
                    raise DataError(
                        f"{path}: task {name!r}: hub dataset {e['dataset']!r} has no revision; pin one "
                        "(revision: <40-hex commit sha>) so the task reads the same data every time"
                    )
            opts = {k: v for k, v in e.items() if k not in {"name", "reader", "path", "research_only"}}
            tasks.append(TaskEntry(name=name, reader=e["reader"], path=str(e.get("path") or ""), research_only=bool(e.get("research_only", False)), options=opts))
    allow = doc.get("licence_allowlist") or []
    return Catalog(benchmark=str(doc.get("benchmark", "medbench")), tasks=tuple(tasks), licence_allowlist=tuple(allow))


def subset_slug(subset: str) -> str:
    """``Medical-Sciences`` -> ``medical_sciences``: the task-name suffix of a subset."""
    return re.sub(r"[^a-z0-9]+", "_", subset.lower()).strip("_")


def expand_subsets(entry: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """One entry per subset of ``entry`` (itself when it has no ``subsets``); see the module docstring."""
    subsets = entry.get("subsets")
    if subsets is None:
        return [entry]
    if isinstance(subsets, list) and subsets:
        per: dict[str, dict[str, Any]] = {str(s): {} for s in subsets}
    elif isinstance(subsets, dict) and subsets:
        per = {}
        for s, v in subsets.items():
            if v is None:
                per[str(s)] = {}
            elif isinstance(v, str):
                per[str(s)] = {"revision": v}
            elif isinstance(v, dict):
                per[str(s)] = dict(v)
            else:
                raise DataError(f"{where}: subset {s!r}: give its revision (a string) or a mapping of its options, not {type(v).__name__}")
    else:
        raise DataError(f"{where}: 'subsets' must be a non-empty list of names or a mapping name -> revision / options")
    out = []
    base = {k: v for k, v in entry.items() if k != "subsets"}
    for subset, own in per.items():
        slug = subset_slug(subset)
        if not slug:
            raise DataError(f"{where}: subset {subset!r} has no letters or digits to name a task with")
        e = {k: (v.replace("{subset}", subset) if isinstance(v, str) else v) for k, v in {**base, **own}.items()}
        e["name"] = f"{entry['name']}_{slug}"
        e["subset"] = subset
        out.append(e)
    return out


def build_task(entry: TaskEntry, data_root: str | Path, work_dir: str | Path, *, online: bool = False, hub_cache: str | Path | None = None) -> Task:
    """Read the source dataset of ``entry`` (a folder under ``data_root``, or a hub dataset) into a Task.

    ``work_dir`` is a scratch folder for readers that must render files (PneumoniaMNIST images,
    image bytes of Parquet datasets). Hub datasets are downloaded only with ``online=True``;
    otherwise they must be in the local hub cache (``hub_cache``, default huggingface_hub's).
    """
    src: Path | None = None
    if entry.path:
        src = Path(data_root) / entry.path
        if not src.exists():
            raise DataError(f"task {entry.name}: source {src} not found (is ../shared/data beside the checkout?)")
    read = mteb_reader_for(entry) or reader(entry.reader)
    args = (src, Path(work_dir) / "images") if entry.reader in RENDERS_FILES else (src,)
    extra: dict[str, Any] = {}
    if entry.reader in HUB_READERS:
        extra.update(online=online, hub_cache=hub_cache)
    if entry.reader in IMAGE_SCRATCH:
        extra["image_scratch"] = Path(work_dir) / "images"
    return read(*args, name=entry.name, research_only=entry.research_only, **entry.options, **extra)
