"""The Dagster definitions that `dagster dev` loads (see [tool.dagster] in pyproject.toml).

Built when loaded, not at import: the task partitions come from tasks.yaml as it is then, and
the resources from the settings (the one place that reads the environment).
"""

from __future__ import annotations

import dagster as dg

from assets import build_assets
from orchestration.jobs import ALL_JOBS
from orchestration.schedules import nightly_drift_canary, nightly_evaluation
from orchestration.sensors import model_registry_sensor
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
    """None (Dagster's multiprocess default), or the celery executor of the production profile (MEDBENCH_EXECUTOR=celery)."""
    if settings.EXECUTOR == "celery":
        from dagster_celery import celery_executor

        return celery_executor.configured({"broker": settings.CELERY_BROKER, "backend": settings.CELERY_BACKEND}, name="celery")
    if settings.EXECUTOR != "multiprocess":
        raise ValueError(f"MEDBENCH_EXECUTOR={settings.EXECUTOR!r}: expected 'multiprocess' or 'celery'")
    return None


def build_definitions(resources: dict | None = None) -> dg.Definitions:
    """Assets, checks, jobs, schedules and the sensor over the catalogue's partitions; ``resources`` default to this checkout's."""
    assets, checks = build_assets(Partitions.from_catalog(settings.TASKS_FILE))
    return dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=ALL_JOBS,
        schedules=[nightly_evaluation, nightly_drift_canary],
        sensors=[model_registry_sensor],
        resources=resources if resources is not None else default_resources(),
        executor=executor(),
    )


@dg.definitions
def defs() -> dg.Definitions:
    """What `dagster dev -m orchestration.definitions`, the daemon and every run worker load."""
    return build_definitions()
