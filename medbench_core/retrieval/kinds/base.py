"""What a model kind is: the protocol every kind module implements, and the parts kinds share.

- :class:`Kind`: the entry (settings schema, own fields, identity), revision, which tasks it reads,
  upstreams, provenance keys and MLflow params. Its defaults claim nothing about a model (no
  long-text policy, no mteb model type); the dense defaults live in
  :class:`~medbench_core.retrieval.kinds.encoder.EncoderKind`.
- :class:`Retriever`: the three methods the one search path needs of a first-stage retriever
  (as mteb's ``SearchProtocol``): ``embed_corpus`` (represent the corpus), ``represent_queries``
  (the task's own queries, or expanded ones) and ``search`` (top k per query in the run schema,
  :data:`~medbench_core.retrieval.ranking.RUN_SCHEMA`, ties by the rule of
  :mod:`medbench_core.retrieval.ranking`). :class:`RetrieverKind` is the base that gives a
  retriever the rest (keys, a stage with no separate index, hooks). :func:`medbench_core.retrieval.stages.retrieve`
  is the one search path; an expanded model runs it with its retriever's kind.
- :class:`DerivedKind`: builds its run from its inputs (upstream runs, a retriever's stored corpus,
  an expansion) with ``compute``; it has no corpus embeddings or index of its own.

Keys: a stage's key hashes its inputs, its upstream stage's key, the stage's declared version
(:data:`medbench_core.provenance.STAGE_VERSIONS`) and the kind's :attr:`Kind.version`. Bump the
kind's version in the change that alters its output (tests/core/test_golden_outputs.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.expansion.spec import ExpansionSpec
from medbench_core.retrieval.kinds.settings import KindSettings, NoSettings
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.taskdata.task import Task

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


# --- revisions ------------------------------------------------------------------------------

_REVISIONS: dict[str, str] = {}


def cached_revision(spec: ModelSpec) -> str:
    """The kind's :meth:`Kind.revision` of ``spec``, once per process and model identity (a folder's hash takes a moment).

    A hub branch that the local cache cannot resolve to a commit yet is asked again next time (a
    registry sync may pin it meanwhile).
    """
    from medbench_core.hub import is_commit_sha

    key = json.dumps(spec.identity(), sort_keys=True, default=str)
    if key not in _REVISIONS:
        revision = spec.plugin.revision(spec)
        if spec.hub_id and not is_commit_sha(revision):
            return revision
        _REVISIONS[key] = revision
    return _REVISIONS[key]


# --- the kinds ------------------------------------------------------------------------------


class Kind:
    """The protocol of a model kind, with defaults. Subclasses set the class attributes and override methods."""

    name: str = ""
    #: the typed settings of ``settings:`` (unknown keys are refused)
    Settings: type[KindSettings] = NoSettings
    #: bumped in the change that alters this kind's output
    version: str = "1"
    #: entry fields of this kind beside the common ones (``fusion``, ``rerank``, ``retriever`` ...)
    entry_fields: tuple[str, ...] = ()
    needs_path: bool = False
    takes_path: bool = True
    no_path_reason: str = ""
    #: builds its run from upstream runs (no corpus embeddings or index of its own)
    derived: bool = False
    #: record modalities it reads: a text-only kind is ``n/a`` on tasks with image-only records
    reads: frozenset[str] = frozenset({"text"})
    #: how a text expansion meets it (``lexical`` or ``dense``); None: it cannot be expanded
    expansion_family: str | None = None
    #: loads model weights to compute (a process keeps one loaded; the main job warms it up early)
    loads_weights: bool = False
    #: the distributions (as pip names them) whose versions can change this kind's output, beside those every
    #: stage rests on (:data:`medbench_core.provenance.SCORING_PACKAGES`); recorded with every benchmark version
    #: and canary run (:func:`medbench_core.retrieval.kinds.scoring_packages`). Every library its module imports
    #: is one of them (tests/core/test_kind_packages.py).
    packages: tuple[str, ...] = ()

    # --- an example
    def example_entry(self, folder: Path) -> dict[str, Any] | None:
        """The fields, besides ``name`` and ``kind``, of a small model of this kind that runs offline: the golden
        outputs' model of this kind when their fixture writes none (tests/core/golden_outputs.py). It may write what
        the model needs (tiny weights, a config) into the empty folder ``folder``. The default: ``{}`` (the kind's
        defaults make a model) unless the kind needs a path or fields of its own, then None (no example)."""
        return None if self.needs_path or self.entry_fields else {}

    # --- the entry
    def parse_block(self, spec: ModelSpec, fields: dict[str, Any], where: str) -> Any:
        """This kind's own entry fields, checked (``where`` names file and entry); the spec's other fields may be checked too."""
        return None

    def block_entry(self, spec: ModelSpec) -> dict[str, Any]:
        """The kind's own fields as the entry writes them (they enter the identity)."""
        return {}

    def grant_trust(self, spec: ModelSpec, trusted_code: Mapping[str, str], where: str) -> ModelSpec:
        """``spec`` once the registry's ``trust_code`` allowlist (code folder or ``pkg:`` -> sha256) is known; a kind
        that runs code from a folder refuses (DataError) code that is not listed with its current hash."""
        return spec

    def complete(self, spec: ModelSpec, registry: Mapping[str, ModelSpec], expansions: Mapping[str, Any], where: str) -> ModelSpec:
        """``spec`` checked against the whole registry (upstream entries, expansions), with what it learns from them."""
        return spec

    def upstream(self, spec: ModelSpec) -> tuple[str, ...]:
        """Models whose runs (or stored corpus) this model's run is built from."""
        return ()

    def upstream_runs(self, spec: ModelSpec) -> tuple[str, ...]:
        """Models whose run keys enter this model's keys and MLflow params."""
        return self.upstream(spec)

    def corpus_of(self, spec: ModelSpec) -> str | None:
        """The model whose ``corpus_embeddings`` and ``corpus_index`` this model's partitions use (None: it has none)."""
        return None

    def expansion_name(self, spec: ModelSpec) -> str | None:
        """The ``expansions:`` entry its queries are expanded by, or None."""
        return None

    def scoring_family(self, spec: ModelSpec, registry: Mapping[str, ModelSpec]) -> str | None:
        """The retriever family whose evaluator R2MED uses for this model's runs (``dense``: BEIR, which drops a
        document whose id is its query's; ``lexical``: pytrec_eval, which keeps it; None: a model built from
        runs, a reranker or fusion, scored by pytrec_eval as R2MED's reranker script does): :attr:`expansion_family`."""
        return self.expansion_family

    def instructs_expansion(self, spec: ModelSpec) -> bool:
        """Whether, averaged with its query (``combine: mean``), an expansion gets the query's instruction
        too by default (an expanded entry's ``settings.instruct_expansion`` overrides it).

        R2MED's classes decide it by how they hand the instruction to the model (src/utils.py at
        62b7074): those that pass it to the model's own encode as an argument put it on the
        expansion too (NVEmbedModel l.643-649 ``self.encode(self.query_instruction_for_retrieval,
        queries_rewrite)``; GritModel l.574-580; InstructorModel l.227-233), those that write it
        into the query's text leave the expansion bare (FlagDRESModel l.86-97, BiEncoderModel
        l.313-323, HighScaleModel l.436-446). A kind that writes the instruction into the text
        (the default) says False.
        """
        return False

    def hub_id(self, spec: ModelSpec) -> str:
        """The hub repository of its weights (``org/name``), or ``""``."""
        return ""

    # --- revision
    def revision(self, spec: ModelSpec) -> str:
        """What identifies the weights (a pinned commit, a local folder's hash, a seed); see :func:`cached_revision`."""
        return spec.revision

    def weights_revision(self, spec: ModelSpec) -> str:
        """The revision of this model's own weights ('' when it has none)."""
        return ""

    def shown_revision(self, spec: ModelSpec, registry: Mapping[str, ModelSpec]) -> str:
        """The revision recorded for its partitions."""
        return self.weights_revision(spec)

    # --- tasks
    def applicability(self, spec: ModelSpec, task: Task, registry: Mapping[str, ModelSpec]) -> str | None:
        """None when ``spec`` can be evaluated on ``task``; otherwise why not (an upstream's reason first)."""
        for up in self.upstream(spec):
            if up in registry:
                reason = registry[up].plugin.applicability(registry[up], task, registry)
                if reason:
                    return f"{spec.name} builds on {up}: {reason}"
        return self.own_applicability(spec, task)

    def own_applicability(self, spec: ModelSpec, task: Task) -> str | None:
        """A text-only kind refuses a task whose queries or documents include records without text."""
        if "image" in self.reads:
            return None
        q_missing = task.queries.filter(pl.col("text").fill_null("").str.strip_chars() == "")["query_id"].to_list()
        d_missing = task.corpus["doc_id"].filter(task.doc_text().empty()).to_list()  # no doc_text(): the corpus's strings are not made
        if q_missing or d_missing:
            parts = []
            if q_missing:
                parts.append(f"{len(q_missing)} queries (e.g. {q_missing[0]})")
            if d_missing:
                parts.append(f"{len(d_missing)} documents (e.g. {d_missing[0]})")
            return f"{spec.kind} reads text only and {' and '.join(parts)} of {task.name} have no text"
        return None

    # --- provenance
    def partition_keys(self, spec: ModelSpec, task: Task, ctx: KeyContext) -> dict[str, str]:
        """The provenance key of each stage this model has on ``task``."""
        raise NotImplementedError

    def long_text_params(self, spec: ModelSpec, model: object = None) -> dict[str, Any]:
        """What the model does with text beyond its length limit (info.json and MLflow params):
        ``long_text`` (``truncate``, ``chunk``, ``whole``) and its settings; ``{}`` says nothing
        (a kind that reads no text itself). Encoders truncate or chunk
        (:class:`~medbench_core.retrieval.kinds.encoder.EncoderKind`)."""
        return {}

    def query_prompt(self, spec: ModelSpec, task: Task) -> tuple[str, str] | None:
        """``(template, instruction)`` its queries are formatted with on ``task``, or None."""
        return None

    def run_params(self, spec: ModelSpec, task: Task) -> dict[str, str]:
        """Flat, MLflow-ready params of one model x task beyond the model's own (dataset provenance, long text, prompt, dtype)."""
        out: dict[str, Any] = dict(task.meta.provenance())
        out.update({k: v for k, v in self.long_text_params(spec).items() if v is not None})
        prompt = self.query_prompt(spec, task)
        if prompt is not None:
            out["query_template"], out["query_instruction"] = prompt
        dtype = getattr(spec.settings, "dtype", None)
        if dtype:
            out["dtype"] = dtype
        if spec.trust_remote_code:
            out["trust_remote_code"] = "true"
        return {k: str(v) for k, v in out.items()}

    def record_params(self, spec: ModelSpec, run_info: Mapping[str, Any]) -> dict[str, str]:
        """MLflow params of this kind beyond the common ones (an expanded model's retriever and combination)."""
        return {}

    def mteb_meta(self, spec: ModelSpec, registry: Mapping[str, ModelSpec]) -> dict[str, Any]:
        """What mteb's ``ModelMeta`` says of this model (medbench_core/evaluation/exports.py writes it):
        ``framework`` and ``model_type`` (values from mteb's allowed lists), ``n_parameters``,
        ``open_weights``, ``similarity_fn_name``, ``use_instructions``, ``modalities``, ``max_tokens``.
        The default claims nothing (no model type); encoders say ``dense``
        (:class:`~medbench_core.retrieval.kinds.encoder.EncoderKind`), other kinds their own."""
        return {
            "framework": [], "model_type": [], "n_parameters": None, "open_weights": None, "similarity_fn_name": None,
            "use_instructions": False, "modalities": sorted(self.reads), "max_tokens": None,
        }  # fmt: skip

    # --- compute
    def model_for_run(self, spec: ModelSpec, registry: Mapping[str, ModelSpec]) -> ModelSpec | None:
        """The model whose weights its run stage keeps loaded (itself, its retriever) or None."""
        return spec if self.loads_weights else None

    def load(self, spec: ModelSpec, *, device: str = "cpu", progress: bool | None = False, online: bool = False) -> Any:
        """The loaded model (an encoder, a cross-encoder); None for a kind without weights."""
        return None


