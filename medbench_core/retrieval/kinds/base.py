"""What a model kind is, and the defaults kinds share (:class:`Kind`).

The pieces of the plugin boundary, one module each:

- :class:`ModelKind` (here): the protocol every kind implements (three attributes, five methods).
- :class:`Kind` (here): the base with a default for what every kind says: the entry (settings schema,
  own fields, identity), revision, which tasks it reads, upstreams, provenance keys and MLflow
  params. Its defaults claim nothing about a model (no long-text policy, no mteb model type); the
  dense defaults live in :class:`~medbench_core.retrieval.kinds.encoder.EncoderKind`.
- :mod:`.capabilities`: what only some kinds can do, each a small runtime-checkable protocol asked with
  ``isinstance`` (through one helper each), never a default on the base: :class:`~.capabilities.Expandable`,
  :class:`~.capabilities.ExpandsQueries`, :class:`~.capabilities.TakesQueryPrompt`,
  :class:`~.capabilities.RunsTrustedCode`, and the entry's (defined in :mod:`.spec`, beside the reader that asks them):
  :class:`~.spec.OwnEntryFields`, :class:`~.spec.ChecksEntry`, :class:`~.spec.NeedsPath`, :class:`~.spec.RefusesPath`.
- :mod:`.retriever_base`: :class:`~medbench_core.retrieval.kinds.retriever_base.Retriever`, the three
  methods the one search path needs of a first-stage retriever (as mteb's ``SearchProtocol``), and
  :class:`~medbench_core.retrieval.kinds.retriever_base.RetrieverKind`, the base that gives a retriever
  the rest (keys, a stage with no separate index, hooks).
- :mod:`.derived_base`: :class:`~medbench_core.retrieval.kinds.derived_base.RunBuilder`, the other
  compute capability, and :class:`~medbench_core.retrieval.kinds.derived_base.DerivedKind`, which builds
  its run from its inputs (upstream runs, a retriever's stored corpus, an expansion) with ``compute``.
- :mod:`.stage_inputs`: the values those methods take and return.

Keys: a stage's key hashes its inputs, its upstream stage's key, the stage's declared version
(:data:`medbench_core.provenance.STAGE_VERSIONS`) and the kind's :attr:`Kind.version`. Bump the
kind's version in the change that alters its output (tests/core/test_golden_outputs.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import polars as pl

from medbench_core.retrieval.kinds.capabilities import NeedsPath, OwnEntryFields, half_implemented, query_prompt
from medbench_core.retrieval.kinds.settings import KindSettings, NoSettings
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.kinds.stage_inputs import KeyContext
from medbench_core.taskdata.task import Task

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


@runtime_checkable
class ModelKind(Protocol):
    """What every model kind must implement: three attributes and five methods, as mteb's ``SearchProtocol``
    (mteb/models/models_protocols.py) is the few methods a search needs.

    A kind also has exactly one compute capability: :class:`~.retriever_base.Retriever` (represent the corpus,
    then search it) or :class:`~.derived_base.RunBuilder` (build a run from its inputs; no flag says which:
    :func:`~.derived_base.is_derived`), and any of the optional capabilities of :mod:`.capabilities`. What
    every kind says beyond the protocol has a default in :class:`Kind`. Reading models.yaml refuses an entry whose kind is not
    a ``ModelKind`` (:func:`model_kind`); tests/core/test_kinds.py checks every registered kind against it,
    parameters included.
    """

    #: the ``kind:`` value of models.yaml, equal to its key in ``KINDS``
    name: str
    #: bumped in the change that alters this kind's output (it enters every artifact key)
    version: str
    #: the typed settings of ``settings:`` (a frozen :class:`KindSettings` dataclass)
    Settings: type[KindSettings]

    def revision(self, spec: ModelSpec) -> str:
        """What identifies the model's own weights; ``""`` when it has none (:meth:`Kind.revision`)."""
        ...

    def upstream(self, spec: ModelSpec) -> tuple[str, ...]:
        """Models whose runs (or stored corpus) this model's run is built from."""
        ...

    def applicability(self, spec: ModelSpec, task: Task, registry: Mapping[str, ModelSpec]) -> str | None:
        """None when ``spec`` can be evaluated on ``task``; otherwise why not (the task's ``n/a`` cell)."""
        ...

    def partition_keys(self, spec: ModelSpec, task: Task, ctx: KeyContext) -> dict[str, str]:
        """The provenance key of each stage this model has on ``task``."""
        ...

    def load(self, spec: ModelSpec, *, device: str = "cpu", progress: bool | None = False, online: bool = False) -> Any:
        """The loaded model its compute takes (an encoder, a cross-encoder); None for a kind without weights."""
        ...


