"""How an expansion meets a retriever: the combination modes and R2MED's defaults per method and retriever family.

Pure rules on model entries (no retrieval code), so the registry can check an ``expanded`` entry
when it is read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from medbench_core.errors import DataError


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


def family(retriever: Any) -> str:
    """How a text expansion meets ``retriever`` (a model spec): ``lexical`` or ``dense``, as its kind says; DataError for a kind that cannot take one."""
    fam = retriever.plugin.expansion_family
    if fam is None:
        raise DataError(f"model {retriever.name}: kind {retriever.kind} cannot be expanded; use a bm25 or text-encoder retriever")
    return fam


def resolve_combination(
    model: str, fam: str, method: str, *, combine: str = "", repeat_query: int | None = None, separator: str | None = None, retriever: str = "its retriever"
) -> Combine:
    """The combination expanded model ``model`` asks for (``combine``, ``repeat_query``, ``separator``)
    with a retriever of family ``fam``, R2MED's default for ``method`` filling what it leaves out.

    Equal settings give an equal :class:`Combine`, so writing a default out does not change a key.
    """
    default = R2MED_DEFAULTS[(fam, method)]
    mode = combine or default.mode
    where = f"model {model}"
    if mode not in MODES:
        raise DataError(f"{where}: combine {mode!r} unknown; use one of {', '.join(MODES)}")
    if mode == "mean" and fam == "lexical":
        raise DataError(f"{where}: combine 'mean' averages embeddings; retriever {retriever} is BM25 (use concat or replace)")
    sep = separator
    if mode != "concat":
        if repeat_query is not None:
            raise DataError(f"{where}: repeat_query is for combine 'concat' only")
        if sep is not None:
            raise DataError(f"{where}: settings.separator is for combine 'concat' only")
        return Combine(mode)
    if fam == "lexical" and sep is not None:
        raise DataError(f"{where}: BM25 joins token lists; settings.separator is for dense retrievers only")
    repeat = repeat_query if repeat_query is not None else (default.repeat_query if default.mode == "concat" else 1)
    if repeat < 1:
        raise DataError(f"{where}: repeat_query must be at least 1")
    if fam == "lexical":
        return Combine("concat", int(repeat))
    return Combine("concat", int(repeat), DEFAULT_SEPARATOR if sep is None else str(sep))