@runtime_checkable
class Retriever(Protocol[Queries]):
    """What the one search path needs of a first-stage retriever kind: three methods, as mteb's
    ``SearchProtocol`` (mteb/models/models_protocols.py) has ``index``, ``search`` and its meta.

    :func:`medbench_core.retrieval.stages.embed_corpus` calls ``embed_corpus`` once per task and
    :func:`medbench_core.retrieval.stages.rank` calls ``represent_queries`` then ``search`` (an
    expanded model calls them with its retriever's kind). Every retriever kind in
    :data:`~medbench_core.retrieval.kinds.KINDS` satisfies it (tests/core/test_kinds.py checks
    the methods and their parameters); :class:`RetrieverKind` gives it everything else.
    """

    def embed_corpus(self, spec: ModelSpec, task: Task, out: Path, *, model: object, progress: bool, available: MemoryBudget) -> Info:
        """Write the corpus representation into the empty folder ``out``, in ``task.corpus`` order (the caller
        writes ``doc_ids.json`` beside it, then ``info.json``).

        Returns what ``info.json`` records: ``files`` (required: the names of the files it wrote into
        ``out``, besides doc_ids.json and info.json) and any JSON values describing the representation
        (``representation``, ``n_docs``, settings, :meth:`Kind.long_text_params`). ``model`` is the
        kind's :meth:`Kind.load` (None for a kind without weights); ``available``: refuse, before
        the work, a corpus that would not fit in memory (:func:`medbench_core.retrieval.vectors.check_memory`).
        An exact kind's files must be byte-identical on every run (tests/core/golden_outputs.py
        digests them): no time stamps (``np.savez`` and ``scipy.sparse.save_npz`` write zip entries
        stamped with the time: write ``.npy`` files with ``np.save``), no absolute paths, no
        iteration order of a set.
        """
        ...

    def represent_queries(self, spec: ModelSpec, task: Task, model: object, *, prompt: QueryPrompt | None, expansion: QueryExpansion | None = None) -> Queries:
        """The task's queries as ``search`` takes them, in ``task.queries`` order: formatted with
        ``prompt`` when given; with ``expansion``, each query combined with its expansion text
        (an expanded model; only kinds with an :attr:`Kind.expansion_family` get one)."""
        ...

    def search(self, spec: ModelSpec, task: Task, corpus: StoredCorpus, queries: Queries, k: int, *, pools: Pools | None, progress: bool) -> pl.DataFrame:
        """The top ``k`` documents of each query as a run: :data:`~medbench_core.retrieval.ranking.RUN_SCHEMA`
        (``query_id``, ``doc_id``, ``score`` float64, ``rank`` int32 from 1), queries in task order,
        ranks by descending score, equal scores by doc id in descending byte order (trec_eval's
        order: :func:`medbench_core.retrieval.ranking.rank_scores` applies it). With ``pools``
        each query ranks only its own candidate set. ``corpus`` names the stored folders
        (``corpus.embeddings``: what ``embed_corpus`` wrote; ``corpus.index``: the index stage's)."""
        ...


