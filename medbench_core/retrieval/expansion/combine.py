"""How an expansion meets a retriever, and the run of an expanded model.

Modes (a model entry's ``combine`` and ``repeat_query``; ``settings.separator`` for dense concat):

- ``concat``: the query ``repeat_query`` times, then the expansion. BM25 joins the token lists
  (query tokens, query tokens, ..., expansion tokens: no separator token). A dense encoder
  embeds one string, ``query`` (repeated, space-joined) + ``separator`` + expansion, its query
  prefix in front of the whole.
- ``replace``: the expansion alone stands for the query (a dense encoder gives it the query prefix).
- ``mean`` (dense only): the query (with its prefix) and the expansion (no prefix, no
  instruction) are embedded separately and averaged with equal weight; with ``normalize`` (the
  default) the mean is L2-normalised, so the inner product the index computes is the cosine
  similarity R2MED's BEIR scoring uses. Rankings are the same either way.

Defaults are R2MED's (its evaluation scripts): BM25: hyde ``replace``, query2doc ``concat`` x2,
lamer ``concat`` x1; dense: hyde and lamer ``mean``, query2doc ``concat`` with ``[SEP]``.

An expanded model reuses its retriever's corpus representation and index (same keys), so
only the run and the metrics are its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.expansion.frame import answers
from medbench_core.retrieval.expansion.rules import DEFAULT_SEPARATOR, MODES, R2MED_DEFAULTS, Combine, family, resolve_combine  # noqa: F401  (re-exported)
from medbench_core.taskdata.task import Task
from medbench_core.retrieval.model_registry import ModelSpec


def bm25_query_tokens(queries: list[str], expansions: list[str], combine: Combine, settings: dict[str, Any]) -> list[list[str]]:
    """BM25 token list of each expanded query (the analyzer of the retriever's settings)."""
    from medbench_core.retrieval.bm25 import tokenize

    exp_tokens = tokenize(expansions, settings)
    if combine.mode == "replace":
        return [list(t) for t in exp_tokens]
    if combine.mode != "concat":
        raise DataError(f"BM25 cannot combine by {combine.mode!r}")
    q_tokens = tokenize(queries, settings)
    return [list(q) * combine.repeat_query + list(e) for q, e in zip(q_tokens, exp_tokens)]


def dense_query_texts(queries: list[str], expansions: list[str], combine: Combine) -> list[str]:
    """The one string a dense encoder embeds per query under ``concat`` or ``replace``."""
    if combine.mode == "replace":
        return list(expansions)
    if combine.mode == "concat":
        return [" ".join([q] * combine.repeat_query) + combine.separator + e for q, e in zip(queries, expansions)]
    raise DataError(f"combine {combine.mode!r} embeds query and expansion separately; see dense_query_vectors")


def _encode(encoder, texts: list[str], langs: list[str | None], role: str, ids: list[str]) -> np.ndarray:
    from medbench_core.retrieval.records import _accepts_ids

    extra = {"ids": ids} if _accepts_ids(encoder) else {}
    emb = encoder.encode_records(texts, [None] * len(texts), langs, role, **extra)
    return np.ascontiguousarray(emb, dtype=np.float32)


def dense_query_vectors(encoder, task: Task, expansions: list[str], combine: Combine, normalize: bool = True) -> np.ndarray:
    """Query vectors of the expanded queries (see the module docstring for each mode).

    The expansion is encoded with role ``expansion``: the encoders apply a prefix by role, and no
    prefix is set for that role unless a model's settings name an ``expansion_prefix``.
    """
    from medbench_core.retrieval.records import encode_side

    ids = task.queries["query_id"].to_list()
    langs = task.queries["language"].to_list()
    if combine.mode == "mean":
        q = encode_side(encoder, task, "query")
        e = _encode(encoder, expansions, langs, "expansion", ids)
        m = (q.astype(np.float64) + e.astype(np.float64)) / 2.0
        if normalize:
            m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(m, dtype=np.float32)
    texts = dense_query_texts(task.queries["text"].fill_null("").to_list(), expansions, combine)
    return _encode(encoder, texts, langs, "query", ids)


def retrieve_expanded(
    retriever: ModelSpec,
    task: Task,
    expansions: pl.DataFrame,
    combine: Combine,
    emb_dir: Path,
    index_dir: Path,
    out: Path,
    *,
    k: int = 100,
    tag: str = "expanded",
    device: str = "cpu",
    progress: bool = False,
    encoder=None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Rank the top ``k`` documents for the expanded queries, on ``retriever``'s stored corpus.

    ``emb_dir`` and ``index_dir`` are the retriever's ``corpus_embeddings`` and ``corpus_index``
    artifacts on this task (as :func:`medbench_core.retrieval.stages.embed_corpus` and
    :func:`~medbench_core.retrieval.stages.build_corpus_index` wrote them). Writes ``run.parquet``,
    ``run.trec``, ``info.json`` (and ``query_embeddings.npy`` for dense retrievers) into ``out``,
    in the schema :func:`medbench_core.retrieval.stages.retrieve` uses.
    """
    from medbench_core.retrieval import bm25
    from medbench_core.retrieval.stages import _read_json, load_corpus_embeddings, task_language
    from medbench_core.retrieval.ranking import rank_scores, write_trec
    from medbench_core.retrieval.records import candidate_pools, load_encoder

    t0 = time.perf_counter()
    doc_ids = _read_json(Path(emb_dir) / "doc_ids.json")
    if doc_ids != task.corpus["doc_id"].to_list():
        raise DataError(f"{emb_dir}: stored document ids do not match task {task.name}; rematerialise {retriever.name}'s corpus_embeddings")
    query_ids = task.queries["query_id"].to_list()
    exp = answers(expansions, query_ids, f"expansion for task {task.name}")
    pools = candidate_pools(task)
    files = ["run.parquet", "run.trec"]
    if family(retriever) == "lexical":
        settings = bm25.bm25_settings(retriever.settings, task_language(task))
        tokens = bm25_query_tokens(task.queries["text"].fill_null("").to_list(), exp, combine, settings)
        index = bm25.load(Path(emb_dir))
        # An empty token list (only stopwords) matches nothing: bm25s fails on it, so score 0.
        rows = (index.get_scores(t) if t else np.zeros(len(doc_ids)) for t in tokens)
        run = rank_scores(query_ids, doc_ids, rows, k, candidates=pools)
    else:
        from medbench_core.retrieval.index import load_index, search

        encoder = encoder or load_encoder(retriever, device=device, progress=progress)
        q = dense_query_vectors(encoder, task, exp, combine, normalize=bool(retriever.settings.get("normalize", True)))
        np.save(Path(out) / "query_embeddings.npy", q, allow_pickle=False)
        files.append("query_embeddings.npy")
        _, demb = load_corpus_embeddings(Path(emb_dir)) if pools is not None else (None, None)
        run = search(load_index(Path(index_dir) / "index.faiss"), q, query_ids, doc_ids, k, doc_emb=demb, candidates=pools)
    run.write_parquet(Path(out) / "run.parquet", statistics=False)
    (Path(out) / "run.trec").write_text(write_trec(run, f"medbench-{tag}"))
    info = {
        "k": k,
        "n_queries": len(query_ids),
        "n_rows": run.height,
        "retriever": retriever.name,
        "combine": combine.to_dict(),
        "seconds": round(time.perf_counter() - t0, 3),
        "files": files,
    }
    (Path(out) / "info.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return run, info


def expanded_stage_keys(
    spec: ModelSpec,
    retriever: ModelSpec,
    task_hash: str,
    retriever_revision: str,
    expansion_key: str,
    combine: Combine,
    k: int,
    codes: dict[str, str],
    metrics: tuple[str, ...] | None = None,
    *,
    retriever_keys: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Stage keys of an expanded model on one task.

    ``embeddings`` and ``index`` are the retriever's own keys (its stored corpus is reused): those
    of ``retriever_keys`` when given (:func:`medbench_core.retrieval.stages.partition_keys` of the
    retriever, which also covers a task's dataset revision), else computed from ``task_hash``
    and ``retriever_revision``. The run key covers the expanded model's name (a rename is a new
    model, as for every kind), the index key, the expansion's key, the resolved combination (so
    writing R2MED's default out changes nothing), k and the code of the expanded run
    (``codes["expanded_run"]``); the metrics key the run key and the metric list.
    """
    from medbench_core.evaluation.metrics import DEFAULT_METRICS
    from medbench_core.retrieval.stages import stage_keys
    from medbench_core.provenance import artifact_key

    base = dict(retriever_keys) if retriever_keys is not None else stage_keys(retriever, task_hash, retriever_revision, k, codes)
    run = artifact_key(stage="expanded_run", model=spec.name, upstream=base["index"], expansion=expansion_key, combine=combine.to_dict(), k=k, code=codes["expanded_run"])
    met = artifact_key(stage="metrics", upstream=run, metrics=list(metrics or DEFAULT_METRICS), code=codes["metrics"])
    return {"expansion": expansion_key, "embeddings": base["embeddings"], "index": base["index"], "run": run, "metrics": met}
