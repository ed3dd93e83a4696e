"""R2MED's BM25: gensim's ``LuceneBM25Model`` weights on the documents and on the query, a sparse dot product.

R2MED's ``eval_BM25.py`` (lines 58-85 at 62b7074) analyses every text with pyserini's Lucene
analyser (:mod:`medbench_core.retrieval.lucene_analysis`), builds a gensim ``Dictionary`` of the
corpus, weights every document's bag of words with ``LuceneBM25Model(k1=0.9, b=0.4)``, weights
the **query's** bag of words with the same model, and scores each document by the dot product
of the two (``SparseMatrixSimilarity``, no normalisation). gensim's weight of term ``t`` in a
text of ``len`` known tokens where it occurs ``tf`` times is

    idf(t) * tf / (tf + k1 * (1 - b + b * len / avgdl)),   idf(t) = ln(N + 1) - ln(df(t) + 0.5)

(``N`` documents, ``avgdl`` the mean document length, both of the corpus; a query's ``len``
counts its tokens that the corpus has). Everything is computed as gensim computes it, down to
the bits: the weights in float64 in gensim's order of operations, stored as float32 as
``SparseMatrixSimilarity`` stores them, and each document's score summed in float32 over the
query's terms in the order of gensim's term ids (a term's id is its rank by the first document
it occurs in, then alphabetically within that document, as ``Dictionary.doc2bow`` numbers them).

The top ``k`` are R2MED's too: ``sorted(..., key=score, reverse=True)[:100]`` (eval_BM25.py l.80) is
a stable sort, so among documents tied at the last place kept, the ones **first in the corpus**
are kept (an empty query, all scores 0: the first 100 documents of the corpus). The documents kept
are then ranked, ties by doc id as trec_eval orders them (:mod:`medbench_core.retrieval.ranking`),
which is how R2MED's pytrec_eval reads its run.

One difference is left: gensim's ``Dictionary`` prunes its vocabulary to its 2,000,000 most
frequent terms when it grows past that (``prune_at``); this index keeps every term, so a corpus
with more distinct terms than that scores its rare terms where R2MED's code would drop them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.progress import bar
from medbench_core.retrieval.ranking import doc_order, run_frame, topk

K1, B = 0.9, 0.4  # R2MED's eval_BM25.py line 66
FILES = ("params.json", "vocab.json", "idf.npy", "term_indptr.npy", "doc_indices.npy", "weights.npy")
_CHUNK_DOCS = 20_000  # documents counted together (their (document, term) keys sorted at once)
_WEIGHT_BLOCK = 1 << 22  # (document, term) entries weighted together (their float64 operands: 4 x 32 MB)


@dataclass
class LuceneBM25Index:
    """Term-major sparse document weights (a CSC matrix of documents x terms) and the corpus statistics."""

    vocab: list[str]
    idf: np.ndarray  # float64, per term id
    term_indptr: np.ndarray  # int64, len(vocab) + 1
    doc_indices: np.ndarray  # int32, documents of each term, ascending
    weights: np.ndarray  # float32
    n_docs: int
    avgdl: float
    k1: float = K1
    b: float = B

    def __post_init__(self) -> None:
        self._term_id = {t: i for i, t in enumerate(self.vocab)}

    def query_weights(self, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """gensim's ``model[dictionary.doc2bow(terms)]``: (term ids ascending, float32 weights); unknown terms dropped."""
        ids = [self._term_id[t] for t in terms if t in self._term_id]
        if not ids:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        tids, tf = np.unique(np.asarray(ids, dtype=np.int64), return_counts=True)
        return tids, _weights(tf.astype(np.float64), self.idf[tids], len(ids), self.k1, self.b, self.avgdl).astype(np.float32)

    def scores(self, terms: list[str]) -> np.ndarray:
        """Every document's score for a query's terms (float32, as ``SparseMatrixSimilarity`` computes it)."""
        out = np.zeros(self.n_docs, dtype=np.float32)
        tids, qw = self.query_weights(terms)
        for t, w in zip(tids.tolist(), qw):  # ascending term id: gensim's order of summation
            s, e = self.term_indptr[t], self.term_indptr[t + 1]
            idx = self.doc_indices[s:e]
            out[idx] += self.weights[s:e] * w  # float32 products and sums; a term's documents are distinct
        return out


