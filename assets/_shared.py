"""What every partitioned asset needs: its model and task, their provenance keys, the gate."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from medbench_core.encoders import cached_revision
from medbench_core.errors import ContractError
from medbench_core.model import Task
from medbench_core.models import ModelSpec
from medbench_core.pipeline import DEFAULT_K, applicability, partition_keys, stage_code_versions
from medbench_core.provenance import artifact_key, code_version
from medbench_core.storage import is_complete, replace_dir_atomic, verify_manifest, write_manifest
from orchestration.partitions import split_key
from orchestration.resources import ArtifactStoreResource, RegistryResource

CODE_VERSION = code_version()
CODE_VERSIONS = stage_code_versions()


class RetrievalConfig(dg.Config):
    """Per-run knobs for the model x task assets."""

    k: int = DEFAULT_K
    force: bool = False  # recompute even when an artifact with the same provenance key exists
    progress: bool = False


model_revision = cached_revision  # once per process and model identity


def model_version(spec: ModelSpec) -> str:
    """Data version of a registered model: everything that changes its vectors (identity, weights' revision).

    Recorded as observations of the ``model_spec`` source asset, so that changing one model's
    settings marks exactly that model's partitions stale (Dagster compares upstream data versions).
    """
    return artifact_key(model=spec.identity(), revision=model_revision(spec))


_ENCODER: dict[str, object] = {}


def shared_encoder(spec: ModelSpec, device: str, progress: bool = False):
    """The dense encoder of ``spec``, loaded once per process (None for BM25).

    Under the in-process executor corpus_embeddings and retrieval_run of a partition run in one
    process; loading the model twice cost seconds per partition (bench/bench_overhead.py). One
    model is kept at a time.
    """
    if spec.kind == "bm25":
        return None
    key = json.dumps([spec.to_dict(), device, progress], sort_keys=True, default=str)
    if key not in _ENCODER:
        from medbench_core.retrieval import load_encoder

        _ENCODER.clear()
        _ENCODER[key] = load_encoder(spec, device=device, progress=progress)
    return _ENCODER[key]


@dataclass
class Partition:
    model: str
    task_name: str
    spec: ModelSpec
    task: Task
    revision: str
    keys: dict[str, str]
    store: ArtifactStoreResource
    not_applicable: str | None = None

    def dir(self, stage: str) -> Path:
        return self.store.artifact_dir(self.model, self.task_name, stage, self.keys[stage])

    def cached(self, stage: str, force: bool = False) -> bool:
        return not force and is_complete(self.dir(stage))

    def materialize(self, stage: str, build: Callable[[Path], list[str]], *, force: bool = False, needs: tuple[str, ...] = ()) -> bool:
        """Write the stage's artifact unless a complete one exists for its key; True on a cache hit.

        The manifests of the upstream stages in ``needs`` are verified first (FAISS, for one,
        loads a flipped byte silently). ``build(tmp)`` writes the files into a temporary folder
        and returns their names; the manifest, with this partition's provenance, is written last
        and the folder swapped into place atomically.
        """
        if self.cached(stage, force):
            return True
        for upstream in needs:
            verify_manifest(self.dir(upstream))

        def write(tmp: Path) -> None:
            files = build(tmp)
            write_manifest(tmp, files, {"provenance": provenance_metadata(self, stage) | {"path": None}})

        replace_dir_atomic(self.dir(stage), write)
        return False


def open_partition(context: dg.AssetExecutionContext, store: ArtifactStoreResource, registry: RegistryResource, k: int) -> Partition:
    """Resolve the partition's model spec and curated task; refuse a task whose gate failed."""
    model, task_name = split_key(context.partition_key)
    spec = registry.model(model)
    task = store.load_task(task_name)
    require_gate(store, task)
    revision = model_revision(spec)
    return Partition(model, task_name, spec, task, revision, partition_keys(spec, task, k), store, applicability(spec, task))


def require_gate(store: ArtifactStoreResource, task: Task) -> None:
    """Refuse to build on a task whose last data-contract gate (own or cross-task) failed or judged other content.

    Dagster's blocking checks stop downstream assets only within the run that ran them; this
    precondition holds across separate later runs too.
    """
    reason = store.layout.gate_refusal(task.name, task.content_hash())
    if reason:
        raise ContractError(reason)


def not_applicable_result(p: Partition, stage: str) -> dg.MaterializeResult:
    """A model that cannot read the task's records produces no artifact, and says why."""
    return dg.MaterializeResult(
        metadata={"model": p.model, "task": p.task_name, "applicable": False, "reason": p.not_applicable},
        data_version=dg.DataVersion(f"n/a-{p.keys[stage]}"),
    )


def provenance_metadata(p: Partition, stage: str) -> dict:
    return {
        "model": p.model,
        "task": p.task_name,
        "model_revision": p.revision,
        "task_content_hash": p.task.content_hash(),
        "code_version": CODE_VERSIONS[stage],
        "provenance_key": p.keys[stage],
        "research_only": p.task.meta.research_only,
        "path": dg.MetadataValue.path(str(p.dir(stage))),
    }