def model_kind(spec: ModelSpec) -> ModelKind:
    """``spec``'s kind as a :class:`ModelKind` (TypeError naming what it lacks for an object that is not one)."""
    kind = spec.plugin
    if not isinstance(kind, ModelKind):
        required = ("name", "version", "Settings", "revision", "upstream", "applicability", "partition_keys", "load")
        missing = [m for m in required if not hasattr(kind, m)]
        raise TypeError(f"model {spec.name}: kind {spec.kind} is not a ModelKind (it lacks {', '.join(missing)})")
    problems = half_implemented(kind)
    if problems:
        raise TypeError(f"model {spec.name}: kind {spec.kind} has part of a capability: {'; '.join(problems)}")
    return kind


class Kind:
    """The base of every kind: :class:`ModelKind`'s methods, and a default for what every kind says beside them
    (modalities, libraries, long-text policy, MLflow params, mteb metadata, a hub id, an example entry).

    The protocols are what callers rely on, not this class: :class:`ModelKind` (required: ``name``, ``version``,
    ``Settings``, ``revision``, ``upstream``, ``applicability``, ``partition_keys``, ``load``), exactly one compute
    capability, :class:`~.retriever_base.Retriever` or :class:`~.derived_base.RunBuilder`, and the optional
    capabilities listed in :data:`~.capabilities.CAPABILITIES` (:class:`~.capabilities.Expandable`,
    :class:`~.capabilities.ExpandsQueries`, :class:`~.capabilities.TakesQueryPrompt`, :class:`~.capabilities.RunsTrustedCode`,
    :class:`~.spec.OwnEntryFields`, :class:`~.spec.ChecksEntry`, :class:`~.spec.NeedsPath`, :class:`~.spec.RefusesPath`),
    which a kind has by defining all their members (:func:`model_kind` refuses a kind with only part of one) and
    which have no default here. A kind module subclasses one of the three bases
    (:class:`~.retriever_base.RetrieverKind`, :class:`~.encoder.EncoderKind`, :class:`~.derived_base.DerivedKind`),
    sets the class attributes and overrides what its models need.
    """

    name: str = ""
    #: the typed settings of ``settings:`` (unknown keys are refused)
    Settings: type[KindSettings] = NoSettings
    #: bumped in the change that alters this kind's output
    version: str = "1"
    #: record modalities it reads: a text-only kind is ``n/a`` on tasks with image-only records
    reads: frozenset[str] = frozenset({"text"})
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
        return None if isinstance(self, (NeedsPath, OwnEntryFields)) else {}

    def upstream(self, spec: ModelSpec) -> tuple[str, ...]:
        """Models whose runs (or stored corpus) this model's run is built from."""
        return ()

    def hub_id(self, spec: ModelSpec) -> str:
        """The hub repository of its weights (``org/name``), or ``""``."""
        return ""

    # --- revision
    def revision(self, spec: ModelSpec) -> str:
        """The one revision of a model: what identifies its own weights (a pinned commit, a local folder's hash,
        a seed; ``""`` for a model without weights of its own, :class:`~.derived_base.DerivedKind`'s default).
        Callers read it through :func:`cached_revision`; the revision shown for an expanded model's partitions
        (its retriever's) is derived from it (:func:`medbench_core.retrieval.derived.model_revision`)."""
        return spec.revision

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

    def run_params(self, spec: ModelSpec, task: Task) -> dict[str, str]:
        """Flat, MLflow-ready params of one model x task beyond the model's own (dataset provenance, long text, prompt, dtype)."""
        out: dict[str, Any] = dict(task.meta.provenance())
        out.update({k: v for k, v in self.long_text_params(spec).items() if v is not None})
        prompt = query_prompt(spec, task)
        if prompt is not None:
            out["query_template"], out["query_instruction"] = prompt
        dtype = getattr(spec.settings, "dtype", None)
        if dtype:
            out["dtype"] = dtype
        if spec.trust_remote_code:
            out["trust_remote_code"] = "true"
        return {k: str(v) for k, v in out.items()}

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
    def load(self, spec: ModelSpec, *, device: str = "cpu", progress: bool | None = False, online: bool = False) -> Any:
        """The loaded model (an encoder, a cross-encoder); None for a kind without weights."""
        return None
