"""Resources: where artifacts live, the registries, the compute device and MLflow."""

from __future__ import annotations

import fcntl
import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

from medbench_core.catalog import Catalog, TaskEntry, load_catalog
from medbench_core.errors import DataError
from medbench_core.model import Task, load_task
from medbench_core.models import ModelSpec, load_registry
from medbench_core.storage import verify_manifest

STAGES = ("embeddings", "index", "run", "metrics")


class ArtifactStoreResource(dg.ConfigurableResource):
    """The artifact tree under ``root`` (DVC-tracked ``data/``) and the source data folder.

    data/tasks/<task>/                               curated task, MANIFEST.json, GATE.json
    data/artifacts/<model>/<task>/<stage>/<key>/     one artifact per provenance key
    data/reports/                                    leaderboard
    """

    root: str
    shared_data: str
    scratch: str

    @property
    def root_path(self) -> Path:
        return Path(self.root)

    def task_dir(self, task: str) -> Path:
        return self.root_path / "tasks" / task

    def artifact_dir(self, model: str, task: str, stage: str, key: str) -> Path:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        return self.root_path / "artifacts" / model / task / stage / key

    def reports_dir(self) -> Path:
        return self.root_path / "reports"

    def load_task(self, task: str) -> Task:
        """The curated task, after verifying its manifest."""
        folder = self.task_dir(task)
        if not (folder / "MANIFEST.json").exists():
            raise DataError(f"task {task}: no curated task at {folder}; materialise curated_task[{task}] first")
        verify_manifest(folder)
        return load_task(folder)

    def scratch_dir(self, *parts: str) -> Path:
        p = Path(self.scratch).joinpath(*parts)
        p.mkdir(parents=True, exist_ok=True)
        return p


class RegistryResource(dg.ConfigurableResource):
    """The model registry (models.yaml) and the task catalogue (tasks.yaml)."""

    models_file: str
    tasks_file: str

    def models(self) -> list[ModelSpec]:
        return load_registry(self.models_file)

    def model(self, name: str) -> ModelSpec:
        for m in self.models():
            if m.name == name:
                return m
        raise DataError(f"model {name!r} is a partition but not in {self.models_file}; add it back or delete the partition")

    def catalog(self) -> Catalog:
        return load_catalog(self.tasks_file)

    def task_entry(self, name: str) -> TaskEntry:
        return self.catalog().task(name)


class ComputeResource(dg.ConfigurableResource):
    """Device for encoders (``auto`` picks CUDA when present) and FAISS GPU use."""

    device: str = "auto"
    faiss_gpu: str = "auto"  # auto | never | always

    def torch_device(self) -> str:
        if self.device != "auto":
            return self.device
        try:
            import torch

            return "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            return "cpu"

    def use_gpu_for_faiss(self) -> bool | None:
        return {"auto": None, "never": False, "always": True}[self.faiss_gpu]


class MLflowResource(dg.ConfigurableResource):
    """One MLflow run per model x task partition, identified by the tag ``medbench.run_key``.

    Policy for a re-run: a FINISHED run with the same key is reused (nothing new is logged);
    FAILED, KILLED or stale RUNNING runs with that key are deleted before a new run starts,
    so the store never holds two results for the same inputs.
    """

    tracking_uri: str
    artifact_root: str = ""

    def client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri)

    def ensure_store(self) -> None:
        """Create the SQLite store once, under a file lock, before any parallel work.

        Sixteen processes migrating one new SQLite file at once all fail (RELIABILITY.md).
        """
        if not self.tracking_uri.startswith("sqlite:///"):
            return
        db = Path(self.tracking_uri[len("sqlite:///") :])
        db.parent.mkdir(parents=True, exist_ok=True)
        with open(db.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self.client().search_experiments(max_results=1)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def experiment_id(self, name: str) -> str:
        client = self.client()
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        kwargs: dict[str, Any] = {}
        if self.artifact_root:
            Path(self.artifact_root).mkdir(parents=True, exist_ok=True)
            kwargs["artifact_location"] = Path(self.artifact_root, name).resolve().as_uri()
        try:
            return client.create_experiment(name, **kwargs)
        except Exception:  # created by a concurrent writer in the meantime
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def find_runs(self, experiment: str, run_key: str) -> list[Any]:
        exp_id = self.experiment_id(experiment)
        return self.client().search_runs([exp_id], filter_string=f"tags.`medbench.run_key` = '{run_key}'", max_results=100)

    def finished_run(self, experiment: str, run_key: str) -> Any | None:
        for r in self.find_runs(experiment, run_key):
            if r.info.status == "FINISHED":
                return r
        return None

    def log_run(
        self,
        experiment: str,
        run_key: str,
        run_name: str,
        params: dict[str, Any],
        metrics: dict[str, float],
        tags: dict[str, str],
        artifacts: list[Path],
        replace: bool = False,
    ) -> tuple[str, bool]:
        """Log one result; returns ``(run_id, reused)``. See the class docstring for the policy."""
        from mlflow.entities import Metric, Param, RunTag

        client = self.client()
        existing = self.find_runs(experiment, run_key)
        for r in existing:
            if r.info.status == "FINISHED" and not replace:
                return r.info.run_id, True
        for r in existing:
            client.delete_run(r.info.run_id)
        run = client.create_run(self.experiment_id(experiment), run_name=run_name, tags={**tags, "medbench.run_key": run_key})
        run_id = run.info.run_id
        try:
            now = int(time.time() * 1000)
            client.log_batch(
                run_id,
                metrics=[Metric(k, float(v), now, 0) for k, v in sorted(metrics.items())],
                params=[Param(k, str(v)[:6000]) for k, v in sorted(params.items())],
                tags=[RunTag(k, str(v)) for k, v in sorted(tags.items())],
            )
            for a in artifacts:
                client.log_artifact(run_id, str(a))
        except BaseException:
            client.set_terminated(run_id, status="FAILED")
            raise
        client.set_terminated(run_id, status="FINISHED")
        return run_id, False


@contextmanager
def _noop():
    yield


def dump(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)
