"""The Dagster definitions that `dagster dev` loads (see [tool.dagster] in pyproject.toml)."""

from __future__ import annotations

import dagster as dg

from assets.canary import drift_canary
from assets.checks import task_checks
from assets.embeddings import corpus_embeddings
from assets.indices import corpus_index
from assets.metrics import task_metrics
from assets.registry import model_spec
from assets.reports import leaderboard
from assets.runs import retrieval_run
from assets.tasks import curated_task
from orchestration import settings
from orchestration.jobs import check_overlap_job, curate_tasks_job, evaluate_partition_job, leaderboard_job
from orchestration.resources import ArtifactStoreResource, ComputeResource, MLflowResource, RegistryResource
from orchestration.schedules import drift_canary_job, nightly_drift_canary, nightly_evaluation
from orchestration.sensors import model_registry_sensor


def default_resources() -> dict:
    return {
        "store": ArtifactStoreResource(root=str(settings.DATA), shared_data=str(settings.SHARED / "data"), scratch=str(settings.STATE / "scratch")),
        "registry": RegistryResource(models_file=str(settings.MODELS_FILE), tasks_file=str(settings.TASKS_FILE)),
        "compute": ComputeResource(),
        "mlflow": MLflowResource(tracking_uri=settings.default_tracking_uri(), artifact_root=str(settings.STATE / "mlartifacts")),
    }


def executor():
    """None (Dagster's multiprocess default), or the celery executor of the production profile (MEDBENCH_EXECUTOR=celery)."""
    if settings.EXECUTOR == "celery":
        from dagster_celery import celery_executor

        return celery_executor.configured({"broker": settings.CELERY_BROKER, "backend": settings.CELERY_BACKEND}, name="celery")
    if settings.EXECUTOR != "multiprocess":
        raise ValueError(f"MEDBENCH_EXECUTOR={settings.EXECUTOR!r}: expected 'multiprocess' or 'celery'")
    return None


ALL_ASSETS = [model_spec, curated_task, corpus_embeddings, corpus_index, retrieval_run, task_metrics, leaderboard, drift_canary]

defs = dg.Definitions(
    assets=ALL_ASSETS,
    asset_checks=task_checks,
    jobs=[curate_tasks_job, check_overlap_job, evaluate_partition_job, leaderboard_job, drift_canary_job],
    schedules=[nightly_evaluation, nightly_drift_canary],
    sensors=[model_registry_sensor],
    resources=default_resources(),
    executor=executor(),
)
