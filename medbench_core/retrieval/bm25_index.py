"""BM25 through bm25s: Lucene scoring, English stopwords, Snowball stemming (PyStemmer).

Scores come from bm25s; the top-k selection is ours so that ties are ordered by doc id
(bm25s, like FAISS, leaves their order undefined).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.memory import give_back_free_memory
from medbench_core.progress import bar
from medbench_core.progress import resolve as resolve_progress
from medbench_core.retrieval.ranking import rank_scores


def _bm25s():
    import bm25s

    # bm25s sets its logger to DEBUG on import: once anything configures the root logger, each
    # index build prints "DEBUG:bm25s:..." into the main job's output.
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


DEFAULTS = {"k1": 1.5, "b": 0.75, "method": "lucene", "stopwords": "en", "stemmer": "english"}
FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "params.index.json", "vocab.index.json")


def bm25_settings(settings: dict[str, Any] | None, language: str | None = None) -> dict[str, Any]:
    """Effective settings; ``language_analyzers: {fr: {stopwords: fr, stemmer: french}}`` in the
    model's settings picks the stopwords and stemmer for a task written in that language."""
    out = dict(DEFAULTS)
    settings = settings or {}
    out.update({k: v for k, v in settings.items() if k in DEFAULTS})
    per_lang = (settings.get("language_analyzers") or {}).get(language or "", {})
    out.update({k: v for k, v in per_lang.items() if k in ("stopwords", "stemmer")})
    return out


def _stemmer(name: str | None):
    if not name:
        return None
    import Stemmer

    return Stemmer.Stemmer(name)


def tokenize(texts: list[str], settings: dict[str, Any], progress: bool | None = False) -> list[list[str]]:
    bm25s = _bm25s()

    s = bm25_settings(settings)
    return bm25s.tokenize(texts, stopwords=s["stopwords"], stemmer=_stemmer(s["stemmer"]), return_ids=False, show_progress=resolve_progress(progress))


def fit(corpus_texts: Iterable[str], settings: dict[str, Any] | None = None, progress: bool | None = False):
    """Index ``corpus_texts`` with bm25s; returns the ``bm25s.BM25`` object. ``progress``: bars (bm25s's own).

    ``corpus_texts`` is read once, in order: a list, or a lazy sequence such as
    :meth:`Task.doc_text <medbench_core.taskdata.task.Task.doc_text>`, so that the corpus's text
    need not be in memory beside its tokens. The tokens are held as bm25s holds them (one list of
    token ids per document); the index's vocabulary is then numbered in sorted order.
    """
    bm25s = _bm25s()

    s = bm25_settings(settings)
    tokenized = bm25s.tokenize(
        corpus_texts, stopwords=s["stopwords"], stemmer=_stemmer(s["stemmer"]), return_ids=True, show_progress=resolve_progress(progress)
    )
    held = [tokenized.ids, tokenized.vocab]
    del tokenized
    return _index(held, s, progress)


def fit_tokens(token_lists: Iterable[list[str]], settings: dict[str, Any] | None = None, progress: bool | None = False):
    """:func:`fit` of documents already tokenized (by an analyser of :mod:`medbench_core.retrieval.analysis`).

    The index is the one :func:`fit` builds for the same tokens: the vocabulary numbered in sorted
    order, scored with ``settings``' ``k1``, ``b`` and ``method``.
    """
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in tokens] for tokens in token_lists]
    held = [ids, vocab]
    del ids
    return _index(held, bm25_settings(settings), progress)


def _index(held: list, s: dict[str, Any], progress: bool | None):
    """A ``bm25s.BM25`` over ``held`` = [token id lists, vocabulary], its vocabulary numbered in sorted order.

    ``held`` is emptied: once indexed, the token lists have no reference left and are freed.
    """
    bm25s = _bm25s()
    ids, vocab = held
    held.clear()
    if not ids:
        raise DataError("BM25: the corpus is empty")
    if not vocab:
        raise DataError("BM25: no document has indexable text (an image-only corpus, or only stopwords); BM25 cannot rank it")
    retriever = bm25s.BM25(k1=float(s["k1"]), b=float(s["b"]), method=s["method"])
    retriever.index((ids, dict(vocab)), show_progress=resolve_progress(progress))  # a copy: bm25s adds its empty token to the dict
    del ids  # the token lists: from here only the index holds the corpus
    give_back_free_memory()  # their pages, before the renumbered columns are written beside the index
    _number_vocabulary_sorted(retriever, vocab)
    return retriever


