"""Model kinds as plugins (medbench_core/retrieval/kinds): one module per kind, registered by name; the
rest of medbench asks a model's kind and never compares kind names; each kind owns a typed settings
schema that refuses what it does not know, naming the file, the entry and the closest known key.

Every check over the kinds derives its list from ``KINDS``: adding a kind (its module, one
registration line, its test, one docs line: docs/contributing/adding_a_kind.md) edits nothing here.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds import KINDS, get_kind, kind_names
from medbench_core.retrieval.kinds.base import Kind, ModelKind, cached_revision
from medbench_core.retrieval.kinds.derived_base import DerivedKind, RunBuilder
from medbench_core.retrieval.kinds.retriever_base import Retriever, RetrieverKind
from medbench_core.retrieval.model_registry import load_registry, model_spec

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("medbench_core", "runtime", "assets", "orchestration", "medbench_cli", "medbench_release")
KINDS_DIR = ROOT / "medbench_core" / "retrieval" / "kinds"


def test_every_registered_kind_is_one_module_with_a_kind_of_that_name():
    assert kind_names() == tuple(KINDS) and len(set(KINDS.values())) == len(KINDS)
    for name, target in KINDS.items():
        module, _ = target.split(":")
        assert (KINDS_DIR / f"{module}.py").is_file(), name
        kind = get_kind(name)
        assert isinstance(kind, Kind) and kind.name == name
        assert isinstance(kind, RetrieverKind) != isinstance(kind, DerivedKind)  # either searches the corpus or builds from upstreams
        assert dataclasses.is_dataclass(kind.Settings) and kind.Settings.__dataclass_params__.frozen
        assert kind.version


def test_every_kind_module_in_the_package_is_registered():
    """A module that defines a kind instance but has no registration line would never be used."""
    registered = {tuple(t.split(":")) for t in KINDS.values()}
    unregistered = []
    for path in sorted(KINDS_DIR.glob("*.py")):
        module = importlib.import_module(f"medbench_core.retrieval.kinds.{path.stem}")
        for attribute, value in vars(module).items():
            if isinstance(value, Kind) and getattr(value, "__module__", None) == module.__name__ and (path.stem, attribute) not in registered:
                unregistered.append(f"{path.stem}:{attribute} ({value.name!r})")
    assert unregistered == []


def _parameters(function) -> list[tuple[str, inspect._ParameterKind]]:
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values() if p.name != "self"]


@pytest.mark.parametrize("name", kind_names())
def test_every_retriever_kind_satisfies_the_retriever_protocol_and_every_derived_kind_computes(name):
    kind = get_kind(name)
    if isinstance(kind, RunBuilder):
        assert type(kind).compute is not DerivedKind.compute, f"derived kind {name} implements no compute()"
        return
    assert isinstance(kind, Retriever), f"kind {name} lacks one of Retriever's methods (embed_corpus, represent_queries, search)"
    for method in ("embed_corpus", "represent_queries", "search"):
        # the stages call them with these names, by keyword after the positional ones
        assert _parameters(getattr(kind, method)) == _parameters(getattr(Retriever, method)), f"{name}.{method}"


@pytest.mark.parametrize("name", kind_names())
def test_every_kind_has_its_line_in_the_kinds_table_of_the_docs(name):
    module = KINDS[name].split(":")[0]
    table = (ROOT / "docs" / "models_and_kinds.md").read_text()
    assert re.search(rf"^\| `{re.escape(name)}` \| `{module}\.py` \| [^|]+ \| .+ \|$", table, flags=re.MULTILINE), (
        f"docs/models_and_kinds.md: no row '| `{name}` | `{module}.py` | <what it reads> | <its settings> |' in the kinds table"
    )


MODEL_KIND_METHODS = ("revision", "upstream", "applicability", "partition_keys", "load")


@pytest.mark.parametrize("name", kind_names())
def test_every_kind_satisfies_the_required_protocol_and_has_exactly_one_compute_capability(name):
    kind = get_kind(name)
    assert isinstance(kind, ModelKind)
    for method in MODEL_KIND_METHODS:
        assert _parameters(getattr(kind, method)) == _parameters(getattr(ModelKind, method)), f"{name}.{method}"
    # a retriever represents the corpus and searches it; a derived kind builds its run from its inputs; never both
    assert isinstance(kind, Retriever) != isinstance(kind, RunBuilder), name
    assert not hasattr(kind, "derived")  # no flag beside the capability: is_derived() asks for a RunBuilder
    if isinstance(kind, RunBuilder):
        for method in ("inputs", "check_inputs", "compute"):
            assert _parameters(getattr(kind, method)) == _parameters(getattr(RunBuilder, method)), f"{name}.{method}"


def test_the_required_protocol_is_small_and_the_registry_refuses_a_kind_that_lacks_part_of_it():

    from medbench_core.retrieval.kinds.base import model_kind

    methods = [m for m, v in vars(ModelKind).items() if callable(v) and not m.startswith("_")]
    assert sorted(methods) == sorted(MODEL_KIND_METHODS)  # three attributes and five methods, as the docstring says
    assert sorted(ModelKind.__annotations__) == ["Settings", "name", "version"]

    class NoRevision:
        name, version, Settings = "no-revision", "1", None

        def upstream(self, spec): ...
        def applicability(self, spec, task, registry): ...
        def partition_keys(self, spec, task, ctx): ...
        def load(self, spec, *, device="cpu", progress=False, online=False): ...

    assert not isinstance(NoRevision(), ModelKind)
    with pytest.raises(TypeError, match=r"^model m: kind no-revision is not a ModelKind \(it lacks revision\)$"):
        model_kind(SimpleNamespace(name="m", kind="no-revision", plugin=NoRevision()))
    bm25 = model_spec(name="bm25", kind="bm25")
    assert model_kind(bm25) is bm25.plugin


def test_one_revision_concept_the_others_are_derived_from_it():
    """A kind says one revision (:meth:`Kind.revision`); a model without weights of its own (fusion, expanded) has
    ``""``, a cross-encoder its weights', and an expanded model's partitions show its retriever's."""
    from medbench_core.retrieval import derived
    from medbench_core.retrieval.derived import model_revision

    for base in (Kind, RetrieverKind, DerivedKind):
        assert not hasattr(base, "weights_revision") and not hasattr(base, "shown_revision")
    assert not hasattr(derived, "derived_revision")  # folded into cached_revision (the kind's one revision, cached)
    bm25 = model_spec(name="bm25", kind="bm25", revision="r7")
    registry = {
        "bm25": bm25,
        "bm25+q2d": model_spec(name="bm25+q2d", kind="expanded", retriever="bm25", expansion="q2d"),
        "fused": model_spec(name="fused", kind="fusion", fusion={"runs": ["bm25", "bm25+q2d"], "method": "rrf"}),
    }
    assert cached_revision(bm25) == model_revision(bm25, registry) == "r7"  # bm25's revision: the entry's, else "bm25s"
    assert cached_revision(model_spec(name="plain", kind="bm25")) == "bm25s"
    assert cached_revision(registry["bm25+q2d"]) == "" and model_revision(registry["bm25+q2d"], registry) == "r7"
    assert cached_revision(registry["fused"]) == model_revision(registry["fused"], registry) == ""


