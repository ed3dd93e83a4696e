"""Reader ``mteb_task``: an MTEB task by name, as ``medbench_core.taskdata.mteb_tasks`` expands a
tasks.yaml entry ``{reader: mteb, task: <MTEB task name>}`` (or ``benchmark:``) from mteb's own
metadata. The data is read by the ``mteb`` reader; MTEB's name, main score and domains are recorded
in the task's metadata, so its results are exported under MTEB's name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from medbench_core.taskdata.readers.base import ReadContext, Reader
from medbench_core.taskdata.readers.mteb import MtebOptions, read_mteb
from medbench_core.taskdata.task import Task


@dataclass(frozen=True, kw_only=True)
class MtebTaskOptions(MtebOptions):
    """:class:`~.mteb.MtebOptions` and what mteb's metadata says of the task."""

    mteb_task: str
    main_metric: str = "ndcg_at_10"
    domains: tuple[str, ...] = ()


def read_mteb_task(folder: str | Path | None, options: MtebTaskOptions, context: ReadContext | None = None) -> Task:
    """Read the task's data with the ``mteb`` reader, then record MTEB's name, main score and domains."""
    base = MtebOptions(**{f.name: getattr(options, f.name) for f in dataclasses.fields(MtebOptions)})
    task = read_mteb(folder, base, context)
    meta = dataclasses.replace(task.meta, mteb_task=options.mteb_task, main_metric=options.main_metric, domains=tuple(options.domains))
    return dataclasses.replace(task, meta=meta, _hash=None)


READER = Reader("mteb_task", MtebTaskOptions, read_mteb_task)
