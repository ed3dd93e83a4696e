"""Nightly schedules: evaluate what is missing or stale, and re-score the drift canary.

``nightly_evaluation`` (default 02:00 UTC; MEDBENCH_NIGHTLY_CRON / MEDBENCH_NIGHTLY_TZ) first brings
the model partitions and observed model versions in step with the registry, then requests one
``evaluate_partition`` run per registered model x usable task partition that is missing or stale
(orchestration.freshness). With nothing to do it launches nothing.

``nightly_drift_canary`` (same time) re-scores the pinned reference model every night
(assets.canary); its asset check fails when a metric moved beyond the tolerance.
"""

from __future__ import annotations

import dagster as dg

from orchestration.freshness import due_partitions, ready, task_partition_keys, usable_tasks
from orchestration.jobs import EVALUATE_JOB, drift_canary_job
from orchestration.registry_sync import sync_model_partitions
from orchestration.sensors import TRIGGER_TAG
from runtime import settings
from runtime.resources import ArtifactStoreResource, RegistryResource


def nightly_requests(context: dg.ScheduleEvaluationContext, registry: RegistryResource, store: ArtifactStoreResource) -> list[dg.RunRequest]:
    """One run request per registered model x usable task partition that is missing or stale."""
    sync_model_partitions(context.instance, registry)
    models = [m.name for m in registry.models()]
    tasks = usable_tasks(store, registry, task_partition_keys(context.repository_def))
    due = due_partitions(context.instance, context.repository_def.asset_graph, models, tasks)
    # A fusion, reranker or expanded model whose upstream is due too waits for the next tick (its run would find no upstream run).
    due, waiting = ready(due, registry.models())
    if waiting:
        context.log.info("waiting for their upstreams: " + ", ".join(str(d.partition_key) for d in waiting))
    tick = context.scheduled_execution_time.isoformat() if context.scheduled_execution_time else "manual"
    return [
        dg.RunRequest(
            job_name=EVALUATE_JOB,
            partition_key=d.partition_key,
            run_key=f"nightly:{tick}:{d.partition_key}",
            tags={TRIGGER_TAG: "nightly_evaluation", "medbench/reason": d.reason[:200]},
        )
        for d in due
    ]


def _nightly(cron: str, timezone: str) -> dict:
    """When both schedules tick, and that they run unless switched off."""
    return {"cron_schedule": cron, "execution_timezone": timezone, "default_status": dg.DefaultScheduleStatus.RUNNING}


def build_nightly_evaluation(cron: str = settings.NIGHTLY_CRON, timezone: str = settings.NIGHTLY_TIMEZONE) -> dg.ScheduleDefinition:
    """The nightly evaluation schedule at ``cron`` in ``timezone``."""

    @dg.schedule(
        name="nightly_evaluation",
        job_name=EVALUATE_JOB,
        description="Evaluates every registered model on every usable task where the partition is missing or stale.",
        **_nightly(cron, timezone),
    )
    def nightly_evaluation(context: dg.ScheduleEvaluationContext, registry: RegistryResource, store: ArtifactStoreResource):
        requests = nightly_requests(context, registry, store)
        if not requests:
            return dg.SkipReason("every registered model x usable task partition is materialised and up to date")
        context.log.info("; ".join(f"{r.partition_key}: {r.tags['medbench/reason']}" for r in requests))
        return requests

    return nightly_evaluation


def build_nightly_drift_canary(cron: str = settings.NIGHTLY_CRON, timezone: str = settings.NIGHTLY_TIMEZONE) -> dg.ScheduleDefinition:
    """The nightly drift canary schedule (one run every night, whatever else changed)."""
    return dg.ScheduleDefinition(
        name="nightly_drift_canary",
        job=drift_canary_job,
        description="Re-scores the pinned reference model (BM25) and checks its metrics against the recorded baseline.",
        **_nightly(cron, timezone),
    )


nightly_evaluation = build_nightly_evaluation()
nightly_drift_canary = build_nightly_drift_canary()
