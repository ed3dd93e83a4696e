"""What needs running: which tasks may be built on, and which model x task partitions are missing or stale.

Shared by the registry sensor and the nightly schedule. Staleness is Dagster's own
(``CachingStaleStatusResolver``, the resolver behind the UI's "Unsynced" tags): an asset
partition is stale when its code version changed or an upstream data version changed since it
was materialised. Dagster flags only the first asset whose inputs moved (``corpus_embeddings``
after a task or model change; ``task_metrics`` after a metrics code change); the assets below it
follow when it is rematerialised with a new data version. A partition is therefore due when any
of its assets is missing or stale, and the whole partition is run: stages whose provenance
key did not change are cache hits.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timezone

import dagster as dg

from assets.stage import PARTITION_KEYS
from assets.tasks import CURATED_TASK
from runtime.partitions import partition_key
from runtime.resources import ArtifactStoreResource, RegistryResource

# The model x task assets, upstream first (the evaluate_partition job).
EVALUATION_ASSETS = PARTITION_KEYS


def task_partition_keys(repository_def: dg.RepositoryDefinition) -> list[str]:
    """The task partitions of the loaded code location (tasks.yaml as it was when it loaded)."""
    return repository_def.asset_graph.get(CURATED_TASK).partitions_def.get_partition_keys()


def task_refusals(store: ArtifactStoreResource, registry: RegistryResource, known: Collection[str] | None = None) -> dict[str, str | None]:
    """For each catalogued task: None when models may be evaluated on it, else why not.

    ``known``: the task partitions of the code location, when the caller has it loaded; a task
    catalogued since is refused until the definitions are reloaded. The rest is the gate rule
    (``Layout.task_refusal``: not curated, or refused by its gates).
    """
    out: dict[str, str | None] = {}
    for name in registry.catalog().names:
        if known is not None and name not in known:
            out[name] = f"task {name}: not a partition of this code location (tasks.yaml changed since it loaded); reload the definitions"
        else:
            out[name] = store.layout.task_refusal(name)
    return out


def usable_tasks(store: ArtifactStoreResource, registry: RegistryResource, known: Collection[str] | None = None) -> list[str]:
    """Catalogued tasks that are curated and passed their gates, in catalogue order."""
    return [t for t, reason in task_refusals(store, registry, known).items() if reason is None]


def stale_status_resolver(instance: dg.DagsterInstance, asset_graph):
    """Dagster's stale-status resolver over ``asset_graph``, as the webserver builds it."""
    # Private API, no public one exists: the UI and `RunRequest(stale_assets_only=...)` use this
    # class, but the latter ignores partitions, which is why medbench asks per partition itself.
    from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
    from dagster._core.definitions.data_version import CachingStaleStatusResolver

    view = AssetGraphView(
        temporal_context=TemporalContext(effective_dt=datetime.now(timezone.utc), last_event_id=None),
        instance=instance,
        asset_graph=asset_graph,
    )
    return CachingStaleStatusResolver(instance, asset_graph, view)


@dataclass(frozen=True)
class Due:
    """A model x task partition that needs a run, and why."""

    model: str
    task: str
    reason: str  # "missing: <assets>" or "stale: <asset> <causes>"

    @property
    def partition_key(self) -> dg.MultiPartitionKey:
        return partition_key(self.model, self.task)


def due_partitions(instance: dg.DagsterInstance, asset_graph, models: list[str], tasks: list[str]) -> list[Due]:
    """The partitions of ``models`` x ``tasks`` with a missing or stale evaluation asset, in that order."""
    from dagster._core.definitions.data_version import StaleStatus  # private, as the resolver above

    resolver = stale_status_resolver(instance, asset_graph)
    due = []
    for model in models:
        for task in tasks:
            key = str(partition_key(model, task))
            status = {a: resolver.get_status(a, key) for a in EVALUATION_ASSETS}
            missing = [a.to_user_string() for a, s in status.items() if s == StaleStatus.MISSING]
            stale = [a for a, s in status.items() if s == StaleStatus.STALE]
            if missing:
                due.append(Due(model, task, "missing: " + ", ".join(missing)))
            elif stale:
                causes = sorted(
                    {c.reason + (f" ({c.dependency.asset_key.to_user_string()})" if c.dependency else "") for c in resolver.get_stale_causes(stale[0], key)}
                )
                due.append(Due(model, task, f"stale: {stale[0].to_user_string()} {'; '.join(causes)}"))
    return due


def waiting_on_upstreams(model: str, task: str, specs, pending: Collection[tuple[str, str]]) -> list[str]:
    """The upstreams of ``model`` (a fusion, reranker or expanded model) that are themselves
    ``pending`` (requested or due) on ``task``. Requested in the same tick, its run could start
    before theirs end and find no upstream run; it is requested on a later tick instead."""
    from medbench_core.retrieval.model_registry import upstream_order

    return [u for u in upstream_order(model, list(specs)) if (u, task) in pending]


def ready(due: list[Due], specs) -> tuple[list[Due], list[Due]]:
    """``due`` split into what may run now and the derived partitions waiting for an upstream that is due too."""
    pending = {(d.model, d.task) for d in due}
    now, later = [], []
    for d in due:
        (later if waiting_on_upstreams(d.model, d.task, specs, pending) else now).append(d)
    return now, later
