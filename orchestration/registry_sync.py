"""Keep the dynamic model partitions, and the observed model versions, in step with the registry file.

Used by the registry sensor, the nightly schedule and the command line (``medbench run`` syncs
before it evaluates; ``medbench models sync|retire``).
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

# Private constant, no public one: the tag under which Dagster reads an observation's data version
# (AssetObservation takes no data_version argument).
from dagster._core.definitions.data_version import DATA_VERSION_TAG

from assets.registry import MODEL_SPEC
from medbench_core.retrieval.model_versions import model_versions
from runtime.partitions import MODEL_PARTITIONS_NAME
from runtime.resources import RegistryResource


@dataclass(frozen=True)
class Pin:
    """A hub model's revision at registration: the entry's ``revision:`` and the commit sha it names now."""

    model: str
    hub_id: str
    requested: str
    sha: str = ""  # empty when it could not be resolved
    error: str = ""

    def describe(self) -> str:
        if self.error:
            return f"{self.model}: {self.hub_id}@{self.requested or 'main'} not resolved ({self.error})"
        if self.requested == self.sha:
            return f"{self.model}: {self.hub_id}@{self.sha} (pinned in models.yaml)"
        return f"{self.model}: {self.hub_id}@{self.requested or 'main'} -> {self.sha}"


def pin_revisions(registry: RegistryResource) -> dict[str, Pin]:
    """Every hub model's revision resolved to a commit sha (:func:`medbench_core.retrieval.model_registry.pin_revision`).

    Offline the local hub cache answers (``refs/<branch>``); online (MEDBENCH_ONLINE) the hub does,
    and the answer is written to the cache's ``refs/<branch>`` as huggingface_hub writes it when it
    downloads a branch, so that every later step (artifact keys, MLflow's ``model_revision``,
    loading the weights) reads the same commit. models.yaml is never rewritten: the sha is
    recorded in the ``model_spec`` observation and each run's MLflow params; write it into the
    entry's ``revision:`` to freeze the model for good.
    """
    from medbench_core.errors import DataError
    from medbench_core.hub import is_commit_sha, record_ref
    from medbench_core.retrieval.model_registry import pin_revision

    pins: dict[str, Pin] = {}
    for spec in registry.models():
        if not spec.hub_id:
            continue
        try:
            sha = pin_revision(spec, online=registry.online).revision
        except DataError as exc:
            pins[spec.name] = Pin(spec.name, spec.hub_id, spec.revision, error=str(exc))
            continue
        if registry.online and not is_commit_sha(spec.revision):
            record_ref(spec.hub_id, spec.revision or "main", sha, repo_type="model")
        pins[spec.name] = Pin(spec.name, spec.hub_id, spec.revision, sha)
    return pins


def sync_model_partitions(instance: dg.DagsterInstance, registry: RegistryResource, pins: dict[str, Pin] | None = None) -> list[str]:
    """Add every registered model that is not yet a partition; returns the names added.

    Also records a ``model_spec`` observation for every model whose entry (or pinned hub
    commit, see :func:`pin_revisions`) changed, so that its partitions show as stale. Models
    removed from the registry keep their partition (and history) until deleted on purpose (see
    orchestration/sensors.py).
    """
    existing = set(instance.get_dynamic_partitions(MODEL_PARTITIONS_NAME))
    new = [m.name for m in registry.models() if m.name not in existing]
    for event in model_observations(instance, registry, pins):
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


def model_observations(instance: dg.DagsterInstance, registry: RegistryResource, pins: dict[str, Pin] | None = None) -> list[dg.AssetObservation]:
    """``model_spec`` observations for registered models whose version differs from the last one recorded.

    A hub model's version hashes the commit its revision is pinned to (``pins``, default
    :func:`pin_revisions`), shown as ``pinned_revision`` in the observation's metadata. Must be
    recorded before a model's first materialisation: Dagster only compares versions recorded
    after the one a materialisation consumed.
    """
    pins = pin_revisions(registry) if pins is None else pins
    events = []
    specs = registry.models()
    # A model left out (e.g. a missing model folder) fails with that error when its partitions run.
    versions = model_versions(specs, registry.expansions(), registry.catalog().names, pins)
    for spec in specs:
        version = versions.get(spec.name)
        if version is None:
            continue
        pin = pins.get(spec.name)
        if observed_model_version(instance, spec.name) != version:
            metadata = {"kind": spec.kind, "revision": str(spec.revision), "settings": dg.MetadataValue.json(spec.settings.explicit())}
            if pin is not None:
                metadata["hub_id"] = pin.hub_id
                metadata["pinned_revision"] = pin.sha or f"unresolved: {pin.error}"
            events.append(dg.AssetObservation(MODEL_SPEC, partition=spec.name, tags={DATA_VERSION_TAG: version}, metadata=metadata))
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
