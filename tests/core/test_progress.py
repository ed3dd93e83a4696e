"""Progress bars: silent with progress=False, a tqdm bar on stderr with progress=True, same results either way.

Covered: the three encoders (sentence-transformers and plain transformers on a seeded tiny BERT
folder, open_clip on the bundled tiny architecture), the FAISS index build and search, BM25 fit and
search, and the rule that decides the default (a terminal outside CI).
"""

import faiss
import numpy as np
import pytest

from medbench_core.progress import resolve, want_progress
from medbench_core.retrieval import bm25_index
from medbench_core.retrieval.index import ADD_CHUNK, build_index, search
from medbench_core.retrieval.kinds.dense import load_text_encoder
from medbench_core.retrieval.model_registry import model_spec
from medbench_core.retrieval.records import load_encoder

TEXTS = [f"patient {i} presents with chest pain and shortness of breath" for i in range(10)]


def test_the_default_is_a_terminal_outside_ci():
    assert want_progress(True, {}) is True
    assert want_progress(False, {}) is False  # logs, pipes, a Dagster run's captured stderr
    assert want_progress(True, {"CI": "true"}) is False
    assert want_progress(True, {"GITHUB_ACTIONS": "true"}) is False
    assert want_progress(True, {"CI": "0"}) is True and want_progress(True, {"CI": ""}) is True
    assert want_progress(True, {"TERM": "dumb"}) is False
    assert resolve(True) is True and resolve(False) is False


def run_quiet_and_loud(capfd, fn):
    """fn(progress) run twice; returns (stderr quiet, stderr loud, result quiet, result loud)."""
    capfd.readouterr()
    a = fn(False)
    quiet = capfd.readouterr().err
    b = fn(True)
    loud = capfd.readouterr().err
    return quiet, loud, a, b


def is_bar(text: str, desc: str) -> bool:
    return desc in text and "100%|" in text


def test_index_build_and_search(capfd):
    rng = np.random.default_rng(0)
    n = ADD_CHUNK + 1000  # two add() chunks
    emb = rng.standard_normal((n, 8)).astype(np.float32)
    q = rng.standard_normal((5, 8)).astype(np.float32)
    quiet, loud, (a, _), (b, _) = run_quiet_and_loud(capfd, lambda p: build_index(emb, {"type": "flat"}, use_gpu=False, progress=p))
    assert quiet == "" and is_bar(loud, "faiss flat add") and "2/2" in loud
    assert faiss.serialize_index(a).tobytes() == faiss.serialize_index(b).tobytes()  # chunked add, same index
    ids = [f"d{i}" for i in range(n)]
    quiet, loud, ra, rb = run_quiet_and_loud(capfd, lambda p: search(a, q, ["q1", "q2", "q3", "q4", "q5"], ids, 10, progress=p))
    assert quiet == "" and is_bar(loud, "rank") and "5/5" in loud
    assert ra.equals(rb)


def test_bm25_fit_and_search(capfd):
    quiet, loud, ra, rb = run_quiet_and_loud(
        capfd, lambda p: bm25_index.search(bm25_index.fit(TEXTS, progress=p), ["a", "b"], ["chest pain", "breath"], [f"d{i}" for i in range(10)], 3, progress=p)
    )
    assert quiet == "" and is_bar(loud, "bm25 search") and "2/2" in loud
    assert ra.equals(rb)


@pytest.mark.model
@pytest.mark.parametrize("kind, desc", [("sentence-transformers", "Batches"), ("transformers", "tiny passages")])
def test_text_encoders(capfd, tiny_bert_dir, kind, desc):
    spec = model_spec(name="tiny", kind=kind, path=str(tiny_bert_dir), batch_size=4, settings={"max_length": 32})
    quiet, loud, a, b = run_quiet_and_loud(capfd, lambda p: load_text_encoder(spec, progress=p).encode(TEXTS, role="passage"))
    assert quiet == "" and is_bar(loud, desc) and "3/3" in loud  # 10 texts in batches of 4
    assert np.array_equal(a, b)


@pytest.mark.model
def test_clip_encoder(capfd):
    spec = model_spec(name="tiny-clip", kind="open_clip", settings={"architecture": "medbench-tiny-clip"}, batch_size=4)
    quiet, loud, a, b = run_quiet_and_loud(capfd, lambda p: load_encoder(spec, progress=p).encode_records(TEXTS, [None] * 10, ["en"] * 10, "query"))
    assert quiet == "" and is_bar(loud, "tiny-clip texts") and "3/3" in loud
    assert np.array_equal(a, b)
