"""The plan of a ``medbench run``: which model x task partitions are new or stale, decided in one pass before any work.

A partition the last runs left complete is not run again (issue 53: visiting it was a Dagster run of
five steps, all cache hits, about a second each). It is *confirmed* when all of these hold, read in a
handful of queries for every partition at once:

- every stage it has holds a complete artifact at the key the current code, registry and curated task
  give it (:mod:`medbench_core.status`'s answer, the files' sha256 checked by the notes of
  :mod:`runtime.verified`: a file whose stat moved is read again);
- Dagster shows each of its assets as the UI does, materialised and fresh: the latest materialisation
  records the data version that key gives (:func:`assets.stage.data_version`), no attempt failed or is
  under way since (the partition status the leaderboard reads), and nothing upstream was recorded
  after it (a newer ``model_spec`` observation: the model's entry changed; a newer upstream
  materialisation in the partition); the asset's code version is the current one;
- MLflow holds its FINISHED run (the metrics key), as :func:`medbench_cli.uptodate.confirm_logged` asks.

Anything else is *due* and evaluated as before (stages whose key has a complete artifact are cache hits
there). So are an expanded model's partitions, whose expansion contract runs with them. The stored
records are those a run of the partition would write: the leaderboard, the MLflow runs and the stale
marks are the same as with every partition visited (``tests/cli/test_incremental.py``);
``--recheck`` and ``--force`` visit every partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
from dagster import DagsterEventType
from dagster._core.definitions.data_version import CODE_VERSION_TAG, DATA_VERSION_TAG  # private: the tags Dagster reads them from

from assets.registry import MODEL_SPEC
from assets.stage import PARTITION_ASSETS, PARTITION_STAGES, Partition, data_version, resolve_partition
from assets.tasks import CURATED_TASK
from medbench_core.errors import MedbenchError
from medbench_core.retrieval.kinds.capabilities import expansion_name
from medbench_core.taskdata.task import Task
from runtime import verified
from runtime.partitions import partition_key

_CHUNK = 500  # partition keys or storage ids per query (SQLite's bound on an IN list)


@dataclass
class Plan:
    """``due``: (model, task) to evaluate, in the order asked, with why in ``reasons``; ``confirmed``: those left as stored."""

    due: list[tuple[str, str]] = field(default_factory=list)
    confirmed: list[tuple[str, str]] = field(default_factory=list)
    reasons: dict[tuple[str, str], str] = field(default_factory=dict)
    seconds: float = 0.0

    def line(self) -> str:
        """What the plan says before the first partition runs."""
        total = len(self.due) + len(self.confirmed)
        said = (
            f"[plan] {len(self.confirmed)} of {total} partitions are current (artifacts at their keys, fresh in Dagster, logged to MLflow): "
            f"not run again; {len(self.due)} to evaluate ({self.seconds:.2f}s)"
        )
        why: dict[str, list[tuple[str, str]]] = {}
        for pair in self.due:
            why.setdefault(self.reasons.get(pair, ""), []).append(pair)
        for reason, pairs in sorted(why.items(), key=lambda kv: -len(kv[1]))[:4]:
            shown = ", ".join(f"{m} x {t}" for m, t in pairs[:3]) + (f" and {len(pairs) - 3} more" if len(pairs) > 3 else "")
            said += f"\n[plan]   {shown}: {reason}"
        return said


def plan_partitions(
    instance: dg.DagsterInstance,
    asset_graph,
    store,
    specs: list,
    tasks: Iterable[Task],
    models: list[str],
    *,
    expansions: Callable[[], list],
    k: int,
    logged: Callable[[dict[str, tuple[str, str]]], set[str]],
    complete: Callable[[Path], bool] = verified.complete,
) -> Plan:
    """The :class:`Plan` of ``models`` (evaluation order) on the curated, gated ``tasks`` (module docstring).

    ``store`` is the artifact store resource; ``logged(metrics key -> (model, task))`` returns the keys MLflow holds a
    FINISHED run for (:func:`medbench_cli.uptodate.logged_keys`); ``complete(folder)`` whether an artifact is complete
    (default: its files' sha256 by their notes; the last complete run's seal, :class:`runtime.verified.Sealed`).
    """
    t0 = time.perf_counter()
    plan = Plan()
    tasks = list(tasks)
    wanted: dict[tuple[str, str], Partition] = {}
    for model in models:
        for task in tasks:
            why = _stored(model, task, specs, expansions, k, store, wanted, complete)
            if why:
                plan.reasons[(model, task.name)] = why
    if wanted:
        for (model, task), why in _dagster(instance, asset_graph, wanted).items():
            plan.reasons[(model, task)] = why
            wanted.pop((model, task))
    metrics = {p.keys["metrics"]: pair for pair, p in wanted.items() if p.no_artifact("metrics") is None}
    if metrics:
        found = logged(metrics)
        for key, pair in metrics.items():
            if key not in found:
                plan.reasons[pair] = "no FINISHED MLflow run of its metrics"
                wanted.pop(pair)
    for model in models:
        for task in tasks:
            (plan.confirmed if (model, task.name) in wanted else plan.due).append((model, task.name))
    plan.seconds = time.perf_counter() - t0
    return plan


def _stored(model: str, task: Task, specs: list, expansions, k: int, store, wanted: dict, complete: Callable[[Path], bool]) -> str:
    """'' when every artifact of the partition is complete at its key (the partition added to ``wanted``), else why not."""
    by_name = {s.name: s for s in specs}
    spec = by_name[model]
    if any(expansion_name(by_name[n]) for n in [*spec.upstream, model]):
        return "an expanded model: its expansion contract runs with it"
    try:
        p = resolve_partition(model, task, specs, expansions, k, store, revision=False)
    except MedbenchError as exc:
        return str(exc).splitlines()[0]
    for stage in PARTITION_STAGES:
        if p.no_artifact(stage) is None and not complete(p.dir(stage)):
            return f"no complete {stage} at its key"
    wanted[(model, task.name)] = p
    return ""


def _chunks(items: list, n: int = _CHUNK) -> Iterable[list]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def _dagster(instance: dg.DagsterInstance, asset_graph, wanted: dict[tuple[str, str], Partition]) -> dict[tuple[str, str], str]:
    """(model, task) -> why Dagster does not show the partition materialised and fresh at its keys, for each of ``wanted`` it does not."""
    storage = instance.event_log_storage
    keys = {pair: str(partition_key(*pair)) for pair in wanted}
    observed = storage.get_latest_storage_id_by_partition(MODEL_SPEC, DagsterEventType.ASSET_OBSERVATION)
    latest: dict[str, dict[str, int]] = {}
    out: dict[tuple[str, str], str] = {}
    for asset, stage in zip(PARTITION_ASSETS, PARTITION_STAGES, strict=True):
        key = dg.AssetKey(asset)
        node = asset_graph.get(key)
        ids = storage.get_latest_storage_id_by_partition(key, DagsterEventType.ASSET_MATERIALIZATION)
        latest[asset] = ids
        records = _records(instance, key, [ids[k] for k in keys.values() if k in ids])
        status = {}
        for part in _chunks(list(keys.values())):
            status |= instance.get_status_by_partition(key, part, node.partitions_def) or {}
        for pair, pkey in keys.items():
            if pair in out:
                continue
            tags = records.get(ids.get(pkey, -1))
            if tags is None or status.get(pkey) != dg.AssetPartitionStatus.MATERIALIZED:
                out[pair] = f"{asset}: {str(status.get(pkey).value).lower() if status.get(pkey) else 'not materialised'} in Dagster"
            elif tags.get(DATA_VERSION_TAG) != data_version(wanted[pair], stage):
                out[pair] = f"{asset}: its last materialisation in Dagster is of another data version"
            elif tags.get(CODE_VERSION_TAG) != node.code_version:
                out[pair] = f"{asset}: its code version changed since it was materialised"
            else:
                for parent in node.parent_keys:
                    up = parent.to_user_string()
                    if parent == CURATED_TASK:
                        continue  # its data version is the content hash, which every key holds: the keys matched
                    # A model_spec observation is recorded only when the entry's version changed (orchestration/registry_sync.py).
                    newer = observed.get(pair[0], -1) if parent == MODEL_SPEC else latest.get(up, {}).get(pkey, 1 << 62)
                    if newer > ids[pkey]:
                        out[pair] = f"{asset}: {up} was recorded again since it was materialised"
                        break
    return out


def _records(instance: dg.DagsterInstance, key: dg.AssetKey, storage_ids: list[int]) -> dict[int, dict[str, str]]:
    """The tags of the materialisations of ``key`` with these storage ids."""
    out: dict[int, dict[str, str]] = {}
    for part in _chunks(sorted(storage_ids)):
        result = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, storage_ids=part), limit=len(part))
        for r in result.records:
            out[r.storage_id] = dict(r.event_log_entry.tags or {})
    return out


def current_audits(instance: dg.DagsterInstance, asset_graph, store, registry, tasks: list[str]) -> list[str]:
    """Which of ``tasks`` have their contamination audit (issue 49) current as stored: the audit complete at the key of
    its inputs as they are now (the task, every other curated task, the declared manifests: the asset's own key), and
    Dagster's last materialisation of that partition of that data version and code version. Those are not run again."""
    from assets.contamination import CONTAMINATION_AUDIT, curated_tasks
    from medbench_core.evaluation.contamination.audit import audit_key
    from medbench_core.evaluation.contamination.board import audit_inputs
    from medbench_core.storage import is_complete

    loaded = curated_tasks(store, registry.catalog().names)
    specs = registry.models()
    keys = {}
    for name in tasks:
        if name in loaded:
            others, manifests = audit_inputs(loaded[name], loaded, specs)
            key = audit_key(loaded[name], others, manifests)
            if is_complete(store.layout.audit_dir(name, key)):
                keys[name] = key
    if not keys:
        return []
    asset = dg.AssetKey(CONTAMINATION_AUDIT)
    ids = instance.event_log_storage.get_latest_storage_id_by_partition(asset, DagsterEventType.ASSET_MATERIALIZATION)
    records = _records(instance, asset, [ids[t] for t in keys if t in ids])
    code = asset_graph.get(asset).code_version
    current = []
    for name, key in keys.items():
        tags = records.get(ids.get(name, -1)) or {}
        if tags.get(DATA_VERSION_TAG) == key and tags.get(CODE_VERSION_TAG) == code:
            current.append(name)
    return current
