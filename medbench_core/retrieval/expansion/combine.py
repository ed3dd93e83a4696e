"""How an expansion meets a retriever, and the run of an expanded model.

Modes (a model entry's ``combine`` and ``repeat_query``; ``settings.separator`` for dense concat):

- ``concat``: the query ``repeat_query`` times, then the expansion. BM25 joins the token lists
  (query tokens, query tokens, ..., expansion tokens: no separator token). A dense encoder
  embeds one string, ``query`` (repeated, space-joined) + ``separator`` + expansion, its query
  prefix in front of the whole.
- ``replace``: the expansion alone stands for the query (a dense encoder gives it the query prefix).
- ``mean`` (dense only): the query (with its prefix and instruction) and the expansion (no
  prefix, no instruction; with ``instruct_expansion`` the query's prefix and instruction too: the
  default for a retriever that hands its instruction to the model as a keyword) are
  embedded separately and averaged with equal weight; with ``normalize`` (the default) the mean
  is L2-normalised, so the inner product the index computes is the cosine similarity R2MED's
  BEIR scoring uses. Rankings are the same either way.

Defaults are R2MED's (its evaluation scripts): BM25: hyde ``replace``, query2doc ``concat`` x2,
lamer ``concat`` x1; dense: hyde and lamer ``mean``, query2doc ``concat`` with ``[SEP]``; for a
reasoning generator (:data:`~medbench_core.retrieval.expansion.rules.R2MED_REASONING_GENERATORS`)
``replace`` with BM25 and ``mean`` with a dense retriever, whatever the method.

An expanded model reuses its retriever's corpus representation and index (same keys), so
only the run and the metrics are its own; its retriever's kind searches with the expanded queries
(kind ``expanded``, :mod:`medbench_core.retrieval.kinds.expanded`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from medbench_core.errors import DataError
from medbench_core.retrieval.expansion.rules import DEFAULT_SEPARATOR, MODES, R2MED_DEFAULTS, Combine  # noqa: F401  (re-exported)


def bm25_query_tokens(queries: list[str], expansions: list[str], combine: Combine, settings: dict[str, Any]) -> list[list[str]]:
    """BM25 token list of each expanded query (the analyzer of the retriever's settings)."""
    from medbench_core.retrieval.bm25_index import tokenize

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


def dense_query_vectors(
    encode, queries: list[str], expansions: list[str], combine: Combine, prompt: tuple[str, str] | None, normalize: bool = True
) -> np.ndarray:
    """Query vectors of the expanded queries, as R2MED's encoder classes make them (utils.py at 62b7074).

    ``encode(texts, role, prompt)`` embeds texts as the retriever's kind does: role ``query`` with
    the query's prefix and ``prompt`` (template, instruction, or None), role ``expansion`` bare.

    - ``mean``: the query with its instruction, the expansion bare (FlagDRES, lines 79-90) or,
      with ``instruct_expansion``, with the query's instruction too (NV-Embed lines 643-650, GritLM
      572-582, Instructor 230-237), averaged with equal weights; with ``normalize`` the mean is
      L2-normalised, so the index's inner product is the cosine of R2MED's BEIR scoring (the
      ranking is the same either way);
    - ``concat``: one string, ``query`` (repeated) + separator + expansion, formatted as a query
      (R2MED's query2doc: ``instruction + text + "[SEP]" + hy_doc``, eval_retrieval.py line 42 and
      FlagDRES lines 70-76);
    - ``replace``: the expansion formatted as a query.
    """
    if combine.mode == "mean":
        q = np.asarray(encode(list(queries), "query", prompt), dtype=np.float64)
        e = np.asarray(
            encode(list(expansions), "query", prompt) if combine.instruct_expansion else encode(list(expansions), "expansion", None), dtype=np.float64
        )
        m = (q + e) / 2.0
        if normalize:
            m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(m, dtype=np.float32)
    texts = dense_query_texts(queries, expansions, combine)
    return np.ascontiguousarray(encode(texts, "query", prompt), dtype=np.float32)
