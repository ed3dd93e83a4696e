"""Partitions: tasks are static (from tasks.yaml), models dynamic (added from the registry)."""

from __future__ import annotations

import dagster as dg

from medbench_core.catalog import load_catalog
from orchestration import settings

MODEL_PARTITIONS_NAME = "models"

task_partitions = dg.StaticPartitionsDefinition(load_catalog(settings.TASKS_FILE).names)
model_partitions = dg.DynamicPartitionsDefinition(name=MODEL_PARTITIONS_NAME)
model_task_partitions = dg.MultiPartitionsDefinition({"model": model_partitions, "task": task_partitions})

# A model x task partition reads the curated task of its own task.
task_of_partition = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="task")
# ... and the registry entry (model_spec) of its own model.
model_of_partition = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="model")


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
