"""Keep the dynamic model partitions in step with the registry file."""

from __future__ import annotations

import dagster as dg

from orchestration.partitions import MODEL_PARTITIONS_NAME
from orchestration.resources import RegistryResource


def sync_model_partitions(instance: dg.DagsterInstance, registry: RegistryResource) -> list[str]:
    """Add every registered model that is not yet a partition; returns the names added.

    Models removed from the registry keep their partition (and history) until deleted on purpose.
    """
    existing = set(instance.get_dynamic_partitions(MODEL_PARTITIONS_NAME))
    new = [m.name for m in registry.models() if m.name not in existing]
    if new:
        instance.add_dynamic_partitions(MODEL_PARTITIONS_NAME, new)
    return new
