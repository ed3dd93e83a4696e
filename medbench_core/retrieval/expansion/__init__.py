"""Generation-augmented retrieval: HyDE, Query2Doc and LameR query expansions.

One more stage between a curated task and retrieval, computed per (expansion x task):

- :mod:`~medbench_core.retrieval.expansion.spec`: the ``expansions:`` entries of ``models.yaml``, prompt
  templates and provenance keys;
- :mod:`~medbench_core.retrieval.expansion.files`: published expansions (R2MED's layout, or a plain
  ``{id, expansion}`` JSONL/Parquet), local or from a hub dataset at a pinned revision;
- :mod:`~medbench_core.retrieval.expansion.generate`: a transformers causal LM with its chat template,
  batched and seeded;
- :mod:`~medbench_core.retrieval.expansion.frame`: the artifact (query id, raw text, answer, reasoning);
- :mod:`~medbench_core.retrieval.expansion.contract`: the blocking GX gate and the leakage measure;
- :mod:`~medbench_core.retrieval.expansion.combine`: how the expansion meets a retriever, and the run of a
  model of kind ``expanded``;
- :mod:`~medbench_core.retrieval.expansion.stage`: key and build of one (expansion x task).

Importing this package imports neither torch nor transformers (they load when a generator does).
"""

from medbench_core.retrieval.expansion.frame import EXPANSION_SCHEMA, load_expansion, split_reasoning, store_expansion
from medbench_core.retrieval.expansion.spec import METHODS, ExpansionSpec, find_expansion, load_expansions, parse_expansions

__all__ = [
    "EXPANSION_SCHEMA",
    "METHODS",
    "ExpansionSpec",
    "find_expansion",
    "load_expansion",
    "load_expansions",
    "parse_expansions",
    "split_reasoning",
    "store_expansion",
]
