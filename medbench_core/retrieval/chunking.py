"""What a dense encoder does with passages longer than its ``max_length``: truncate, or chunk and pool.

Model settings (all enter the model identity, hence the provenance key):

- ``long_text``: ``truncate`` (the default, and what sentence-transformers and transformers do
  by themselves: tokens beyond ``max_length`` are dropped) or ``chunk``;
- ``chunk_pooling``: ``max`` (default) or ``mean``: a document's score for a query is the max
  (or the mean) of its chunks' scores, each chunk scored by inner product as a passage of its own;
- ``chunk_size``: tokens of the passage's own text per chunk (default ``max_length - 2``, room
  for the tokenizer's [CLS]/[SEP], or ``max_length - 3`` with ``passage_pair``'s [CLS] [SEP] text
  [SEP]; prefixes come on top and are cut at ``max_length``);
- ``chunk_stride``: tokens from one chunk's start to the next (default ``chunk_size``: no overlap).

Chunks are cut on the tokenizer's tokens and taken from the original text by character offsets,
so a chunk is a verbatim slice of the passage. Windows start at 0, stride, 2*stride, ... until one
reaches the end: 10 tokens with size 4 and stride 3 give [0, 4), [3, 7), [6, 10). Queries are not
chunked (they are truncated at ``max_length``). Chunked corpora are searched exactly: every chunk
is scored (flat FAISS index), then pooled per document, then ranked with the usual tie rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from medbench_core.errors import DataError

MODES = ("truncate", "chunk")
POOLINGS = ("max", "mean")
SETTING_KEYS = ("long_text", "chunk_pooling", "chunk_size", "chunk_stride")


@dataclass(frozen=True)
class LongText:
    """The effective long-text policy of a model (see the module docstring)."""

    mode: str = "truncate"
    pooling: str = "max"
    size: int = 0
    stride: int = 0
    max_length: int | None = None

    def describe(self) -> dict[str, Any]:
        """What the run's info.json and MLflow params record: ``long_text`` and, when chunking, the chunk settings."""
        if self.mode == "truncate":
            return {"long_text": "truncate", "max_length": self.max_length}
        return {"long_text": "chunk", "chunk_pooling": self.pooling, "chunk_size": self.size, "chunk_stride": self.stride, "max_length": self.max_length}


def long_text(settings: Any, model: str = "model") -> LongText:
    """The checked long-text policy of a text encoder's settings (the dense kinds' settings object)."""
    mode = settings.long_text
    max_length = settings.max_length
    if mode not in MODES:
        raise DataError(f"model {model}: long_text {mode!r} unknown; use one of {MODES}")
    if mode == "truncate":
        stray = [k for k in SETTING_KEYS[1:] if k in settings.explicit()]
        if stray:
            raise DataError(f"model {model}: {stray} only apply with long_text: chunk")
        return LongText(mode="truncate", max_length=max_length)
    pooling = settings.chunk_pooling
    if pooling not in POOLINGS:
        raise DataError(f"model {model}: chunk_pooling {pooling!r} unknown; use one of {POOLINGS}")
    special = 3 if getattr(settings, "passage_pair", False) else 2  # [CLS] text [SEP], or the pair's [CLS] [SEP] text [SEP]
    default_size = int(max_length) - special if max_length else 0
    size = int(settings.chunk_size or default_size)
    if size < 1:
        raise DataError(f"model {model}: long_text: chunk needs chunk_size (tokens) or max_length")
    if max_length and size + special > int(max_length):
        raise DataError(f"model {model}: chunk_size {size} + {special} special tokens exceeds max_length {max_length}; chunks would be truncated")
    stride = int(settings.chunk_stride or size)
    if not 1 <= stride <= size:
        raise DataError(f"model {model}: chunk_stride {stride} must lie in [1, chunk_size={size}] (gaps would drop text)")
    return LongText(mode="chunk", pooling=pooling, size=size, stride=stride, max_length=max_length)


def windows(n_tokens: int, size: int, stride: int) -> list[tuple[int, int]]:
    """Token windows ``[start, end)`` covering ``n_tokens`` (one empty window for an empty text)."""
    if n_tokens <= 0:
        return [(0, 0)]
    starts = [0]
    while starts[-1] + size < n_tokens:
        starts.append(starts[-1] + stride)
    return [(s, min(s + size, n_tokens)) for s in starts]


def split_text(text: str, tokenizer: Any, size: int, stride: int) -> list[str]:
    """``text`` cut into chunks of ``size`` tokens every ``stride`` tokens, each a verbatim slice of ``text``."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False)
    offsets = enc["offset_mapping"]
    if len(offsets) <= size:
        return [text]
    return [text[offsets[s][0] : offsets[e - 1][1]] for s, e in windows(len(offsets), size, stride)]


def split_passages(texts: list[str], tokenizer: Any, lt: LongText) -> tuple[list[str], np.ndarray]:
    """``(chunk texts, owner)``: every passage's chunks in order, and the passage index of each chunk."""
    if not getattr(tokenizer, "is_fast", False):
        raise DataError("long_text: chunk needs a fast tokenizer (character offsets); this model's tokenizer is not one")
    chunks: list[str] = []
    owner: list[int] = []
    for i, t in enumerate(texts):
        parts = split_text(t or "", tokenizer, lt.size, lt.stride)
        chunks.extend(parts)
        owner.extend([i] * len(parts))
    return chunks, np.asarray(owner, dtype=np.int64)


def pool(chunk_scores: np.ndarray, owner: np.ndarray, n_docs: int, pooling: str) -> np.ndarray:
    """Document scores from one query's chunk scores (chunks grouped by document, in document order)."""
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    if len(starts) != n_docs or owner[0] != 0 or owner[-1] != n_docs - 1:
        raise DataError(f"chunk map covers {len(starts)} documents in order, not the {n_docs} of the corpus; rematerialise corpus_embeddings")
    s = chunk_scores.astype(np.float64)
    if pooling == "max":
        return np.maximum.reduceat(s, starts)
    counts = np.diff(np.r_[starts, len(s)])
    return np.add.reduceat(s, starts) / counts


def chunk_doc_scores(index: Any, queries: np.ndarray, owner: np.ndarray, n_docs: int, pooling: str, batch: int = 16):
    """Yield each query's pooled document scores, scoring every chunk exactly with the flat ``index``."""
    import faiss

    if not isinstance(index, faiss.IndexFlat):
        raise DataError("long_text: chunk is searched exactly; build the model's index with type: flat")
    n = int(index.ntotal)
    if n != len(owner):
        raise DataError(f"index holds {n} vectors but the chunk map {len(owner)}; rematerialise the index")
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    for i in range(0, len(queries), batch):
        scores, idx = index.search(queries[i : i + batch], n)
        for sc, ix in zip(scores, idx):
            full = np.empty(n, dtype=np.float32)
            full[ix] = sc
            yield pool(full, owner, n_docs, pooling)