class _Plain(RetrieverKind):
    """A retriever kind that says nothing beyond the base: what a new, non-dense kind inherits."""

    name = "plain"


def test_the_base_claims_nothing_dense_and_the_encoder_base_holds_the_dense_defaults():
    from medbench_core.retrieval.kinds import capabilities
    from medbench_core.retrieval.kinds.encoder import EncoderKind

    spec = model_spec(name="b", kind="bm25")
    kind = _Plain()
    plain = SimpleNamespace(name="p", kind="plain", plugin=kind)  # a model of a kind not in KINDS
    assert not isinstance(kind, capabilities.BuildsIndex)
    assert capabilities.index_identity(plain) == "plain"  # no index of its own: the index stage is keyed by a constant
    assert kind.long_text_params(spec) == {} and kind.mteb_meta(spec, {})["model_type"] == []
    assert capabilities.build_index(plain, Path("unused"), Path("unused"), use_gpu=None, progress=None, available=None) == {
        "type": "none",
        "built_on": "cpu",
        "files": [],
    }
    assert not isinstance(kind, Retriever)  # the three compute methods are the subclass's own
    encoder = EncoderKind()
    assert isinstance(encoder, capabilities.BuildsIndex) and encoder.index_identity(spec) == {"type": "flat"}
    assert encoder.long_text_params(spec) == {"long_text": "truncate", "max_length": None}
    assert encoder.mteb_meta(spec, {})["model_type"] == ["dense"]