def retriever(spec: ModelSpec) -> Retriever[Any]:
    """``spec``'s kind as a :class:`Retriever` (TypeError naming what is missing for a kind that is not one)."""
    kind = spec.plugin
    if not isinstance(kind, Retriever):
        missing = [m for m in ("embed_corpus", "represent_queries", "search") if not callable(getattr(kind, m, None))]
        raise TypeError(f"model {spec.name}: kind {spec.kind} is not a retriever (it lacks {', '.join(missing)})")
    return kind


class RetrieverKind(Kind):
    """The base of a first-stage retriever: represents the corpus once, then ranks queries against it.

    A subclass implements :class:`Retriever`'s three methods; this base gives it its stage keys
    and hooks whose defaults suit a kind that searches its stored corpus as it is (BM25, TF-IDF):
    no separate index (:meth:`build_index`, :meth:`index_identity`), nothing to check before a
    search, no query files. :class:`~medbench_core.retrieval.kinds.encoder.EncoderKind` overrides
    them for dense vectors in a FAISS index.
    """

    def corpus_of(self, spec: ModelSpec) -> str | None:
        return spec.name

    def weights_revision(self, spec: ModelSpec) -> str:
        return cached_revision(spec)

    def index_identity(self, spec: ModelSpec) -> str | Mapping[str, Any]:
        """What keys the index stage beside the embeddings key: a constant (the kind's name) for a kind
        that builds no index; an encoder's FAISS index settings (the entry's ``index:``)."""
        return self.name

    def query_settings(self, spec: ModelSpec) -> tuple[str, ...]:
        """Settings that change only the queries: out of the embeddings key, into the run key (as the resolved prompt)."""
        return spec.settings.QUERY_ONLY

    def stage_keys(
        self,
        spec: ModelSpec,
        task_hash: str,
        revision: str,
        k: int,
        *,
        dataset_revision: str = "",
        query_prompt: dict[str, Any] | None = None,
        metrics: tuple[str, ...] | None = None,
        analysis: dict[str, Any] | None = None,
    ) -> dict[str, str]:
        """Provenance key of each stage: a stage's key covers its own inputs and its upstream stage's key.

        embeddings: the task content hash, the source dataset's revision (when the task records
        one), the model identity without its index and query-only settings, the weights'
        revision, the stage's and the kind's versions, and ``analysis`` when the kind gives one
        (:meth:`analysis_identity`; absent, the key is what it was before analysers were keyed);
        index: adds the index settings; run: adds
        k and the query prompt the task resolves to (``query_prompt``; all query-only settings
        when not given); metrics: the metric list.
        """
        from medbench_core.metric_names import DEFAULT_METRICS
        from medbench_core.provenance import artifact_key, stage_version

        model = {key: v for key, v in spec.identity().items() if key != "index"}
        query_only = [s for s in self.query_settings(spec) if s in model["settings"]]
        prompt: dict[str, Any] = {}
        if query_only:
            model["settings"] = {key: v for key, v in model["settings"].items() if key not in query_only}
            prompt = query_prompt if query_prompt is not None else {"query_settings": {s: spec.identity()["settings"][s] for s in query_only}}
        source = {"dataset_revision": dataset_revision} if dataset_revision else {}
        kind = {"kind_version": self.version}
        if analysis:
            source["analysis"] = analysis
        emb = artifact_key(stage="embeddings", task=task_hash, model=model, revision=revision, code=stage_version("embeddings"), **kind, **source)
        idx = artifact_key(stage="index", upstream=emb, index=self.index_identity(spec), code=stage_version("index"))
        run = artifact_key(stage="run", upstream=idx, k=k, code=stage_version("run"), **kind, **prompt)
        met = artifact_key(stage="metrics", upstream=run, metrics=list(metrics or DEFAULT_METRICS), code=stage_version("metrics"))
        return {"embeddings": emb, "index": idx, "run": run, "metrics": met}

    def prompt_key(self, spec: ModelSpec, task: Task) -> dict[str, Any] | None:
        """What of the query prompt enters the run key on ``task`` (None: the kind has none)."""
        return None

    def analysis_identity(self, spec: ModelSpec, task: Task) -> dict[str, Any] | None:
        """How the kind analyses ``task``'s text, when that enters the embeddings key (None: nothing beyond the settings)."""
        return None

    def partition_keys(self, spec: ModelSpec, task: Task, ctx: KeyContext) -> dict[str, str]:
        return self.stage_keys(
            spec,
            task.content_hash(),
            cached_revision(spec),
            ctx.k,
            dataset_revision=task.meta.source_revision,
            query_prompt=self.prompt_key(spec, task),
            analysis=self.analysis_identity(spec, task),
        )

    # --- compute: a subclass implements Retriever's three methods; these hooks have defaults
    def build_index(self, spec: ModelSpec, emb_dir: Path, out: Path, *, use_gpu: bool | None, progress: bool | None, available: MemoryBudget) -> Info:
        """Write a search index over the stored corpus into ``out``; return what its info.json records:
        ``type`` and ``built_on`` (``cpu`` or ``gpu``; the index asset shows both), ``files`` (what it wrote).
        Default: none (``search`` reads the corpus as ``embed_corpus`` stored it)."""
        return {"type": "none", "built_on": "cpu", "files": []}

    def query_files(self, queries: object, out: Path) -> list[str]:
        """Write what a re-scoring needs of the represented queries into ``out``; their file names."""
        return []

    def before_search(self, spec: ModelSpec, task: Task, corpus: StoredCorpus, available: MemoryBudget) -> None:
        """Refuse a search that cannot fit, before the queries are represented."""


