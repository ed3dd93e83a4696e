"""Runs built from upstream models: score fusion (RRF, weighted sum), cross-encoder reranking, and
retrievers on expanded queries.

A derived model (``kind: fusion``, ``cross-encoder`` or ``expanded``, see :mod:`medbench_core.retrieval.model_registry`)
has no corpus embeddings or index of its own. Its run stage reads what its upstreams stored and
writes a run in medbench's schema (``run.parquet``, ``run.trec``, ``info.json``), so scoring,
statistics, the leaderboard and the exports treat it as any other model:

- ``fusion`` and ``cross-encoder`` read the runs of their upstream models (``run.parquet``);
- ``expanded`` reads its retriever's stored corpus (``corpus_embeddings``, ``corpus_index``) and
  an expansion artifact (:mod:`medbench_core.retrieval.expansion`), and searches with the expanded queries.

One mechanism serves every derived kind: :data:`COMPUTE` maps a kind to the function that builds
its run from ``{input name: Upstream}`` (:func:`inputs` names them); :func:`build_derived_run`
checks and writes; :func:`registry_partition_keys` gives every model's provenance keys, a derived
model's over its upstreams' (run keys; an expanded model's over its retriever's corpus keys and
the expansion's key), so a changed upstream makes the derived run stale.

The fusion and reranking functions themselves are :mod:`medbench_core.retrieval.fuse_rerank`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.fuse_rerank import DEFAULT_K, fuse, load_cross_encoder, rerank
from medbench_core.taskdata.task import Task
from medbench_core.retrieval.model_registry import ModelSpec
from medbench_core.retrieval.ranking import write_trec


@dataclass(frozen=True)
class Upstream:
    """One input of a derived model on a task.

    An upstream model's run (fusion, rerank): ``run``, the ``k`` it was retrieved with, its
    provenance ``key`` and ``info``. A retriever's stored corpus (expanded): its ``spec`` and
    the ``embeddings`` and ``index`` folders, ``key`` its index key. An expansion (expanded):
    its ``spec`` (an :class:`~medbench_core.retrieval.expansion.spec.ExpansionSpec`), the ``expansion``
    frame, ``key`` the expansion's key and ``info`` its info.json.
    """

    run: pl.DataFrame | None = None
    k: int = 0
    key: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    spec: Any = None
    embeddings: Path | None = None
    index: Path | None = None
    expansion: pl.DataFrame | None = None


UpstreamRun = Upstream  # an upstream run is the first kind of input


def expansion_input(expansion: str) -> str:
    """The name under which an expanded model's expansion is passed to :func:`build_derived_run`
    (``:`` cannot appear in a model name, so it never collides with one)."""
    return f"expansion:{expansion}"


def inputs(spec: ModelSpec) -> tuple[str, ...]:
    """The names :func:`build_derived_run` needs in its ``upstream`` mapping for ``spec``.

    Fusion and rerank: their upstream models (runs). Expanded: its retriever (stored corpus) and
    :func:`expansion_input` of its expansion; a LameR expansion's upstream run is not an input
    of the expanded run (it entered the expansion, and its key the expansion's key).
    """
    if spec.kind == "expanded":
        return (spec.retriever, expansion_input(spec.expansion))
    return spec.upstream


def load_upstream_run(folder: str | Path, key: str = "") -> Upstream:
    """Read ``run.parquet`` and ``info.json`` of a run folder (the caller verifies its manifest first)."""
    folder = Path(folder)
    if not (folder / "run.parquet").exists():
        raise DataError(f"{folder}: no run.parquet; materialise the upstream retrieval_run first")
    info = json.loads((folder / "info.json").read_text()) if (folder / "info.json").exists() else {}
    run = pl.read_parquet(folder / "run.parquet")
    k = int(info.get("k") or (run["rank"].max() if run.height else 0) or 0)
    return Upstream(run=run, k=k, key=key, info=info)


def load_upstream_corpus(retriever: ModelSpec, embeddings: str | Path, index: str | Path, key: str = "") -> Upstream:
    """A retriever's stored corpus: its ``corpus_embeddings`` and ``corpus_index`` folders (manifests verified here)."""
    from medbench_core.storage import verify_manifest

    for folder in (embeddings, index):
        verify_manifest(folder)
    return Upstream(key=key, spec=retriever, embeddings=Path(embeddings), index=Path(index))


def load_upstream_expansion(expansion: Any, folder: str | Path, key: str) -> Upstream:
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
    return Upstream(key=key, info=info, spec=expansion, expansion=frame)


# --- one mechanism for every derived kind -------------------------------------------------


def _compute_fusion(spec: ModelSpec, task: Task, upstream: Mapping[str, Upstream], *, k: int, **_: Any) -> tuple[pl.DataFrame, dict[str, Any]]:
    f = spec.fusion
    runs = {name: upstream[name].run for name in f["runs"]}
    if f["method"] == "rrf":
        run = fuse(runs, "rrf", k=f["k"], top_k=k)
    else:
        run = fuse(runs, "wsum", weights=f["weights"], norm=f["norm"], top_k=k)
    return run, {"fusion": f}


def _compute_rerank(
    spec: ModelSpec, task: Task, upstream: Mapping[str, Upstream], *, k: int, device: str = "cpu", progress: bool = False, model: Any = None, **_: Any
) -> tuple[pl.DataFrame, dict[str, Any]]:
    up_name, depth = spec.rerank["upstream"], spec.rerank["depth"]
    up = upstream[up_name]
    # Checked before the model loads: a bad depth fails at once.
    if depth > up.k:
        raise DataError(
            f"model {spec.name}: rerank depth {depth} is deeper than upstream run {up_name!r} (k={up.k}); "
            f"lower rerank.depth to <= {up.k} or retrieve {up_name} with k >= {depth}"
        )
    ce = model if model is not None else load_cross_encoder(spec, device=device, progress=progress)
    run = rerank(up.run, task, ce, depth, upstream_k=up.k, model=spec.name, upstream=up_name, batch_size=spec.batch_size, progress=progress)
    if k < depth:
        run = run.filter(pl.col("rank") <= k)
    return run, {"rerank": spec.rerank}


def _compute_expanded(
    spec: ModelSpec, task: Task, upstream: Mapping[str, Upstream], *, k: int, out: Path, device: str = "cpu", progress: bool = False, model: Any = None, **_: Any
) -> tuple[pl.DataFrame, dict[str, Any]]:
    from medbench_core.retrieval.expansion.combine import retrieve_expanded
    from medbench_core.retrieval.expansion.rules import resolve_combine

    corpus, exp = upstream[spec.retriever], upstream[expansion_input(spec.expansion)]
    if corpus.spec is None or corpus.embeddings is None or corpus.index is None:
        raise DataError(f"model {spec.name}: the input {spec.retriever!r} must carry the retriever's spec and its corpus_embeddings and corpus_index folders")
    if exp.expansion is None or exp.spec is None:
        raise DataError(f"model {spec.name}: the input {expansion_input(spec.expansion)!r} must carry the expansion's spec and frame")
    combine = resolve_combine(spec, corpus.spec, exp.spec.method)
    # ``model``: the retriever's loaded encoder (dense), reused across partitions.
    run, info = retrieve_expanded(
        corpus.spec, task, exp.expansion, combine, corpus.embeddings, corpus.index, out, k=k, tag=spec.name, device=device, progress=progress, encoder=model
    )
    extra_files = [f for f in info["files"] if f not in ("run.parquet", "run.trec")]
    return run, {"retriever": corpus.spec.name, "combine": combine.to_dict(), "expansion": {"name": exp.spec.name, "key": exp.key}, "files": extra_files}


# kind -> function(spec, task, {input name: Upstream}, k=, out=, device=, progress=, model=) -> (run, info);
# ``info["files"]``, when given, names files the function wrote into ``out`` besides the run.
COMPUTE: dict[str, Callable[..., tuple[pl.DataFrame, dict[str, Any]]]] = {
    "fusion": _compute_fusion,
    "cross-encoder": _compute_rerank,
    "expanded": _compute_expanded,
}


def check_inputs(spec: ModelSpec, task: Task, upstream: Mapping[str, Upstream]) -> None:
    """Refuse, before anything is computed or written, inputs :func:`build_derived_run` cannot use:
    a kind not built from upstreams, a missing input (never evaluated, or failed), a rerank
    depth beyond the k its upstream run was retrieved with. DataError names the model and the input."""
    if spec.kind not in COMPUTE:
        raise DataError(f"model {spec.name}: kind {spec.kind} is not built from upstream runs")
    missing = [u for u in inputs(spec) if u not in upstream]
    if missing:
        raise DataError(
            f"model {spec.name}: no run of upstream model(s) {missing} on task {task.name} (not evaluated, or failed); "
            f"evaluate {', '.join(missing)} on {task.name} first"
        )
    if spec.kind == "cross-encoder":
        up_name, depth = spec.rerank["upstream"], spec.rerank["depth"]
        k = upstream[up_name].k
        if depth > k:
            raise DataError(
                f"model {spec.name}: rerank depth {depth} is deeper than upstream run {up_name!r} (k={k}) on task {task.name}; "
                f"lower rerank.depth to <= {k} or retrieve {up_name} with k >= {depth}"
            )


def build_derived_run(
    spec: ModelSpec,
    task: Task,
    upstream: Mapping[str, Upstream],
    out: Path,
    *,
    k: int = DEFAULT_K,
    device: str = "cpu",
    progress: bool = False,
    model: Any = None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Build the run of derived model ``spec`` from its inputs; writes ``run.parquet``, ``run.trec``, ``info.json``.

    ``upstream`` maps each name of :func:`inputs` to its :class:`Upstream` on ``task``. A missing
    input (never evaluated, or failed) raises DataError naming the model and the input before
    anything is written; so does a rerank depth beyond the upstream's k. ``model`` is a loaded
    model to reuse: the cross-encoder, or an expanded model's retriever's encoder (loaded from
    the spec otherwise). ``info["upstream"]`` names each input's key.
    """
    check_inputs(spec, task, upstream)
    t0 = time.perf_counter()
    out = Path(out)
    run, extra = COMPUTE[spec.kind](spec, task, upstream, k=k, out=out, device=device, progress=progress, model=model)
    files = ["run.parquet", "run.trec", *extra.pop("files", [])]
    run.write_parquet(out / "run.parquet", statistics=False)
    (out / "run.trec").write_text(write_trec(run, f"medbench-{spec.name}"))
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


def derived_revision(spec: ModelSpec) -> str:
    """What identifies a derived model's weights: a cross-encoder's folder hash or pinned revision; '' for fusion."""
    if spec.kind == "fusion":
        return ""
    from medbench_core.retrieval.encoders import effective_revision

    return effective_revision(spec)


def model_revision(spec: ModelSpec, registry: Mapping[str, ModelSpec]) -> str:
    """The revision shown for a model's partitions: a retriever's weights (as in its keys), a
    cross-encoder's, '' for a fusion, and an expanded model's retriever's."""
    from medbench_core.retrieval.encoders import cached_revision

    if spec.kind == "expanded":
        return cached_revision(registry[spec.retriever])
    if spec.kind == "fusion":
        return ""
    return cached_revision(spec)


def derived_stage_keys(
    spec: ModelSpec,
    task_hash: str,
    revision: str,
    upstream_run_keys: Mapping[str, str],
    k: int,
    run_code: str,
    metrics_code: str,
    metrics: tuple[str, ...] | None = None,
) -> dict[str, str]:
    """Provenance keys of a derived model's ``run`` and ``metrics`` stages.

    The run key hashes the task content hash, the model identity (kind, its fusion or rerank
    block, path, settings), the weights' revision, each upstream run key (by name), k and the
    code version of the derived run; the metrics key adds the metric list and its code version.
    """
    from medbench_core.evaluation.metrics import DEFAULT_METRICS
    from medbench_core.provenance import artifact_key

    missing = [u for u in spec.upstream if u not in upstream_run_keys]
    if missing:
        raise DataError(f"model {spec.name}: no run key for upstream model(s) {missing}; their keys enter this model's key")
    ups = {u: upstream_run_keys[u] for u in spec.upstream}
    run = artifact_key(stage="run", kind="derived", task=task_hash, model=spec.identity(), revision=revision, upstream=ups, k=k, code=run_code)
    met = artifact_key(stage="metrics", upstream=run, metrics=list(metrics or DEFAULT_METRICS), code=metrics_code)
    return {"run": run, "metrics": met}


def derived_partition_keys(spec: ModelSpec, task: Task, upstream_run_keys: Mapping[str, str], k: int = DEFAULT_K) -> dict[str, str]:
    """:func:`derived_stage_keys` with this code's versions and the model's effective revision."""
    from medbench_core.retrieval.stages import stage_code_versions
    from medbench_core.provenance import stage_version

    return derived_stage_keys(
        spec, task.content_hash(), derived_revision(spec), upstream_run_keys, k, stage_version("derived_run"), stage_code_versions()["metrics"]
    )


def expanded_partition_keys(
    spec: ModelSpec,
    retriever: ModelSpec,
    retriever_keys: Mapping[str, str],
    expansion: Any,
    task: Task,
    k: int = DEFAULT_K,
    *,
    upstream_run_key: str | None = None,
    prompts_dir: str | Path | None = None,
    online: bool = False,
) -> dict[str, str]:
    """Stage keys of expanded model ``spec`` on ``task``: ``expansion`` (the expansion's key, with
    LameR's ``upstream_run_key``), the retriever's ``embeddings`` and ``index`` keys
    (``retriever_keys``: its stored corpus is reused, so a task's dataset revision and the
    retriever's prompts are covered as they are for the retriever), and its own ``run`` and
    ``metrics`` keys (:func:`medbench_core.retrieval.expansion.combine.expanded_stage_keys`)."""
    from medbench_core.retrieval.encoders import cached_revision
    from medbench_core.retrieval.expansion.combine import expanded_stage_keys
    from medbench_core.retrieval.expansion.rules import resolve_combine
    from medbench_core.retrieval.expansion.stage import expansion_stage_key
    from medbench_core.retrieval.stages import stage_code_versions
    from medbench_core.provenance import stage_version

    key = expansion_stage_key(expansion, task, upstream_run_key=upstream_run_key, prompts_dir=prompts_dir, online=online)
    combine = resolve_combine(spec, retriever, expansion.method)
    codes = {**stage_code_versions(), "expanded_run": stage_version("expanded_run")}
    return expanded_stage_keys(spec, retriever, task.content_hash(), cached_revision(retriever), key, combine, k, codes, retriever_keys=retriever_keys)


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

    Retrievers get :func:`medbench_core.retrieval.stages.partition_keys`; fusion and rerank models
    :func:`derived_partition_keys` over their upstreams' run keys; expanded models
    :func:`expanded_partition_keys` over their retriever's keys and their expansion (an entry of
    ``expansions``, the registry's ``expansions:`` section), whose key takes a LameR upstream's
    run key. Upstreams are computed first (:func:`medbench_core.retrieval.model_registry.evaluation_order`).
    """
    from medbench_core.retrieval.model_registry import evaluation_order, upstream_order
    from medbench_core.retrieval.stages import partition_keys

    by_name = {s.name: s for s in specs}
    by_expansion = {e.name: e for e in expansions or []}
    wanted = None
    if names is not None:
        wanted = {n for name in names for n in [*upstream_order(name, specs), name]}
    keys: dict[str, dict[str, str]] = {}
    for name in evaluation_order(specs):
        if wanted is not None and name not in wanted:
            continue
        spec = by_name[name]
        try:
            if spec.kind == "expanded":
                if spec.expansion not in by_expansion:
                    raise DataError(f"model {name}: expansion {spec.expansion!r} is not among the registry's expansions {sorted(by_expansion)}")
                e = by_expansion[spec.expansion]
                up = keys[e.upstream]["run"] if e.upstream and e.source == "generate" else None
                keys[name] = expanded_partition_keys(
                    spec, by_name[spec.retriever], keys[spec.retriever], e, task, k, upstream_run_key=up, prompts_dir=prompts_dir, online=online
                )
            elif spec.derived:
                keys[name] = derived_partition_keys(spec, task, {u: keys[u]["run"] for u in spec.upstream}, k)
            else:
                keys[name] = partition_keys(spec, task, k)
        except DataError as exc:
            if names is None or name in names:
                raise
            users = [n for n in names if name in upstream_order(n, specs)]
            raise DataError(
                f"model {', '.join(users)}: upstream model {name!r} cannot be resolved on task {task.name} ({exc}); "
                f"fix its entry, then evaluate it: medbench run --models {name} --tasks {task.name}"
            ) from exc
    return keys


def applicability(spec: ModelSpec, task: Task, registry: Mapping[str, ModelSpec]) -> str | None:
    """None when ``spec`` (derived or not) can be evaluated on ``task``; otherwise why not.

    A derived model is applicable when every upstream model is; a cross-encoder also reads text only.
    """
    from medbench_core.retrieval.stages import applicability as retriever_applicability

    for up in spec.upstream:
        reason = applicability(registry[up], task, registry)
        if reason:
            return f"{spec.name} builds on {up}: {reason}"
    if spec.kind == "fusion":
        return None
    return retriever_applicability(spec, task)
