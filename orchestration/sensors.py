"""The registry sensor: a model added to models.yaml is evaluated on every usable task, with no code change.

On each tick the sensor compares the registry with the ``models`` dynamic partitions:

- a **new model** becomes a partition, and one ``evaluate_partition`` run is requested for each of
  its model x task partitions that has never been materialised, on every task that is curated
  and passed its gates (a task that is not usable yet is picked up by the nightly schedule once
  it is);
- a **changed entry** (settings, revision, path) gets a new ``model_spec`` observation, which
  marks exactly that model's partitions stale; the nightly schedule reruns them;
- a **removed model** keeps its partition, its Dagster history, its MLflow runs and its artifacts:
  results stay reproducible and nothing is deleted by editing a file. Its partitions are no
  longer evaluated (the schedule reads the registry) and leave the leaderboard. To drop the
  partition on purpose: ``medbench models retire NAME``;
- a **renamed model** is a removal plus an addition: the name is part of the model's identity, so
  the new name is evaluated afresh and the old one is kept until retired.

A second tick with an unchanged registry launches nothing.
"""

from __future__ import annotations

from collections.abc import Collection

import dagster as dg

from assets.stage import STAGE_KEYS
from orchestration.freshness import task_partition_keys, usable_tasks, waiting_on_upstreams
from orchestration.jobs import EVALUATE_JOB, LEADERBOARD_JOB
from orchestration.registry_sync import model_observations, observation_version
from runtime.partitions import MODEL_PARTITIONS_NAME, model_partitions, partition_key
from runtime.resources import ArtifactStoreResource, RegistryResource

TRIGGER_TAG = "medbench/trigger"
RETIRE_COMMAND = "medbench models retire NAME"


def _evaluated(instance: dg.DagsterInstance, model: str, task: str) -> bool:
    """Has the last stage of this partition ever been materialised?"""
    last = dg.AssetRecordsFilter(asset_key=STAGE_KEYS[-1], asset_partitions=[str(partition_key(model, task))])
    return bool(instance.fetch_materializations(last, limit=1).records)


def registry_tick(
    instance: dg.DagsterInstance, registry: RegistryResource, store: ArtifactStoreResource, known_tasks: Collection[str] | None = None
) -> dg.SensorResult:
    """What one sensor tick does (see the module docstring), as a ``SensorResult``.

    ``known_tasks``: the code location's task partitions (a task catalogued since is not requested).
    """
    specs = registry.models()
    registered = [m.name for m in specs]
    existing = set(instance.get_dynamic_partitions(MODEL_PARTITIONS_NAME))
    new = [m for m in registered if m not in existing]
    removed = sorted(existing - set(registered))
    observations = model_observations(instance, registry)
    tasks = usable_tasks(store, registry, known_tasks) if new else []
    versions = {e.partition: observation_version(e) for e in observations}
    wanted = [(m, t) for m in new for t in tasks if not _evaluated(instance, m, t)]
    # A new derived model whose upstream is new too waits: its run could start before the upstream's ends.
    # The nightly schedule requests it once its upstreams are evaluated (it is missing until then).
    waiting = [(m, t) for m, t in wanted if waiting_on_upstreams(m, t, specs, set(wanted))]
    requests = [
        dg.RunRequest(
            job_name=EVALUATE_JOB,
            partition_key=partition_key(m, t),
            run_key=f"new-model:{m}:{versions.get(m, '')}:{t}",
            tags={TRIGGER_TAG: "model_registry_sensor"},
        )
        for m, t in wanted
        if (m, t) not in waiting
    ]
    notes = []
    if new:
        notes.append(f"new models {', '.join(new)}: {len(requests)} partitions requested on {', '.join(tasks) or 'no usable task yet'}")
    if waiting:
        notes.append(f"waiting for their upstreams (the nightly schedule runs them): {', '.join(f'{m}|{t}' for m, t in waiting)}")
    changed = [e.partition for e in observations if e.partition in existing]
    if changed:
        notes.append(f"changed entries {', '.join(changed)}: their partitions are now stale (the nightly schedule reruns them)")
    if removed:
        notes.append(f"no longer registered (kept with their history; retire with `{RETIRE_COMMAND}`): {', '.join(removed)}")
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[model_partitions.build_add_request(new)] if new else [],
        asset_events=observations,
        skip_reason=None if requests else ("; ".join(notes) or "registry unchanged"),
    )


@dg.sensor(
    name="model_registry_sensor",
    job_name=EVALUATE_JOB,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Adds models newly listed in models.yaml as partitions and evaluates them on every usable task.",
)
def model_registry_sensor(context: dg.SensorEvaluationContext, registry: RegistryResource, store: ArtifactStoreResource) -> dg.SensorResult:
    known = task_partition_keys(context.repository_def) if context.repository_def else None
    result = registry_tick(context.instance, registry, store, known)
    if result.run_requests:
        context.log.info(f"requesting {len(result.run_requests)} runs: {', '.join(str(r.partition_key) for r in result.run_requests)}")
    return result


# --- the leaderboard after the evaluations ---------------------------------------------------------------
LEADERBOARD_SENSOR = "leaderboard_after_evaluations"


def leaderboard_tick(instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorResult:
    """What one tick of :data:`leaderboard_after_evaluations` does: request the ``build_leaderboard`` job once
    the evaluations have settled: the latest ``task_metrics`` materialisation is newer than the leaderboard's,
    it was already the latest one tick ago (the cursor), and no ``evaluate_partition`` run is queued or
    running. So the nightly schedule's and the registry sensor's runs (one per partition) are followed by
    one leaderboard, whose statistics of the cells they did not touch are those of the last one (issue 53)."""

    def latest(asset: dg.AssetKey) -> int:
        records = instance.fetch_materializations(asset, limit=1, ascending=False).records
        return records[0].storage_id if records else 0

    metrics, board = latest(STAGE_KEYS[-1]), latest(dg.AssetKey("leaderboard"))
    if metrics <= board:
        return dg.SensorResult(skip_reason="the leaderboard is newer than every evaluation", cursor=str(metrics))
    busy = instance.get_run_records(
        dg.RunsFilter(job_name=EVALUATE_JOB, statuses=[dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]),
        limit=1,
    )
    if busy or cursor != str(metrics):  # evaluations still under way, or the last one recorded since the previous tick
        return dg.SensorResult(skip_reason="waiting for the evaluations to settle", cursor=str(metrics))
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=f"after-evaluations:{metrics}", tags={TRIGGER_TAG: LEADERBOARD_SENSOR})], cursor=str(metrics))


@dg.sensor(
    name=LEADERBOARD_SENSOR,
    job_name=LEADERBOARD_JOB,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Builds the leaderboard once the evaluations the nightly schedule or the registry sensor launched have finished.",
)
def leaderboard_after_evaluations(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    return leaderboard_tick(context.instance, context.cursor)
