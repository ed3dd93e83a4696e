"""Every kind declares the libraries its output rests on (``Kind.packages``), and provenance derives from them.

A kind's library is a third-party distribution that its module imports (at module level or inside a
function), or that a module of ``medbench_core.retrieval`` outside ``kinds/`` imported by its module imports
(``dense.py`` reaches sentence-transformers through ``retrieval/text_encoders.py``), read with ``ast`` and mapped to
distributions by :func:`importlib.metadata.packages_distributions`. Each must be the kind's own
(``packages``) or one every stage rests on (``provenance.SCORING_PACKAGES``); what the environment
fingerprint of a benchmark version or a canary run records is their union
(:func:`medbench_core.retrieval.kinds.scoring_packages`), so a new kind edits no list outside its module.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

from medbench_core import provenance
from medbench_core.retrieval.kinds import KINDS, get_kind, scoring_packages

ROOT = Path(__file__).resolve().parents[2]
# Imported by retrieval modules, but no score depends on their version: progress bars; the hub client finds the
# files of a revision, and the revision (a commit, or a folder's hash) keys the artifacts itself.
NOT_SCORING = {"tqdm", "huggingface-hub"}


def canonical(distribution: str) -> str:
    """A distribution's name as PyPI compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def module_file(dotted: str) -> Path | None:
    path = ROOT / Path(*dotted.split("."))
    return path / "__init__.py" if (path / "__init__.py").exists() else path.with_suffix(".py") if path.with_suffix(".py").exists() else None


def imported_names(path: Path) -> set[str]:
    """Every absolute import of ``path``, anywhere in it (``from a.b import c`` gives ``a.b`` and ``a.b.c``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


@functools.cache
def packages_distributions() -> dict[str, list[str]]:
    """Top-level package -> the distributions that provide it (a scan of every installed distribution: once)."""
    return metadata.packages_distributions()


def distributions(names: set[str]) -> set[str]:
    """The third-party distributions (canonical names) that provide the top-level packages of ``names``."""
    by_package = packages_distributions()
    tops = {n.split(".")[0] for n in names} - set(sys.stdlib_module_names) - {"__future__", "medbench_core"}
    return {canonical(d) for top in tops for d in by_package.get(top, [top])}


def kind_libraries(module: Path) -> set[str]:
    """The distributions a kind module imports, itself or through the retrieval modules (outside ``kinds/``) it imports."""
    names = imported_names(module)
    helpers = {n for n in names if n.startswith("medbench_core.retrieval.") and not n.startswith("medbench_core.retrieval.kinds")}
    for helper in sorted(h for h in helpers if module_file(h)):
        names |= imported_names(module_file(helper))
    return distributions(names) - NOT_SCORING


def undeclared(kind, module: Path) -> set[str]:
    """The libraries of ``module`` that neither ``kind.packages`` nor :data:`provenance.SCORING_PACKAGES` declares."""
    declared = {canonical(p) for p in (*kind.packages, *provenance.SCORING_PACKAGES)}
    return kind_libraries(module) - declared


def kind_module(name: str) -> Path:
    return ROOT / "medbench_core" / "retrieval" / "kinds" / f"{KINDS[name].split(':')[0]}.py"


@pytest.mark.parametrize("name", list(KINDS))
def test_every_library_a_kind_imports_is_declared_by_the_kind(name):
    missing = undeclared(get_kind(name), kind_module(name))
    assert not missing, f"kind {name}: its module imports {sorted(missing)}; add them to the kind's `packages` ({kind_module(name).name})"


def test_the_check_names_a_library_left_out():
    # tfidf before this check: scikit-learn and scipy were in no list that keyed or recorded its runs.
    class Bare(type(get_kind("tfidf"))):
        packages = ()

    assert undeclared(Bare(), kind_module("tfidf")) == {"scikit-learn", "scipy"}

    # ... and one a kind reaches through a retrieval module (dense.py -> retrieval/text_encoders.py)
    class NoLibraries(type(get_kind("sentence-transformers"))):
        packages = ()

    assert undeclared(NoLibraries(), kind_module("sentence-transformers")) == {"sentence-transformers", "torch", "transformers"}


def test_what_the_fingerprint_records_is_every_kinds_packages_each_installed():
    packages = scoring_packages()
    assert packages[: len(provenance.SCORING_PACKAGES)] == provenance.SCORING_PACKAGES
    assert len(set(packages)) == len(packages)
    for name in KINDS:
        assert set(get_kind(name).packages) <= set(packages), name
    recorded = provenance.environment_fingerprint(packages)["packages"]
    # a misspelt name would read "absent": every declared one is a distribution of the lock
    assert {p: v for p, v in recorded.items() if v == "absent"} == {}
    assert recorded["scikit-learn"] == metadata.version("scikit-learn")
    assert recorded["open_clip_torch"] == metadata.version("open_clip_torch")
    # what the hand-kept list held before every kind declared its own is still recorded
    before = {"torch", "transformers", "sentence-transformers", "open_clip_torch", "faiss-cpu", "bm25s", "PyStemmer", "numpy", "polars", "pyarrow"}
    before |= {"tokenizers", "safetensors"}
    assert before <= set(packages)
