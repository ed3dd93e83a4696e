"""A kind's optional capabilities: small runtime-checkable protocols a kind has or has not, as the compute
capabilities :class:`~.retriever_base.Retriever` and :class:`~.derived_base.RunBuilder` are.

A caller asks ``isinstance(kind, Capability)`` (or one of the helpers below, which do) instead of calling a
hook with a default on every kind; a kind without the capability simply lacks its members.

- :class:`Expandable`: a retriever whose queries a text expansion can meet (``expansion_family``,
  ``instructs_expansion``): BM25, Lucene BM25, the text encoders, the remote-code embedders.
- :class:`ExpandsQueries`: a model that runs another model's search on queries expanded by an entry of
  ``expansions:`` (kind ``expanded``): its expansion, the retriever whose corpus it searches, its
  registry check, the upstream runs that key it, its MLflow params.
- :class:`TakesQueryPrompt`: a kind whose queries are formatted with a task's prompt (``query_prompt``,
  ``prompt_key``).
- :class:`RunsTrustedCode`: a kind that runs code from a folder, admitted only by the registry's
  ``trust_code`` allowlist (the code-folder kinds).
- The entry: :class:`OwnEntryFields`, fields of the kind's own beside the common ones (a fusion's ``fusion:``,
  a reranker's ``rerank:``, an expanded model's ``retriever:`` ...), read into the spec's ``block`` and written
  back into its identity; :class:`ChecksEntry`, a check of the common fields and settings together, beyond
  what the settings schema checks (open_clip, UniIR, the late-interaction kinds).
- A model path: :class:`NeedsPath`, every entry must name its weights with ``path:``; :class:`RefusesPath`, no
  entry may (a model with no weights to load), with the reason. A kind with neither takes a path when given one.

A retriever's index and search extras (:mod:`.retriever_base`'s kinds; a kind without them searches its stored corpus as
it is, as TF-IDF does):

- :class:`BuildsIndex`: an index stage of its own over the stored corpus (``build_index``), keyed by ``index_identity``
  (an encoder's FAISS index, BM25's and Lucene's stored scores, late interaction's PLAID settings).
- :class:`ChecksBeforeSearch`: a check that a search fits in memory before the queries are represented (encoders).
- :class:`WritesQueryFiles`: the represented queries kept beside the run for a re-scoring (encoders, late interaction).

The entry's and the path's protocols are defined in :mod:`.spec`, beside :func:`~.spec.parse_entry`, the one reader that
asks them (spec.py is below this module: no import circle), and are named here with the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.spec import ChecksEntry, ModelSpec, NeedsPath, OwnEntryFields, RefusesPath
from medbench_core.retrieval.kinds.stage_inputs import Info, MemoryBudget, StoredCorpus
from medbench_core.taskdata.task import Task


@runtime_checkable
class Expandable(Protocol):
    """A retriever whose queries a text expansion can meet (an ``expanded`` entry may name it as its retriever).

    Structural, as every capability here: a kind has it by having both members (subclassing a runtime-checkable
    protocol would make ``isinstance`` true without them)."""

    #: how a text expansion meets it: ``lexical`` (the texts are joined) or ``dense`` (also averaged); R2MED's
    #: scoring follows it too (:func:`scoring_family`)
    expansion_family: str

    def instructs_expansion(self, spec: ModelSpec) -> bool:
        """Whether, averaged with its query (``combine: mean``), an expansion gets the query's instruction
        too by default (an expanded entry's ``settings.instruct_expansion`` overrides it).

        R2MED's classes decide it by how they hand the instruction to the model (src/utils.py at
        62b7074): those that pass it to the model's own encode as an argument put it on the
        expansion too (NVEmbedModel l.643-649 ``self.encode(self.query_instruction_for_retrieval,
        queries_rewrite)``; GritModel l.574-580; InstructorModel l.227-233), those that write it
        into the query's text leave the expansion bare (FlagDRESModel l.86-97, BiEncoderModel
        l.313-323, HighScaleModel l.436-446). A kind that writes the instruction into the text (or has none) says False.
        """
        ...


@runtime_checkable
class ExpandsQueries(Protocol):
    """A model that searches another model's stored corpus with queries expanded by an entry of ``expansions:``."""

    def expansion_name(self, spec: ModelSpec) -> str:
        """The ``expansions:`` entry its queries are expanded by."""
        ...

    def corpus_of(self, spec: ModelSpec) -> str:
        """The retriever whose ``corpus_embeddings`` and ``corpus_index`` its partitions use (and whose search it runs)."""
        ...

    def complete(self, spec: ModelSpec, registry: Mapping[str, ModelSpec], expansions: Mapping[str, Any], where: str) -> ModelSpec:
        """``spec`` checked against the whole registry (its retriever, its expansion), with what it learns from them."""
        ...

    def upstream_runs(self, spec: ModelSpec) -> tuple[str, ...]:
        """The models whose run keys enter its keys and MLflow params (a LameR expansion's upstream; not its retriever)."""
        ...

    def record_params(self, spec: ModelSpec, run_info: Mapping[str, Any]) -> dict[str, str]:
        """MLflow params beyond the common ones: its retriever, expansion and combination."""
        ...