class DerivedKind(Kind):
    """A model whose run is built from other models' runs (or a retriever's stored corpus and an expansion)."""

    derived = True
    takes_path = True

    def inputs(self, spec: ModelSpec) -> tuple[InputRef, ...]:
        """What its run is built from: by default, each upstream model's run."""
        return tuple(InputRef("run", up) for up in self.upstream(spec))

    def check_inputs(self, spec: ModelSpec, task: Task, inputs: Mapping[str, Input]) -> None:
        """Refuse inputs the compute cannot use, before anything is computed (DataError naming the model and input)."""

    def compute(
        self, spec: ModelSpec, task: Task, inputs: Mapping[str, Input], out: Path, *, k: int, device: str = "cpu", progress: bool = False, model: Any = None
    ) -> tuple[pl.DataFrame, dict[str, Any]]:
        """The run and what info.json records of it (``files``: files written into ``out`` besides the run)."""
        raise NotImplementedError

    def partition_keys(self, spec: ModelSpec, task: Task, ctx: KeyContext) -> dict[str, str]:
        """Run and metrics keys over the upstream run keys (:func:`derived_stage_keys`)."""
        missing = [u for u in self.upstream(spec) if u not in ctx.keys]
        if missing:
            raise DataError(f"model {spec.name}: no keys for upstream model(s) {missing}; their keys enter this model's key")
        return derived_stage_keys(spec, task.content_hash(), self.weights_revision(spec), {u: ctx.keys[u]["run"] for u in self.upstream(spec)}, ctx.k)


