"""The model x task stages as Dagster assets: one factory and one shared body for all four.

A :class:`Stage` (in assets/embeddings.py, indices.py, runs.py, metrics.py) says only what is its
own: how to write its artifact's files and what to show about it. :func:`stage_asset` makes the
asset, and its body does the rest the same way for every stage: resolve the partition's model
and curated task, refuse a task whose gates failed, say why when the stage has no artifact of its
own for this partition, reuse a complete artifact with the same provenance key or build one
atomically with its manifest, and return the provenance as metadata and data version.

Keys are resolved registry-wide (:func:`medbench_core.retrieval.derived.registry_partition_keys`): a model
built from upstreams (its kind is derived: fusion, cross-encoder, expanded) has keys over its
upstreams' keys, writes no corpus embeddings or index of its own (the stages say why, with a label
other than ``n/a``), and its run stage reads the inputs its kind names.
"""

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from medbench_core.errors import DataError, IntegrityError, MedbenchError
from medbench_core.layout import ENCODING_STAGES, STAGES
from medbench_core.memory import give_back_free_memory
from medbench_core.provenance import artifact_key, source_digest, stage_version
from medbench_core.retrieval.derived import (
    load_upstream_corpus,
    load_upstream_expansion,
    load_upstream_run,
    model_revision,
    registry_partition_keys,
)
from medbench_core.retrieval.kinds.capabilities import expansion_name, upstream_runs
from medbench_core.retrieval.kinds.derived_base import is_derived
from medbench_core.retrieval.kinds.retriever_base import corpus_of
from medbench_core.retrieval.kinds.stage_inputs import Input
from medbench_core.retrieval.model_registry import ModelSpec, upstream_order
from medbench_core.retrieval.stages import DEFAULT_K, stage_code_versions
from medbench_core.storage import MANIFEST, is_complete, replace_dir_atomic, verify_manifest, write_manifest
from medbench_core.taskdata.task import Task
from runtime import verified
from runtime.partitions import Partitions, model_of_partition, split_key, task_of_partition
from runtime.resources import ArtifactStoreResource, RegistryResource
from runtime.world import tag_run, world_tags

# A digest of medbench_core's sources (which code ran: provenance only, never a key; logged as code_version), and the
# declared output version of each stage (what keys and Dagster's code_version use).
CORE_SOURCE_DIGEST = source_digest()
STAGE_VERSIONS = stage_code_versions()

# The asset of each stage, keyed in STAGES order; everything else (jobs, freshness, the command
# line) takes the names from here.
ASSET_OF_STAGE = dict(zip(STAGES, ("corpus_embeddings", "corpus_index", "retrieval_run", "task_metrics"), strict=True))
STAGE_ASSETS = tuple(ASSET_OF_STAGE.values())
STAGE_KEYS = tuple(dg.AssetKey(name) for name in STAGE_ASSETS)
# The expansion of a model's queries (assets/expansions.py), between the curated task and the run.
EXPANSION_ASSET = "query_expansion"
EXPANSION_STAGE = "expansion"
# Every asset of one model x task partition, upstream first: what the evaluate_partition job runs (and the stage of each).
PARTITION_ASSETS = (*STAGE_ASSETS[:2], EXPANSION_ASSET, *STAGE_ASSETS[2:])
PARTITION_STAGES = (*STAGES[:2], EXPANSION_STAGE, *STAGES[2:])
PARTITION_KEYS = tuple(dg.AssetKey(name) for name in PARTITION_ASSETS)

_RETRY = dg.RetryPolicy(max_retries=2, delay=1)


class RetrievalConfig(dg.Config):
    """Per-run knobs for the model x task assets."""

    k: int = DEFAULT_K
    force: bool = False  # recompute even when an artifact with the same provenance key exists
    progress: bool = False


@dataclass(frozen=True)
class NoArtifact:
    """Why a stage writes no artifact of its own for a partition; ``label`` prefixes its data version.

    ``n/a``: the model cannot read the task's records. A model built from upstreams writes no
    corpus embeddings or index: ``reused`` (an expanded model searches its retriever's stored
    corpus, named with its key) or ``derived`` (fusion, rerank: built from upstream runs).
    ``none``: a model that reads the task's own queries has no expansion.
    """

    reason: str
    label: str = "n/a"

    @property
    def applicable(self) -> bool:
        return self.label != "n/a"


