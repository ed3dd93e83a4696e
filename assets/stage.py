"""The model x task stages as Dagster assets: one factory and one shared body for all four.

A :class:`Stage` (in assets/embeddings.py, indices.py, runs.py, metrics.py) says only what is its
own: how to write its artifact's files and what to show about it. :func:`stage_asset` makes the
asset, and its body does the rest the same way for every stage: resolve the partition's model
and curated task, refuse a task whose gates failed, say why when the stage has no artifact of its
own for this partition, reuse a complete artifact with the same provenance key or build one
atomically with its manifest, and return the provenance as metadata and data version.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from medbench_core.encoders import cached_revision
from medbench_core.layout import ENCODING_STAGES, STAGES
from medbench_core.model import Task
from medbench_core.models import ModelSpec
from medbench_core.pipeline import DEFAULT_K, applicability, partition_keys, stage_code_versions
from medbench_core.provenance import code_version
from medbench_core.storage import is_complete, replace_dir_atomic, verify_manifest, write_manifest
from runtime.partitions import Partitions, model_of_partition, split_key, task_of_partition
from runtime.resources import ArtifactStoreResource, RegistryResource

CODE_VERSION = code_version()
CODE_VERSIONS = stage_code_versions()

# The asset of each stage, keyed in STAGES order; everything else (jobs, freshness, the command
# line) takes the names from here.
ASSET_OF_STAGE = dict(zip(STAGES, ("corpus_embeddings", "corpus_index", "retrieval_run", "task_metrics"), strict=True))
STAGE_ASSETS = tuple(ASSET_OF_STAGE.values())
STAGE_KEYS = tuple(dg.AssetKey(name) for name in STAGE_ASSETS)

_RETRY = dg.RetryPolicy(max_retries=2, delay=1)


class RetrievalConfig(dg.Config):
    """Per-run knobs for the model x task assets."""

    k: int = DEFAULT_K
    force: bool = False  # recompute even when an artifact with the same provenance key exists
    progress: bool = False


@dataclass(frozen=True)
class NoArtifact:
    """Why a stage writes no artifact of its own for a partition; ``label`` prefixes its data version.

    Today the one case is ``n/a``: the model cannot read the task's records. A derived model (a
    reranker, a fusion of runs, a retriever on expanded queries) will say here that it reuses its
    upstream's embeddings or index, naming the upstream's key.
    """

    reason: str
    label: str = "n/a"


@dataclass
class Partition:
    """One model x task partition: its model spec, curated task and the provenance key of each stage."""

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

    def no_artifact(self, stage: str) -> NoArtifact | None:
        """None when ``stage`` writes an artifact of its own for this partition; otherwise why not."""
        return NoArtifact(self.not_applicable) if self.not_applicable else None

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


def open_partition(partition_key: str, store: ArtifactStoreResource, registry: RegistryResource, k: int) -> Partition:
    """Resolve the partition's model spec and curated task; refuse a task whose gate failed.

    Dagster's blocking checks stop downstream assets only within the run that ran them; this
    precondition holds across separate later runs too.
    """
    model, task_name = split_key(partition_key)
    spec = registry.model(model)
    task = store.load_task(task_name)
    store.layout.require_gate(task_name, task.content_hash())
    revision = cached_revision(spec)  # once per process and model identity
    return Partition(model, task_name, spec, task, revision, partition_keys(spec, task, k), store, applicability(spec, task))


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


@dataclass
class StageRun:
    """What a stage's own code receives: the partition, the run's config, context and resources."""

    partition: Partition
    config: RetrievalConfig
    context: dg.AssetExecutionContext
    resources: Any  # context.resources: store, registry and the stage's own (compute, mlflow)

    def dir(self, stage: str) -> Path:
        return self.partition.dir(stage)


@dataclass(frozen=True)
class Stage:
    """What one stage adds to the shared body.

    ``build(run, tmp)`` writes the artifact's files into ``tmp`` and returns their names;
    ``finish(run)`` runs once the artifact exists (built now or found complete) and returns the
    metadata shown beside the provenance. ``needs``: upstream stages whose manifests are verified
    before building; ``resources``: resource keys beyond store and registry.
    """

    name: str
    build: Callable[[StageRun, Path], list[str]]
    finish: Callable[[StageRun], dict[str, Any]]
    description: str
    group: str
    kinds: tuple[str, ...]
    needs: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()

    @property
    def asset_name(self) -> str:
        return ASSET_OF_STAGE[self.name]

    def deps(self) -> list[dg.AssetDep | str]:
        """The first stage reads the curated task and the model's registry entry; the others, the stage before."""
        i = STAGES.index(self.name)
        if i > 0:
            return [ASSET_OF_STAGE[STAGES[i - 1]]]
        return [
            dg.AssetDep("curated_task", partition_mapping=task_of_partition),
            dg.AssetDep("model_spec", partition_mapping=model_of_partition),  # settings changes -> stale
        ]


def run_stage(stage: Stage, context: dg.AssetExecutionContext, config: RetrievalConfig) -> dg.MaterializeResult:
    """The shared body of every stage asset (see the module docstring)."""
    p = open_partition(context.partition_key, context.resources.store, context.resources.registry, config.k)
    skip = p.no_artifact(stage.name)
    if skip is not None:
        return dg.MaterializeResult(
            metadata={"model": p.model, "task": p.task_name, "applicable": skip.label != "n/a", "reason": skip.reason},
            data_version=dg.DataVersion(f"{skip.label}-{p.keys[stage.name]}"),
        )
    run = StageRun(p, config, context, context.resources)
    hit = p.materialize(stage.name, lambda tmp: stage.build(run, tmp), force=config.force, needs=stage.needs)
    return dg.MaterializeResult(
        metadata={**provenance_metadata(p, stage.name), "cache_hit": hit, **stage.finish(run)},
        data_version=dg.DataVersion(p.keys[stage.name]),
    )


def stage_asset(stage: Stage, partitions: Partitions) -> dg.AssetsDefinition:
    """The Dagster asset of ``stage`` over the model x task partitions of ``partitions``."""

    @dg.asset(
        name=stage.asset_name,
        partitions_def=partitions.model_task,
        deps=stage.deps(),
        code_version=CODE_VERSIONS[stage.name],
        group_name=stage.group,
        kinds=set(stage.kinds),
        pool="encode" if stage.name in ENCODING_STAGES else None,  # one model encodes at a time
        retry_policy=_RETRY,
        description=stage.description,
        required_resource_keys={"store", "registry", *stage.resources},
    )
    def _asset(context: dg.AssetExecutionContext, config: RetrievalConfig) -> dg.MaterializeResult:
        return run_stage(stage, context, config)

    return _asset
