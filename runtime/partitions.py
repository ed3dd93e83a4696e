"""Partitions: tasks are static (from a task catalogue), models dynamic (added from the registry).

Nothing is read at import: :class:`Partitions` is built from a catalogue's task names when the
definitions are (orchestration/definitions.py), and the asset factories take it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import dagster as dg

from medbench_core.taskdata.catalog import load_catalog

MODEL_PARTITIONS_NAME = "models"

model_partitions = dg.DynamicPartitionsDefinition(name=MODEL_PARTITIONS_NAME)

# A model x task partition reads the curated task of its own task.
task_of_partition = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="task")
# ... and the registry entry (model_spec) of its own model.
model_of_partition = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="model")


class Partitions:
    """The partitions of one task catalogue: ``tasks`` (static), ``models`` (dynamic) and ``model_task``."""

    def __init__(self, task_names: Sequence[str]) -> None:
        self.tasks = dg.StaticPartitionsDefinition(list(task_names))
        self.models = model_partitions
        self.model_task = dg.MultiPartitionsDefinition({"model": model_partitions, "task": self.tasks})

    @classmethod
    def from_catalog(cls, tasks_file: str | Path) -> Partitions:
        return cls(load_catalog(tasks_file).names)


def split_key(key: str | dg.MultiPartitionKey) -> tuple[str, str]:
    """(model, task) of a model x task partition key."""
    if isinstance(key, dg.MultiPartitionKey):
        dims = key.keys_by_dimension
    else:
        dims = dict(part.split("=", 1) for part in key.split("|")) if "=" in key else None
        if dims is None:  # the plain "model|task" form, dimensions in alphabetical order
            model, task = key.split("|")
            return model, task
    return dims["model"], dims["task"]


def partition_key(model: str, task: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"model": model, "task": task})