@dataclass
class Partition:
    """One model x task partition: its model spec, curated task and the provenance key of each stage.

    ``upstream_keys`` holds the stage keys of every model it is built from (empty for a
    retriever), ``registry`` every registered model, ``expansion`` an expanded model's
    expansion entry.
    """

    model: str
    task_name: str
    spec: ModelSpec
    task: Task
    revision: str
    keys: dict[str, str]
    store: ArtifactStoreResource
    not_applicable: str | None = None
    upstream_keys: dict[str, dict[str, str]] = field(default_factory=dict)
    registry: dict[str, ModelSpec] = field(default_factory=dict)
    expansion: Any = None  # ExpansionSpec of an expanded model

    def dir(self, stage: str) -> Path:
        if stage == EXPANSION_STAGE:
            return self.store.layout.expansion_dir(self.expansion.name, self.task_name, self.keys[EXPANSION_STAGE])
        owner = corpus_of(self.spec)
        if owner and owner != self.model and stage in ("embeddings", "index"):
            return self.upstream_dir(owner, stage)  # the same key: its retriever's corpus
        return self.store.artifact_dir(self.model, self.task_name, stage, self.keys[stage])

    def upstream_dir(self, model: str, stage: str) -> Path:
        """The artifact folder of ``stage`` of upstream ``model`` on this task."""
        return self.store.artifact_dir(model, self.task_name, stage, self.upstream_keys[model][stage])

    def cached(self, stage: str, force: bool = False) -> bool:
        if force or not is_complete(self.dir(stage)):
            return False
        verified.remember(self.dir(stage))  # the warm path of the next `medbench run` need not read it again
        return True

    def data_key(self, stage: str) -> str:
        """The key in ``stage``'s data version: its own, or (a stage without one) the run's."""
        return self.keys.get(stage) or self.keys["run"]

    def no_artifact(self, stage: str) -> NoArtifact | None:
        """None when ``stage`` writes an artifact of its own for this partition; otherwise why not."""
        if self.not_applicable:
            return NoArtifact(self.not_applicable)
        if stage == EXPANSION_STAGE:
            return None if expansion_name(self.spec) else no_expansion(self.model)
        if is_derived(self.spec) and stage in ("embeddings", "index"):
            asset = ASSET_OF_STAGE[stage]
            owner = corpus_of(self.spec)
            if owner:
                return NoArtifact(f"reuses {owner}'s {asset} {self.keys[stage]}", "reused")
            return NoArtifact(f"built from upstream runs ({', '.join(self.spec.upstream)}); no {asset} of its own", "derived")
        return None

    def upstream_run_keys(self) -> dict[str, str]:
        """Run key of each model whose run this one's is built from (an expanded model: a LameR expansion's upstream)."""
        return {u: self.upstream_keys[u]["run"] for u in upstream_runs(self.spec)}

    def require_upstream(self, upstream: str, stage: str, folder: Path) -> None:
        """``folder`` holds a complete artifact of ``upstream``'s ``stage``; a DataError saying what to run otherwise."""
        asset, where = ASSET_OF_STAGE.get(stage, stage), f"on task {self.task_name}"
        todo = f"medbench run --models {upstream} --tasks {self.task_name}"
        if not (folder / MANIFEST).exists():
            raise DataError(
                f"model {self.model}: upstream model {upstream!r} has no {asset} {where} (key {folder.name}): it was not evaluated, "
                f"or its evaluation failed; nothing was stored for {self.model}. Evaluate {upstream} first: {todo}"
            )
        try:
            verify_manifest(folder)
        except IntegrityError as exc:
            raise DataError(
                f"model {self.model}: upstream model {upstream!r}'s {asset} {where} fails its manifest ({exc}); rematerialise it: {todo} --force"
            ) from exc

    def load_inputs(self) -> dict[str, Input]:
        """What a derived model's run is built from, as its kind names them, each verified.

        An upstream model's run; a retriever's stored corpus (its embeddings and index); an
        expansion, refused unless its contract passed. Raises DataError naming the model, the
        upstream, the task and what to run.
        """
        out: dict[str, Input] = {}
        for ref in self.spec.plugin.inputs(self.spec):
            if ref.what == "run":
                folder = self.upstream_dir(ref.name, "run")
                self.require_upstream(ref.name, "run", folder)
                out[ref.label] = load_upstream_run(folder, key=self.upstream_keys[ref.name]["run"])
            elif ref.what == "corpus":
                for stage in ("embeddings", "index"):
                    self.require_upstream(ref.name, stage, self.upstream_dir(ref.name, stage))
                out[ref.label] = load_upstream_corpus(
                    self.registry[ref.name],
                    self.upstream_dir(ref.name, "embeddings"),
                    self.upstream_dir(ref.name, "index"),
                    key=self.upstream_keys[ref.name]["index"],
                )
            else:
                out[ref.label] = self.load_expansion()
        return out

    def load_expansion(self) -> Input:
        """The partition's stored expansion, refused unless its contract passed on exactly its key."""
        folder, e = self.dir(EXPANSION_STAGE), self.expansion
        if not (folder / MANIFEST).exists():
            raise DataError(
                f"model {self.model}: no expansion {e.name} of task {self.task_name} (key {folder.name}); nothing was stored for {self.model}. "
                f"Materialise {EXPANSION_ASSET} first: medbench run --models {self.model} --tasks {self.task_name}"
            )
        try:
            return load_upstream_expansion(e, folder, self.keys[EXPANSION_STAGE])
        except MedbenchError as exc:
            raise DataError(f"model {self.model} on task {self.task_name}: {exc}") from exc

    def materialize(self, stage: str, build: Callable[[Path], list[str]], *, force: bool = False, needs: tuple[str, ...] = ()) -> bool:
        """Write the stage's artifact unless a complete one exists for its key; True on a cache hit.

        The manifests of the upstream stages in ``needs`` are verified first (FAISS, for one,
        loads a flipped byte silently); a stage without an artifact of its own here is skipped.
        ``build(tmp)`` writes the files into a temporary folder and returns their names; the
        manifest, with this partition's provenance, is written last and the folder swapped into
        place atomically.
        """
        if self.cached(stage, force):
            return True
        for upstream in needs:
            if self.no_artifact(upstream) is None:
                verify_manifest(self.dir(upstream))

        def write(tmp: Path) -> None:
            files = build(tmp)
            write_manifest(tmp, files, {"provenance": provenance_metadata(self, stage) | {"path": None}})

        give_back_free_memory()  # what earlier steps of this process freed: not the base of this build's peak
        replace_dir_atomic(self.dir(stage), write)
        verified.remember(self.dir(stage))
        return False


