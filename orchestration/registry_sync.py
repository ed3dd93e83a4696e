"""Keep the dynamic model partitions, and the observed model versions, in step with the registry file.

Used by the registry sensor, the nightly schedule and the command line (``medbench run`` syncs
before it evaluates; ``medbench models sync|retire``).
"""

from __future__ import annotations

import dagster as dg

# Private constant, no public one: the tag under which Dagster reads an observation's data version
# (AssetObservation takes no data_version argument).
from dagster._core.definitions.data_version import DATA_VERSION_TAG

from assets.registry import MODEL_SPEC, model_versions
from runtime.partitions import MODEL_PARTITIONS_NAME
from runtime.resources import RegistryResource


def sync_model_partitions(instance: dg.DagsterInstance, registry: RegistryResource) -> list[str]:
    """Add every registered model that is not yet a partition; returns the names added.

    Also records a ``model_spec`` observation for every model whose entry changed, so that
    its partitions show as stale. Models removed from the registry keep their partition (and
    history) until deleted on purpose (see orchestration/sensors.py).
    """
    existing = set(instance.get_dynamic_partitions(MODEL_PARTITIONS_NAME))
    new = [m.name for m in registry.models() if m.name not in existing]
    for event in model_observations(instance, registry):
        instance.report_runless_asset_event(event)
    if new:
        instance.add_dynamic_partitions(MODEL_PARTITIONS_NAME, new)
    return new


def observation_version(event: dg.AssetObservation) -> str:
    """The model version an observation from :func:`model_observations` records."""
    return event.tags[DATA_VERSION_TAG]


def observed_model_version(instance: dg.DagsterInstance, model: str) -> str | None:
    """The last recorded data version of ``model_spec[model]`` (None before the first observation)."""
    records = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=MODEL_SPEC, asset_partitions=[model]), limit=1).records
    return (records[0].event_log_entry.tags or {}).get(DATA_VERSION_TAG) if records else None


def model_observations(instance: dg.DagsterInstance, registry: RegistryResource) -> list[dg.AssetObservation]:
    """``model_spec`` observations for registered models whose version differs from the last one recorded.

    Must be recorded before a model's first materialisation: Dagster only compares versions
    recorded after the one a materialisation consumed.
    """
    events = []
    specs = registry.models()
    # A model left out (e.g. a missing model folder) fails with that error when its partitions run.
    versions = model_versions(specs, registry.expansions(), registry.catalog().names)
    for spec in specs:
        version = versions.get(spec.name)
        if version is None:
            continue
        if observed_model_version(instance, spec.name) != version:
            events.append(
                dg.AssetObservation(
                    MODEL_SPEC,
                    partition=spec.name,
                    tags={DATA_VERSION_TAG: version},
                    metadata={"kind": spec.kind, "revision": str(spec.revision), "settings": dg.MetadataValue.json(spec.settings)},
                )
            )
    return events


def retire_model(instance: dg.DagsterInstance, registry: RegistryResource, name: str) -> None:
    """Delete the partition of a model that left the registry, on purpose.

    Its Dagster event history, MLflow runs and artifacts under data/artifacts/<name>/ stay; the
    UI just no longer lists its partitions. A model still in the registry is refused.
    """
    if name in {m.name for m in registry.models()}:
        raise ValueError(f"model {name!r} is still listed in {registry.models_file}; remove the entry first")
    if name not in instance.get_dynamic_partitions(MODEL_PARTITIONS_NAME):
        raise ValueError(f"model {name!r} is not a partition; known: {', '.join(instance.get_dynamic_partitions(MODEL_PARTITIONS_NAME))}")
    instance.delete_dynamic_partition(MODEL_PARTITIONS_NAME, name)