_PERMUTE_BLOCK = 1 << 22  # index entries moved at a time: bounded extra memory beside the index


def _number_vocabulary_sorted(retriever, vocab: dict[str, int]) -> None:
    """Renumber the index's vocabulary in sorted token order.

    bm25s numbers the vocabulary in the iteration order of a set of strings, which changes with
    each process's hash seed: the saved index would differ from one build to the next (same
    scores, other bytes). Its score matrix is CSC, one column per token with the documents in
    ascending order, so numbering the tokens differently only permutes the columns: the arrays
    below are those bm25s builds from token ids numbered in sorted order (tests/core/test_bm25.py),
    without renumbering every token of every document first.
    """
    ordered = sorted(vocab)
    old = np.fromiter((vocab[t] for t in ordered), dtype=np.int64, count=len(ordered))  # the column each new one was
    scores = retriever.scores
    indptr = np.asarray(scores["indptr"])
    lengths = np.diff(indptr.astype(np.int64))[old]
    new_indptr = np.zeros(len(old) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_indptr[1:])
    shift = indptr[old].astype(np.int64) - new_indptr[:-1]  # old position - new position, per column
    # One array at a time, the old one dropped before the next is copied: the index plus one array
    # at the peak, not plus two.
    for name in ("data", "indices"):
        before = np.asarray(scores[name])
        after = np.empty_like(before)
        col = 0
        while col < len(old):  # blocks of whole columns, about _PERMUTE_BLOCK entries each
            end = max(int(np.searchsorted(new_indptr, new_indptr[col] + _PERMUTE_BLOCK, side="right")) - 1, col + 1)
            lo, hi = new_indptr[col], new_indptr[end]
            after[lo:hi] = before[np.repeat(shift[col:end], lengths[col:end]) + np.arange(lo, hi)]
            col = end
        scores[name] = after
        del before
    scores["indptr"] = new_indptr.astype(indptr.dtype)
    if getattr(retriever, "nonoccurrence_array", None) is not None:
        retriever.nonoccurrence_array = retriever.nonoccurrence_array[old]
    numbering = {token: i for i, token in enumerate(ordered)}
    if "" in retriever.vocab_dict and "" not in numbering:  # bm25s's empty token, after the last column
        numbering[""] = len(ordered)
    retriever.vocab_dict = numbering
    retriever.unique_token_ids_set = set(numbering.values())


def save(retriever, folder: Path) -> list[str]:
    retriever.save(str(folder), allow_pickle=False)
    return [f for f in FILES if (folder / f).exists()]


def load(folder: Path):
    bm25s = _bm25s()

    return bm25s.BM25.load(str(folder), allow_pickle=False)


def search(
    retriever,
    query_ids: list[str],
    query_texts: list[str],
    doc_ids: list[str],
    k: int,
    settings: dict[str, Any] | None = None,
    candidates: dict[str, np.ndarray] | None = None,
    progress: bool | None = False,
) -> pl.DataFrame:
    """Top ``k`` documents per query by BM25 score, ties by doc id; ``progress``: a bar over the queries."""
    tokens = tokenize(query_texts, bm25_settings(settings))
    return search_tokens(retriever, query_ids, tokens, doc_ids, k, candidates=candidates, progress=progress)


def search_tokens(
    retriever,
    query_ids: list[str],
    tokens: list[list[str]],
    doc_ids: list[str],
    k: int,
    candidates: dict[str, np.ndarray] | None = None,
    progress: bool | None = False,
) -> pl.DataFrame:
    """:func:`search` of queries already tokenized (an expanded query is a combination of token lists)."""
    # bm25s adds an empty token to the vocabulary it indexes, numbered past the index's last column when no
    # document holds "" (_number_vocabulary_sorted): a query token "" (Greek Snowball stems some words to
    # nothing) would then fail bm25s's range check. Such a token matches no document: it is dropped.
    empty_is_no_column = retriever.vocab_dict.get("", -1) >= len(retriever.scores["indptr"]) - 1
    with bar(total=len(tokens), desc="bm25 search", unit="query", progress=progress) as pbar:

        def rows():
            for t in tokens:
                if empty_is_no_column and "" in t:
                    t = [x for x in t if x]
                # bm25s fails on an empty token list (a query of stopwords only, or an image-only
                # query with no text): such a query matches nothing, so every document scores 0.
                row = retriever.get_scores(t) if t else np.zeros(len(doc_ids))
                pbar.update(1)
                yield row

        return rank_scores(query_ids, doc_ids, rows(), k, candidates=candidates)