@runtime_checkable
class TakesQueryPrompt(Protocol):
    """A kind whose queries are formatted with a prompt (an instruction) that depends on the task: the text
    encoders, UniIR's CLIP-SF, the remote-code and code-folder embedders."""

    def query_prompt(self, spec: ModelSpec, task: Task) -> tuple[str, Any] | None:
        """``(template, instruction)`` its queries are formatted with on ``task``, or None (none on this task)."""
        ...

    def prompt_key(self, spec: ModelSpec, task: Task) -> dict[str, Any] | None:
        """What of that prompt enters the run key on ``task`` (None: nothing)."""
        ...


@runtime_checkable
class RunsTrustedCode(Protocol):
    """A kind that runs code from a folder (or ``pkg:``), admitted only when the registry's ``trust_code`` allowlist
    lists it with its current hash."""

    def grant_trust(self, spec: ModelSpec, trusted_code: Mapping[str, str], where: str) -> ModelSpec:
        """``spec`` once the allowlist (code folder or ``pkg:`` -> sha256) is known; DataError for code not listed
        with its current hash."""
        ...


@runtime_checkable
class BuildsIndex(Protocol):
    """A retriever with an index stage of its own over its stored corpus (a kind without one gets an index stage that
    writes no file, keyed by the kind's name)."""

    def index_identity(self, spec: ModelSpec) -> Any:
        """What keys the index stage beside the embeddings key (an encoder's ``index:`` settings)."""
        ...

    def build_index(self, spec: ModelSpec, emb_dir: Path, out: Path, *, use_gpu: bool | None, progress: bool | None, available: MemoryBudget) -> Info:
        """Write the index over the stored corpus ``emb_dir`` into ``out``; what its info.json records: ``type`` and
        ``built_on`` (``cpu`` or ``gpu``; the index asset shows both), ``files`` (what it wrote)."""
        ...


@runtime_checkable
class ChecksBeforeSearch(Protocol):
    """A retriever that refuses a search that cannot fit before its queries are represented (its model loaded)."""

    def before_search(self, spec: ModelSpec, task: Task, corpus: StoredCorpus, available: MemoryBudget) -> None:
        """MemoryBudgetError (or DataError) for a search of ``corpus`` that ``available`` memory cannot hold."""
        ...


@runtime_checkable
class WritesQueryFiles(Protocol):
    """A retriever whose represented queries are kept beside its run, for a re-scoring."""

    def query_files(self, queries: object, out: Path) -> list[str]:
        """Write what a re-scoring needs of the represented ``queries`` into ``out``; their file names."""
        ...


