"""A first-stage retriever kind: the :class:`Retriever` protocol the one search path calls, and
:class:`RetrieverKind`, the base that gives a retriever its stage keys and index hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import polars as pl

from medbench_core.retrieval.kinds.base import Kind, cached_revision
from medbench_core.retrieval.kinds.capabilities import ExpandsQueries, index_identity, prompt_key
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.kinds.stage_inputs import Info, KeyContext, MemoryBudget, Pools, Queries, QueryExpansion, QueryPrompt, StoredCorpus
from medbench_core.taskdata.task import Task


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
        (an expanded model; only :class:`~.capabilities.Expandable` kinds get one)."""
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


def corpus_of(spec: ModelSpec) -> str | None:
    """The model whose stored corpus (``corpus_embeddings``, ``corpus_index``) ``spec``'s partitions use: a retriever's
    own, an expanded model's retriever's (:class:`~.capabilities.ExpandsQueries`); None for a model built from runs
    (fusion, a reranker)."""
    kind = spec.plugin
    if isinstance(kind, ExpandsQueries):
        return kind.corpus_of(spec)
    return spec.name if isinstance(kind, Retriever) else None


class RetrieverKind(Kind):
    """The base of a first-stage retriever: represents the corpus once, then ranks queries against it.

    A subclass implements :class:`Retriever`'s three methods; this base gives it its stage keys. An index of its
    own, a check before a search and query files are optional capabilities (:class:`~.capabilities.BuildsIndex`,
    :class:`~.capabilities.ChecksBeforeSearch`, :class:`~.capabilities.WritesQueryFiles`); a kind without them
    searches its stored corpus as it is (TF-IDF). :class:`~medbench_core.retrieval.kinds.encoder.EncoderKind` has
    all three for dense vectors in a FAISS index.
    """

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
        query_only = [s for s in spec.settings.QUERY_ONLY if s in model["settings"]]  # query-only: out of the embeddings key, into the run key
        prompt: dict[str, Any] = {}
        if query_only:
            model["settings"] = {key: v for key, v in model["settings"].items() if key not in query_only}
            prompt = query_prompt if query_prompt is not None else {"query_settings": {s: spec.identity()["settings"][s] for s in query_only}}
        source = {"dataset_revision": dataset_revision} if dataset_revision else {}
        kind = {"kind_version": self.version}
        if analysis:
            source["analysis"] = analysis
        emb = artifact_key(stage="embeddings", task=task_hash, model=model, revision=revision, code=stage_version("embeddings"), **kind, **source)
        idx = artifact_key(stage="index", upstream=emb, index=index_identity(spec), code=stage_version("index"))
        run = artifact_key(stage="run", upstream=idx, k=k, code=stage_version("run"), **kind, **prompt)
        met = artifact_key(stage="metrics", upstream=run, metrics=list(metrics or DEFAULT_METRICS), code=stage_version("metrics"))
        return {"embeddings": emb, "index": idx, "run": run, "metrics": met}

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
            query_prompt=prompt_key(spec, task),
            analysis=self.analysis_identity(spec, task),
        )
