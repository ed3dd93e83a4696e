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


# R2MED's reasoning generators (its src/base.py lines 5-6, ``r1_model_list``, at 62b7074): with
# them R2MED's scripts use the answer alone with BM25 (eval_BM25.py lines 125-126) and the mean of
# query and answer with a dense retriever (eval_retrieval.py lines 38-39), whatever the method.
R2MED_REASONING_GENERATORS = frozenset(
    {"r1-llama-8b", "r1-qwen-32b", "r1-llama-70b", "qwq-32b", "huatuo-o1-8b", "huatuo-o1-70b", "sky-32b", "qwen3-32b", "qwen3-8b", "qwen-7b-ins", "qwen-3b-ins"}
)


@dataclass(frozen=True)
class Combine:
    """A resolved combination: mode, query repetitions (concat), separator (dense concat), and
    whether the expansion gets the query's instruction too (dense mean: R2MED's NV-Embed, GritLM
    and Instructor classes put it on both; its FlagDRES class on the query only)."""

    mode: str
    repeat_query: int = 0
    separator: str = ""
    instruct_expansion: bool = False

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
    # Search-R1 / Search-o1: R2MED scores them with reasoning generators only (qwen-*-ins, qwen3-32b),
    # so as eval_BM25.py lines 125-126 and eval_retrieval.py lines 38-39 do: the answer alone, or the mean
    ("lexical", "search-r1"): Combine("replace"),
    ("dense", "search-r1"): Combine("mean"),
    ("lexical", "search-o1"): Combine("replace"),
    ("dense", "search-o1"): Combine("mean"),
}


def r2med_default(fam: str, method: str, generator: str = "") -> Combine:
    """R2MED's combination for ``method`` with a retriever of family ``fam``: per method, or for a
    reasoning generator (:data:`R2MED_REASONING_GENERATORS`) the answer alone (BM25) or the mean (dense)."""
    if generator in R2MED_REASONING_GENERATORS:
        return Combine("replace") if fam == "lexical" else Combine("mean")
    return R2MED_DEFAULTS[(fam, method)]


def resolve_combination(
    model: str,
    fam: str,
    method: str,
    *,
    combine: str = "",
    repeat_query: int | None = None,
    separator: str | None = None,
    retriever: str = "its retriever",
    generator: str = "",
    instruct_expansion: bool | None = None,
    instruct_default: bool = False,
) -> Combine:
    """The combination expanded model ``model`` asks for (``combine``, ``repeat_query``, ``separator``,
    ``instruct_expansion``) with a retriever of family ``fam``, R2MED's default for ``method`` and
    the expansion's ``generator`` (:func:`r2med_default`) filling what it leaves out;
    ``instruct_default`` is the retriever's own default for ``instruct_expansion`` under ``mean``
    (:meth:`~medbench_core.retrieval.kinds.capabilities.Expandable.instructs_expansion`).

    Equal settings give an equal :class:`Combine`, so writing a default out does not change a key.
    """
    default = r2med_default(fam, method, generator)
    mode = combine or default.mode
    where = f"model {model}"
    if mode not in MODES:
        raise DataError(f"{where}: combine {mode!r} unknown; use one of {', '.join(MODES)}")
    if mode == "mean" and fam == "lexical":
        raise DataError(f"{where}: combine 'mean' averages embeddings; retriever {retriever} is BM25 (use concat or replace)")
    if instruct_expansion and mode != "mean":
        raise DataError(f"{where}: settings.instruct_expansion is for combine 'mean' (concat and replace give the one string the query's instruction)")
    if instruct_expansion is None:
        instruct_expansion = instruct_default and mode == "mean"
    sep = separator
    if mode != "concat":
        if repeat_query is not None:
            raise DataError(f"{where}: repeat_query is for combine 'concat' only")
        if sep is not None:
            raise DataError(f"{where}: settings.separator is for combine 'concat' only")
        return Combine(mode, instruct_expansion=bool(instruct_expansion))
    if fam == "lexical" and sep is not None:
        raise DataError(f"{where}: BM25 joins token lists; settings.separator is for dense retrievers only")
    repeat = repeat_query if repeat_query is not None else (default.repeat_query if default.mode == "concat" else 1)
    if repeat < 1:
        raise DataError(f"{where}: repeat_query must be at least 1")
    if fam == "lexical":
        return Combine("concat", int(repeat))
    return Combine("concat", int(repeat), DEFAULT_SEPARATOR if sep is None else str(sep))
