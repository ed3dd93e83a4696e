"""Keep the dynamic model partitions, and the observed model versions, in step with the registry file."""

from __future__ import annotations

import dagster as dg
from dagster._core.definitions.data_version import DATA_VERSION_TAG, extract_data_version_from_entry

from assets._shared import model_version
from assets.registry import MODEL_SPEC
from medbench_core.errors import MedbenchError
from orchestration.partitions import MODEL_PARTITIONS_NAME
from orchestration.resources import RegistryResource


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


def observed_model_version(instance: dg.DagsterInstance, model: str) -> str | None:
    """The last recorded data version of ``model_spec[model]`` (None before the first observation)."""
    record = instance.get_latest_data_version_record(MODEL_SPEC, is_source=True, partition_key=model)
    version = extract_data_version_from_entry(record.event_log_entry) if record else None
    return version.value if version else None


def model_observations(instance: dg.DagsterInstance, registry: RegistryResource) -> list[dg.AssetObservation]:
    """``model_spec`` observations for registered models whose version differs from the last one recorded.

    Must be recorded before a model's first materialisation: Dagster only compares versions
    recorded after the one a materialisation consumed.
    """
    events = []
    for spec in registry.models():
        try:
            version = model_version(spec)
        except MedbenchError:
            continue  # e.g. a missing model folder: its partitions fail with that error when run
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


def main(argv: list[str] | None = None) -> int:
    """``python -m orchestration.registry_sync [--retire NAME ...]``: sync partitions, or retire removed models."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m orchestration.registry_sync", description=main.__doc__)
    parser.add_argument("--retire", nargs="+", default=[], metavar="NAME", help="delete the partition of a model removed from the registry")
    args = parser.parse_args(argv)
    from orchestration.definitions import defs

    instance = dg.DagsterInstance.get()
    registry = defs.resources["registry"]
    for name in args.retire:
        retire_model(instance, registry, name)
        print(f"retired {name}: partition deleted; history, MLflow runs and artifacts kept")
    if not args.retire:
        print(f"added: {', '.join(sync_model_partitions(instance, registry)) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
