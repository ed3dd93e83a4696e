"""The index's vocabulary numbered in sorted order by permuting the columns of bm25s's score matrix
(medbench_core/retrieval/bm25_index.py) gives the very bytes bm25s writes when the token ids are
numbered in sorted order before it indexes them (what medbench did before, one token at a time)."""

from __future__ import annotations

import json

import pytest

from medbench_core.retrieval import bm25_index
from tests.orchestration.operating_env import ROOT

SCIFACT = ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl"


def _renumbered_first(texts: list[str], settings: dict) -> object:
    """bm25s indexing token ids renumbered in sorted vocabulary order beforehand."""
    bm25s = bm25_index._bm25s()
    s = bm25_index.bm25_settings(settings)
    tokenized = bm25s.tokenize(texts, stopwords=s["stopwords"], stemmer=bm25_index._stemmer(s["stemmer"]), return_ids=True, show_progress=False)
    ids, vocab = tokenized.ids, tokenized.vocab
    ordered = sorted(vocab)
    renumber = [0] * len(ordered)
    for new, token in enumerate(ordered):
        renumber[vocab[token]] = new
    ids = [[renumber[t] for t in doc] for doc in ids]
    retriever = bm25s.BM25(k1=float(s["k1"]), b=float(s["b"]), method=s["method"])
    retriever.index((ids, {token: i for i, token in enumerate(ordered)}), show_progress=False)
    return retriever


@pytest.mark.parametrize("method", ["lucene", "bm25l", "robertson"])
@pytest.mark.parametrize("block", [1 << 22, 5])  # one block, and columns moved a few at a time
def test_columns_permuted_give_the_bytes_of_ids_renumbered_first(tmp_path, monkeypatch, method, block):
    docs = [json.loads(line) for line in SCIFACT.read_text().splitlines()[:600]]
    texts = [f"{d.get('title', '')} {d.get('text', '')}".strip() for d in docs] + ["the of and", "aspirin aspirin aspirin"]
    monkeypatch.setattr(bm25_index, "_PERMUTE_BLOCK", block)
    want, got = tmp_path / "want", tmp_path / "got"
    _renumbered_first(texts, {"method": method}).save(str(want), allow_pickle=False)
    bm25_index.fit(texts, {"method": method}).save(str(got), allow_pickle=False)
    names = sorted(p.name for p in want.iterdir())
    assert names == sorted(p.name for p in got.iterdir()) and "vocab.index.json" in names
    assert ("nonoccurrence_array.index.npy" in names) == (method == "bm25l")
    for name in names:
        assert (want / name).read_bytes() == (got / name).read_bytes(), name
