"""A derived kind: a model whose run is built from its inputs (upstream runs, a retriever's stored
corpus, an expansion) by :meth:`DerivedKind.compute`, keyed over its upstreams' run keys."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.base import Kind, cached_revision
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.kinds.stage_inputs import Input, InputRef, KeyContext
from medbench_core.taskdata.task import Task


@runtime_checkable
class RunBuilder(Protocol):
    """The compute capability of a derived kind: what :func:`medbench_core.retrieval.derived.build_derived_run`
    calls. A kind is derived exactly when it is one (:func:`is_derived`): no flag says it beside the methods
    (tests/core/test_kinds.py checks every registered kind has exactly one of the two compute capabilities)."""

    def inputs(self, spec: ModelSpec) -> tuple[InputRef, ...]:
        """What its run is built from (upstream runs, a retriever's stored corpus, an expansion)."""
        ...

    def check_inputs(self, spec: ModelSpec, task: Task, inputs: Mapping[str, Input]) -> None:
        """Refuse inputs the compute cannot use, before anything is computed."""
        ...

    def compute(
        self, spec: ModelSpec, task: Task, inputs: Mapping[str, Input], out: Path, *, k: int, device: str = "cpu", progress: bool = False, model: Any = None
    ) -> tuple[pl.DataFrame, dict[str, Any]]:
        """The run and what info.json records of it."""
        ...


def is_derived(spec: ModelSpec) -> bool:
    """Whether ``spec``'s run is built from its inputs (a :class:`RunBuilder`: fusion, cross-encoder, expanded), so
    it has no corpus embeddings or index of its own, rather than by searching the corpus (a retriever)."""
    return isinstance(spec.plugin, RunBuilder)


def run_builder(spec: ModelSpec) -> RunBuilder:
    """``spec``'s kind as a :class:`RunBuilder` (TypeError naming what is missing for a kind that is not one)."""
    kind = spec.plugin
    if not isinstance(kind, RunBuilder):
        missing = [m for m in ("inputs", "check_inputs", "compute") if not callable(getattr(kind, m, None))]
        raise TypeError(f"model {spec.name}: kind {spec.kind} does not build runs from its inputs (it lacks {', '.join(missing)})")
    return kind


class DerivedKind(Kind):
    """A model whose run is built from other models' runs (or a retriever's stored corpus and an expansion):
    :class:`RunBuilder`'s three methods; no weights of its own unless it says so (a cross-encoder's :meth:`revision`)."""

    def revision(self, spec: ModelSpec) -> str:
        return ""

    def inputs(self, spec: ModelSpec) -> tuple[InputRef, ...]:
        """What its run is built from: by default, each upstream model's run."""
        return tuple(InputRef("run", up) for up in self.upstream(spec))

    def check_inputs(self, spec: ModelSpec, task: Task, inputs: Mapping[str, Input]) -> None:
        """Refuse inputs the compute cannot use, before anything is computed (DataError naming the model and input)."""

    def compute(
        self, spec: ModelSpec, task: Task, inputs: Mapping[str, Input], out: Path, *, k: int, device: str = "cpu", progress: bool = False, model: Any = None
    ) -> tuple[pl.DataFrame, dict[str, Any]]:
        """The run and what info.json records of it (``files``: files written into ``out`` besides the run)."""
        raise NotImplementedError

    def partition_keys(self, spec: ModelSpec, task: Task, ctx: KeyContext) -> dict[str, str]:
        """Run and metrics keys over the upstream run keys (:func:`derived_stage_keys`)."""
        missing = [u for u in self.upstream(spec) if u not in ctx.keys]
        if missing:
            raise DataError(f"model {spec.name}: no keys for upstream model(s) {missing}; their keys enter this model's key")
        return derived_stage_keys(spec, task.content_hash(), cached_revision(spec), {u: ctx.keys[u]["run"] for u in self.upstream(spec)}, ctx.k)


def derived_stage_keys(
    spec: ModelSpec,
    task_hash: str,
    revision: str,
    upstream_run_keys: Mapping[str, str],
    k: int,
    metrics: tuple[str, ...] | None = None,
) -> dict[str, str]:
    """Provenance keys of a derived model's ``run`` and ``metrics`` stages.

    The run key hashes the task content hash, the model identity, the weights' revision, each
    upstream run key (by name), k, the derived run's declared version and the kind's version; the
    metrics key adds the metric list.
    """
    from medbench_core.metric_names import DEFAULT_METRICS
    from medbench_core.provenance import artifact_key, stage_version

    missing = [u for u in spec.upstream if u not in upstream_run_keys]
    if missing:
        raise DataError(f"model {spec.name}: no run key for upstream model(s) {missing}; their keys enter this model's key")
    ups = {u: upstream_run_keys[u] for u in spec.upstream}
    run = artifact_key(
        stage="run", kind="derived", task=task_hash, model=spec.identity(), revision=revision, upstream=ups, k=k,
        code=stage_version("derived_run"), kind_version=spec.plugin.version,
    )  # fmt: skip
    met = artifact_key(stage="metrics", upstream=run, metrics=list(metrics or DEFAULT_METRICS), code=stage_version("metrics"))
    return {"run": run, "metrics": met}
