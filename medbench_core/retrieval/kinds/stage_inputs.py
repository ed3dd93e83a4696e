"""What a kind's stages take and return: the value types of a retriever's methods, the inputs of a
derived model's run (:class:`InputRef`, :class:`UpstreamRun`, :class:`StoredCorpus`,
:class:`StoredExpansion`) and what keys a model's stages (:class:`KeyContext`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import polars as pl

from medbench_core.retrieval.expansion.spec import ExpansionSpec
from medbench_core.retrieval.kinds.spec import ModelSpec

if TYPE_CHECKING:
    import numpy as np

    from medbench_core.retrieval.expansion.rules import Combine

DEFAULT_K = 100  # documents retrieved per query

# --- the types a retriever's methods take and return --------------------------------------------

#: bytes of memory a stage may use, a function returning them, or None (ask the OS)
MemoryBudget = int | Callable[[], int] | None
#: ``(template, instruction)`` a task's queries are formatted with (:mod:`medbench_core.retrieval.instructions`)
QueryPrompt = tuple[str, str]
#: ``(expansions, combine)``: each query's expansion text, in the task's query order, and how the kind combines it with the query
QueryExpansion = tuple[Sequence[str], "Combine"]
#: query id -> the corpus rows (positions in ``task.corpus``) of its candidate set; None: the whole corpus
Pools = Mapping[str, "np.ndarray"]
#: what a stage records in its info.json: JSON values only (no paths, times or other values that differ between two runs)
Info = dict[str, object]
Queries = TypeVar("Queries")


# --- inputs of a derived model's run ---------------------------------------------------------


@dataclass(frozen=True)
class InputRef:
    """One input a derived model's run needs: ``what`` is ``run`` or ``corpus`` (of the model ``name``)
    or ``expansion`` (of the expansion entry ``name``)."""

    what: str
    name: str

    @property
    def label(self) -> str:
        """The name the loaded input is passed under (``:`` never appears in a model name)."""
        return f"expansion:{self.name}" if self.what == "expansion" else self.name


@dataclass(frozen=True)
class UpstreamRun:
    """An upstream model's stored run on a task: the ranking, the ``k`` it was retrieved with, its key and info.json."""

    run: pl.DataFrame
    k: int
    key: str = ""
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredCorpus:
    """A retriever's stored corpus on a task: its spec and its ``corpus_embeddings`` and ``corpus_index`` folders (``key``: the index key)."""

    spec: ModelSpec
    embeddings: Path
    index: Path
    key: str = ""


@dataclass(frozen=True)
class StoredExpansion:
    """An expansion of a task's queries whose contract passed: its entry in ``expansions:``, its frame, key and info.json."""

    spec: ExpansionSpec
    frame: pl.DataFrame
    key: str
    info: dict[str, Any] = field(default_factory=dict)


Input = UpstreamRun | StoredCorpus | StoredExpansion


@dataclass
class KeyContext:
    """What a kind needs besides its spec and the task to compute its stage keys.

    ``registry``: every registered model by name; ``keys``: the stage keys of the models computed
    so far (upstreams come first); ``expansions``: the registry's ``expansions:`` entries by name.
    """

    k: int = DEFAULT_K
    registry: Mapping[str, ModelSpec] = field(default_factory=dict)
    keys: dict[str, dict[str, str]] = field(default_factory=dict)
    expansions: Mapping[str, ExpansionSpec] = field(default_factory=dict)
    prompts_dir: str | Path | None = None
    online: bool = False
