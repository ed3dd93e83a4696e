"""Late interaction: one vector per token, stored per document, scored by ColBERT's MaxSim.

A document (or query) is a set of unit token vectors; a query q scores a document d as

    MaxSim(q, d) = sum over query tokens i of  max over document tokens j of  q_i . d_j

(Khattab & Zaharia, ColBERT, SIGIR 2020, eq. 3). Two searches over the same stored vectors:

- **exact**: every document scored, the token vectors read block by block from a memory-mapped
  file, so memory stays bounded by the block, not the corpus;
- **PLAID** (Santhanam et al., CIKM 2022), as fast-plaid implements it
  (github.com/lightonai/fast-plaid at 87f96f6; ``rust/index/create.rs`` ``create_index`` and
  ``python/fast_plaid/search/fast_plaid.py`` ``compute_kmeans`` for the index,
  ``rust/search/search.rs`` ``search`` l.471-696 for the search): token vectors are coded as
  their nearest centroid plus an ``nbits``-per-dimension residual; a query probes the
  ``n_ivf_probe`` best centroids of each of its tokens, scores the documents found there with
  centroid scores only, keeps the ``n_full_scores`` best, then their best quarter, and scores
  those with decompressed vectors (centroid + residual, normalised).

Storage (the ``corpus_embeddings`` folder): ``tokens.npy`` (float32, one row per token, all
documents in corpus order) and ``doc_offsets.npy`` (int64, ``n_docs + 1``: document i owns rows
``offsets[i]:offsets[i+1]``). ``tokens.npy`` is written batch by batch (:class:`TokenWriter`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from medbench_core.errors import DataError

TOKENS = "tokens.npy"
OFFSETS = "doc_offsets.npy"
SCORE_BLOCK_BYTES = 64 << 20  # one block of query-token x document-token similarities


# --- storage -------------------------------------------------------------------------------------


class TokenWriter:
    """Writes documents' token vectors into one float32 ``.npy`` as they come, batch by batch.

    The row count is not known until the last document is encoded, so the header is written with
    a fixed-width shape and rewritten in place on :meth:`close` (an ``.npy`` header is a Python
    literal: padding inside the tuple is allowed). Memory holds one batch.
    """

    WIDTH = 20  # digits reserved for the row count

    def __init__(self, folder: Path, dim: int):
        self.folder = Path(folder)
        self.dim = int(dim)
        self.rows = 0
        self.offsets = [0]
        self._f = open(self.folder / TOKENS, "wb")
        self._f.write(self._header(0))

    def _header(self, rows: int) -> bytes:
        body = "{'descr': '<f4', 'fortran_order': False, 'shape': (%*d, %d), }" % (self.WIDTH, rows, self.dim)
        pad = 64 - (10 + len(body) + 1) % 64
        body = body + " " * (pad % 64) + "\n"
        return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body.encode("latin1")

    def add(self, docs: Iterable[np.ndarray], names: Iterable[str] = ()) -> None:
        """Append each document's ``(tokens, dim)`` vectors, in corpus order."""
        names = list(names)
        for i, vecs in enumerate(docs):
            vecs = np.ascontiguousarray(vecs, dtype="<f4")
            if vecs.ndim != 2 or vecs.shape[1] != self.dim or vecs.shape[0] == 0:
                who = names[i] if i < len(names) else f"document {len(self.offsets) - 1}"
                raise DataError(f"{who}: expected at least one token vector of {self.dim} dims, got shape {vecs.shape}")
            self._f.write(vecs.tobytes())
            self.rows += vecs.shape[0]
            self.offsets.append(self.rows)

    def close(self) -> tuple[int, int]:
        """Finish the file (header rewritten with the row count, fsynced) and write ``doc_offsets.npy``; ``(documents, tokens)``."""
        self._f.flush()
        self._f.seek(0)
        self._f.write(self._header(self.rows))
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        np.save(self.folder / OFFSETS, np.asarray(self.offsets, dtype=np.int64), allow_pickle=False)
        return len(self.offsets) - 1, self.rows


