"""A kind's optional capabilities (medbench_core/retrieval/kinds/capabilities.py): which registered kinds have
each, that the base classes no longer carry their hooks, and that a kind without one (or with only part of one)
is handled by the helpers the rest of medbench asks."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds import capabilities, get_kind, kind_names
from medbench_core.retrieval.kinds import spec as spec_module
from medbench_core.retrieval.kinds.base import Kind, model_kind
from medbench_core.retrieval.kinds.capabilities import (
    ChecksEntry,
    Expandable,
    ExpandsQueries,
    NeedsPath,
    OwnEntryFields,
    RefusesPath,
    RunsTrustedCode,
    TakesQueryPrompt,
    complete,
    expansion_family,
    expansion_name,
    grant_trust,
    half_implemented,
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
OWN_ENTRY_FIELDS = {"cross-encoder": ("rerank",), "fusion": ("fusion",), "expanded": ("retriever", "expansion", "combine", "repeat_query")}
CHECKS_ENTRY = {"open_clip", "uniir-clip-sf", "colbert", "code-folder-late"}
NEEDS_PATH = {
    "sentence-transformers", "transformers", "cross-encoder", "uniir-clip-sf", "remote-code-embedder", "colbert", "code-folder", "code-folder-late",
}  # fmt: skip
REFUSES_PATH = {"bm25": "BM25 has no weights", "lucene-bm25": "BM25 has no weights", "fusion": "a fusion has no weights; its runs name the models it fuses",
                "expanded": "its retriever's entry names the model", "tfidf": "TF-IDF has no weights; it is fitted on each task's corpus"}  # fmt: skip
BUILDS_INDEX = {
    "bm25", "lucene-bm25", "sentence-transformers", "transformers", "open_clip", "uniir-clip-sf", "remote-code-embedder",
    "code-folder", "colbert", "code-folder-late",
}  # fmt: skip
CHECKS_BEFORE_SEARCH = {"sentence-transformers", "transformers", "open_clip", "uniir-clip-sf", "remote-code-embedder", "code-folder"}
WRITES_QUERY_FILES = CHECKS_BEFORE_SEARCH | {"colbert", "code-folder-late"}
CAPABILITIES = {
    capabilities.BuildsIndex: ("index_identity", "build_index"),
    capabilities.ChecksBeforeSearch: ("before_search",),
    capabilities.WritesQueryFiles: ("query_files",),
    OwnEntryFields: ("block_entry", "entry_fields", "parse_block"),
    ChecksEntry: ("check_entry",),
    NeedsPath: ("needs_path",),
    RefusesPath: ("no_path_reason",),
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
    assert {n: k.entry_fields for n, k in known.items() if isinstance(k, OwnEntryFields)} == OWN_ENTRY_FIELDS
    assert {n for n, k in known.items() if isinstance(k, ChecksEntry)} == CHECKS_ENTRY
    assert {n for n, k in known.items() if isinstance(k, NeedsPath)} == NEEDS_PATH
    assert {n: k.no_path_reason for n, k in known.items() if isinstance(k, RefusesPath)} == REFUSES_PATH
    assert {n for n, k in known.items() if isinstance(k, capabilities.BuildsIndex)} == BUILDS_INDEX  # TF-IDF: none
    assert {n for n, k in known.items() if isinstance(k, capabilities.ChecksBeforeSearch)} == CHECKS_BEFORE_SEARCH
    assert {n for n, k in known.items() if isinstance(k, capabilities.WritesQueryFiles)} == WRITES_QUERY_FILES
    assert {c: capabilities.members(c) for c in capabilities.CAPABILITIES} == {c: tuple(sorted(m)) for c, m in CAPABILITIES.items()}  # all, with their members
    for name in kind_names():
        kind = get_kind(name)
        assert half_implemented(kind) == [], name
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


class _HalfEntry(DerivedKind):
    """Declares fields of its own and reads them, but never writes them back (no ``block_entry``): its block would
    be left out of its identity, so out of every key."""

    name = "half-entry"
    entry_fields = ("extra",)

    def parse_block(self, spec, fields, where):
        return fields


class _PathBothWays(RetrieverKind):
    name = "both-ways"
    needs_path = True
    no_path_reason = "no weights"


class _OptionalSaidFalse(RetrieverKind):
    name = "false-path"
    needs_path = False


def test_a_half_implemented_capability_is_named_and_the_registry_refuses_its_kind():
    assert half_implemented(_HalfEntry()) == ["OwnEntryFields: it has entry_fields, parse_block but not block_entry"]
    assert not isinstance(_HalfEntry(), OwnEntryFields)
    assert half_implemented(_HalfExpanded()) == ["ExpandsQueries: it has expansion_name but not complete, corpus_of, record_params, upstream_runs"]
    assert half_implemented(_NoFamily()) == ["Expandable: it has instructs_expansion but not expansion_family"]
    assert half_implemented(_PathBothWays()) == ["NeedsPath and RefusesPath: a path cannot be both needed and refused"]
    assert half_implemented(_OptionalSaidFalse()) == ["NeedsPath: needs_path is False; a kind whose path is optional leaves it out"]
    assert half_implemented(_Bare()) == []
    with pytest.raises(
        TypeError, match=r"^model m: kind half-entry has part of a capability: OwnEntryFields: it has entry_fields, parse_block but not block_entry$"
    ):
        model_kind(_spec(_HalfEntry()))
    assert model_kind(_spec(_Bare())) is not None


def test_model_kind_names_a_missing_required_member():
    class NoLoad:  # the required protocol less load()
        name, version, Settings = "no-load", "1", object

        def revision(self, spec): ...
        def upstream(self, spec): ...
        def applicability(self, spec, task, registry): ...
        def partition_keys(self, spec, task, ctx): ...

    with pytest.raises(TypeError, match=r"^model m: kind no-load is not a ModelKind \(it lacks load\)$"):
        model_kind(_spec(NoLoad()))


def test_the_entry_and_path_helpers_follow_the_capabilities():
    with pytest.raises(DataError, match=r"kind bm25 takes no 'path'; BM25 has no weights"):
        model_spec(name="b", kind="bm25", path="org/bm25")
    with pytest.raises(DataError, match=r"kind cross-encoder needs 'path' \(a hub id or a local folder\)"):
        model_spec(name="c", kind="cross-encoder", rerank={"upstream": "b"})
    clip = model_spec(name="clip", kind="open_clip", path="/weights/clip.pt", settings={"architecture": "ViT-B-32"})  # optional, given
    assert clip.block is None and spec_module.block_entry(clip) == {}
    with pytest.raises(DataError, match=r"settings need 'architecture'"):  # ChecksEntry: open_clip's check of the whole entry
        model_spec(name="clip", kind="open_clip")
    fused = model_spec(name="f", kind="fusion", fusion={"runs": ["a", "b"], "method": "rrf"})
    assert spec_module.block_entry(fused) == {"fusion": {"method": "rrf", "runs": ["a", "b"], "k": 60}}
    assert fused.identity()["fusion"] == spec_module.block_entry(fused)["fusion"]
    with pytest.raises(DataError, match=r"unknown field 'fusion' for kind bm25 \('fusion' belongs to kind fusion\)"):
        model_spec(name="b", kind="bm25", fusion={"runs": ["a", "b"]})
    assert spec_module.entry_fields(get_kind("bm25")) == () and spec_module.path_rule(get_kind("open_clip")) == (False, True, "")
