"""The four stages of one model x task evaluation, each writing into a folder it is given.

``embed_corpus`` -> ``build_corpus_index`` -> ``retrieve`` -> ``score``. The caller (a Dagster
asset) decides where the folder lives, makes the write atomic and records a manifest; these
functions only compute. BM25's "embedding" is its sparse bm25s index; its index stage only
records that no FAISS index is needed.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.retrieval import bm25, chunking, instructions
from medbench_core.errors import DataError
from medbench_core.layout import STAGES
from medbench_core.evaluation.metrics import DEFAULT_METRICS, breakdown, cross_lingual_gap, evaluate_frame
from medbench_core.taskdata.task import Task
from medbench_core.retrieval.model_registry import ModelSpec
from medbench_core.retrieval.ranking import rank_scores, write_trec
from medbench_core.retrieval.records import candidate_pools, encode_chunks, encode_side, load_encoder

BREAKDOWN_COLUMNS = ("language", "discipline", "tier")
MemoryBudget = int | Callable[[], int] | None  # bytes available, or a function returning them; None: ask the OS
DEFAULT_K = 100  # documents retrieved per query


@functools.cache
def stage_code_versions() -> dict[str, str]:
    """The declared output version of each of the four stages (provenance.STAGE_VERSIONS)."""
    from medbench_core.provenance import stage_version

    return {stage: stage_version(stage) for stage in STAGES}


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def _read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def long_text_info(spec: ModelSpec, encoder=None) -> dict[str, Any]:
    """What the model does with text beyond its ``max_length`` (recorded in info.json; see :mod:`.chunking`)."""
    if spec.kind == "bm25":
        return {"long_text": "whole"}  # BM25 indexes every token of a document
    lt = chunking.long_text(spec.settings, spec.name, spec.kind)
    info = lt.describe()
    if info.get("max_length") is None and encoder is not None:
        info["max_length"] = getattr(encoder, "max_length", None)
    return info


def embed_corpus(
    spec: ModelSpec, task: Task, out: Path, *, device: str = "cpu", progress: bool = False, encoder=None, online: bool = False,
    available: MemoryBudget = None,
) -> dict[str, Any]:
    """Represent the corpus: dense vectors (``corpus.npy``) or a bm25s index. Returns info.

    With ``long_text: chunk`` the vectors are those of the passages' chunks and ``chunk_doc.npy``
    maps each chunk to its document's position. ``online`` lets a hub model download. Dense
    vectors are written batch by batch into the file; a corpus whose index would not fit in
    ``available`` memory (bytes, or a function returning them; default: what the OS reports) is
    refused before it is encoded (:mod:`medbench_core.retrieval.vectors`).
    """
    t0 = time.perf_counter()
    doc_ids = task.corpus["doc_id"].to_list()
    _write_json(out / "doc_ids.json", doc_ids)
    if spec.kind == "bm25":
        analyzer = bm25.bm25_settings(spec.settings, task_language(task))
        retriever = bm25.fit(task.doc_text(), analyzer, progress=progress)
        files = bm25.save(retriever, out)
        info = {"representation": "bm25s-sparse", "n_docs": len(doc_ids), "settings": analyzer, **long_text_info(spec)}
    else:
        lt = chunking.long_text(spec.settings, spec.name, spec.kind)
        encoder = encoder or load_encoder(spec, device=device, progress=progress, online=online)
        files = ["corpus.npy"]
        if lt.mode == "chunk":
            emb, owner = encode_chunks(encoder, task, lt)
            _require_memory(task.name, emb.shape[0], emb.shape[1], spec, available)
            np.save(out / "corpus.npy", emb, allow_pickle=False)
            np.save(out / "chunk_doc.npy", owner, allow_pickle=False)
            files.append("chunk_doc.npy")
            n_rows, dim = emb.shape
        else:
            from medbench_core.retrieval.vectors import encode_side_to

            n_rows, dim = encode_side_to(
                out / "corpus.npy", encoder, task, "passage", before_encoding=lambda n, d: _require_memory(task.name, n, d, spec, available)
            )
        info = {"representation": "dense", "n_docs": len(doc_ids), "dim": int(dim), "dtype": "float32", **long_text_info(spec, encoder)}
        if lt.mode == "chunk":
            info["n_chunks"] = int(n_rows)
    info["seconds"] = round(time.perf_counter() - t0, 3)
    info["files"] = ["doc_ids.json", *files]
    _write_json(out / "info.json", info)
    return info


def task_language(task: Task) -> str | None:
    """The task's one language, or None when its records mix languages."""
    langs = set(task.queries["language"].drop_nulls().to_list()) | set(task.corpus["language"].drop_nulls().to_list())
    return langs.pop() if len(langs) == 1 else None