def _weights(tf: np.ndarray, idf: np.ndarray, length, k1: float, b: float, avgdl: float) -> np.ndarray:
    """gensim's ``LuceneBM25Model.get_term_weights`` in its order of operations (float64)."""
    return idf * (tf / (tf + k1 * (1 - b + b * length / avgdl)))


def fit(texts: Iterable[str], k1: float = K1, b: float = B, progress: bool | None = False, n_docs: int | None = None) -> LuceneBM25Index:
    """Analyse and weight a corpus as R2MED's code does (module docstring). ``texts`` is read once, in order."""
    from medbench_core.retrieval.lucene_analysis import EnglishAnalyzer, tokenize

    analyzer = EnglishAnalyzer()
    term_pid: dict[str, int] = {}  # analysed term -> provisional id, in order of first occurrence

    class TokenIds(dict):
        """A token as the tokenizer cuts it -> its term's provisional id (-1: dropped); each distinct token analysed once."""

        def __missing__(self, raw: str) -> int:
            term = analyzer.term(raw)
            pid = -1
            if term:
                pid = term_pid.get(term, -1)
                if pid < 0:
                    pid = term_pid[term] = len(term_pid)
            self[raw] = pid
            return pid

    token_ids = TokenIds()
    first_doc: list[np.ndarray] = []  # the document each provisional id first occurs in
    lengths: list[np.ndarray] = []
    coo_t: list[np.ndarray] = []
    coo_d: list[np.ndarray] = []
    coo_c: list[np.ndarray] = []
    tokens: list[str] = []
    n_tokens: list[int] = []
    chunk_start = 0

    def flush() -> None:
        # one chunk of documents at a time in C: each token's id by a dictionary look-up (a new
        # token is analysed once, in order), the stopwords dropped, (document, term) pairs counted
        nonlocal tokens, n_tokens, chunk_start
        n = len(n_tokens)
        if not n:
            return
        v0 = len(term_pid)
        ids = np.fromiter(map(token_ids.__getitem__, tokens), dtype=np.int64, count=len(tokens))
        local = np.repeat(np.arange(n, dtype=np.int64), n_tokens)
        keep = ids >= 0
        ids, local = ids[keep], local[keep]
        lengths.append(np.bincount(local, minlength=n))
        new = ids >= v0
        if new.any():  # provisional ids are numbered in order of first occurrence: first index of each
            _, first = np.unique(ids[new], return_index=True)
            first_doc.append(local[new][first] + chunk_start)
        v = max(len(term_pid), 1)
        keys, counts = np.unique(local * v + ids, return_counts=True)
        coo_d.append((keys // v + chunk_start).astype(np.int32))
        coo_t.append((keys % v).astype(np.int32))
        coo_c.append(counts.astype(np.int32))
        chunk_start += n
        tokens, n_tokens = [], []

    with bar(total=n_docs, desc="lucene-bm25 index", unit="doc", progress=progress) as pbar:
        for text in texts:
            toks = tokenize(text or "")
            tokens.extend(toks)
            n_tokens.append(len(toks))
            if len(n_tokens) >= _CHUNK_DOCS:
                flush()
            pbar.update(1)
        flush()
    lengths = [np.concatenate(lengths)] if lengths else []
    n = int(lengths[0].shape[0]) if lengths else 0
    if n == 0:
        raise DataError("BM25: the corpus is empty")
    if not term_pid:
        raise DataError("BM25: no document has indexable text (an image-only corpus, or only stopwords); BM25 cannot rank it")
    # from here on, spent containers are emptied in place to free their memory (not `del`: the nested
    # TokenIds and flush() name them, so a `del` reads to a linter as a name used after deletion)
    token_ids.clear()
    # gensim's term ids: by first document, then alphabetically among the terms new in that document
    terms = list(term_pid)
    first = np.concatenate(first_doc).tolist()
    order = sorted(range(len(terms)), key=lambda p: (first[p], terms[p]))
    final = np.empty(len(order), dtype=np.int32)
    final[np.asarray(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int32)
    vocab = [terms[p] for p in order]
    term_pid.clear()
    terms.clear()
    first_doc.clear()

    import scipy.sparse as sp

    # each list joined and emptied in turn, so that a column and its chunks are never all held twice
    t = final[np.concatenate(coo_t)]
    coo_t.clear()
    d = np.concatenate(coo_d)
    coo_d.clear()
    tf = np.concatenate(coo_c)
    coo_c.clear()
    # terms x documents; entries arrive in document order, so each term's documents stay ascending
    mat = sp.csr_matrix((tf, (t, d)), shape=(len(vocab), n))
    del t, d, tf
    df = np.diff(mat.indptr)
    doc_len = lengths[0].astype(np.int64)
    avgdl = int(doc_len.sum()) / n  # gensim: sum(dictionary.cfs.values()) / dictionary.num_docs
    # math.log as gensim's precompute_idfs (numpy's log may round the last bit otherwise), once per distinct df
    uniq, inverse = np.unique(df, return_inverse=True)
    idf = np.array([math.log(n + 1.0) - math.log(int(f) + 0.5) for f in uniq.tolist()], dtype=np.float64)[inverse]
    doc_of = mat.indices
    indptr = mat.indptr.astype(np.int64, copy=False)
    # the weights a block of terms at a time: the float64 operands of the whole matrix at once were
    # the index's memory peak (about 48 bytes per (document, term) entry); element-wise, so the same bits
    weights = np.empty(len(doc_of), dtype=np.float32)
    start = 0
    while start < len(vocab):
        stop = int(np.searchsorted(indptr, indptr[start] + _WEIGHT_BLOCK, side="right")) - 1
        stop = min(max(stop, start + 1), len(vocab))
        lo, hi = int(indptr[start]), int(indptr[stop])
        weights[lo:hi] = _weights(mat.data[lo:hi].astype(np.float64), np.repeat(idf[start:stop], df[start:stop]), doc_len[doc_of[lo:hi]], k1, b, avgdl)
        start = stop
    return LuceneBM25Index(
        vocab=vocab, idf=idf, term_indptr=indptr, doc_indices=doc_of.astype(np.int32, copy=False), weights=weights,
        n_docs=n, avgdl=avgdl, k1=float(k1), b=float(b),
    )  # fmt: skip


def save(index: LuceneBM25Index, folder: Path) -> list[str]:
    """Write the index into ``folder``; the file names (deterministic bytes: the same corpus gives the same files)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "params.json").write_text(
        json.dumps({"k1": index.k1, "b": index.b, "n_docs": index.n_docs, "avgdl": index.avgdl, "n_terms": len(index.vocab)}, sort_keys=True)
    )
    (folder / "vocab.json").write_text(json.dumps(index.vocab, ensure_ascii=False), encoding="utf-8")
    for name in ("idf", "term_indptr", "doc_indices", "weights"):
        np.save(folder / f"{name}.npy", getattr(index, name), allow_pickle=False)
    return list(FILES)


def load(folder: Path) -> LuceneBM25Index:
    params = json.loads((folder / "params.json").read_text())
    arrays = {name: np.load(folder / f"{name}.npy", allow_pickle=False) for name in ("idf", "term_indptr", "doc_indices", "weights")}
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    return LuceneBM25Index(vocab=vocab, n_docs=int(params["n_docs"]), avgdl=float(params["avgdl"]), k1=float(params["k1"]), b=float(params["b"]), **arrays)


def search_terms(
    index: LuceneBM25Index,
    query_ids: list[str],
    queries: list[list[str]],
    doc_ids: list[str],
    k: int,
    candidates: dict[str, np.ndarray] | None = None,
    progress: bool | None = False,
) -> pl.DataFrame:
    """Top ``k`` documents per analysed query, R2MED's (ties at the cut: the first in the corpus; module
    docstring), ranked with ties by doc id (trec_eval's order; medbench's run schema)."""
    tie = doc_order(doc_ids)
    position = np.arange(len(doc_ids), dtype=np.int64)
    hits = []
    with bar(total=len(queries), desc="lucene-bm25 search", unit="query", progress=progress) as pbar:
        for qid, terms in zip(query_ids, queries):
            row = index.scores(terms)
            if candidates is not None:
                pool = np.sort(candidates.get(qid, np.empty(0, dtype=np.int64)))
                kept = pool[topk(row[pool], position[pool], k)]
            else:
                kept = topk(row, position, k)  # R2MED's stable sort: ties at the cut by corpus position
            kept = kept[np.lexsort((tie[kept], -row[kept].astype(np.float64)))]
            hits.append((kept, row[kept]))
            pbar.update(1)
    return run_frame(query_ids, hits, doc_ids)
