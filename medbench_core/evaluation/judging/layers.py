"""The qrels layers of a task, and a stored run scored on the filled one.

- **human**: the task's own qrels, never changed;
- **LLM**: the parsed grades of a judgement artifact, on the task's scale (``qrels.llm.trec``);
- **filled**: human + LLM: every human judgment as it is, plus the LLM's grade of each pair the
  humans did not judge (fill pairs), on the humans' queries only. Calibration pairs keep their
  human grade. A negative human grade (trec_eval: in the pool, unjudged) is no judgment: the
  LLM's grade takes its place when there is one. LLM grades of queries the humans never judged
  are left out (counted): the two layers score the same queries, so their differences, Kendall's
  tau and RBO compare like with like.

A run is scored on the filled layer with the very evaluator and measures of the metrics stage
(:func:`medbench_core.evaluation.metrics.evaluate_frame`, holes counted against the filled
judgments), over the same queries as the human layer, with the same filter of documents
retrieved for a query of their own id as the human scoring applies to that model's run (the
task's ``ignore_identical_ids`` and the model's scoring family:
:func:`medbench_core.evaluation.scoring.drops_identical_ids`). The result is stored beside the cell's metrics, keyed by the cell's metrics key and the
judgement artifact's key (``Layout.filled_dir``): ``metrics.json`` (means, their 95% bootstrap
CIs, the keys) and ``per_query.parquet``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.capabilities import scoring_family

FILES = ("metrics.json", "per_query.parquet")


def llm_fill(human: pl.DataFrame, judgements: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """The filled layer (module docstring) and how many parsed LLM grades of fill pairs it leaves out
    because their query is not one the humans judged."""
    h = human.select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.col("relevance").cast(pl.Int64))
    judged = h.filter(pl.col("relevance") >= 0)  # a negative grade: in the pool, unjudged (trec_eval)
    llm = judgements.filter((pl.col("role") == "fill") & pl.col("grade").is_not_null()).select(
        pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.col("grade").cast(pl.Int64).alias("relevance")
    )
    llm = llm.join(judged, on=["query_id", "doc_id"], how="anti")
    on_humans = llm.join(h.select("query_id").unique(), on="query_id", how="semi")
    kept_unjudged = h.filter(pl.col("relevance") < 0).join(on_humans, on=["query_id", "doc_id"], how="anti")
    return pl.concat([judged, kept_unjudged, on_humans]), llm.height - on_humans.height


def filled_key(metrics_key: str, judgement_key: str, code: str | None = None) -> str:
    """Key of a cell's filled-layer metrics: its human metrics key (run, task, measures) and the judgements'."""
    from medbench_core.provenance import artifact_key, stage_version

    return artifact_key(stage="filled_metrics", metrics=metrics_key, judgements=judgement_key, code=code or stage_version("filled_metrics"))


def score_filled(task, run: pl.DataFrame, judgements: pl.DataFrame, out: str | Path | None = None, *, family: str | None = None) -> dict[str, Any]:
    """Score ``run`` on the filled layer of ``task`` (module docstring); with ``out``, write its files there.
    ``family``: the retriever family of the model that made the run, as the human scoring takes it."""
    import json

    from medbench_core.evaluation.holes import unjudged_in_universe
    from medbench_core.evaluation.metrics import DEFAULT_METRICS, evaluate_frame
    from medbench_core.evaluation.scoring import drops_identical_ids, judged_nonrelevant_summary
    from medbench_core.evaluation.stats import bootstrap_cis

    qrels, other_queries = llm_fill(task.qrels, judgements)
    if drops_identical_ids(task, family):  # as the human layer is scored (scoring.score): BEIR's rule
        run = run.filter(pl.col("query_id").cast(pl.Utf8) != pl.col("doc_id").cast(pl.Utf8))
    ev = evaluate_frame(qrels, run, DEFAULT_METRICS, unjudged=unjudged_in_universe(task, qrels))
    per_query = ev.per_query_frame()
    result: dict[str, Any] = {
        "mean": ev.mean, "n_queries": len(ev.per_query), "n_llm_judgments": qrels.filter(pl.col("relevance") >= 0).height
        - task.qrels.filter(pl.col("relevance") >= 0).height, "n_llm_other_queries": other_queries,
        "holes": {"judged_nonrelevant": judged_nonrelevant_summary(qrels, per_query)},
    }  # fmt: skip
    if per_query.height:
        names = [m for m in ev.mean if m in per_query.columns]
        result["ci"] = {m: list(ci) for m, ci in zip(names, bootstrap_cis([per_query[m].cast(pl.Float64).to_numpy() for m in names]))}
    if out is not None:
        out = Path(out)
        per_query.write_parquet(out / "per_query.parquet", statistics=False)
        (out / "metrics.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    result["per_query"] = per_query
    return result


def load_or_score_filled(
    folder: str | Path, task, run_file: str | Path, judgements: pl.DataFrame, provenance: dict[str, Any], *, family: str | None = None
) -> dict[str, Any]:
    """The cell's filled-layer metrics stored in ``folder`` (verified), else scored now and stored atomically."""
    import json

    from medbench_core.storage import MANIFEST, is_complete, replace_dir_atomic, verify_manifest, write_manifest

    folder = Path(folder)
    if not is_complete(folder):
        run = pl.read_parquet(run_file)

        def build(tmp: Path) -> None:
            score_filled(task, run, judgements, tmp, family=family)
            write_manifest(tmp, list(FILES), {"provenance": provenance})

        replace_dir_atomic(folder, build)
    if not (folder / MANIFEST).exists():
        raise DataError(f"{folder}: filled-layer metrics were not written")
    verify_manifest(folder)
    result = json.loads((folder / "metrics.json").read_text())
    result["per_query"] = pl.read_parquet(folder / "per_query.parquet")
    return result


