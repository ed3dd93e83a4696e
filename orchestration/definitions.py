"""The Dagster definitions that `dagster dev` loads (see [tool.dagster] in pyproject.toml)."""

from __future__ import annotations

import dagster as dg

from assets.checks import task_checks
from assets.embeddings import corpus_embeddings
from assets.indices import corpus_index
from assets.metrics import task_metrics
from assets.reports import leaderboard
from assets.runs import retrieval_run
from assets.tasks import curated_task
from orchestration import settings
from orchestration.jobs import check_overlap_job, curate_tasks_job, evaluate_partition_job, leaderboard_job
from orchestration.resources import ArtifactStoreResource, ComputeResource, MLflowResource, RegistryResource


def default_resources() -> dict:
    return {
        "store": ArtifactStoreResource(root=str(settings.DATA), shared_data=str(settings.SHARED / "data"), scratch=str(settings.STATE / "scratch")),
        "registry": RegistryResource(models_file=str(settings.MODELS_FILE), tasks_file=str(settings.TASKS_FILE)),
        "compute": ComputeResource(),
        "mlflow": MLflowResource(tracking_uri=settings.default_tracking_uri(), artifact_root=str(settings.STATE / "mlartifacts")),
    }


ALL_ASSETS = [curated_task, corpus_embeddings, corpus_index, retrieval_run, task_metrics, leaderboard]

defs = dg.Definitions(
    assets=ALL_ASSETS,
    asset_checks=task_checks,
    jobs=[curate_tasks_job, check_overlap_job, evaluate_partition_job, leaderboard_job],
    resources=default_resources(),
)
