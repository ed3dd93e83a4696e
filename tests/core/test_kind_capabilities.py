"""A kind's optional capabilities (medbench_core/retrieval/kinds/capabilities.py): which registered kinds have
each, that the base classes no longer carry their hooks, and that a kind without one (or with only part of one)
is handled by the helpers the rest of medbench asks."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds import get_kind, kind_names
from medbench_core.retrieval.kinds.base import Kind
from medbench_core.retrieval.kinds.capabilities import (
    Expandable,
    ExpandsQueries,
    RunsTrustedCode,
    TakesQueryPrompt,
    complete,
    expansion_family,
    expansion_name,
    grant_trust,
    model_for_run,
    prompt_key,
    query_prompt,
    record_params,
    scoring_family,
    upstream_runs,
)
from medbench_core.retrieval.kinds.derived_base import DerivedKind, is_derived
from medbench_core.retrieval.kinds.retriever_base import Retriever, RetrieverKind, corpus_of
from medbench_core.retrieval.model_registry import model_spec

# worked out from each kind module: which kinds an expansion can meet (and how), which run another model's
# search on expanded queries, which run code from a folder
EXPANDABLE = {
    "bm25": "lexical",
    "lucene-bm25": "lexical",
    "sentence-transformers": "dense",
    "transformers": "dense",
    "remote-code-embedder": "dense",
    "code-folder": "dense",
}
EXPANDS_QUERIES = {"expanded"}
RUNS_TRUSTED_CODE = {"code-folder", "code-folder-late"}
TAKES_QUERY_PROMPT = {"sentence-transformers", "transformers", "uniir-clip-sf", "remote-code-embedder", "code-folder", "code-folder-late"}
CAPABILITIES = {
    Expandable: ("expansion_family", "instructs_expansion"),
    ExpandsQueries: ("expansion_name", "corpus_of", "complete", "upstream_runs", "record_params"),
    RunsTrustedCode: ("grant_trust",),
    TakesQueryPrompt: ("query_prompt", "prompt_key"),
}


def _parameters(function) -> list[tuple[str, inspect._ParameterKind]]:
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values() if p.name != "self"]


# the kinds those sets were worked out for (a kind added later is checked by the parameter loop, not listed here)
KNOWN = (
    "bm25", "sentence-transformers", "transformers", "open_clip", "cross-encoder", "fusion", "expanded", "uniir-clip-sf",
    "remote-code-embedder", "lucene-bm25", "colbert", "code-folder", "code-folder-late", "tfidf",
)  # fmt: skip


def test_each_registered_kind_has_the_capabilities_its_module_gives_it():
    known = {name: get_kind(name) for name in KNOWN}
    assert {n: k.expansion_family for n, k in known.items() if isinstance(k, Expandable)} == EXPANDABLE
    assert {n for n, k in known.items() if isinstance(k, ExpandsQueries)} == EXPANDS_QUERIES
    assert {n for n, k in known.items() if isinstance(k, RunsTrustedCode)} == RUNS_TRUSTED_CODE
    assert {n for n, k in known.items() if isinstance(k, TakesQueryPrompt)} == TAKES_QUERY_PROMPT
    for name in kind_names():
        kind = get_kind(name)
        for capability, members in CAPABILITIES.items():
            if isinstance(kind, capability):  # called by keyword and position as the protocol says
                for m in members:
                    if callable(getattr(capability, m, None)):
                        assert _parameters(getattr(kind, m)) == _parameters(getattr(capability, m)), f"{name}.{m}"


def test_the_base_classes_no_longer_carry_the_optional_hooks():
    for base in (Kind, RetrieverKind, DerivedKind):
        for members in CAPABILITIES.values():
            for m in members:
                assert not hasattr(base, m), f"{base.__name__}.{m}"
        for gone in ("scoring_family", "model_for_run", "query_settings", "derived"):
            assert not hasattr(base, gone), f"{base.__name__}.{gone}"


class _Bare(RetrieverKind):
    """A retriever with no optional capability: the three search methods and nothing else."""

    name = "bare"

    def embed_corpus(self, spec, task, out, *, model, progress, available): ...
    def represent_queries(self, spec, task, model, *, prompt, expansion=None): ...
    def search(self, spec, task, corpus, queries, k, *, pools, progress): ...


def _spec(kind, name="m"):
    return SimpleNamespace(name=name, kind=kind.name, plugin=kind)


def test_a_kind_without_an_optional_capability_gets_what_the_helpers_say_of_none():
    kind = _Bare()
    spec = _spec(kind)
    assert isinstance(kind, Retriever) and not any(isinstance(kind, c) for c in CAPABILITIES)
    assert expansion_name(spec) is None
    assert corpus_of(spec) == "m"  # a retriever searches its own stored corpus
    assert upstream_runs(spec) == ()
    assert scoring_family(spec, {}) is None  # pytrec_eval, which keeps a document whose id is its query's
    assert model_for_run(spec, {}) is None  # loads no weights
    assert complete(spec, {}, {}, "models.yaml") is spec
    assert record_params(spec, {"combine": {"mode": "concat"}}) == {}
    assert grant_trust(spec, {}, "models.yaml") is spec  # no code of its own: the allowlist does not concern it
    task = SimpleNamespace(name="t")  # no kind is asked about it
    assert query_prompt(spec, task) is None and prompt_key(spec, task) is None
    with pytest.raises(DataError, match=r"^model m: kind bare cannot be expanded; use a bm25 or text-encoder retriever$"):
        expansion_family(spec)


class _NoFamily(RetrieverKind):
    """Says how an expansion gets its instruction but not how an expansion meets it (no ``expansion_family``)."""

    name = "no-family"

    def instructs_expansion(self, spec):
        return True


class _HalfExpanded(DerivedKind):
    """Names an expansion but lacks the rest of ExpandsQueries (no corpus_of, complete, upstream_runs, record_params)."""

    name = "half-expanded"

    def expansion_name(self, spec):
        return "q2d"


def test_a_kind_with_only_part_of_a_capability_does_not_have_it():
    assert not isinstance(_NoFamily(), Expandable)
    with pytest.raises(DataError, match="kind no-family cannot be expanded"):
        expansion_family(_spec(_NoFamily()))
    half = _spec(_HalfExpanded())
    assert not isinstance(half.plugin, ExpandsQueries)
    assert expansion_name(half) is None and corpus_of(half) is None  # built from runs: no stored corpus of its own
    assert is_derived(half)


def test_the_helpers_follow_an_expanded_model_to_its_retriever():
    registry = {
        "bm25": model_spec(name="bm25", kind="bm25"),
        "e5": model_spec(name="e5", kind="sentence-transformers", path="org/e5"),
        "bm25+q2d": model_spec(name="bm25+q2d", kind="expanded", retriever="bm25", expansion="q2d"),
        "e5+hyde": model_spec(name="e5+hyde", kind="expanded", retriever="e5", expansion="hyde"),
        "fused": model_spec(name="fused", kind="fusion", fusion={"runs": ["bm25", "e5"], "method": "rrf"}),
    }
    assert [expansion_name(registry[n]) for n in registry] == [None, None, "q2d", "hyde", None]
    assert [corpus_of(registry[n]) for n in registry] == ["bm25", "e5", "bm25", "e5", None]
    # R2MED: BEIR (drops identical ids) for dense runs, expanded or not; pytrec_eval for BM25 and fused runs
    assert [scoring_family(registry[n], registry) for n in registry] == ["lexical", "dense", "lexical", "dense", None]
    assert scoring_family(registry["e5+hyde"], {}) is None  # its retriever is not in the registry given
    # the run stage keeps loaded: its own weights, an expanded model's retriever's, none for BM25 and a fusion
    assert [getattr(model_for_run(registry[n], registry), "name", None) for n in registry] == [None, "e5", None, "e5", None]
    assert upstream_runs(registry["fused"]) == ("bm25", "e5") and upstream_runs(registry["bm25+q2d"]) == ()
    assert record_params(registry["bm25+q2d"], {"expansion": {"key": "k1"}})["expansion_key"] == "k1"
    assert [is_derived(registry[n]) for n in registry] == [False, False, True, True, True]
