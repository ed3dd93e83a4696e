"""Model kinds: one plugin module per kind, registered here by name.

A kind owns everything about its models: the settings schema (a typed, frozen dataclass), its own
entry fields, its identity for artifact keys and its declared version, how its weights' revision is
resolved, which tasks it can read, its upstreams, and its compute (represent the corpus and search
it, or build a run from upstream runs). The rest of medbench asks a model's kind
(``spec.plugin``) and never compares kind names.

Adding a kind: a module in this package with an instance of a
:class:`~medbench_core.retrieval.kinds.base.Kind` subclass (the protocol it satisfies:
:class:`~medbench_core.retrieval.kinds.base.ModelKind`), one line in :data:`KINDS`, its tests (docs/contributing/adding_a_kind.md).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

# kind name in models.yaml -> "module:attribute" in this package, imported on first use
KINDS: dict[str, str] = {
    "bm25": "bm25:KIND",
    "sentence-transformers": "dense:SENTENCE_TRANSFORMERS",
    "transformers": "dense:TRANSFORMERS",
    "open_clip": "open_clip:KIND",
    "cross-encoder": "cross_encoder:KIND",
    "fusion": "fusion:KIND",
    "expanded": "expanded:KIND",
    "uniir-clip-sf": "uniir_clip_sf:KIND",
    "remote-code-embedder": "remote_code:KIND",
    "lucene-bm25": "lucene_bm25:KIND",
    "colbert": "colbert:KIND",
    "code-folder": "code_folder:KIND",
    "code-folder-late": "code_folder:LATE",
    "tfidf": "tfidf:KIND",
}


def kind_names() -> tuple[str, ...]:
    """Every registered kind, in registration order."""
    return tuple(KINDS)


@functools.cache
def get_kind(name: str) -> Any:
    """The kind registered as ``name``; KeyError for an unknown one (entries are checked when models.yaml is read)."""
    module, attribute = KINDS[name].split(":")
    kind = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    if kind.name != name:
        raise RuntimeError(f"kind registered as {name!r} calls itself {kind.name!r}")
    return kind


def scoring_packages() -> tuple[str, ...]:
    """The distributions whose versions can change a score: those every stage rests on
    (:data:`medbench_core.provenance.SCORING_PACKAGES`), then every registered kind's own (:attr:`Kind.packages`)."""
    from medbench_core.provenance import SCORING_PACKAGES

    return tuple(dict.fromkeys([*SCORING_PACKAGES, *sorted({p for name in KINDS for p in get_kind(name).packages})]))