def _kind_comparisons(path: Path) -> list[str]:
    """``x.kind == ...`` / ``in`` / ``!=`` comparisons, and comparisons with a registered kind's name, in ``path``."""
    names = set(kind_names())
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        # ``x.kind`` of a model (numpy's ``dtype.kind`` is another thing)
        on_kind = any(isinstance(s, ast.Attribute) and s.attr == "kind" and not (isinstance(s.value, ast.Attribute) and s.value.attr == "dtype") for s in sides)
        operands = [e for s in sides for e in (s.elts if isinstance(s, (ast.Tuple, ast.List, ast.Set)) else [s])]
        literals = {s.value for s in operands if isinstance(s, ast.Constant) and isinstance(s.value, str)}
        if on_kind or literals & names:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_code_outside_the_kinds_package_compares_kind_names():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if KINDS_DIR not in path.parents:
                found += _kind_comparisons(path)
    # Names that are not model kinds (index types, checkpoint types) compare a local variable, never
    # ``.kind`` of a model, and never a registered kind's name.
    assert found == []


def test_the_grep_would_notice_a_comparison(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text('def f(spec):\n    if spec.kind == "bm25":\n        return 1\n    return "open_clip" in (spec.name,)\n')
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        assert len(_kind_comparisons(bad)) == 2
    finally:
        ROOT = root


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"name": "bm25", "kind": "bm25", "settings": {"bb": 0.4}}, r"model 'bm25': unknown setting 'bb' for kind bm25 \(did you mean 'b'\?\)"),
        ({"name": "bm25", "kind": "bm25", "settings": {"methd": "lucene"}}, r"unknown setting 'methd' for kind bm25 \(did you mean 'method'\?\)"),
        ({"name": "bm25", "kind": "bm25", "settings": {"k1": "high"}}, r"setting 'k1' must be float, not 'high'"),
        ({"name": "bm25", "kind": "bm25", "settings": {"method": "bm26"}}, r"method 'bm26' unknown; use one of lucene, robertson"),
        ({"name": "bm25", "kind": "bm25", "settings": {"stemmer": "klingon"}}, r"stemmer 'klingon' unknown; PyStemmer has"),
        (
            {"name": "st", "kind": "sentence-transformers", "path": "x", "settings": {"normalise": True}},
            r"unknown setting 'normalise' .*did you mean 'normalize'",
        ),
        ({"name": "st", "kind": "sentence-transformers", "path": "x", "settings": {"pooling": "cls"}}, r"use kind transformers to choose mean or cls"),
        ({"name": "c", "kind": "open_clip", "settings": {"architecture": "medbench-tiny-clip", "fusion_wieght": 0.3}}, r"did you mean 'fusion_weight'"),
        ({"name": "c", "kind": "open_clip", "settings": {"architecture": "medbench-tiny-clip", "fusion_weight": 2}}, r"fusion_weight 2.0 must lie in \[0, 1\]"),
        ({"name": "x", "kind": "bm-25"}, r"unknown kind 'bm-25' \(did you mean 'bm25'\?\)"),
        ({"name": "x", "kind": "bm25", "revison": "r"}, r"unknown field 'revison' for kind bm25 \(did you mean 'revision'\?\)"),
        ({"name": "x", "kind": "bm25", "path": "models/x"}, r"kind bm25 takes no 'path'; BM25 has no weights"),
        ({"name": "f", "kind": "fusion", "fusion": {"runs": ["a", "b"], "kk": 3}}, r"fusion has unknown field 'kk' \(did you mean 'k'\?\)"),
    ],
)
def test_a_typo_is_refused_naming_the_file_the_entry_and_the_closest_key(tmp_path, entry, message):
    import yaml

    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [entry]}))
    with pytest.raises(DataError, match=message) as err:
        load_registry(path)
    assert str(err.value).startswith(f"{path}: model {entry['name']!r}")


def test_settings_are_typed_and_identity_holds_what_differs_from_the_defaults():
    spec = model_spec(name="bm25", kind="bm25", settings={"k1": 1, "b": 0.4})
    assert spec.settings.k1 == 1.0 and isinstance(spec.settings.k1, float) and spec.settings.method == "lucene"
    assert spec.identity()["settings"] == {"k1": 1.0, "b": 0.4}
    assert model_spec(**spec.to_entry()) == spec  # the entry form reads back to the same spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.settings.k1 = 2.0  # type: ignore[misc]


def test_the_project_registry_reads_with_every_setting_known():
    specs = load_registry(ROOT / "models.yaml")
    assert specs and all(s.kind in KINDS for s in specs)
    assert all(type(s.settings) is get_kind(s.kind).Settings for s in specs)
