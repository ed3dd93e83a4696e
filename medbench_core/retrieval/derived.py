"""Runs built from their inputs (upstream runs, a retriever's stored corpus, an expansion), and every
model's provenance keys on a task.

A derived model (its kind is a :class:`~medbench_core.retrieval.kinds.derived_base.RunBuilder`: fusion, cross-encoder,
expanded; :func:`~medbench_core.retrieval.kinds.derived_base.is_derived`) has no corpus
embeddings or index of its own. Its run stage loads the inputs its kind names
(:meth:`~medbench_core.retrieval.kinds.derived_base.DerivedKind.inputs`), and :func:`build_derived_run` has
the kind compute the run and writes it in medbench's schema (``run.parquet``, ``run.trec``,
``info.json``), so scoring, statistics, the leaderboard and the exports treat it as any other model.
:func:`registry_partition_keys` gives every model's keys on a task, upstreams first, so a changed
upstream makes what is built on it stale.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.base import cached_revision
from medbench_core.retrieval.kinds.derived_base import is_derived, run_builder
from medbench_core.retrieval.kinds.retriever_base import corpus_of
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.kinds.stage_inputs import DEFAULT_K, Input, KeyContext, StoredCorpus, StoredExpansion, UpstreamRun
from medbench_core.retrieval.ranking import write_trec_file
from medbench_core.taskdata.task import Task


def inputs(spec: ModelSpec) -> tuple[str, ...]:
    """The names :func:`build_derived_run` needs in its ``upstream`` mapping for ``spec`` (its kind's inputs)."""
    return tuple(ref.label for ref in run_builder(spec).inputs(spec))


def load_upstream_run(folder: str | Path, key: str = "") -> UpstreamRun:
    """Read ``run.parquet`` and ``info.json`` of a run folder (the caller verifies its manifest first)."""
    folder = Path(folder)
    if not (folder / "run.parquet").exists():
        raise DataError(f"{folder}: no run.parquet; materialise the upstream retrieval_run first")
    info = json.loads((folder / "info.json").read_text()) if (folder / "info.json").exists() else {}
    run = pl.read_parquet(folder / "run.parquet")
    k = int(info.get("k") or (run["rank"].max() if run.height else 0) or 0)
    return UpstreamRun(run=run, k=k, key=key, info=info)


def load_upstream_corpus(retriever: ModelSpec, embeddings: str | Path, index: str | Path, key: str = "") -> StoredCorpus:
    """A retriever's stored corpus: its ``corpus_embeddings`` and ``corpus_index`` folders (manifests verified here)."""
    from medbench_core.storage import verify_manifest

    for folder in (embeddings, index):
        verify_manifest(folder)
    return StoredCorpus(spec=retriever, embeddings=Path(embeddings), index=Path(index), key=key)


def load_upstream_expansion(expansion: Any, folder: str | Path, key: str) -> StoredExpansion:
    """A stored expansion whose contract passed (``EXPANSION_GATE.json`` on exactly ``key``).

    Raises DataError when the folder holds no complete artifact, or the gate refuses it
    (:func:`medbench_core.retrieval.expansion.contract.expansion_gate_refusal`).
    """
    from medbench_core.retrieval.expansion.contract import expansion_gate_refusal
    from medbench_core.retrieval.expansion.frame import load_expansion

    frame, info = load_expansion(folder)
    refusal = expansion_gate_refusal(folder, key)
    if refusal:
        raise DataError(f"expansion {expansion.name}: {refusal}")
    return StoredExpansion(spec=expansion, frame=frame, key=key, info=info)


def check_inputs(spec: ModelSpec, task: Task, upstream: Mapping[str, Input]) -> None:
    """Refuse, before anything is computed or written, inputs :func:`build_derived_run` cannot use:
    a model not built from upstreams, a missing input (never evaluated, or failed), and what its
    kind refuses (a rerank depth beyond the k its upstream run was retrieved with). DataError names
    the model and the input."""
    if not is_derived(spec):
        raise DataError(f"model {spec.name}: kind {spec.kind} is not built from upstream runs")
    missing = [u for u in inputs(spec) if u not in upstream]
    if missing:
        raise DataError(
            f"model {spec.name}: no run of upstream model(s) {missing} on task {task.name} (not evaluated, or failed); "
            f"evaluate {', '.join(missing)} on {task.name} first"
        )
    run_builder(spec).check_inputs(spec, task, upstream)


def build_derived_run(
    spec: ModelSpec,
    task: Task,
    upstream: Mapping[str, Input],
    out: Path,
    *,
    k: int = DEFAULT_K,
    device: str = "cpu",
    progress: bool = False,
    model: Any = None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Build the run of derived model ``spec`` from its inputs; writes ``run.parquet``, ``run.trec``, ``info.json``.

    ``upstream`` maps each name of :func:`inputs` to its loaded input on ``task``. A missing input
    (never evaluated, or failed) raises DataError naming the model and the input before anything
    is written; so does what the kind refuses. ``model`` is a loaded model to reuse: the
    cross-encoder, or an expanded model's retriever's encoder (loaded from the spec otherwise).
    ``info["upstream"]`` names each input's key.
    """
    check_inputs(spec, task, upstream)
    t0 = time.perf_counter()
    out = Path(out)
    run, extra = run_builder(spec).compute(spec, task, upstream, out, k=k, device=device, progress=progress, model=model)
    files = ["run.parquet", "run.trec", *extra.pop("files", [])]
    run.write_parquet(out / "run.parquet", statistics=False)
    write_trec_file(run, out / "run.trec", f"medbench-{spec.name}")
    info = {
        "k": k,
        "n_queries": run["query_id"].n_unique(),
        "n_rows": run.height,
        "seconds": round(time.perf_counter() - t0, 3),
        "upstream": {u: upstream[u].key for u in inputs(spec)},
        **extra,
        "files": files,
    }
    (out / "info.json").write_text(json.dumps(info, indent=2, sort_keys=True, default=str) + "\n")
    return run, info


def model_revision(spec: ModelSpec, registry: Mapping[str, ModelSpec]) -> str:
    """The revision shown for a model's partitions: its own (:func:`~medbench_core.retrieval.kinds.base.cached_revision`,
    ``""`` for a fusion or an expanded model), else, for a model without weights that searches another model's
    corpus (an expanded model), that model's."""
    own = cached_revision(spec)
    corpus = corpus_of(spec)
    if own or corpus is None or corpus == spec.name:
        return own
    return model_revision(registry[corpus], registry)


def registry_partition_keys(
    specs: list[ModelSpec],
    task: Task,
    k: int = DEFAULT_K,
    names: list[str] | None = None,
    *,
    expansions: list[Any] | None = None,
    prompts_dir: str | Path | None = None,
    online: bool = False,
) -> dict[str, dict[str, str]]:
    """Stage keys of every model (or of ``names`` and what they are built from) on ``task``.

    Each model's kind computes its keys (:meth:`~medbench_core.retrieval.kinds.base.Kind.partition_keys`),
    upstreams first (:func:`medbench_core.retrieval.model_registry.evaluation_order`), so a derived
    model's keys are over its upstreams' and an expanded model's over its retriever's and its
    expansion's (an entry of ``expansions``, the registry's ``expansions:`` section).
    """
    from medbench_core.retrieval.model_registry import evaluation_order, upstream_order

    by_name = {s.name: s for s in specs}
    ctx = KeyContext(k=k, registry=by_name, expansions={e.name: e for e in expansions or []}, prompts_dir=prompts_dir, online=online)
    wanted = None
    if names is not None:
        wanted = {n for name in names for n in [*upstream_order(name, specs), name]}
    for name in evaluation_order(specs):
        if wanted is not None and name not in wanted:
            continue
        spec = by_name[name]
        try:
            ctx.keys[name] = spec.plugin.partition_keys(spec, task, ctx)
        except DataError as exc:
            if names is None or name in names:
                raise
            users = [n for n in names if name in upstream_order(n, specs)]
            raise DataError(
                f"model {', '.join(users)}: upstream model {name!r} cannot be resolved on task {task.name} ({exc}); "
                f"fix its entry, then evaluate it: medbench run --models {name} --tasks {task.name}"
            ) from exc
    return ctx.keys


def applicability(spec: ModelSpec, task: Task, registry: Mapping[str, ModelSpec]) -> str | None:
    """None when ``spec`` (derived or not) can be evaluated on ``task``; otherwise why not (its kind's rule)."""
    return spec.plugin.applicability(spec, task, registry)