def _require_memory(task: str, n: int, dim: int, spec: ModelSpec, available: MemoryBudget) -> None:
    from medbench_core.retrieval.vectors import check_memory, corpus_bytes

    needed, what = corpus_bytes(n, dim, spec.index)
    check_memory(task, what, needed, available=available)


def load_corpus_embeddings(folder: Path) -> tuple[list[str], np.ndarray]:
    """Doc ids and the corpus vectors, memory-mapped (one per document, or one per chunk with ``chunk_doc.npy``)."""
    doc_ids = _read_json(folder / "doc_ids.json")
    emb = np.load(folder / "corpus.npy", mmap_mode="r", allow_pickle=False)
    owner = load_chunk_map(folder)
    rows = len(doc_ids) if owner is None else len(owner)
    if emb.shape[0] != rows:
        what = "doc ids" if owner is None else "chunks in chunk_doc.npy"
        raise DataError(f"{folder}: corpus.npy has {emb.shape[0]} rows for {rows} {what}")
    return doc_ids, emb


def load_chunk_map(folder: Path) -> np.ndarray | None:
    """Chunk -> document position of a chunked corpus, or None for one vector per document."""
    path = Path(folder) / "chunk_doc.npy"
    return np.load(path, allow_pickle=False) if path.exists() else None


def build_corpus_index(
    spec: ModelSpec, emb_dir: Path, out: Path, *, use_gpu: bool | None = None, progress: bool | None = False, available: MemoryBudget = None
) -> dict[str, Any]:
    """FAISS index over the corpus vectors (``index.faiss``), filled block by block; BM25 needs none. ``progress``: a bar while adding."""
    from medbench_core.retrieval.index import build_index, save_index
    from medbench_core.retrieval.vectors import iter_blocks, npy_shape

    t0 = time.perf_counter()
    if spec.kind == "bm25":
        info: dict[str, Any] = {"type": "bm25s-sparse", "built_on": "cpu", "files": []}
    else:
        if load_chunk_map(emb_dir) is not None and (spec.index or {}).get("type", "flat") != "flat":
            raise DataError(f"model {spec.name}: long_text: chunk is searched exactly; use index type flat, not {spec.index.get('type')!r}")
        _require_memory(Path(emb_dir).parents[1].name, *npy_shape(Path(emb_dir) / "corpus.npy"), spec, available)  # .../<task>/embeddings/<key>
        _, emb = load_corpus_embeddings(emb_dir)
        blocks = lambda: (block for _, block in iter_blocks(Path(emb_dir) / "corpus.npy"))  # noqa: E731
        index, info = build_index(emb, spec.index, use_gpu=use_gpu, progress=progress, add_blocks=blocks)
        save_index(index, out / "index.faiss")
        info["files"] = ["index.faiss"]
    info["seconds"] = round(time.perf_counter() - t0, 3)
    _write_json(out / "info.json", info)
    return info


