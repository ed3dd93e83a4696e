"""RELIABILITY 5 and 6 for FAISS indices.

5. A truncated file, a flipped header byte and a flipped data byte are all refused by our own
   sha256 manifest before the index is used. FAISS alone loads the flipped data byte silently
   and returns other scores, which is why the manifest check is needed.
6. An index rebuilt and searched with 1 and with N threads gives identical ids and scores, and
   ties come out in our order (descending doc id, as trec_eval reads a run), whatever order
   FAISS returns them in.
"""

from __future__ import annotations

import shutil

import faiss
import numpy as np
import pytest

from medbench_core.errors import DataError, IntegrityError
from medbench_core.retrieval.index import build_index, load_index, save_index, search
from medbench_core.storage import verify_manifest, write_manifest

DIM = 8


@pytest.fixture()
def stored_index(tmp_path):
    rng = np.random.default_rng(7)
    emb = rng.standard_normal((200, DIM)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    index, _ = build_index(emb, {"type": "flat"}, use_gpu=False)
    folder = tmp_path / "index"
    folder.mkdir()
    save_index(index, folder / "index.faiss")
    write_manifest(folder, ["index.faiss"])
    queries = emb[:5] + 0.01
    return folder, queries


def _copy(folder, tmp_path, name):
    dst = tmp_path / name
    shutil.copytree(folder, dst)
    return dst, dst / "index.faiss"


def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_an_intact_index_verifies_and_loads(stored_index):
    folder, queries = stored_index
    verify_manifest(folder)
    index = load_index(folder / "index.faiss")
    assert index.ntotal == 200


def test_a_truncated_index_is_refused_by_the_manifest(stored_index, tmp_path):
    folder, _ = stored_index
    copy, f = _copy(folder, tmp_path, "truncated")
    size = f.stat().st_size
    f.write_bytes(f.read_bytes()[: size - 100])
    with pytest.raises(IntegrityError, match=rf"index\.faiss: size {size - 100} bytes, manifest says {size}: truncated"):
        verify_manifest(copy)
    with pytest.raises(DataError, match="FAISS could not read"):  # FAISS notices this one too
        load_index(f)


def test_a_flipped_header_byte_is_refused_by_the_manifest(stored_index, tmp_path):
    folder, _ = stored_index
    copy, f = _copy(folder, tmp_path, "header")
    assert f.read_bytes()[:4] == b"IxFI"  # the flat inner-product index's fourcc
    _flip(f, 1)
    with pytest.raises(IntegrityError, match=r"index\.faiss: sha256 \w+ does not match manifest \w+: corrupted"):
        verify_manifest(copy)


def test_a_flipped_data_byte_is_refused_by_the_manifest_although_faiss_loads_it(stored_index, tmp_path):
    folder, queries = stored_index
    copy, f = _copy(folder, tmp_path, "data")
    # The last bytes of a flat index are the stored vectors (the last document's float32 values).
    _flip(f, f.stat().st_size - 2)
    with pytest.raises(IntegrityError, match=r"index\.faiss: sha256 .* corrupted"):
        verify_manifest(copy)

    # Without the manifest nothing would notice: FAISS reads the file and scores differently.
    good, bad = load_index(folder / "index.faiss"), load_index(f)
    last = np.ascontiguousarray(good.reconstruct(199)[None, :])
    s_good, _ = good.search(last, 1)
    s_bad, _ = bad.search(last, 200)
    assert bad.ntotal == 200
    assert not np.array_equal(good.reconstruct(199), bad.reconstruct(199))
    assert s_good[0, 0] == pytest.approx(1.0, abs=1e-5) and not np.isclose(s_bad[0].max(), s_good[0, 0])


def _tied_corpus():
    """Documents 1-6 share three vectors; insertion order is not id order on purpose."""
    base = np.eye(DIM, dtype=np.float32)
    doc_ids = ["d2", "d10", "d5", "d7", "d3", "d11", "d1", "d4"]
    vecs = np.stack([base[0], base[0], base[0], base[1], base[1], base[2], base[3], base[4]])
    query = (0.9 * base[0] + 0.5 * base[1] + 0.2 * base[2]).astype(np.float32)[None, :]
    # Scores: d2, d10, d5 = 0.9; d7, d3 = 0.5; d11 = 0.2; d1, d4 = 0.
    # Ties by descending byte order of the id: "d5" > "d2" > "d10"; "d7" > "d3"; "d4" > "d1".
    expected = ["d5", "d2", "d10", "d7", "d3", "d11", "d4", "d1"]
    return doc_ids, vecs, query, expected


@pytest.mark.parametrize(
    "spec",
    [{"type": "flat"}, {"type": "ivf", "nlist": 2, "nprobe": 2}, {"type": "hnsw", "m": 8, "ef_search": 64}],
    ids=["flat", "ivf", "hnsw"],
)
def test_rebuilt_index_gives_identical_ids_with_1_and_n_threads_and_ties_by_doc_id(spec, tmp_path):
    doc_ids, vecs, query, expected = _tied_corpus()
    # Many repeated queries so that FAISS actually splits the batch across threads.
    queries = np.repeat(query, 64, axis=0)
    qids = [f"q{i}" for i in range(64)]
    before = faiss.omp_get_max_threads()
    runs = []
    try:
        for threads in (1, 4):
            faiss.omp_set_num_threads(threads)
            index, info = build_index(vecs, spec, use_gpu=False)
            save_index(index, tmp_path / f"{threads}.faiss")
            run = search(load_index(tmp_path / f"{threads}.faiss"), queries, qids, doc_ids, k=8)
            runs.append(run)
            assert info["built_on"] == "cpu"
    finally:
        faiss.omp_set_num_threads(before)
    one, many = runs
    assert one.equals(many)
    for qid in ("q0", "q63"):
        got = one.filter(one["query_id"] == qid)
        assert got["doc_id"].to_list() == expected
        assert got["rank"].to_list() == list(range(1, 9))
        assert got["score"].to_list()[:3] == pytest.approx([0.9, 0.9, 0.9])
