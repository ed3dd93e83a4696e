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
only the run and the metrics are its own; its retriever's kind searches with the expanded queries
(kind ``expanded``, :mod:`medbench_core.retrieval.kinds.expanded`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from medbench_core.errors import DataError
from medbench_core.retrieval.expansion.rules import DEFAULT_SEPARATOR, MODES, R2MED_DEFAULTS, Combine  # noqa: F401  (re-exported)
from medbench_core.taskdata.task import Task


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