def retrieve(
    spec: ModelSpec,
    task: Task,
    emb_dir: Path,
    index_dir: Path,
    out: Path,
    *,
    k: int = 100,
    device: str = "cpu",
    progress: bool = False,
    encoder=None,
    online: bool = False,
    available: MemoryBudget = None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Rank the top ``k`` documents per query; writes ``run.parquet``, ``run.trec`` (and query vectors).

    Queries carry the model's instruction for this task (:mod:`.instructions`); a chunked corpus
    is scored chunk by chunk and pooled per document (:mod:`.chunking`). info.json records both
    (``query_prompt``, ``long_text``). The index is memory-mapped; a corpus whose index would not
    fit in memory is refused before the queries are encoded.
    """
    t0 = time.perf_counter()
    doc_ids = _read_json(emb_dir / "doc_ids.json")
    if doc_ids != task.corpus["doc_id"].to_list():
        raise DataError(f"{emb_dir}: stored document ids do not match task {task.name}; rematerialise corpus_embeddings")
    pools = candidate_pools(task)
    query_ids = task.queries["query_id"].to_list()
    files = ["run.parquet", "run.trec"]
    prompt = instructions.resolve(spec.settings, task.name, task.meta.task_type, spec.name)
    if spec.kind == "bm25":
        retriever = bm25.load(emb_dir)
        analyzer = bm25.bm25_settings(spec.settings, task_language(task))
        run = bm25.search(retriever, query_ids, task.queries["text"].fill_null("").to_list(), doc_ids, k, analyzer, candidates=pools, progress=progress)
    else:
        from medbench_core.retrieval.index import load_index, search
        from medbench_core.retrieval.vectors import npy_shape

        _require_memory(task.name, *npy_shape(Path(emb_dir) / "corpus.npy"), spec, available)
        encoder = encoder or load_encoder(spec, device=device, progress=progress, online=online)
        q = encode_side(encoder, task, "query", prompt=prompt)
        np.save(out / "query_embeddings.npy", q, allow_pickle=False)
        files.append("query_embeddings.npy")
        index = load_index(index_dir / "index.faiss", mmap=True)  # its manifest was verified by the caller
        owner = load_chunk_map(emb_dir)
        if owner is not None:
            lt = chunking.long_text(spec.settings, spec.name, spec.kind)
            rows = chunking.chunk_doc_scores(index, q, owner, len(doc_ids), lt.pooling)
            run = rank_scores(query_ids, doc_ids, rows, k, candidates=pools)
        else:
            _, demb = load_corpus_embeddings(emb_dir) if pools is not None else (None, None)
            run = search(index, q, query_ids, doc_ids, k, doc_emb=demb, candidates=pools, progress=progress)
    run.write_parquet(out / "run.parquet", statistics=False)
    (out / "run.trec").write_text(write_trec(run, f"medbench-{spec.name}"))
    info = {"k": k, "n_queries": len(query_ids), "n_rows": run.height, "seconds": round(time.perf_counter() - t0, 3), "files": files}
    info.update(long_text_info(spec, encoder))
    if prompt is not None:
        info["query_prompt"] = {"template": prompt[0], "instruction": prompt[1]}
    _write_json(out / "info.json", info)
    return run, info


def score(task: Task, run: pl.DataFrame, out: Path, metrics: tuple[str, ...] = DEFAULT_METRICS) -> dict[str, Any]:
    """Per-query and mean metrics, each mean's 95% bootstrap CI, and breakdowns by language, discipline and tier.

    The CIs (``ci``: metric -> [low, high]; :func:`medbench_core.evaluation.stats.bootstrap_ci`, 10,000
    resamples of the queries, seed 0) are deterministic, so re-scoring a run reproduces them bit for bit.
    """
    from medbench_core.evaluation.stats import bootstrap_ci

    ev = evaluate_frame(task.qrels, run, metrics)
    per_query = ev.per_query_frame()
    per_query.write_parquet(out / "per_query.parquet", statistics=False)
    result: dict[str, Any] = {"mean": ev.mean, "n_queries": len(ev.per_query), "breakdowns": {}}
    if per_query.height:
        result["ci"] = {m: list(bootstrap_ci(per_query[m].cast(pl.Float64).to_numpy())) for m in ev.mean if m in per_query.columns}
    for col in BREAKDOWN_COLUMNS:
        groups = task.queries.select("query_id", col)
        if groups[col].drop_nulls().n_unique() >= 1:
            result["breakdowns"][col] = breakdown(per_query, groups, col, metrics)
    langs = result["breakdowns"].get("language", {})
    if len(langs) > 1:
        result["cross_lingual_gap"] = cross_lingual_gap(langs, "ndcg_at_10")
    result["files"] = ["per_query.parquet", "metrics.json"]
    _write_json(out / "metrics.json", result)
    return result


def flat_metrics(result: dict[str, Any]) -> dict[str, float]:
    """MLflow-ready metric keys: ``ndcg_at_10``, ``ci_low.ndcg_at_10`` / ``ci_high.ndcg_at_10`` (the mean's 95% CI),
    ``language.fr.ndcg_at_10``, ``gap.language.ja.ndcg_at_10``."""
    out = {k: float(v) for k, v in result["mean"].items()}
    for m, (low, high) in result.get("ci", {}).items():
        out[f"ci_low.{m}"], out[f"ci_high.{m}"] = float(low), float(high)
    for col, groups in result.get("breakdowns", {}).items():
        for value, vals in groups.items():
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(value))
            for m, v in vals.items():
                out[f"{col}.{safe}.{m}"] = float(v)
    for lang, gap in result.get("cross_lingual_gap", {}).items():
        out[f"gap.language.{lang}.ndcg_at_10"] = float(gap)
    return out


def stage_keys(
    spec: ModelSpec,
    task_hash: str,
    revision: str,
    k: int,
    codes: dict[str, str],
    metrics: tuple[str, ...] = DEFAULT_METRICS,
    *,
    dataset_revision: str = "",
    query_prompt: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Provenance key of each stage: a stage's key covers its own inputs and its upstream key.

    The embedding key covers the task content hash, the source dataset's revision (when the
    task records one: hub commit sha or a local folder's file hash), the model identity (id,
    kind, path, settings that change vectors), the weights' revision and the code version; the
    index key adds the index type and parameters; the run key adds k; the metrics key the
    metric list. A task without a dataset revision (the bundled tasks) keeps the keys it had
    before the revision was recorded. A model with query instructions keeps them out of the
    embedding key; the run key takes the task's resolved prompt (``query_prompt``, from
    :func:`medbench_core.retrieval.instructions.key_part`), or all of the instruction settings when not given.
    """
    from medbench_core.provenance import artifact_key

    # The index settings enter at the index stage only: changing them must not re-encode.
    model = {k: v for k, v in spec.identity().items() if k != "index"}
    prompt: dict[str, Any] = {}
    if instructions.uses_instructions(spec.settings):
        # Query instructions change the queries only: they enter the run key, not the corpus vectors'.
        model["settings"] = {k: v for k, v in model["settings"].items() if k not in instructions.SETTING_KEYS}
        prompt = query_prompt if query_prompt is not None else {"query_instructions": {k: spec.settings.get(k) for k in instructions.SETTING_KEYS}}
    source = {"dataset_revision": dataset_revision} if dataset_revision else {}
    emb = artifact_key(stage="embeddings", task=task_hash, model=model, revision=revision, code=codes["embeddings"], **source)
    idx = artifact_key(stage="index", upstream=emb, index=spec.index if spec.kind != "bm25" else "bm25s", code=codes["index"])
    run = artifact_key(stage="run", upstream=idx, k=k, code=codes["run"], **prompt)
    met = artifact_key(stage="metrics", upstream=run, metrics=list(metrics), code=codes["metrics"])
    return {"embeddings": emb, "index": idx, "run": run, "metrics": met}


def partition_keys(spec: ModelSpec, task: Task, k: int = DEFAULT_K) -> dict[str, str]:
    """Provenance key of each stage of ``spec`` x ``task`` with this code (the artifact folders' names)."""
    from medbench_core.retrieval.encoders import cached_revision

    return stage_keys(
        spec,
        task.content_hash(),
        cached_revision(spec),
        k,
        stage_code_versions(),
        dataset_revision=task.meta.source_revision,
        query_prompt=instructions.key_part(spec.settings, task.name, task.meta.task_type, spec.name) or None,
    )


def run_params(spec: ModelSpec, task: Task) -> dict[str, str]:
    """Flat, MLflow-ready params of one model x task beyond the model's own: the dataset's source
    and revision, the long-text policy and the query prompt (``dataset``, ``dataset_revision``,
    ``subset``, ``task_type``, ``long_text``, ``chunk_pooling``, ``chunk_size``, ``chunk_stride``,
    ``max_length``, ``query_template``, ``query_instruction``, ``dtype``, ``trust_remote_code``)."""
    out: dict[str, Any] = dict(task.meta.provenance())
    out.update({k: v for k, v in long_text_info(spec).items() if v is not None})
    prompt = instructions.resolve(spec.settings, task.name, task.meta.task_type, spec.name)
    if prompt is not None:
        out["query_template"], out["query_instruction"] = prompt
    if spec.settings.get("dtype"):
        out["dtype"] = spec.settings["dtype"]
    if spec.trust_remote_code:
        out["trust_remote_code"] = "true"
    return {k: str(v) for k, v in out.items()}


def applicability(spec: ModelSpec, task: Task) -> str | None:
    """None when ``spec`` can read every record of ``task``; otherwise the reason it cannot.

    BM25 and text encoders read the text side only, so a task whose queries or documents
    include records without text (images only) is not applicable to them. open_clip reads both.
    """
    if spec.kind == "open_clip":
        return None
    q_missing = task.queries.filter(pl.col("text").fill_null("").str.strip_chars() == "")["query_id"].to_list()
    doc_text = [t for t in task.doc_text()]
    d_missing = [d for d, t in zip(task.corpus["doc_id"].to_list(), doc_text) if not t.strip()]
    if q_missing or d_missing:
        parts = []
        if q_missing:
            parts.append(f"{len(q_missing)} queries (e.g. {q_missing[0]})")
        if d_missing:
            parts.append(f"{len(d_missing)} documents (e.g. {d_missing[0]})")
        return f"{spec.kind} reads text only and {' and '.join(parts)} of {task.name} have no text"
    return None
