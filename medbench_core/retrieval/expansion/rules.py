"""How an expansion meets a retriever: the combination modes and R2MED's defaults per method and retriever family.

Pure rules on model entries (no retrieval code), so the registry can check an ``expanded`` entry
when it is read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

from medbench_core.errors import DataError


class ModelSpec(Protocol):
    """The fields of a model entry these rules read (medbench_core.retrieval.model_registry imports this module, not the reverse)."""

    name: str
    kind: str
    combine: str
    repeat_query: int | None
    settings: dict[str, Any]


MODES = ("concat", "replace", "mean")
DEFAULT_SEPARATOR = "[SEP]"


@dataclass(frozen=True)
class Combine:
    """A resolved combination: mode, query repetitions (concat) and separator (dense concat)."""

    mode: str
    repeat_query: int = 0
    separator: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# (retriever family, method) -> R2MED's combination
R2MED_DEFAULTS: dict[tuple[str, str], Combine] = {
    ("lexical", "hyde"): Combine("replace"),
    ("lexical", "query2doc"): Combine("concat", 2),
    ("lexical", "lamer"): Combine("concat", 1),
    ("dense", "hyde"): Combine("mean"),
    ("dense", "lamer"): Combine("mean"),
    ("dense", "query2doc"): Combine("concat", 1, DEFAULT_SEPARATOR),
}


def family(retriever: ModelSpec) -> str:
    """``lexical`` (BM25) or ``dense`` (text encoders); other kinds cannot take a text expansion."""
    if retriever.kind == "bm25":
        return "lexical"
    if retriever.kind in ("sentence-transformers", "transformers"):
        return "dense"
    raise DataError(f"model {retriever.name}: kind {retriever.kind} cannot be expanded; use a bm25 or text-encoder retriever")


def resolve_combine(spec: ModelSpec, retriever: ModelSpec, method: str) -> Combine:
    """The combination ``spec`` (kind ``expanded``) asks for, R2MED's default filling what it leaves out.

    Equal settings give an equal :class:`Combine`, so writing a default out does not change a key.
    """
    fam = family(retriever)
    default = R2MED_DEFAULTS[(fam, method)]
    mode = spec.combine or default.mode
    where = f"model {spec.name}"
    if mode not in MODES:
        raise DataError(f"{where}: combine {mode!r} unknown; use one of {', '.join(MODES)}")
    if mode == "mean" and fam == "lexical":
        raise DataError(f"{where}: combine 'mean' averages embeddings; retriever {retriever.name} is BM25 (use concat or replace)")
    sep = spec.settings.get("separator")
    if mode != "concat":
        if spec.repeat_query is not None:
            raise DataError(f"{where}: repeat_query is for combine 'concat' only")
        if sep is not None:
            raise DataError(f"{where}: settings.separator is for combine 'concat' only")
        return Combine(mode)
    if fam == "lexical" and sep is not None:
        raise DataError(f"{where}: BM25 joins token lists; settings.separator is for dense retrievers only")
    repeat = spec.repeat_query if spec.repeat_query is not None else (default.repeat_query if default.mode == "concat" else 1)
    if repeat < 1:
        raise DataError(f"{where}: repeat_query must be at least 1")
    if fam == "lexical":
        return Combine("concat", int(repeat))
    return Combine("concat", int(repeat), DEFAULT_SEPARATOR if sep is None else str(sep))
