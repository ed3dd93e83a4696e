"""``index: {type: plaid, searcher: colbertv2}``: the search of the ColBERT engine flmr bundles, as flmr runs it.

FLMR (github.com/LinWeizheDragon/FLMR at be4b748) searches with its bundled ColBERT:
``flmr.search_custom_collection`` (flmr/searching.py l.37-59) calls ``Searcher._search_all_Q`` with
``remove_zero_tensors=True``; ``Searcher.dense_search`` (third_party/ColBERT/colbert/searcher.py
l.95-136) sets ncells 2, centroid_score_threshold 0.45, ndocs 1024 for k <= 100 (4, 0.4,
max(4k, 4096) beyond) and drops all-zero query vectors; ``IndexScorer.rank`` (search/index_storage.py
l.67-98) generates candidates from the first ``query_maxlen`` query vectors (l.77; ColBERTConfig's
32) through ``CandidateGeneration`` (candidate_generation.py l.12-64), then ``score_pids`` (l.100-184).

``flmr_gpu_search`` below is that GPU path (the one M3Retrieve's run_flmr.py uses, ``use_gpu=True``)
written out in torch operation for operation, on medbench's stored PLAID index (its centroids, codes,
inverted file and decompressed vectors): the ColBERT engine itself does not install beside the lock
(it is not on PyPI and needs its C++ extensions). Its fp16 centroid scores are not emulated (float32 here).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from medbench_core.errors import DataError
from medbench_core.retrieval import multivector as mv


def flmr_gpu_search(index: mv.PlaidIndex, Q: np.ndarray, k: int, query_maxlen: int = 32, remove_zero_tensors: bool = True) -> tuple[list[int], list[float]]:
    """Searcher.dense_search (l.95-136) -> IndexScorer.rank (l.86-98) -> retrieve (l.67-80) -> score_pids' GPU branch (l.115-151, 159-179)."""
    ncells, threshold, ndocs = (2, 0.45, 1024) if k <= 100 else (4, 0.4, max(k * 4, 4096))
    Q = torch.from_numpy(Q)[None]
    if remove_zero_tensors:
        nonZeroRows = torch.abs(Q).sum(dim=-1) > 0  # l.124-130
        Q = Q[nonZeroRows].unsqueeze(0)
    centroids = torch.from_numpy(np.asarray(index.centroids))
    Qc = Q[:, :query_maxlen].squeeze(0)  # index_storage.py l.77, candidate_generation.py l.50
    scores = centroids @ Qc.T  # get_cells, l.13
    cells = scores.argmax(dim=0, keepdim=True).permute(1, 0) if ncells == 1 else scores.topk(ncells, dim=0, sorted=False).indices.permute(1, 0)
    cells = cells.flatten().contiguous().unique(sorted=False)
    ivf, ivf_off = np.asarray(index.ivf), np.asarray(index.ivf_offsets)
    pids = torch.from_numpy(np.concatenate([ivf[ivf_off[c] : ivf_off[c + 1]] for c in cells.tolist()]))
    pids = torch.unique_consecutive(pids.sort().values)  # l.57-60
    centroid_scores = scores
    codes_all, offsets = torch.from_numpy(np.asarray(index.codes).astype(np.int64)), np.asarray(index.offsets)

    def lookup_codes(p):
        return [codes_all[offsets[i] : offsets[i + 1]] for i in p.tolist()]

    def reduce(per_doc_scores):  # colbert_score_reduce: padding -9999, max over document tokens, sum over query tokens
        padded = torch.full((len(per_doc_scores), max(1, max(len(x) for x in per_doc_scores)), centroid_scores.shape[1]), -9999.0)
        for i, x in enumerate(per_doc_scores):
            padded[i, : len(x)] = x
        return padded.max(1).values.sum(-1)

    idx = centroid_scores.max(-1).values >= threshold  # l.115
    approx = reduce([centroid_scores[c[idx[c]]] for c in lookup_codes(pids)])  # l.120-140: pruned codes only
    if ndocs < len(approx):
        pids = pids[torch.topk(approx, k=ndocs).indices]
    approx = reduce([centroid_scores[c] for c in lookup_codes(pids)])  # l.144-149: every code
    if ndocs // 4 < len(approx):
        pids = pids[torch.topk(approx, k=(ndocs // 4)).indices]
    vecs, lengths = index.decompress(pids.numpy())  # l.160 (lookup_pids: centroid + residual, normalised)
    D = torch.from_numpy(vecs)
    final, start = [], 0
    for n in lengths.tolist():  # colbert_score_packed: MaxSim of every query vector
        final.append(float((Q[0] @ D[start : start + n].T).max(1).values.sum()))
        start += n
    order = sorted(range(len(final)), key=lambda i: -final[i])
    return [int(pids[i]) for i in order][:k], [final[i] for i in order][:k]


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """2,500 documents of 8-30 token vectors around 256 topics; PLAID with 8 bits, as M3Retrieve's FLMR index (run_flmr.py l.70, l.224)."""
    root = tmp_path_factory.mktemp("flmr")
    rng = np.random.default_rng(3)
    topics = rng.normal(size=(256, 32))
    docs = []
    for _ in range(2500):
        x = topics[rng.integers(0, 256, int(rng.integers(8, 30)))] + 0.3 * rng.normal(size=(1, 32))
        docs.append((x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32))
    writer = mv.TokenWriter(root, 32)
    writer.add(docs)
    writer.close()
    (root / "idx").mkdir()
    settings = mv.plaid_settings({"type": "plaid", "nbits": 8, "seed": 1, **mv.FLMR_SEARCH}, "test")
    mv.build_plaid(root, root / "idx", settings)
    # PreFLMR-like queries: question vectors, then visual ones (beyond the first 32), then zero padding (late_interaction_output)
    queries = []
    for d in docs[:12]:
        q = np.concatenate([d[:6], topics[rng.integers(0, 256, 40)], np.zeros((5, 32))]) + 0.05 * rng.normal(size=(1, 32))
        q[-5:] = 0.0
        q[:-5] /= np.linalg.norm(q[:-5], axis=1, keepdims=True)
        queries.append(q.astype(np.float32))
    return root / "idx", settings, queries


@pytest.mark.slow
def test_colbert_searcher_equals_flmrs_search_path(stored):
    folder, settings, queries = stored
    index = mv.PlaidIndex(folder, settings)
    for q in queries:
        for k in (10, 100):
            docs, scores = index.search(q, k)
            want_docs, want_scores = flmr_gpu_search(index, q, k)
            assert docs[:k].tolist() == want_docs
            np.testing.assert_allclose(scores[:k], want_scores, rtol=1e-5, atol=1e-4)


def test_flmrs_settings_score_far_fewer_documents_in_full_than_fast_plaids():
    """ColBERT at k <= 100 scores ndocs // 4 = 256 documents in full; fast-plaid keeps n_full_scores // 4 = 2,048."""
    assert mv.colbert_search_settings(10, {}) == (2, 0.45, 1024) and mv.colbert_search_settings(100, {}) == (2, 0.45, 1024)
    assert mv.colbert_search_settings(500, {}) == (4, 0.4, 4096) and mv.colbert_search_settings(2000, {}) == (4, 0.4, 8000)
    assert mv.colbert_search_settings(10, {"ncells": 8, "ndocs": 8192, "centroid_score_threshold": 0.0}) == (8, 0.0, 8192)


@pytest.mark.slow
def test_searchers_differ_on_the_same_index(stored):
    folder, settings, queries = stored
    colbert = mv.PlaidIndex(folder, settings)
    fast = mv.PlaidIndex(folder, {**settings, "searcher": "fast-plaid"})
    full_colbert = [len(colbert.search(q, 10)[0]) for q in queries]
    full_fast = [len(fast.search(q, 10)[0]) for q in queries]
    assert max(full_colbert) <= 256 and min(full_fast) > 256, (full_colbert, full_fast)


@pytest.mark.slow
def test_zero_query_vectors_are_removed_before_the_first_32_are_taken(stored):
    folder, settings, queries = stored
    index = mv.PlaidIndex(folder, settings)
    keep = mv.PlaidIndex(folder, {**settings, "remove_zero_query_tokens": False})
    moved = 0
    for q in queries:
        front = np.concatenate([np.zeros((10, 32), dtype=np.float32), q])  # zeros first: removing them moves the first 32
        top = index.search(front, 10)[0][:10].tolist()
        assert top == index.search(q, 10)[0][:10].tolist() == flmr_gpu_search(index, front, 10)[0]
        kept = keep.search(front, 10)[0][:10].tolist()
        assert kept == flmr_gpu_search(index, front, 10, remove_zero_tensors=False)[0]
        moved += len(keep.search(front, 10)[0]) != len(index.search(q, 10)[0]) or kept != top
    assert moved > 0  # keeping the zeros changes which vectors generate the candidates (and so what is scored)


def test_colbert_settings_are_checked():
    with pytest.raises(DataError, match="index ncells is a setting of searcher: colbertv2"):
        mv.plaid_settings({"type": "plaid", "ncells": 2}, "m")
    with pytest.raises(DataError, match="index searcher 'pylate' unknown"):
        mv.plaid_settings({"type": "plaid", "searcher": "pylate"}, "m")
    with pytest.raises(DataError, match="centroid_score_threshold must be a number"):
        mv.plaid_settings({"type": "plaid", "searcher": "colbertv2", "centroid_score_threshold": "high"}, "m")
    got = mv.plaid_settings({"type": "plaid", "nbits": 8, **mv.FLMR_SEARCH}, "m")
    assert got["searcher"] == "colbertv2" and got["remove_zero_query_tokens"] is True and got["query_maxlen"] == 32 and got["ndocs"] is None