def derived_stage_keys(
    spec: ModelSpec,
    task_hash: str,
    revision: str,
    upstream_run_keys: Mapping[str, str],
    k: int,
    metrics: tuple[str, ...] | None = None,
) -> dict[str, str]:
    """Provenance keys of a derived model's ``run`` and ``metrics`` stages.

    The run key hashes the task content hash, the model identity, the weights' revision, each
    upstream run key (by name), k, the derived run's declared version and the kind's version; the
    metrics key adds the metric list.
    """
    from medbench_core.metric_names import DEFAULT_METRICS
    from medbench_core.provenance import artifact_key, stage_version

    missing = [u for u in spec.upstream if u not in upstream_run_keys]
    if missing:
        raise DataError(f"model {spec.name}: no run key for upstream model(s) {missing}; their keys enter this model's key")
    ups = {u: upstream_run_keys[u] for u in spec.upstream}
    run = artifact_key(
        stage="run", kind="derived", task=task_hash, model=spec.identity(), revision=revision, upstream=ups, k=k,
        code=stage_version("derived_run"), kind_version=spec.plugin.version,
    )  # fmt: skip
    met = artifact_key(stage="metrics", upstream=run, metrics=list(metrics or DEFAULT_METRICS), code=stage_version("metrics"))
    return {"run": run, "metrics": met}