def load_tokens(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens, offsets)`` of a stored corpus: the token vectors memory-mapped, the offsets in memory."""
    folder = Path(folder)
    tokens = np.load(folder / TOKENS, mmap_mode="r", allow_pickle=False)
    offsets = np.load(folder / OFFSETS, allow_pickle=False)
    if offsets.ndim != 1 or offsets[0] != 0 or offsets[-1] != tokens.shape[0] or (np.diff(offsets) <= 0).any():
        raise DataError(f"{folder}: {OFFSETS} does not cut {TOKENS} ({tokens.shape[0]} rows) into non-empty documents")
    return tokens, offsets


def pad_queries(queries: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(nq, max tokens, dim)`` float32 with zero rows after each query's tokens, and the lengths.

    A zero query vector adds exactly 0 to MaxSim (its best match scores 0), so padded queries
    score as their own tokens do.
    """
    lengths = np.asarray([len(q) for q in queries], dtype=np.int64)
    dim = queries[0].shape[1]
    out = np.zeros((len(queries), int(lengths.max()), dim), dtype=np.float32)
    for i, q in enumerate(queries):
        out[i, : len(q)] = q
    return out, lengths


# --- exact MaxSim ------------------------------------------------------------------------------


def maxsim(queries: np.ndarray, tokens: np.ndarray, offsets: np.ndarray, docs: np.ndarray | None = None) -> np.ndarray:
    """MaxSim of every (padded) query against documents ``docs`` (default all): ``(nq, len(docs))`` float32.

    Documents are read in blocks of about :data:`SCORE_BLOCK_BYTES` of similarities, so memory
    is bounded by the block, whatever the corpus. Each query token's best match per document is
    ``np.maximum.reduceat`` over that document's rows; the sum runs over query tokens.
    """
    nq, tq, dim = queries.shape
    flat = np.ascontiguousarray(queries.reshape(nq * tq, dim), dtype=np.float32)
    docs = np.arange(len(offsets) - 1) if docs is None else np.asarray(docs, dtype=np.int64)
    out = np.zeros((nq, len(docs)), dtype=np.float32)
    if len(docs) == 0:
        return out
    budget = max(1, SCORE_BLOCK_BYTES // (4 * max(1, nq * tq)))  # document tokens per block
    contiguous = len(docs) == len(offsets) - 1 or bool((np.diff(docs) == 1).all())
    ends = np.cumsum(offsets[docs + 1] - offsets[docs])  # tokens up to and including each document
    start = 0
    while start < len(docs):
        # as many whole documents as fit the budget (at least one)
        done = int(ends[start - 1]) if start else 0
        take = max(1, int(np.searchsorted(ends, done + budget, side="right")) - start)
        block = docs[start : start + take]
        if contiguous:
            rows = np.asarray(tokens[offsets[block[0]] : offsets[block[-1] + 1]], dtype=np.float32)
        else:
            rows = np.asarray(tokens[_rows_of(block, offsets)], dtype=np.float32)
        lens = offsets[block + 1] - offsets[block]
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        sim = flat @ rows.T  # (nq * tq, block tokens)
        best = np.maximum.reduceat(sim, starts, axis=1)  # (nq * tq, block docs)
        out[:, start : start + take] = best.reshape(nq, tq, -1).sum(axis=1)
        start += take
    return out


def _rows_of(docs: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The token rows of ``docs``, concatenated in their order."""
    lens = offsets[docs + 1] - offsets[docs]
    first = np.repeat(offsets[docs] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    return first + np.arange(int(lens.sum()))


# --- PLAID ----------------------------------------------------------------------------------------

PLAID_DEFAULTS: dict[str, Any] = {"nbits": 4, "kmeans_niters": 4, "max_points_per_centroid": 256, "n_ivf_probe": 8, "n_full_scores": 8192, "seed": 42}
PLAID_FILES = ("centroids.npy", "codes.npy", "residuals.npy", "bucket_cutoffs.npy", "bucket_weights.npy", "ivf.npy", "ivf_offsets.npy", OFFSETS)
# ``searcher: colbertv2``: the search of the ColBERT engine flmr bundles (FLMR third_party/ColBERT/colbert,
# searcher.py l.95-136, search/candidate_generation.py, search/index_storage.py l.67-184, search/filter_pids.cpp).
# ncells, centroid_score_threshold and ndocs left null take Searcher.dense_search's values for the k searched
# (l.96-122); query_maxlen is ColBERTConfig's (32, infra/config/settings.py l.108); remove_zero_query_tokens is
# flmr's search_custom_collection default (flmr/searching.py l.42: "For PreFLMR, this is needed").
SEARCHERS = ("fast-plaid", "colbertv2")
SEARCH_DEFAULTS: dict[str, Any] = {
    "searcher": "fast-plaid", "ncells": None, "centroid_score_threshold": None, "ndocs": None, "query_maxlen": 32, "remove_zero_query_tokens": False,
}  # fmt: skip
FLMR_SEARCH = {"searcher": "colbertv2", "remove_zero_query_tokens": True}  # what flmr's search_custom_collection runs


def colbert_search_settings(k: int, settings: dict[str, Any]) -> tuple[int, float, int]:
    """``(ncells, centroid_score_threshold, ndocs)`` for a search of ``k``: the entry's, else ColBERT's
    Searcher.dense_search defaults (searcher.py l.96-122: k <= 100: 2, 0.45, 1024; more: 4, 0.4, max(4k, 4096))."""
    ncells, threshold, ndocs = (2, 0.45, 1024) if k <= 100 else (4, 0.4, max(k * 4, 4096))
    pick = lambda key, default: default if settings.get(key) is None else settings[key]  # noqa: E731
    return int(pick("ncells", ncells)), float(pick("centroid_score_threshold", threshold)), int(pick("ndocs", ndocs))


def plaid_settings(index: dict[str, Any], where: str) -> dict[str, Any]:
    """The PLAID settings of an entry's ``index:`` (fast-plaid's and pylate's defaults for the rest), checked."""
    known = {"type", "n_centroids", *PLAID_DEFAULTS, *SEARCH_DEFAULTS}
    unknown = sorted(set(index) - known)
    if unknown:
        raise DataError(f"{where}: unknown PLAID index setting {unknown[0]!r}; known: {', '.join(sorted(known - {'type'}))}")
    search = {**SEARCH_DEFAULTS, **{k: v for k, v in index.items() if k in SEARCH_DEFAULTS}}
    if search["searcher"] not in SEARCHERS:
        raise DataError(f"{where}: index searcher {search['searcher']!r} unknown; use {' or '.join(SEARCHERS)}")
    colbert_only = [k for k in ("ncells", "centroid_score_threshold", "ndocs", "query_maxlen", "remove_zero_query_tokens") if k in index]
    if search["searcher"] != "colbertv2" and colbert_only:
        raise DataError(f"{where}: index {colbert_only[0]} is a setting of searcher: colbertv2 (ColBERT's engine, as flmr runs it)")
    if not isinstance(search["remove_zero_query_tokens"], bool):
        raise DataError(f"{where}: index remove_zero_query_tokens must be true or false")
    threshold = search["centroid_score_threshold"]
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
        raise DataError(f"{where}: index centroid_score_threshold must be a number (ColBERT's: 0.45 at k <= 100), not {threshold!r}")
    for key in ("ncells", "ndocs", "query_maxlen"):
        value = search[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise DataError(f"{where}: index {key} must be a positive integer, not {value!r}")
    if search["ndocs"] is not None and search["ndocs"] < 4:
        raise DataError(f"{where}: index ndocs must be at least 4 (ColBERT scores the best ndocs // 4 in full)")
    out = {**PLAID_DEFAULTS, "n_centroids": None, **{k: v for k, v in index.items() if k != "type" and k not in SEARCH_DEFAULTS}}
    for key, value in out.items():
        if key == "n_centroids" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "seed" else 1):
            raise DataError(f"{where}: index {key} must be a {'non-negative' if key == 'seed' else 'positive'} integer, not {value!r}")
    if out["nbits"] not in (1, 2, 4, 8):
        raise DataError(f"{where}: index nbits must be 1, 2, 4 or 8 (bits per dimension of a residual), not {out['nbits']}")
    return {**out, **search}


def _kmeans(sample: np.ndarray, k: int, niter: int, max_points: int, seed: int) -> np.ndarray:
    """Euclidean k-means centroids (FAISS), L2-normalised as fast-plaid normalises them."""
    import faiss

    km = faiss.Kmeans(sample.shape[1], k, niter=niter, seed=seed, max_points_per_centroid=max_points, verbose=False)
    km.train(np.ascontiguousarray(sample, dtype=np.float32))
    cents = km.centroids.astype(np.float32)
    norms = np.linalg.norm(cents, axis=1, keepdims=True)
    return cents / np.maximum(norms, 1e-12)


CODE_BLOCK_BYTES = 64 << 20  # the (vectors x centroids) scores held at once while coding


def _codes(vectors: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Nearest centroid by inner product (fast-plaid ``compress_into_codes``: argmax of scores, in chunks of vectors)."""
    step = max(1, CODE_BLOCK_BYTES // (4 * len(centroids)))
    out = np.empty(len(vectors), dtype=np.int32)
    for start in range(0, len(vectors), step):
        out[start : start + step] = np.argmax(vectors[start : start + step] @ centroids.T, axis=1)
    return out


def _pack(buckets: np.ndarray, nbits: int) -> np.ndarray:
    """Bucket indices (n, dim) as ``nbits`` bits each, most significant first, packed into bytes (n, dim * nbits / 8)."""
    bits = (buckets[..., None] >> np.arange(nbits - 1, -1, -1, dtype=np.uint8)) & 1
    return np.packbits(bits.reshape(len(buckets), -1).astype(np.uint8), axis=1)


def _unpack(packed: np.ndarray, dim: int, nbits: int) -> np.ndarray:
    bits = np.unpackbits(packed, axis=1)[:, : dim * nbits].reshape(len(packed), dim, nbits)
    return (bits * (1 << np.arange(nbits - 1, -1, -1, dtype=np.uint8))).sum(axis=2, dtype=np.int64)


def build_plaid(emb_dir: Path, out: Path, settings: dict[str, Any], block_rows: int = 1 << 16) -> dict[str, Any]:
    """A PLAID index of the stored token vectors, written into ``out`` (memory: one block and the sample).

    As fast-plaid builds it: k-means on the tokens of ``min(1 + 16 sqrt(120 n), n)`` sampled
    documents (``seed``), ``2^floor(log2(16 sqrt(estimated tokens)))`` centroids unless
    ``n_centroids`` is given; the residual codec from the sample's last 5 % of tokens (at most
    50,000): bucket cutoffs at the quantiles ``i / 2^nbits`` and bucket weights at
    ``(i + 0.5) / 2^nbits`` of all residual values; each token coded as its nearest centroid and
    its residual's buckets; an inverted file from each centroid to the documents holding it.
    """
    tokens, offsets = load_tokens(emb_dir)
    n_docs, (n_tok, dim) = len(offsets) - 1, tokens.shape
    nbits = settings["nbits"]
    if (dim * nbits) % 8:
        raise DataError(f"index nbits {nbits} x {dim} dims is not a whole number of bytes per token; use nbits 8 or a dimension divisible by 8")
    rng = np.random.default_rng(settings["seed"])
    n_sample = min(1 + int(16 * math.sqrt(120 * n_docs)), n_docs)
    sampled = np.sort(rng.permutation(n_docs)[:n_sample])
    sample = np.asarray(tokens[_rows_of(sampled, offsets)], dtype=np.float32)
    k = settings.get("n_centroids") or int(2 ** math.floor(math.log2(16 * math.sqrt(len(sample) / n_sample * n_docs))))
    k = max(1, min(k, len(sample)))
    centroids = _kmeans(sample, k, settings["kmeans_niters"], settings["max_points_per_centroid"], settings["seed"])
    heldout = sample[len(sample) - min(50_000, max(1, round(0.05 * len(sample)))) :]
    residual = (heldout - centroids[_codes(heldout, centroids)]).ravel()
    n_options = 1 << nbits
    cutoffs = np.quantile(residual, np.arange(1, n_options) / n_options).astype(np.float32)
    weights = np.quantile(residual, (np.arange(n_options) + 0.5) / n_options).astype(np.float32)
    del sample, heldout, residual

    codes = np.lib.format.open_memmap(out / "codes.npy", mode="w+", dtype=np.int32, shape=(n_tok,))
    packed = np.lib.format.open_memmap(out / "residuals.npy", mode="w+", dtype=np.uint8, shape=(n_tok, dim * nbits // 8))
    for start in range(0, n_tok, block_rows):
        block = np.asarray(tokens[start : start + block_rows], dtype=np.float32)
        c = _codes(block, centroids)
        buckets = np.searchsorted(cutoffs, block - centroids[c], side="left").astype(np.uint8)  # torch.bucketize(right=False)
        codes[start : start + len(block)] = c
        packed[start : start + len(block)] = _pack(buckets, nbits)
    codes.flush()
    packed.flush()
    # inverted file: centroid -> the documents with a token coded to it (each once, ascending)
    owner = np.repeat(np.arange(n_docs, dtype=np.int64), np.diff(offsets))
    pairs = np.unique(np.asarray(codes, dtype=np.int64) * n_docs + owner)
    ivf = (pairs % n_docs).astype(np.int32)
    ivf_offsets = np.concatenate([[0], np.cumsum(np.bincount(pairs // n_docs, minlength=k))]).astype(np.int64)
    del codes, packed, owner, pairs
    for name, arr in (("centroids.npy", centroids), ("bucket_cutoffs.npy", cutoffs), ("bucket_weights.npy", weights),
                      ("ivf.npy", ivf), ("ivf_offsets.npy", ivf_offsets), (OFFSETS, offsets)):  # fmt: skip
        np.save(out / name, arr, allow_pickle=False)
    return {
        "type": "plaid", "n_docs": int(n_docs), "n_tokens": int(n_tok), "dim": int(dim), "n_centroids": int(k),
        "n_sampled_docs": int(n_sample), **{key: settings[key] for key in PLAID_DEFAULTS}, "files": list(PLAID_FILES),
    }  # fmt: skip


class PlaidIndex:
    """A stored PLAID index, memory-mapped (codes and residuals are read for the candidates only)."""

    def __init__(self, folder: Path, settings: dict[str, Any]):
        folder = Path(folder)
        load = lambda name, mmap=None: np.load(folder / name, mmap_mode=mmap, allow_pickle=False)  # noqa: E731
        self.centroids = load("centroids.npy")
        self.cutoffs, self.weights = load("bucket_cutoffs.npy"), load("bucket_weights.npy")
        self.codes, self.residuals = load("codes.npy", "r"), load("residuals.npy", "r")
        self.ivf, self.ivf_offsets = load("ivf.npy", "r"), load("ivf_offsets.npy")
        self.offsets = load(OFFSETS)
        self.settings = settings
        self.dim = self.centroids.shape[1]

    def decompress(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The documents' token vectors rebuilt (centroid + residual buckets' weights, normalised), and their lengths."""
        rows = _rows_of(docs, self.offsets)
        codes = np.asarray(self.codes[rows])
        buckets = _unpack(np.asarray(self.residuals[rows]), self.dim, self.settings["nbits"])
        vecs = self.centroids[codes] + self.weights[buckets]
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        return vecs.astype(np.float32), self.offsets[docs + 1] - self.offsets[docs]

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(documents, scores)`` of one query's ``(tokens, dim)`` vectors, best first (ties: lower document first)."""
        s = self.settings
        if s.get("searcher") == "colbertv2":
            return self.search_colbert(query, k)
        cs = self.centroids @ query.T  # (centroids, query tokens)
        probe = min(s["n_ivf_probe"], len(cs))
        cells = np.unique(np.argpartition(-cs, probe - 1, axis=0)[:probe].ravel()) if probe < len(cs) else np.arange(len(cs))
        starts, ends = self.ivf_offsets[cells], self.ivf_offsets[cells + 1]
        lens = ends - starts
        cand = np.unique(np.asarray(self.ivf[np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(int(lens.sum()))]))
        if len(cand) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        # centroid interaction: each document token replaced by its centroid's score
        rows = _rows_of(cand, self.offsets)
        dl = self.offsets[cand + 1] - self.offsets[cand]
        approx = np.maximum.reduceat(cs[np.asarray(self.codes[rows])], np.concatenate([[0], np.cumsum(dl)[:-1]]), axis=0).sum(axis=1)
        keep = _best(approx, s["n_full_scores"])
        keep = keep[_best(approx[keep], max(k, s["n_full_scores"] // 4))]
        docs = cand[keep]
        vecs, lengths = self.decompress(docs)
        sim = vecs @ query.T
        scores = np.maximum.reduceat(sim, np.concatenate([[0], np.cumsum(lengths)[:-1]]), axis=0).sum(axis=1).astype(np.float32)
        order = np.lexsort((docs, -scores))
        return docs[order], scores[order]

    def _centroid_maxsim(self, cand: np.ndarray, cs: np.ndarray, kept: np.ndarray | None) -> np.ndarray:
        """Each candidate's MaxSim with its tokens replaced by their centroids' scores ``cs`` (centroids x query
        tokens); with ``kept`` only tokens whose centroid is kept count, and a query token no kept token
        meets scores -9999 (filter_pids.cpp l.30-63, colbert_score_reduce's padding value)."""
        rows = _rows_of(cand, self.offsets)
        codes = np.asarray(self.codes[rows])
        dl = self.offsets[cand + 1] - self.offsets[cand]
        token_scores = cs[codes]
        if kept is not None:
            token_scores = np.where(kept[codes][:, None], token_scores, np.float32(-9999))
        per_doc = np.full((len(cand), cs.shape[1]), -9999, dtype=np.float32)
        nonempty = dl > 0
        if nonempty.any():
            starts = np.concatenate([[0], np.cumsum(dl)[:-1]])[nonempty]
            per_doc[nonempty] = np.maximum.reduceat(token_scores, starts, axis=0)
        return per_doc.sum(axis=1, dtype=np.float32)

    def search_colbert(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The search of the ColBERT engine flmr bundles (FLMR third_party/ColBERT at be4b748), over this index.

        - all-zero query vectors removed first (searcher.py l.124-130, ``remove_zero_tensors``, which
          flmr's ``search_custom_collection`` sets);
        - candidates from the first ``query_maxlen`` query vectors only (index_storage.py l.77): the
          ``ncells`` best centroids of each (candidate_generation.py l.12-19), every document in those cells;
        - stage 1: centroid scores with the centroids whose best score over those query vectors is
          below ``centroid_score_threshold`` left out (index_storage.py l.115-142), the best ``ndocs`` kept;
        - stage 2: every centroid's score, the best ``ndocs // 4`` kept (l.144-151);
        - stage 3: MaxSim of every query vector with the decompressed documents (l.158-179).

        Not emulated: the GPU path computes the centroid scores in fp16 (candidate_generation.py l.51-52).
        """
        s = self.settings
        ncells, threshold, ndocs = colbert_search_settings(k, s)
        if s.get("remove_zero_query_tokens"):
            query = query[np.abs(query).sum(axis=1) > 0]
        if len(query) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        cs = (self.centroids @ query[: s.get("query_maxlen") or len(query)].T).astype(np.float32)  # (centroids, query_maxlen)
        probe = min(ncells, len(cs))
        cells = np.unique(np.argpartition(-cs, probe - 1, axis=0)[:probe].ravel()) if probe < len(cs) else np.arange(len(cs))
        starts, ends = self.ivf_offsets[cells], self.ivf_offsets[cells + 1]
        lens = ends - starts
        cand = np.unique(np.asarray(self.ivf[np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(int(lens.sum()))]))
        if len(cand) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        kept = cs.max(axis=1) >= threshold
        approx = self._centroid_maxsim(cand, cs, kept)
        if ndocs < len(cand):
            cand = cand[_best(approx, ndocs)]
        approx = self._centroid_maxsim(cand, cs, None)
        if ndocs // 4 < len(cand):
            cand = cand[_best(approx, ndocs // 4)]
        vecs, lengths = self.decompress(cand)
        sim = vecs @ query.T
        scores = np.maximum.reduceat(sim, np.concatenate([[0], np.cumsum(lengths)[:-1]]), axis=0).sum(axis=1).astype(np.float32)
        order = np.lexsort((cand, -scores))
        return cand[order], scores[order]


def _best(scores: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``n`` best scores (all when fewer), best first, ties by position."""
    if n >= len(scores):
        return np.lexsort((np.arange(len(scores)), -scores))
    part = np.argpartition(-scores, n - 1)[:n]
    return part[np.lexsort((part, -scores[part]))]


def plaid_bytes(n_tokens: int, dim: int, nbits: int, n_docs: int) -> int:
    """Bytes a PLAID index over ``n_tokens`` vectors holds on disk (codes, residuals, inverted file at most one entry per token)."""
    return n_tokens * (4 + dim * nbits // 8 + 4) + n_docs * 8
