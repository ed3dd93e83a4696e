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
    """None (Dagster's multiprocess default), the celery executor of the production profile
    (MEDBENCH_EXECUTOR=celery; deploy/production/celery.yaml) or dagster-k8s' job executor (k8s; deploy/k8s)."""
    if settings.EXECUTOR == "celery":
        import yaml
        from dagster_celery import celery_executor

        # The workers' own YAML: both sides must agree on acks_late, retries and the visibility timeout.
        source = yaml.safe_load(settings.CELERY_CONFIG.read_text())["execution"]["config"].get("config_source") or {}
        config = {"broker": settings.CELERY_BROKER, "backend": settings.CELERY_BACKEND, "config_source": source}
        return celery_executor.configured(config, name="celery")
    if settings.EXECUTOR == "k8s":
        from dagster_k8s import k8s_job_executor

        return k8s_job_executor  # image, namespace, env and kubeconfig from the instance's K8sRunLauncher
    if settings.EXECUTOR != "multiprocess":
        raise ValueError(f"MEDBENCH_EXECUTOR={settings.EXECUTOR!r}: expected 'multiprocess', 'celery' or 'k8s'")
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