def current_judgements(spec, task, layout, model_specs: list, expansions: list, *, online: bool = False) -> tuple[str, Path]:
    """The key and folder of ``spec``'s judgements of ``task`` as the registry stands now (pool models'
    current run keys). Raises DataError when a pool model's keys cannot be computed."""
    from medbench_core.evaluation.judging.stage import judgement_stage_key
    from medbench_core.retrieval.derived import registry_partition_keys

    run_keys: dict[str, str] = {}
    if spec.source == "generate":
        models = spec.resolved_pool()["models"]
        keys = registry_partition_keys(model_specs, task, names=models, expansions=expansions, online=online)
        run_keys = {m: keys[m]["run"] for m in models}
    key = judgement_stage_key(spec, task, pool_runs=run_keys)
    return key, layout.judgement_dir(spec.name, task.name, key)


def attach_filled(cells: list, tasks: dict, judgement_specs: list, layout, model_specs: list, expansions: list, *, online: bool = False) -> tuple[list, dict]:
    """Each evaluated cell with its score on the filled layer of its task (:attr:`~medbench_core.evaluation.reports.Cell.filled`),
    and per task what its filled layer is: the judgement entry, key, judge, counts and agreement, or why there is none.

    A task's filled layer is that of the one ``judgements:`` entry that judges it, as stored at its
    current key (the leaderboard reads, it judges nothing). A task two or more entries judge gets
    none, and its summary says so, naming them (``status``: refused): which of them would be the
    filled layer is not the leaderboard's to guess. Each cell's filled metrics are scored once and
    stored (``Layout.filled_dir``), keyed by the cell's metrics key and the judgements' key. A cell
    built with a model of the judge's family is marked (:mod:`.circularity`), and each cell's
    builders carry their families and where each was read.
    """
    import dataclasses

    from medbench_core.errors import MedbenchError
    from medbench_core.evaluation.judging.circularity import cell_builders, circular, describe, judge_family_sources
    from medbench_core.evaluation.judging.frame import load_judgements

    by_model = {s.name: s for s in model_specs}
    exp_by_name = {e.name: e for e in expansions}
    summary: dict[str, dict] = {}
    out = []
    loaded: dict[str, tuple] = {}
    for name, task in tasks.items():
        judging = [s for s in judgement_specs if s.judges_task(name)]
        if not judging:
            continue
        if len(judging) > 1:
            names = ", ".join(s.name for s in judging)
            summary[name] = {"judgement": names, "status": f"refused: {len(judging)} judgements: entries judge {name} ({names}); "
                             "a task's filled layer comes from one: give their 'tasks:' lists no task in common"}  # fmt: skip
            continue
        spec = judging[0]
        if task.meta.doc_modality != "text":
            summary[name] = {"judgement": spec.name, "status": f"not judged: the judges read text passages; {name}'s documents are {task.meta.doc_modality}"}
            continue
        try:
            key, folder = current_judgements(spec, task, layout, model_specs, expansions, online=online)
            frame, info = load_judgements(folder)
        except MedbenchError as exc:
            summary[name] = {"judgement": spec.name, "status": f"not judged at the current key: {str(exc).splitlines()[0]} (medbench run --tasks {name})"}
            continue
        judge_sources = judge_family_sources(spec)
        info = {**info, "n_llm_other_queries": llm_fill(task.qrels, frame)[1]}
        loaded[name] = (spec, key, frame, frozenset(judge_sources))
        summary[name] = {"judgement": spec.name, "key": key, "judge": spec.judge, "families": judge_sources, "status": "judged",
                         **{k: info.get(k) for k in ("source", "revision", "n_pairs", "n_fill", "n_calibration", "n_unparsed", "n_fill_relevant", "top_grade",
                                                     "n_llm_other_queries", "grade_map", "agreement", "seconds", "pairs_per_second")}}  # fmt: skip
    for c in cells:
        got = loaded.get(c.task)
        prov = c.provenance or {}
        if got is None or c.metrics is None or not c.applicable or "metrics_key" not in prov or "run_key" not in prov:
            out.append(c)
            continue
        spec, key, frame, fams = got
        fk = filled_key(prov["metrics_key"], key)
        run_file = layout.artifact_dir(c.model, c.task, "run", prov["run_key"]) / "run.parquet"
        # The identical-id rule as the human scoring took it for this model (assets/metrics.py: its kind's scoring family).
        family = scoring_family(by_model[c.model], by_model) if c.model in by_model else None
        result = load_or_score_filled(
            layout.filled_dir(c.model, c.task, fk),
            tasks[c.task],
            run_file,
            frame,
            {"model": c.model, "task": c.task, "metrics_key": prov["metrics_key"], "judgements_key": key, "provenance_key": fk},
            family=family,
        )
        builders = cell_builders(by_model[c.model], by_model, exp_by_name) if c.model in by_model else {}
        filled = {"mean": result["mean"], "ci": result.get("ci", {}), "per_query": result["per_query"], "judgements": f"{spec.name}@{key}",
                  "key": fk, "circular": circular(fams, builders), "builders": {k: dict(v) for k, v in builders.items()},
                  "families": "; ".join(f"{b}: {describe(v)}" for b, v in sorted(builders.items())) or "no model",
                  "holes": result.get("holes") or {}}  # fmt: skip
        out.append(dataclasses.replace(c, filled=filled, provenance={**prov, "filled_key": fk, "judgements_key": key}))
    return out, summary
