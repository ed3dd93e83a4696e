"""The Dagster definitions that `dagster dev` loads (see [tool.dagster] in pyproject.toml).

Built when loaded, not at import: the task partitions come from tasks.yaml as it is then, and
the resources from the settings (the one place that reads the environment).
"""

from __future__ import annotations

import dagster as dg

from assets import build_assets
from orchestration.jobs import ALL_JOBS
from orchestration.schedules import nightly_drift_canary, nightly_evaluation
from orchestration.sensors import leaderboard_after_evaluations, model_registry_sensor
from runtime import settings
from runtime.partitions import Partitions
from runtime.resources import ArtifactStoreResource, ComputeResource, MLflowResource, RegistryResource


def default_resources() -> dict:
    """The resources of this checkout, configured from the settings."""
    return {
        "store": ArtifactStoreResource(root=str(settings.DATA), shared_data=str(settings.SHARED / "data"), scratch=str(settings.STATE / "scratch")),
        "registry": RegistryResource(
            models_file=str(settings.MODELS_FILE), tasks_file=str(settings.TASKS_FILE), project_root=str(settings.ROOT), online=settings.ONLINE
        ),
        "compute": ComputeResource(online=settings.ONLINE),
        "mlflow": MLflowResource(tracking_uri=settings.default_tracking_uri(), artifact_root=str(settings.STATE / "mlartifacts")),
    }


def executor():
    """Dagster's multiprocess executor, its step processes forked from a forkserver, the celery executor of
    the production profile (MEDBENCH_EXECUTOR=celery; deploy/production/celery.yaml) or dagster-k8s' job
    executor (k8s; deploy/k8s)."""
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
    # Spawned (Dagster's default), each step process imports Dagster and this project again (~2.7 s of
    # CPU); forked from a forkserver that imported them once per run, it starts in a fraction of that.
    return dg.multi_or_in_process_executor.configured({"multiprocess": {"start_method": {"forkserver": {}}}}, name="multi_or_in_process_executor")


def build_definitions(resources: dict | None = None) -> dg.Definitions:
    """Assets, checks, jobs, schedules and the sensor over the catalogue's partitions; ``resources`` default to this checkout's.

    Refuses (:class:`runtime.settings.InvalidSetting`, naming each variable) an environment whose settings are not valid.
    """
    settings.check()
    assets, checks = build_assets(Partitions.from_catalog(settings.TASKS_FILE))
    return dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=ALL_JOBS,
        schedules=[nightly_evaluation, nightly_drift_canary],
        sensors=[model_registry_sensor, leaderboard_after_evaluations],
        resources=resources if resources is not None else default_resources(),
        executor=executor(),
    )


@dg.definitions
def defs() -> dg.Definitions:
    """What `dagster dev -m orchestration.definitions`, the daemon and every run worker load."""
    return build_definitions()