def open_partition(partition_key: str, store: ArtifactStoreResource, registry: RegistryResource, k: int) -> Partition:
    """Resolve the partition's model spec, curated task and keys; refuse a task whose gate failed.

    Dagster's blocking checks stop downstream assets only within the run that ran them; this
    precondition holds across separate later runs too. Keys come from the whole registry
    (:func:`medbench_core.retrieval.derived.registry_partition_keys`), so a derived model's keys follow its
    upstreams'.
    """
    model, task_name = split_key(partition_key)
    specs = registry.models()
    if model not in {s.name for s in specs}:
        registry.model(model)  # says what to do about a model no longer registered
    task = store.load_task(task_name)
    store.layout.require_gate(task_name, task.content_hash())
    return resolve_partition(model, task, specs, registry.expansions, k, store)


def resolve_partition(
    model: str, task: Task, specs: list[ModelSpec], expansions: Callable[[], list], k: int, store: ArtifactStoreResource, *, revision: bool = True
) -> Partition:
    """The partition of ``model`` on the curated ``task``: its keys over the registry ``specs`` (``expansions()``, the
    registry's expansions, read only when the model's chain has one); ``revision=False`` leaves the model's revision
    unresolved (the run plan needs the keys only: orchestration/plan.py)."""
    by_name = {s.name: s for s in specs}
    spec = by_name[model]
    not_applicable = spec.plugin.applicability(spec, task, by_name)
    chain = [*upstream_order(model, specs), model]
    found = expansions() if any(expansion_name(by_name[n]) for n in chain) else []
    try:
        keys = registry_partition_keys(list(by_name.values()), task, k, names=[model], expansions=found)
    except MedbenchError:
        if not not_applicable:
            raise
        # e.g. an expansion with no file for an image task: nothing will be computed; the keys only name the data versions.
        na = artifact_key(model=spec.identity(), task=task.content_hash(), k=k, not_applicable=not_applicable)
        keys = {model: {stage: na for stage in (*STAGES, EXPANSION_STAGE)}}
    expansion = next((e for e in found if e.name == expansion_name(spec)), None)
    resolved = model_revision(spec, by_name) if revision else ""  # once per process and model identity
    upstream_keys = {n: v for n, v in keys.items() if n != model}
    return Partition(model, task.name, spec, task, resolved, keys[model], store, not_applicable, upstream_keys, by_name, expansion)


def data_version(p: Partition, stage: str) -> str:
    """The data version the asset of ``stage`` records for the partition, which the Dagster UI compares: the stage's key,
    or, for a stage without an artifact of its own, the label of why (:class:`NoArtifact`) with the key it names; a
    model that reads the task's own queries has the one constant version ``none`` for its expansion (assets/expansions.py)."""
    if stage == EXPANSION_STAGE and not expansion_name(p.spec):
        return no_expansion(p.model).label
    skip = p.no_artifact(stage)
    return p.keys[stage] if skip is None else f"{skip.label}-{p.data_key(stage)}"


def provenance_metadata(p: Partition, stage: str) -> dict:
    return {
        "model": p.model,
        "task": p.task_name,
        "model_revision": p.revision,
        "task_content_hash": p.task.content_hash(),
        "code_version": STAGE_VERSIONS.get(stage) or stage_version(stage),
        "provenance_key": p.keys[stage],
        "research_only": p.task.meta.research_only,
        "path": dg.MetadataValue.path(str(p.dir(stage))),
    }


