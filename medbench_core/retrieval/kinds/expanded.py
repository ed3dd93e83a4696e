"""Kind ``expanded``: a registered retriever run on queries expanded by an entry of ``expansions:``
(HyDE, Query2Doc, LameR; :mod:`medbench_core.retrieval.expansion`).

``{name: bm25+hyde-gpt4, kind: expanded, retriever: bm25, expansion: hyde-gpt4}``, with ``combine``
(concat | replace | mean; R2MED's default for the method and the retriever's family when left
out), ``repeat_query`` and, for dense concat, ``settings.separator``
(:mod:`medbench_core.retrieval.expansion.rules`). It searches its retriever's stored corpus (same
embeddings and index keys) through the retriever kind's own search path
(:func:`medbench_core.retrieval.stages.rank`); only its run and metrics are its own. A LameR
expansion reads an upstream model's run, which becomes this model's upstream too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.expansion.rules import Combine, resolve_combination
from medbench_core.retrieval.kinds.capabilities import expansion_family, prompt_key, query_files, query_prompt
from medbench_core.retrieval.kinds.derived_base import DerivedKind, is_derived
from medbench_core.retrieval.kinds.settings import KindSettings
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.kinds.stage_inputs import Input, InputRef, KeyContext, StoredCorpus, StoredExpansion
from medbench_core.taskdata.task import Task


@dataclass(frozen=True)
class ExpandedSettings(KindSettings):
    separator: str | None = None  # dense concat: between the (repeated) query and the expansion
    # dense mean: the expansion is embedded with the query's instruction too (true) or bare (false);
    # left out, as R2MED's class for that kind of retriever does (Expandable.instructs_expansion: NV-Embed,
    # GritLM and Instructor, utils.py l.643-649, 574-580, 227-233, give it to both; FlagDRES,
    # l.86-97, to the query only)
    instruct_expansion: bool | None = None


@dataclass(frozen=True)
class ExpandedBlock:
    """The retriever, the expansion, the combination asked for, and (set from the registry) the
    model whose run a LameR expansion reads."""

    retriever: str
    expansion: str
    combine: str = ""
    repeat_query: int | None = None
    expansion_upstream: str = ""

    def to_entry(self) -> dict[str, Any]:
        return {"retriever": self.retriever, "expansion": self.expansion, "combine": self.combine, "repeat_query": self.repeat_query}


def resolve_combine(spec: ModelSpec, retriever: ModelSpec, method: str, generator: str = "") -> Combine:
    """The combination expanded model ``spec`` uses with ``retriever`` for an expansion of ``method`` written by ``generator``."""
    b = spec.block
    fam = expansion_family(retriever)  # refuses a retriever no expansion meets, before it is asked for instructs_expansion
    return resolve_combination(
        spec.name, fam, method, combine=b.combine, repeat_query=b.repeat_query, separator=spec.settings.separator, retriever=retriever.name,
        generator=generator, instruct_expansion=spec.settings.instruct_expansion, instruct_default=retriever.plugin.instructs_expansion(retriever),
    )  # fmt: skip


class ExpandedKind(DerivedKind):
    """A :class:`~.derived_base.RunBuilder` with the :class:`~.capabilities.ExpandsQueries` capability."""

    name = "expanded"
    Settings = ExpandedSettings
    # 2: dense runs give the query its instruction (and the expansion too with instruct_expansion);
    #    reasoning generators default to the answer alone (BM25) or the mean (dense)
    # (instruct_expansion's default per retriever kind changed the resolved combination, which is in the run key)
    version = "2"
    entry_fields = ("retriever", "expansion", "combine", "repeat_query")
    no_path_reason = "its retriever's entry names the model"

    def parse_block(self, spec: ModelSpec, fields: dict[str, Any], where: str) -> ExpandedBlock:
        retriever, expansion = fields.get("retriever"), fields.get("expansion")
        if not isinstance(retriever, str) or not retriever or not isinstance(expansion, str) or not expansion:
            raise DataError(f"{where}: kind expanded needs 'retriever' (a model entry) and 'expansion' (an entry of 'expansions:')")
        combine = fields.get("combine") or ""
        repeat = fields.get("repeat_query")
        if repeat is not None and (isinstance(repeat, bool) or not isinstance(repeat, int)):
            raise DataError(f"{where}: repeat_query must be an integer, not {repeat!r}")
        return ExpandedBlock(retriever, expansion, str(combine), repeat)

    def block_entry(self, spec: ModelSpec) -> dict[str, Any]:
        return spec.block.to_entry()

    def complete(self, spec: ModelSpec, registry: Mapping[str, ModelSpec], expansions: Mapping[str, Any], where: str) -> ModelSpec:
        """The retriever must be another entry that can take an expansion; the expansion an entry of ``expansions:``."""
        b = spec.block
        r = registry.get(b.retriever)
        if r is None or is_derived(r):
            raise DataError(
                f"{where}: model {spec.name!r}: retriever {b.retriever!r} must be another, non-expanded entry of 'models:' "
                "that searches the corpus itself (not a fusion or a reranker)"
            )
        if b.expansion not in expansions:
            raise DataError(f"{where}: model {spec.name!r}: expansion {b.expansion!r} is not in 'expansions:' (known: {sorted(expansions)})")
        e = expansions[b.expansion]
        try:
            resolve_combine(spec, r, e.method, e.generator)  # refuses a combination the retriever cannot do
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from exc
        return dataclasses.replace(spec, block=dataclasses.replace(b, expansion_upstream=e.upstream or ""))

    def upstream(self, spec: ModelSpec) -> tuple[str, ...]:
        """Its retriever, and the model whose run a LameR expansion reads."""
        return tuple(dict.fromkeys(n for n in (spec.block.retriever, spec.block.expansion_upstream) if n))

    def upstream_runs(self, spec: ModelSpec) -> tuple[str, ...]:
        return (spec.block.expansion_upstream,) if spec.block.expansion_upstream else ()

    def corpus_of(self, spec: ModelSpec) -> str:
        return spec.block.retriever

    def expansion_name(self, spec: ModelSpec) -> str:
        return spec.block.expansion

    def mteb_meta(self, spec: ModelSpec, registry: Mapping[str, ModelSpec]) -> dict[str, Any]:
        """An expanded model is its retriever's kind of model."""
        r = registry.get(spec.block.retriever)
        return r.plugin.mteb_meta(r, registry) if r is not None else super().mteb_meta(spec, registry)

    def inputs(self, spec: ModelSpec) -> tuple[InputRef, ...]:
        """Its retriever's stored corpus and its expansion (a LameR upstream's run entered the expansion, and its key the expansion's key)."""
        return (InputRef("corpus", spec.block.retriever), InputRef("expansion", spec.block.expansion))

    def record_params(self, spec: ModelSpec, run_info: Mapping[str, Any]) -> dict[str, str]:
        import json

        return {
            "retriever": spec.block.retriever,
            "expansion": spec.block.expansion,
            "expansion_key": str((run_info.get("expansion") or {}).get("key", "")),
            "combine": json.dumps(run_info.get("combine") or {}, sort_keys=True),
            "empty_expansions": str(len(run_info.get("empty_expansions") or [])),
        }

    def partition_keys(self, spec: ModelSpec, task: Task, ctx: KeyContext) -> dict[str, str]:
        """``expansion`` (the expansion's key, with a LameR upstream's run key), the retriever's
        ``embeddings`` and ``index`` keys (its stored corpus is reused), and its own ``run`` (over
        the index key, the expansion key, the resolved combination, k, the versions) and ``metrics``."""
        from medbench_core.metric_names import DEFAULT_METRICS
        from medbench_core.provenance import artifact_key, stage_version
        from medbench_core.retrieval.expansion.stage import expansion_stage_key

        b = spec.block
        if b.expansion not in ctx.expansions:
            raise DataError(f"model {spec.name}: expansion {b.expansion!r} is not among the registry's expansions {sorted(ctx.expansions)}")
        e = ctx.expansions[b.expansion]
        retriever = ctx.registry[b.retriever]
        up = ctx.keys[e.upstream]["run"] if e.upstream and e.source == "generate" else None
        key = expansion_stage_key(e, task, upstream_run_key=up, prompts_dir=ctx.prompts_dir, online=ctx.online)
        base = ctx.keys[b.retriever]
        combine = resolve_combine(spec, retriever, e.method, e.generator)
        prompt = prompt_key(retriever, task)  # the retriever's query instruction on the task (None: it has none)
        run = artifact_key(
            stage="expanded_run", model=spec.name, upstream=base["index"], expansion=key, combine=combine.to_dict(), k=ctx.k,
            code=stage_version("expanded_run"), kind_version=self.version, **({"query_prompt": prompt} if prompt else {}),
        )  # fmt: skip
        met = artifact_key(stage="metrics", upstream=run, metrics=list(DEFAULT_METRICS), code=stage_version("metrics"))
        return {"expansion": key, "embeddings": base["embeddings"], "index": base["index"], "run": run, "metrics": met}

    def check_inputs(self, spec: ModelSpec, task: Task, inputs: Mapping[str, Input]) -> None:
        corpus, exp = inputs[spec.block.retriever], inputs[f"expansion:{spec.block.expansion}"]
        if not isinstance(corpus, StoredCorpus):
            raise DataError(f"model {spec.name}: the input {spec.block.retriever!r} must be the retriever's stored corpus (corpus_embeddings and corpus_index)")
        if not isinstance(exp, StoredExpansion):
            raise DataError(f"model {spec.name}: the input 'expansion:{spec.block.expansion}' must be the stored expansion")

    def compute(
        self, spec: ModelSpec, task: Task, inputs: Mapping[str, Input], out: Path, *, k: int, device: str = "cpu", progress: bool = False, model: Any = None
    ) -> tuple[pl.DataFrame, dict[str, Any]]:
        """The retriever's own search with the expanded queries; ``model``: the retriever's loaded encoder, reused across partitions."""
        from medbench_core.retrieval.expansion.frame import answers
        from medbench_core.retrieval.stages import rank

        self.check_inputs(spec, task, inputs)
        corpus, exp = inputs[spec.block.retriever], inputs[f"expansion:{spec.block.expansion}"]
        retriever = corpus.spec
        combine = resolve_combine(spec, retriever, exp.spec.method, exp.spec.generator)
        texts = answers(exp.frame, task.queries["query_id"].to_list(), f"expansion for task {task.name}")

        def load_model() -> Any:
            if model is not None or not retriever.plugin.loads_weights:
                return model
            return retriever.plugin.load(retriever, device=device, progress=progress)

        # the retriever's query instruction on this task (R2MED's encoders keep it with an expansion)
        prompt = query_prompt(retriever, task)
        run, queries = rank(retriever, task, corpus, k=k, load_model=load_model, prompt=prompt, expansion=(texts, combine), progress=progress)
        files = query_files(retriever, queries, out)
        info = {"retriever": retriever.name, "combine": combine.to_dict(), "expansion": {"name": exp.spec.name, "key": exp.key}, "files": files}
        qids = task.queries["query_id"].to_list()
        empty = [q for q, t in zip(qids, texts) if not (t or "").strip()]
        if empty:  # scored with the empty string, as R2MED's code scores them, and kept in the mean: said where the run is read
            from medbench_core.retrieval.expansion.files import empty_note

            info.update(empty_expansions=empty, notes=[empty_note(empty, len(qids))])
        return run, info


KIND = ExpandedKind()