# --- what the rest of medbench asks ------------------------------------------------------------


def expansion_family(retriever: ModelSpec) -> str:
    """How a text expansion meets ``retriever``: ``lexical`` or ``dense``, as its :class:`Expandable` kind says;
    DataError for a kind that cannot take one."""
    kind = retriever.plugin
    if not isinstance(kind, Expandable):
        raise DataError(f"model {retriever.name}: kind {retriever.kind} cannot be expanded; use a bm25 or text-encoder retriever")
    return kind.expansion_family


def expansion_name(spec: ModelSpec) -> str | None:
    """The ``expansions:`` entry ``spec``'s queries are expanded by; None for a model without one."""
    kind = spec.plugin
    return kind.expansion_name(spec) if isinstance(kind, ExpandsQueries) else None


def upstream_runs(spec: ModelSpec) -> tuple[str, ...]:
    """The models whose run keys enter ``spec``'s keys and MLflow params: its upstreams, or what an expanded model says."""
    kind = spec.plugin
    return kind.upstream_runs(spec) if isinstance(kind, ExpandsQueries) else kind.upstream(spec)


def scoring_family(spec: ModelSpec, registry: Mapping[str, ModelSpec]) -> str | None:
    """The retriever family whose evaluator R2MED uses for ``spec``'s runs (``dense``: BEIR, which drops a document whose
    id is its query's; ``lexical``: pytrec_eval, which keeps it; None: a model built from runs, a reranker or fusion,
    or a retriever no text expansion meets, scored by pytrec_eval as R2MED's reranker script does): an
    :class:`Expandable` retriever's ``expansion_family``; an expanded model's retriever's (R2MED scores an expanded dense
    run with BEIR and an expanded BM25 run with pytrec_eval)."""
    kind = spec.plugin
    if isinstance(kind, ExpandsQueries):
        retriever = registry.get(kind.corpus_of(spec))
        return scoring_family(retriever, registry) if retriever is not None else None
    return kind.expansion_family if isinstance(kind, Expandable) else None


def model_for_run(spec: ModelSpec, registry: Mapping[str, ModelSpec]) -> ModelSpec | None:
    """The model whose weights ``spec``'s run stage keeps loaded: itself when its kind loads weights, an expanded
    model's retriever's; None when there are none."""
    kind = spec.plugin
    if isinstance(kind, ExpandsQueries):
        return model_for_run(registry[kind.corpus_of(spec)], registry)
    return spec if kind.loads_weights else None


def query_prompt(spec: ModelSpec, task: Task) -> tuple[str, Any] | None:
    """``(template, instruction)`` ``spec``'s queries are formatted with on ``task``; None for a kind without a prompt."""
    kind = spec.plugin
    return kind.query_prompt(spec, task) if isinstance(kind, TakesQueryPrompt) else None


def prompt_key(spec: ModelSpec, task: Task) -> dict[str, Any] | None:
    """What of ``spec``'s query prompt on ``task`` enters its run key; None for a kind without a prompt."""
    kind = spec.plugin
    return kind.prompt_key(spec, task) if isinstance(kind, TakesQueryPrompt) else None


def complete(spec: ModelSpec, registry: Mapping[str, ModelSpec], expansions: Mapping[str, Any], where: str) -> ModelSpec:
    """``spec`` checked against the whole registry by its kind, when its kind checks anything there (:class:`ExpandsQueries`)."""
    kind = spec.plugin
    return kind.complete(spec, registry, expansions, where) if isinstance(kind, ExpandsQueries) else spec


def record_params(spec: ModelSpec, run_info: Mapping[str, Any]) -> dict[str, str]:
    """MLflow params of ``spec``'s kind beyond the common ones (an expanded model's retriever and combination; else none)."""
    kind = spec.plugin
    return kind.record_params(spec, run_info) if isinstance(kind, ExpandsQueries) else {}


