"""The four stages of one model x task evaluation, each writing into a folder it is given.

``embed_corpus`` -> ``build_corpus_index`` -> ``retrieve`` -> ``score`` (the last is evaluation's:
:mod:`medbench_core.evaluation.scoring`). Each asks the model's kind
(:mod:`medbench_core.retrieval.kinds`) for what is its own: how to represent the corpus, index it,
represent the queries and search. The caller (a Dagster asset) decides where the folder lives, makes
the write atomic and records a manifest; these functions only compute.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.layout import STAGES
from medbench_core.metric_names import DEFAULT_METRICS
from medbench_core.retrieval.kinds import capabilities
from medbench_core.retrieval.kinds.encoder import load_chunk_map, load_corpus_embeddings  # noqa: F401  (re-exported)
from medbench_core.retrieval.kinds.retriever_base import retriever
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.kinds.stage_inputs import DEFAULT_K, KeyContext, MemoryBudget, StoredCorpus
from medbench_core.retrieval.ranking import write_trec_file
from medbench_core.retrieval.records import candidate_pools
from medbench_core.taskdata.task import Task


@functools.cache
def stage_code_versions() -> dict[str, str]:
    """The declared output version of each of the four stages (provenance.STAGE_VERSIONS)."""
    from medbench_core.provenance import stage_version

    return {stage: stage_version(stage) for stage in STAGES}


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def _read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def _model(spec: ModelSpec, encoder: Any, *, device: str, progress: bool, online: bool) -> Any:
    """The loaded model a stage computes with: the one given, else the kind's (None for a kind without weights)."""
    kind = spec.plugin
    if encoder is not None or not kind.loads_weights:
        return encoder
    return kind.load(spec, device=device, progress=progress, online=online)


def long_text_info(spec: ModelSpec, encoder: Any = None) -> dict[str, Any]:
    """What the model does with text beyond its length limit (recorded in info.json; see :mod:`.chunking`)."""
    return spec.plugin.long_text_params(spec, encoder)


def embed_corpus(
    spec: ModelSpec,
    task: Task,
    out: Path,
    *,
    device: str = "cpu",
    progress: bool = False,
    encoder=None,
    online: bool = False,
    available: MemoryBudget = None,
) -> dict[str, Any]:
    """Represent the corpus as the model's kind does (dense vectors in ``corpus.npy``, a bm25s index, ...). Returns info.

    ``online`` lets a hub model download. A corpus whose index would not fit in ``available``
    memory (bytes, or a function returning them; default: what the OS reports) is refused before
    it is encoded (:mod:`medbench_core.retrieval.vectors`).
    """
    t0 = time.perf_counter()
    _write_json(out / "doc_ids.json", task.corpus["doc_id"].to_list())
    model = _model(spec, encoder, device=device, progress=progress, online=online)
    info = retriever(spec).embed_corpus(spec, task, out, model=model, progress=progress, available=available)
    files = info.pop("files")
    info["seconds"] = round(time.perf_counter() - t0, 3)
    info["files"] = ["doc_ids.json", *files]
    _write_json(out / "info.json", info)
    return info


def build_corpus_index(
    spec: ModelSpec, emb_dir: Path, out: Path, *, use_gpu: bool | None = None, progress: bool | None = False, available: MemoryBudget = None
) -> dict[str, Any]:
    """The search index the model's kind needs over its stored corpus (a FAISS index; none for BM25). ``progress``: a bar while adding."""
    t0 = time.perf_counter()
    info = capabilities.build_index(spec, Path(emb_dir), out, use_gpu=use_gpu, progress=progress, available=available)
    files = info.pop("files")
    info["seconds"] = round(time.perf_counter() - t0, 3)
    info["files"] = files
    _write_json(out / "info.json", info)
    return info