@dataclass
class StageRun:
    """What a stage's own code receives: the partition, the run's config, context and resources.

    ``inputs``: what a stage's ``check`` loaded before building (a derived run's upstreams).
    """

    partition: Partition
    config: RetrievalConfig
    context: dg.AssetExecutionContext
    resources: Any  # context.resources: store, registry and the stage's own (compute, mlflow)
    inputs: dict[str, Any] = field(default_factory=dict)

    def dir(self, stage: str) -> Path:
        return self.partition.dir(stage)


@dataclass(frozen=True)
class Stage:
    """What one stage adds to the shared body.

    ``build(run, tmp)`` writes the artifact's files into ``tmp`` and returns their names;
    ``finish(run)`` runs once the artifact exists (built now or found complete) and returns the
    metadata shown beside the provenance. ``needs``: upstream stages whose manifests are verified
    before building; ``resources``: resource keys beyond store and registry. ``check(run)``, when
    given, runs before anything is written for an artifact to build (it may fill ``run.inputs``):
    an error there leaves no folder behind.
    """

    name: str
    build: Callable[[StageRun, Path], list[str]]
    finish: Callable[[StageRun], dict[str, Any]]
    description: str
    group: str
    kinds: tuple[str, ...]
    needs: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    check: Callable[[StageRun], None] | None = None

    @property
    def asset_name(self) -> str:
        return ASSET_OF_STAGE[self.name]

    def deps(self) -> list[dg.AssetDep | str]:
        """The first stage reads the curated task and the model's registry entry; the others, the stage before."""
        i = STAGES.index(self.name)
        if self.name == "run":  # the queries as the model reads them: the task's, or an expansion of them
            return [ASSET_OF_STAGE[STAGES[i - 1]], EXPANSION_ASSET]
        if i > 0:
            return [ASSET_OF_STAGE[STAGES[i - 1]]]
        return [
            dg.AssetDep("curated_task", partition_mapping=task_of_partition),
            dg.AssetDep("model_spec", partition_mapping=model_of_partition),  # settings changes -> stale
        ]


@contextmanager
def fails_at_once():
    """A DataError (a bad file or entry, a missing or failed upstream) fails the step without the
    retries meant for a dying worker: running it again cannot fix it. The message is kept."""
    try:
        yield
    except DataError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from exc


def run_stage(stage: Stage, context: dg.AssetExecutionContext, config: RetrievalConfig) -> dg.MaterializeResult:
    """The shared body of every stage asset (see the module docstring)."""
    with fails_at_once():
        return _run_stage(stage, context, config)


def _run_stage(stage: Stage, context: dg.AssetExecutionContext, config: RetrievalConfig) -> dg.MaterializeResult:
    # The run names the state it writes into, however it was launched: one instance may serve several (runtime/world.py).
    mlflow = context.resources.mlflow if "mlflow" in stage.resources else None
    tag_run(context.instance, context.run_id, world_tags(context.resources.store.layout.root, mlflow.tracking_uri if mlflow else None))
    p = open_partition(context.partition_key, context.resources.store, context.resources.registry, config.k)
    skip = p.no_artifact(stage.name)
    if skip is not None:
        return no_artifact_result(p, stage.name, skip)
    run = StageRun(p, config, context, context.resources)
    if stage.check is not None and not p.cached(stage.name, config.force):
        stage.check(run)
    hit = p.materialize(stage.name, lambda tmp: stage.build(run, tmp), force=config.force, needs=stage.needs)
    return dg.MaterializeResult(
        metadata={**provenance_metadata(p, stage.name), "cache_hit": hit, **stage.finish(run)},
        data_version=dg.DataVersion(data_version(p, stage.name)),
    )


def no_expansion(model: str) -> NoArtifact:
    """Why a model that is not of kind expanded has no ``query_expansion``: it reads the task's own queries."""
    return NoArtifact(f"{model} reads the task's own queries (no expansion)", "none")


def no_artifact_result(p: Partition, stage: str, skip: NoArtifact) -> dg.MaterializeResult:
    """The materialisation of a stage without an artifact of its own: why, and a data version labelled so."""
    return dg.MaterializeResult(
        metadata={"model": p.model, "task": p.task_name, "applicable": skip.applicable, "reason": skip.reason, "label": skip.label},
        data_version=dg.DataVersion(data_version(p, stage)),
    )


def stage_asset(stage: Stage, partitions: Partitions) -> dg.AssetsDefinition:
    """The Dagster asset of ``stage`` over the model x task partitions of ``partitions``."""

    @dg.asset(
        name=stage.asset_name,
        partitions_def=partitions.model_task,
        deps=stage.deps(),
        code_version=STAGE_VERSIONS[stage.name],
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
