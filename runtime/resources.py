"""Resources: where artifacts live, the registries, the compute device and MLflow (runtime/mlflow_store.py).

Configured in one place (orchestration/definitions.py, from runtime/settings.py); assets and
tests receive them as Dagster resources.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

from medbench_core.errors import DataError
from medbench_core.layout import Layout
from medbench_core.provenance import file_hash, git_sha
from medbench_core.retrieval.model_registry import ModelSpec, load_baseline, load_registry
from medbench_core.taskdata.catalog import Catalog, TaskEntry, load_catalog
from medbench_core.taskdata.task import Task
from runtime.mlflow_store import MLflowResource, dagster_run_alive

__all__ = ["ArtifactStoreResource", "ComputeResource", "MLflowResource", "RegistryResource", "dagster_run_alive"]

# The checkout this code was imported from: the default project root (settings.ROOT says the same
# unless MEDBENCH_ROOT points elsewhere, and definitions.py passes that).
_CHECKOUT = Path(__file__).resolve().parent.parent


class ArtifactStoreResource(dg.ConfigurableResource):
    """The artifact tree under ``root`` (DVC-tracked ``data/``) and the source data folder.

    data/tasks/<task>/                               curated task, MANIFEST.json, GATE.json
    data/artifacts/<model>/<task>/<stage>/<key>/     one artifact per provenance key
    data/reports/                                    leaderboard, canary baselines
    Every path comes from :class:`medbench_core.layout.Layout`.
    """

    root: str
    shared_data: str
    scratch: str

    @property
    def root_path(self) -> Path:
        return Path(self.root)

    @property
    def layout(self) -> Layout:
        return Layout(self.root_path)

    def task_dir(self, task: str) -> Path:
        return self.layout.task_dir(task)

    def artifact_dir(self, model: str, task: str, stage: str, key: str) -> Path:
        return self.layout.artifact_dir(model, task, stage, key)

    def reports_dir(self) -> Path:
        return self.layout.reports_dir()

    def load_task(self, task: str) -> Task:
        """The curated task, after verifying its manifest; kept per process while its folder is unchanged.

        The five steps of one partition run in one process under `medbench run`: each reloaded and
        re-hashed the task (0.2 GB and seconds at 100K documents). A folder whose files' names,
        sizes and modification times are those of the last load is the same task.
        """
        folder = self.layout.task_dir(task)
        stamp = _folder_stamp(folder)
        cached = _TASKS.get(str(folder))
        if cached is not None and stamp is not None and cached[0] == stamp:
            return cached[1]
        loaded = self.layout.load_task(task)
        _TASKS.clear()  # one task kept at a time: a partition's steps ask for the same one
        if stamp is not None:
            _TASKS[str(folder)] = (stamp, loaded)
        return loaded

    def scratch_dir(self, *parts: str) -> Path:
        p = Path(self.scratch).joinpath(*parts)
        p.mkdir(parents=True, exist_ok=True)
        return p


class RegistryResource(dg.ConfigurableResource):
    """The model registry (models.yaml), the task catalogue (tasks.yaml) and the code that runs them.

    ``project_root`` is the checkout whose code and lock file produce the results (git sha and
    lock hash in every MLflow run); empty means the checkout this module was imported from.
    ``online`` (MEDBENCH_ONLINE) lets hub datasets download and hub revisions resolve on the hub;
    offline, both come from the local hub cache.
    """

    models_file: str
    tasks_file: str
    project_root: str = ""
    online: bool = False

    def models(self) -> list[ModelSpec]:
        return load_registry(self.models_file)

    def baseline(self) -> str:
        """The model every other is tested against (``baseline:`` of models.yaml, default bm25); DataError naming the file otherwise."""
        return load_baseline(self.models_file)

    def expansions(self) -> list:
        """The ``expansions:`` entries of the registry file (:mod:`medbench_core.retrieval.expansion.spec`)."""
        from medbench_core.retrieval.expansion.spec import load_expansions

        return load_expansions(self.models_file)

    def model(self, name: str) -> ModelSpec:
        for m in self.models():
            if m.name == name:
                return m
        raise DataError(f"model {name!r} is a partition but not in {self.models_file}; add it back or delete the partition")

    def catalog(self) -> Catalog:
        return load_catalog(self.tasks_file)

    def task_entry(self, name: str) -> TaskEntry:
        return self.catalog().task(name)

    def checkout(self) -> Path:
        return Path(self.project_root) if self.project_root else _CHECKOUT

    def git_sha(self) -> str:
        return git_sha(self.checkout())

    def lock_hash(self) -> str:
        return file_hash(self.checkout() / "requirements.lock")


_TASKS: dict[str, tuple[tuple, Task]] = {}


def _folder_stamp(folder: Path) -> tuple | None:
    """Names, sizes and modification times (ns) of every file under ``folder``; None when it cannot be read."""
    try:
        return tuple(sorted((str(p.relative_to(folder)), st.st_size, st.st_mtime_ns) for p in folder.rglob("*") if p.is_file() for st in (p.stat(),)))
    except OSError:
        return None


_ENCODER: dict[str, object] = {}
_GENERATOR: dict[str, object] = {}


class ComputeResource(dg.ConfigurableResource):
    """Device for encoders (``auto`` picks CUDA when present), FAISS GPU use, and the loaded encoder.

    ``online`` (MEDBENCH_ONLINE) lets a hub model's weights download; offline they come from the
    local hub cache at the pinned revision.
    """

    device: str = "auto"
    faiss_gpu: str = "auto"  # auto | never | always
    online: bool = False

    def torch_device(self) -> str:
        if self.device != "auto":
            return self.device
        try:
            import torch

            return "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            return "cpu"

    def device_for(self, spec: ModelSpec) -> str:
        """:meth:`torch_device` for a kind that loads weights; "cpu" for one that does not (BM25): torch is not imported for it."""
        return self.torch_device() if spec.plugin.loads_weights else "cpu"

    def use_gpu_for_faiss(self) -> bool | None:
        return {"auto": None, "never": False, "always": True}[self.faiss_gpu]

    def encoder(self, spec: ModelSpec, progress: bool = False):
        """The loaded model of ``spec`` (its kind's: a dense or CLIP encoder, a cross-encoder), loaded once
        per process; None for a kind that loads no weights (BM25, fusion, expanded).

        Under the in-process executor corpus_embeddings and retrieval_run of a partition run in
        one process; loading the model twice cost seconds per partition (bench/bench_overhead.py).
        One model is kept at a time. The main job loads it early, while the tasks are prepared.
        """
        if not spec.plugin.loads_weights:
            return None
        device = self.torch_device()
        key = json.dumps([spec.to_entry(), device, progress, self.online], sort_keys=True, default=str)
        if key not in _ENCODER:
            _ENCODER.clear()
            _ENCODER[key] = spec.plugin.load(spec, device=device, progress=progress, online=self.online)
        return _ENCODER[key]

    def generator(self, spec):
        """The causal LM of a ``source: generate`` expansion (an ExpansionSpec), loaded once per
        process: one generator is kept at a time, as one encoder is."""
        from medbench_core.retrieval.expansion.generate import Generator

        device = self.torch_device()
        key = json.dumps([spec.resolve_path(spec.generator), spec.revision, spec.dtype, device], default=str)
        if key not in _GENERATOR:
            _GENERATOR.clear()
            _GENERATOR[key] = Generator(spec.resolve_path(spec.generator), revision=spec.revision, online=False, device=device, dtype=spec.dtype)
        return _GENERATOR[key]