def rank(
    spec: ModelSpec,
    task: Task,
    corpus: StoredCorpus,
    *,
    k: int,
    load_model: Callable[[], Any],
    prompt: tuple[str, str] | None = None,
    expansion: Any = None,
    progress: bool = False,
    available: MemoryBudget = None,
) -> tuple[pl.DataFrame, Any]:
    """The one search path of every retriever: ``(run, queries as the kind represented them)``.

    The kind refuses a search that cannot fit first, then the model is loaded (``load_model``),
    the queries represented (the task's own formatted with ``prompt``, or ``expansion``:
    ``(texts, combine)`` of an expanded model) and the stored corpus searched, ties by doc id.
    """
    search = retriever(spec)
    doc_ids = _read_json(Path(corpus.embeddings) / "doc_ids.json")
    if doc_ids != task.corpus["doc_id"].to_list():
        raise DataError(f"{corpus.embeddings}: stored document ids do not match task {task.name}; rematerialise {spec.name}'s corpus_embeddings")
    pools = candidate_pools(task)
    capabilities.before_search(spec, task, corpus, available)
    queries = search.represent_queries(spec, task, load_model(), prompt=prompt, expansion=expansion)
    return search.search(spec, task, corpus, queries, k, pools=pools, progress=progress), queries


def write_run(run: pl.DataFrame, out: Path, tag: str) -> list[str]:
    """``run.parquet`` and ``run.trec`` (run tag ``tag``) in ``out``; their names."""
    run.write_parquet(out / "run.parquet", statistics=False)
    write_trec_file(run, out / "run.trec", tag)
    return ["run.parquet", "run.trec"]


def retrieve(
    spec: ModelSpec,
    task: Task,
    emb_dir: Path,
    index_dir: Path,
    out: Path,
    *,
    k: int = DEFAULT_K,
    device: str = "cpu",
    progress: bool = False,
    encoder=None,
    online: bool = False,
    available: MemoryBudget = None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Rank the top ``k`` documents per query; writes ``run.parquet``, ``run.trec`` (and what the kind keeps of the queries).

    Queries carry the model's instruction for this task (:mod:`.instructions`); a chunked corpus
    is scored chunk by chunk and pooled per document (:mod:`.chunking`). info.json records both
    (``query_prompt``, ``long_text``).
    """
    t0 = time.perf_counter()
    prompt = capabilities.query_prompt(spec, task)
    loaded: list[Any] = []

    def load_model() -> Any:
        loaded.append(_model(spec, encoder, device=device, progress=progress, online=online))
        return loaded[0]

    corpus = StoredCorpus(spec, Path(emb_dir), Path(index_dir))
    run, queries = rank(spec, task, corpus, k=k, load_model=load_model, prompt=prompt, progress=progress, available=available)
    files = write_run(run, out, f"medbench-{spec.name}") + capabilities.query_files(spec, queries, out)
    info = {"k": k, "n_queries": task.queries.height, "n_rows": run.height, "seconds": round(time.perf_counter() - t0, 3), "files": files}
    info.update(long_text_info(spec, loaded[0] if loaded else None))
    if prompt is not None:
        info["query_prompt"] = {"template": prompt[0], "instruction": prompt[1]}
    _write_json(out / "info.json", info)
    return run, info


def stage_keys(
    spec: ModelSpec,
    task_hash: str,
    revision: str,
    k: int,
    metrics: tuple[str, ...] = DEFAULT_METRICS,
    *,
    dataset_revision: str = "",
    query_prompt: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Provenance key of each stage of a retriever (:meth:`~medbench_core.retrieval.kinds.retriever_base.RetrieverKind.stage_keys`)."""
    return spec.plugin.stage_keys(spec, task_hash, revision, k, dataset_revision=dataset_revision, query_prompt=query_prompt, metrics=metrics)


def partition_keys(spec: ModelSpec, task: Task, k: int = DEFAULT_K) -> dict[str, str]:
    """Provenance key of each stage of retriever ``spec`` x ``task`` (the artifact folders' names)."""
    return spec.plugin.partition_keys(spec, task, KeyContext(k=k))


def run_params(spec: ModelSpec, task: Task) -> dict[str, str]:
    """Flat, MLflow-ready params of one model x task beyond the model's own: the dataset's source
    and revision, the long-text policy and the query prompt (``dataset``, ``dataset_revision``,
    ``subset``, ``task_type``, ``long_text``, ``chunk_pooling``, ``chunk_size``, ``chunk_stride``,
    ``max_length``, ``query_template``, ``query_instruction``, ``dtype``, ``trust_remote_code``)."""
    return spec.plugin.run_params(spec, task)


def applicability(spec: ModelSpec, task: Task, registry: dict[str, ModelSpec] | None = None) -> str | None:
    """None when ``spec`` can read every record of ``task`` (and so can every model it builds on); otherwise why not."""
    return spec.plugin.applicability(spec, task, registry if registry is not None else {spec.name: spec})