def grant_trust(spec: ModelSpec, trusted_code: Mapping[str, str], where: str) -> ModelSpec:
    """``spec`` admitted by the registry's ``trust_code`` allowlist when its kind runs code from a folder
    (:class:`RunsTrustedCode`; DataError for code not listed with its current hash); any other ``spec`` as it is."""
    kind = spec.plugin
    return kind.grant_trust(spec, trusted_code, where) if isinstance(kind, RunsTrustedCode) else spec


def index_identity(spec: ModelSpec) -> Any:
    """What keys ``spec``'s index stage beside its embeddings key: its :class:`BuildsIndex` kind's, else the kind's name
    (a constant: no index of its own)."""
    kind = spec.plugin
    return kind.index_identity(spec) if isinstance(kind, BuildsIndex) else kind.name


def build_index(spec: ModelSpec, emb_dir: Path, out: Path, *, use_gpu: bool | None, progress: bool | None, available: MemoryBudget) -> Info:
    """``spec``'s index over its stored corpus written into ``out`` (:class:`BuildsIndex`), or none: ``search`` reads the
    corpus as ``embed_corpus`` stored it."""
    kind = spec.plugin
    if isinstance(kind, BuildsIndex):
        return kind.build_index(spec, emb_dir, out, use_gpu=use_gpu, progress=progress, available=available)
    return {"type": "none", "built_on": "cpu", "files": []}


def before_search(spec: ModelSpec, task: Task, corpus: StoredCorpus, available: MemoryBudget) -> None:
    """Refuse a search of ``corpus`` that cannot fit, when ``spec``'s kind checks one (:class:`ChecksBeforeSearch`)."""
    kind = spec.plugin
    if isinstance(kind, ChecksBeforeSearch):
        kind.before_search(spec, task, corpus, available)


def query_files(spec: ModelSpec, queries: object, out: Path) -> list[str]:
    """The files ``spec``'s kind keeps of its represented queries in ``out`` (:class:`WritesQueryFiles`); none otherwise."""
    kind = spec.plugin
    return kind.query_files(queries, out) if isinstance(kind, WritesQueryFiles) else []


# Every optional capability, with its members: a kind has one with all its members or none of them.
CAPABILITIES: tuple[type, ...] = (
    Expandable, ExpandsQueries, TakesQueryPrompt, RunsTrustedCode, OwnEntryFields, ChecksEntry, NeedsPath, RefusesPath,
    BuildsIndex, ChecksBeforeSearch, WritesQueryFiles,
)  # fmt: skip


def members(capability: type) -> tuple[str, ...]:
    """The names a kind must define to have ``capability``."""
    own = {*vars(capability).get("__annotations__", {}), *(n for n, v in vars(capability).items() if callable(v))}
    return tuple(sorted(n for n in own if not n.startswith("_")))


def half_implemented(kind: object) -> list[str]:
    """What is wrong with ``kind``'s optional capabilities: one it has only part of (its other members missing, so
    ``isinstance`` says it has none and its members are never called), a path both needed and refused, a
    ``needs_path`` that is not True, a refusal without a reason. Empty for a sound kind."""
    problems = []
    for capability in CAPABILITIES:
        names = members(capability)
        present = [m for m in names if hasattr(kind, m)]
        if present and len(present) < len(names):
            missing = [m for m in names if m not in present]
            problems.append(f"{capability.__name__}: it has {', '.join(present)} but not {', '.join(missing)}")
    if isinstance(kind, NeedsPath) and kind.needs_path is not True:
        problems.append(f"NeedsPath: needs_path is {kind.needs_path!r}; a kind whose path is optional leaves it out")
    if isinstance(kind, RefusesPath) and not kind.no_path_reason:
        problems.append("RefusesPath: no_path_reason is empty; say why its entries take no path")
    if isinstance(kind, NeedsPath) and isinstance(kind, RefusesPath):
        problems.append("NeedsPath and RefusesPath: a path cannot be both needed and refused")
    return problems
