"""The leaderboard: every registered model on every task, with CIs and paired tests against the baseline.

Reads what the stages stored (metrics.json, per_query.parquet, the run's info.json) for the
current registry and catalogue (each cell at its current provenance key), writes the reports
under data/reports (medbench_core.evaluation.reports: leaderboard.{md,csv,json}, stats.csv, heatmap.png, diff/<task>.png) and logs them as one MLflow
run tagged ``medbench.kind=leaderboard`` in the experiment ``<benchmark>-leaderboard``, reused while
its inputs are unchanged.

It never shows a number it cannot stand behind. A cell whose inputs changed since it was computed,
and that was not recomputed, keeps its value marked stale with the reason: a task whose source files
or tasks.yaml entry changed since it was curated (and curating it again failed or was not run), or
a model with no result at its current keys (changed entry, weights or upstreams) whose cell on the
previous leaderboard still verifies; a new model shows '-'. A cell whose model x task partition
Dagster shows as failed (its last evaluation failed after its metrics were written, e.g. logging
them to MLflow on a full disk) or unfinished is marked the same way, with that run and its error
(issue 29.5). A cell of the saved leaderboard whose metrics artifact now fails its manifest (edited,
truncated) is not dropped quietly: the asset fails, naming the artifact and the partition to
rematerialise, and the saved reports stay as they were.
"""

import dataclasses
import json
from pathlib import Path

import dagster as dg

from assets.stage import ASSET_OF_STAGE
from medbench_core.errors import DataError, IntegrityError, MedbenchError
from medbench_core.evaluation.exports import mteb_models, mteb_task_names
from medbench_core.evaluation.judging.layers import attach_filled
from medbench_core.evaluation.judging.spec import load_judgements
from medbench_core.evaluation.multilingual import multilingual_mlflow_metrics, query_groups
from medbench_core.evaluation.published import load_sources
from medbench_core.evaluation.reports import STALE_KEY, UNCONFIRMED, Cell, Significance, load_cell, write_leaderboard
from medbench_core.evaluation.run_record import DAGSTER_RUN_TAG
from medbench_core.evaluation.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, TESTS
from medbench_core.evaluation.trust import JUDGED_THRESHOLD, TrustSettings
from medbench_core.provenance import artifact_key, stage_version
from medbench_core.retrieval.derived import applicability, derived_revision, registry_partition_keys
from medbench_core.retrieval.expansion.contract import GATE_FILE
from medbench_core.retrieval.expansion.spec import load_expansions
from medbench_core.retrieval.model_registry import ModelSpec
from medbench_core.retrieval.stages import run_params
from medbench_core.storage import is_complete, read_manifest, verify_manifest
from medbench_core.taskdata.catalog import changed_inputs
from medbench_core.taskdata.contracts import read_gate
from medbench_core.taskdata.task import Task
from runtime.partitions import Partitions, partition_key
from runtime.resources import ArtifactStoreResource, MLflowResource, RegistryResource

REPORTS_VERSION = stage_version("reports")  # the declared output version of the reports (logged and keyed as code_version)
KIND_TAG = "medbench.kind"
STALE_TAG = "medbench.stale"


def leaderboard_experiment(benchmark: str) -> str:
    """The MLflow experiment of the leaderboard runs: beside the benchmark's, whose runs are one per model x task (a release lists them)."""
    return f"{benchmark}-leaderboard"


class LeaderboardConfig(dg.Config):
    """How cells are compared with the baseline (``baseline:`` of models.yaml, default bm25)."""

    metric: str = "ndcg_at_10"
    test: str = "permutation"  # or "ttest": the test Holm's correction and the stars follow (both p-values are reported)
    alpha: float = 0.05
    resamples: int = DEFAULT_RESAMPLES  # sign flips of the randomisation test, and bootstrap resamples of the CI
    seed: int = DEFAULT_SEED
    published: str = ""  # a folder of published results (MTEB's or R2MED's layout) instead of tasks.yaml's published_results
    judged_threshold: float = JUDGED_THRESHOLD  # cells whose mean Judged@10 is below it are marked (docs/trust.md)


def expansion_copies(store: ArtifactStoreResource, spec: ModelSpec, task: str, keys: dict[str, str]) -> int:
    """How many of an expanded model's expansions copy a relevant passage, from its expansion's EXPANSION_GATE.json (0 when none recorded)."""
    expansion = spec.plugin.expansion_name(spec)
    if not expansion or "expansion" not in keys:
        return 0
    gate = store.layout.expansion_dir(expansion, task, keys["expansion"]) / GATE_FILE
    try:
        doc = json.loads(gate.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return 0
    return int((doc.get("leakage") or {}).get("n_copies") or 0) if doc.get("key") == keys["expansion"] else 0


def task_cells(
    store: ArtifactStoreResource,
    specs: list[ModelSpec],
    task: Task,
    expansions: list,
    *,
    split: str = "test",
    online: bool = False,
    stale: str = "",
    previous: dict | None = None,
) -> tuple[list[Cell], dict[tuple[str, str], int]]:
    """The cell of every model on ``task`` at its current keys, and the expanded models' copied passages.

    A model that cannot read the task is ``n/a``; a derived model (fusion, reranker, expanded) is
    judged by its upstream models, not by its own embeddings or index, which it does not have.
    ``stale``: why the curated task is not current (its cells are marked with it). A model with no
    result at its current keys keeps the cell of the ``previous`` leaderboard (``model/task`` ->
    provenance), marked stale, while that artifact verifies.
    """
    by_name = {s.name: s for s in specs}
    cells, copies = [], {}
    for spec in specs:
        if applicability(spec, task, by_name):
            cells.append(Cell(spec.name, task.name, applicable=False, research_only=task.meta.research_only))
            continue
        try:
            keys = registry_partition_keys(specs, task, names=[spec.name], expansions=expansions, online=online)[spec.name]
        except MedbenchError:  # e.g. its model folder or expansion file is gone: no result for the current entry
            keys = None
        metrics = store.artifact_dir(spec.name, task.name, "metrics", keys["metrics"]) if keys else None
        if metrics is None or not is_complete(metrics):  # verifies every file against the manifest
            cells.append(earlier_cell(store, spec, task, (previous or {}).get(f"{spec.name}/{task.name}"), split, stale))
            continue
        run = store.artifact_dir(spec.name, task.name, "run", keys["run"])
        own = [] if spec.derived else [store.artifact_dir(spec.name, task.name, s, keys[s]) for s in ("embeddings", "index")]
        revision = derived_revision(spec)
        provenance = {
            "metrics_key": keys["metrics"],
            "run_key": keys["run"],
            "task_content_hash": task.content_hash(),
            "model_revision": revision,
            "dataset_revision": task.meta.source_revision or None,
            "split": split,
            **run_params(spec, task),
        }
        if spec.derived:
            provenance["upstream"] = list(spec.upstream)
        else:
            provenance |= {"embeddings_key": keys["embeddings"], "index_key": keys["index"]}
        if "expansion" in keys:
            provenance["expansion_key"] = keys["expansion"]
        cell = load_cell(
            spec.name, task, metrics_dir=metrics, run_dir=run if (run / "info.json").exists() else None, model_revision=revision,
            split=split, stage_dirs=[d for d in own if d.is_dir()], provenance=provenance,
        )  # fmt: skip
        cells.append(dataclasses.replace(cell, stale=stale) if stale else cell)
        copies[(spec.name, task.name)] = expansion_copies(store, spec, task.name, keys)
    return cells, copies


def filled_layers(
    store: ArtifactStoreResource, registry: RegistryResource, catalog, cells: list[Cell], specs: list[ModelSpec], expansions: list
) -> tuple[list[Cell], dict]:
    """The cells with their scores on the filled (human + LLM) layer of each task a ``judgements:`` entry judges,
    as relevance_judgements stored it (:func:`medbench_core.evaluation.judging.layers.attach_filled`), and per task what that layer is."""
    judgement_specs = load_judgements(registry.models_file)
    if not judgement_specs:
        return cells, {}
    tasks = {}
    for t in catalog.tasks:
        try:
            tasks[t.name] = store.load_task(t.name)
        except MedbenchError:
            continue
    return attach_filled(cells, tasks, judgement_specs, store.layout, specs, expansions, online=registry.online)


def earlier_cell(store: ArtifactStoreResource, spec: ModelSpec, task: Task, prov: dict | None, split: str, stale: str = "") -> Cell:
    """The cell a model has no current result for: its value on the previous leaderboard (``prov``), marked
    stale, while that metrics artifact verifies; else empty ('-')."""
    empty = Cell(spec.name, task.name, research_only=task.meta.research_only)
    if not prov or "metrics_key" not in prov:
        return empty
    metrics = store.artifact_dir(spec.name, task.name, "metrics", prov["metrics_key"])
    if not is_complete(metrics):
        return empty
    run = store.artifact_dir(spec.name, task.name, "run", prov.get("run_key", ""))
    if prov.get("task_content_hash") != task.content_hash():
        why = f"computed on an earlier curated copy of {task.name}, and not recomputed on this one"
    else:
        why = f"{spec.name}'s inputs (its models.yaml entry, weights, upstreams or code) changed since it was computed, and it was not recomputed"
    why += f" (`medbench run --models {spec.name} --tasks {task.name}`)"
    provenance = {k: v for k, v in prov.items() if k != "stale"}
    cell = load_cell(
        spec.name, task, metrics_dir=metrics, run_dir=run if prov.get("run_key") and (run / "info.json").exists() else None,
        model_revision=str(prov.get("model_revision") or ""), split=split, provenance=provenance,
    )  # fmt: skip
    return dataclasses.replace(cell, stale="; ".join(w for w in (stale, why) if w))


def saved_cells(store: ArtifactStoreResource) -> dict:
    """``model/task`` -> provenance of every cell of the saved leaderboard.json ({} when there is none or it does not parse)."""
    try:
        return json.loads(store.layout.leaderboard_file("json").read_text()).get("cells") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def lost_to_corrupt_artifacts(store: ArtifactStoreResource, previous: dict, cells: list[Cell]) -> list[str]:
    """Cells of the saved leaderboard this one would lose because their metrics artifact fails its manifest:
    one line each, naming the artifact and the partition to rematerialise."""
    filled = {(c.model, c.task) for c in cells if c.metrics is not None}
    shown = {(c.model, c.task) for c in cells}
    lost = []
    for name, prov in sorted(previous.items()):
        model, _, task = name.partition("/")
        if (model, task) in filled or (model, task) not in shown or "metrics_key" not in prov:
            continue  # kept, or no longer on the board (model or task removed, task not curated)
        folder = store.artifact_dir(model, task, "metrics", prov["metrics_key"])
        if not folder.is_dir():
            continue  # removed on purpose (a pruned release), not corrupted
        try:
            verify_manifest(folder)
        except IntegrityError as exc:
            lost.append(f"{model} x {task}: {exc}: rematerialise task_metrics[{model}|{task}] (`medbench run --models {model} --tasks {task}`)")
    return lost


def unconfirmed_cells(instance: dg.DagsterInstance, tasks: list[str], cells: list[Cell]) -> dict[tuple[str, str], str]:
    """(model, task) -> why, for each cell with a value whose task_metrics partition Dagster shows as FAILED or
    IN_PROGRESS (its status in the UI: the last run that planned it failed, or has not ended, after its
    last materialisation): that value is not a result the pipeline stood behind, whatever its artifact holds."""
    filled = {str(partition_key(c.model, c.task)): (c.model, c.task) for c in cells if c.value() is not None}
    if not filled:
        return {}
    asset = dg.AssetKey(ASSET_OF_STAGE["metrics"])
    status = instance.get_status_by_partition(asset, list(filled), Partitions(tasks).model_task) or {}
    out = {}
    for key, (model, task) in filled.items():
        if status.get(key) not in (dg.AssetPartitionStatus.FAILED, dg.AssetPartitionStatus.IN_PROGRESS):
            continue
        planned = instance.get_latest_planned_materialization_info(asset, key)
        run = instance.get_run_by_id(planned.run_id) if planned else None
        what = f"Dagster run {run.run_id[:8]}" if run else "its Dagster run"
        if status[key] == dg.AssetPartitionStatus.FAILED:
            error = run_error(instance, run.run_id) if run else ""
            said = f"failed ({what}{': ' + error if error else ''})"
        else:
            said = f"has not finished ({what}, {run.status.value.lower() if run else 'unknown'}: still running, or its process died)"
        out[(model, task)] = (
            f"{UNCONFIRMED} {model} x {task} {said}: the value its stored metrics hold is not confirmed (`medbench run --models {model} --tasks {task}`)"
        )
    return out


def run_error(instance: dg.DagsterInstance, run_id: str) -> str:
    """The first line of the error that failed ``run_id``'s first failed step, as ``step: Error: message`` ("" when none)."""
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        data = entry.dagster_event.step_failure_data if entry.dagster_event else None
        err = data.error if data else None
        # Dagster's wrappers (step execution, retries): the cause is what failed.
        while err is not None and err.cause is not None and ((err.cls_name or "").startswith("Dagster") or err.cls_name == "RetryRequestedFromPolicy"):
            err = err.cause
        if err is not None:
            text = (err.message or "").strip().splitlines()
            return f"{entry.step_key}: {text[0][:300]}" if text else str(entry.step_key)
    return ""


@dg.asset(
    deps=[ASSET_OF_STAGE["metrics"], "relevance_judgements"],
    code_version=REPORTS_VERSION,
    group_name="reports",
    kinds={"markdown", "mlflow"},
    description=(
        "Model x task table of nDCG@10 with 95% bootstrap CIs and paired tests against the baseline (Holm per task), "
        "average, breakdowns, heatmap and per-query difference plots; saved under data/reports and logged to MLflow."
    ),
)
def leaderboard(
    context: dg.AssetExecutionContext, config: LeaderboardConfig, store: ArtifactStoreResource, registry: RegistryResource, mlflow: MLflowResource
) -> dg.MaterializeResult:
    if config.test not in TESTS:
        raise dg.Failure(f"leaderboard config: test {config.test!r} unknown; use one of {TESTS}")
    specs = registry.models()
    sig = Significance(
        registry.baseline(), config.metric, config.test, config.alpha, config.resamples, config.seed
    )  # refuses an unknown baseline before anything is written
    if not 0.0 <= config.judged_threshold <= 1.0:
        raise dg.Failure(f"leaderboard config: judged_threshold {config.judged_threshold} is not a share between 0 and 1")
    trust = TrustSettings(config.judged_threshold, config.metric)
    expansions = load_expansions(registry.models_file)
    catalog = registry.catalog()
    cells: list[Cell] = []
    copies: dict[tuple[str, str], int] = {}
    previous = saved_cells(store)
    groups = {}  # task -> its queries' languages, concepts and relevant documents, for the multilingual section
    for t in catalog.tasks:
        try:
            task = store.load_task(t.name)
        except MedbenchError:
            continue  # not curated: its column shows '-'
        if task.queries["language"].drop_nulls().n_unique() >= 2:
            groups[t.name] = query_groups(task.queries, task.qrels)
        changed = changed_inputs(read_manifest(store.task_dir(t.name)).get("inputs"), t, store.shared_data)
        stale = f"task {t.name}: {changed}, and it has not been curated again (`medbench run --tasks {t.name}`)" if changed else ""
        got, leaks = task_cells(
            store, specs, task, expansions, split=str(t.options.get("split") or "test"), online=registry.online, stale=stale, previous=previous
        )  # fmt: skip
        cells += got
        copies |= leaks
    cells, judged = filled_layers(store, registry, catalog, cells, specs, expansions)
    # Each task's qrels holes as its contract counted them (GATE.json), marked or none: shown under the table, for the
    # tasks with a figure (one refused by its gate or the overlap gate has none: the run that refused it says why).
    scored = {c.task for c in cells if c.metrics is not None}
    data_holes = {t.name: (read_gate(store.layout.gate_file(t.name)) or {}).get("holes") for t in catalog.tasks if t.name in scored}
    data_holes = {t: h for t, h in data_holes.items() if h}
    unconfirmed = unconfirmed_cells(context.instance, catalog.names, cells)
    if unconfirmed:
        context.log.warning("cells whose partition failed or has not finished, marked: " + "; ".join(f"{m}/{t}" for m, t in sorted(unconfirmed)))
    cells = [dataclasses.replace(c, stale="; ".join(w for w in (c.stale, unconfirmed.get((c.model, c.task), "")) if w)) for c in cells]
    lost = lost_to_corrupt_artifacts(store, previous, cells)
    if lost:
        raise DataError(
            f"the saved leaderboard {store.layout.leaderboard_file('md')} was not replaced: it would lose {len(lost)} cell(s) to artifacts "
            "that fail their manifest:\n" + "\n".join(lost)
        )
    research_only = [t.name for t in catalog.tasks if t.research_only]
    provenance = {f"{c.model}/{c.task}": {**c.provenance, **({STALE_KEY: c.stale} if c.stale else {})} for c in cells if c.metrics is not None}
    out = store.reports_dir()
    sources = load_sources(registry.tasks_file, store.shared_data, config.published or None)
    names = {m: meta["name"] for m, meta in mteb_models(specs, {c.model: c.model_revision for c in cells}).items()} if sources else {}
    evaluated = [c for c in cells if c.metrics is not None and c.applicable]
    mteb_tasks = {t: v["mteb_task"] for t, v in mteb_task_names(evaluated).items() if v["mteb_task"]} if sources else {}
    written = write_leaderboard(
        cells, [s.name for s in specs], catalog.names, sig, out, research_only=research_only, specs=specs, copies=copies,
        footer=f"code version {REPORTS_VERSION}, git {registry.git_sha()}; per-cell provenance in leaderboard.json, tests in stats.csv",
        extra_json={"benchmark": catalog.benchmark, "cells": provenance}, published=sources, model_names=names, mteb_tasks=mteb_tasks,
        trust=trust, qrels_holes=data_holes, judgements=judged,
        query_groups=groups,
    )  # fmt: skip
    md = written["markdown"]
    context.log.info("\n" + md)
    run_id, reused = log_leaderboard(context, mlflow, leaderboard_experiment(catalog.benchmark), sig, provenance, copies, written, out, trust)
    annotate_partition_runs(mlflow, catalog.benchmark, provenance, written["published"])
    annotate_filled_runs(mlflow, catalog.benchmark, cells, config.metric)
    heatmap = out / "heatmap.png"
    plots = {f"{Path(f).parent.name}_{Path(f).stem}": dg.MetadataValue.path(str(out / f)) for f in written["files"] if f.startswith(("diff/", "trust/"))}
    return dg.MaterializeResult(
        metadata={
            "leaderboard": dg.MetadataValue.md(md),
            "path": dg.MetadataValue.path(str(out / "leaderboard.md")),
            "heatmap": dg.MetadataValue.path(str(heatmap)),
            # Markdown links render as clickable in the UI; the images themselves are in the MLflow run.
            "plots": dg.MetadataValue.md("\n".join(f"- [{f}]({(out / f).resolve().as_uri()})" for f in written["files"] if f.endswith(".png"))),
            **plots,
            "baseline": sig.baseline,
            "significant_cells": int(written["stats"]["significant"].sum()) if written["stats"].height else 0,
            "cells_filled": len(provenance),
            "stale_cells": len(written["stale"]),
            # Cells whose mean Judged@10 is below the threshold (docs/trust.md), marked in the table.
            "low_judged_cells": int(written["trust"]["low_judged"].fill_null(False).sum()) if written["trust"].height else 0,
            "mlflow_run_id": run_id,
            "mlflow_run_reused": reused,
            "mlflow_heatmap": f"runs:/{run_id}/heatmap.png",
        },
    )


def log_leaderboard(
    context,
    mlflow: MLflowResource,
    experiment: str,
    sig: Significance,
    provenance: dict,
    copies: dict,
    written: dict,
    out: Path,
    trust: TrustSettings | None = None,
) -> tuple[str, bool]:
    """One MLflow run holding the reports and the significance table; the same inputs reuse it."""
    from medbench_core.evaluation.trust import mlflow_metrics as trust_metrics

    stats = written["stats"]
    published = written["published"]
    trusted = written.get("trust")
    filled = {f"{r['model']}/{r['task']}": r["judgements"] for r in trusted.iter_rows(named=True) if r["judgements"]} if trusted is not None else {}
    run_key = artifact_key(
        **({"trust": (trust or TrustSettings()).describe(), "filled": filled} if trusted is not None and trusted.height else {}),
        kind="leaderboard", code=REPORTS_VERSION, significance=sig.describe(), cells={k: v["metrics_key"] for k, v in provenance.items()},
        table=written["board"].columns + written["board"]["model"].to_list(), copies={f"{m}/{t}": n for (m, t), n in copies.items()},
        **({"published": published.select("model", "task", "published", "status", "file").to_dicts()} if published.height else {}),
        **({"stale": {f"{m}/{t}": why for (m, t), why in written["stale"].items()}} if written["stale"] else {}),
    )  # fmt: skip
    params = {**{f"significance.{k}": v for k, v in sig.describe().items()}, "cells": len(provenance), "code_version": REPORTS_VERSION}
    metrics: dict[str, float] = {}
    for r in stats.iter_rows(named=True):
        prefix = "".join(ch if ch.isalnum() or ch in "-_./" else "_" for ch in f"{r['task']}/{r['model']}")
        for col in ("mean", "ci_low", "ci_high", "diff", "p_ttest", "p_perm", "p_holm"):
            if r[col] is not None:
                metrics[f"{prefix}/{col}"] = float(r[col])
        if r["p_holm"] is not None:
            metrics[f"{prefix}/significant"] = 1.0 if r["significant"] else 0.0
        if (r["model"], r["task"]) in written["stale"]:
            metrics[f"{prefix}/stale"] = 1.0
    groups: dict[str, list[str]] = {}
    for r in written["ranks"].iter_rows(named=True):  # per task and for the average (task "average")
        prefix = "".join(ch if ch.isalnum() or ch in "-_./" else "_" for ch in f"{r['task']}/{r['model']}")
        for col in ("rank", "rank_low", "rank_high"):
            metrics[f"{prefix}/{col}"] = float(r[col])
        groups.setdefault(r["task"], []).append(f"{r['model']}: {r['group']}")
    params |= {f"groups.{task}": "; ".join(g) for task, g in groups.items()}  # the letters of the groups no test separates
    for r in published.iter_rows(named=True):
        prefix = "".join(ch if ch.isalnum() or ch in "-_./" else "_" for ch in f"{r['task']}/{r['model']}")
        metrics[f"{prefix}/published"] = float(r["published"])
        if r["diff"] is not None:
            metrics[f"{prefix}/published_diff"] = float(r["diff"])
            metrics[f"{prefix}/published_in_ci"] = 1.0 if r["in_ci"] else 0.0
    if written.get("multilingual"):  # per language and script, paired gaps, balanced aggregate, rank variance
        metrics |= multilingual_mlflow_metrics(written["multilingual"])
    if published.height:
        from medbench_core.evaluation.published import summary

        params["published"] = summary(published)
    if trusted is not None and trusted.height:
        metrics |= trust_metrics(trusted)
        params["trust.judged_threshold"] = (trust or TrustSettings()).judged_threshold
        params["trust.low_judged_cells"] = int(trusted["low_judged"].fill_null(False).sum())
    files = [out / f for f in written["files"] if not f.startswith(("diff/", "trust/"))]
    for folder in ("diff", "trust"):
        if (out / folder).is_dir() and any((out / folder).iterdir()):
            files.append(out / folder)  # logged as the folder diff/ (trust/)
    tags = {KIND_TAG: "leaderboard", DAGSTER_RUN_TAG: context.run_id}
    if written["stale"]:  # the values marked stale in the saved reports, and why
        tags[STALE_TAG] = "; ".join(f"{m}/{t}: {why}" for (m, t), why in sorted(written["stale"].items()))[:5000]
    return mlflow.log_run(experiment, run_key, "leaderboard", params, metrics, tags, files)


def annotate_partition_runs(mlflow: MLflowResource, experiment: str, provenance: dict, published) -> None:
    """Each compared cell's own MLflow run (one per model x task) gets the published value beside its metrics:
    ``published.<metric>``, and when compared ``published_diff.<metric>`` and ``published_in_ci.<metric>`` (1/0),
    with tags ``medbench.published_status`` and ``medbench.published_source``."""
    for r in published.iter_rows(named=True):
        prov = provenance.get(f"{r['model']}/{r['task']}")
        if not prov:
            continue
        m = r["metric"]
        metrics = {f"published.{m}": float(r["published"])}
        if r["diff"] is not None:
            metrics |= {f"published_diff.{m}": float(r["diff"]), f"published_in_ci.{m}": 1.0 if r["in_ci"] else 0.0}
        status = r["status"] + (f": {r['note']}" if r["note"] else "")
        mlflow.annotate_run(experiment, prov["metrics_key"], metrics, {"medbench.published_status": status, "medbench.published_source": r["file"]})


def annotate_filled_runs(mlflow: MLflowResource, experiment: str, cells: list[Cell], metric: str) -> None:
    """Each cell's own MLflow run gets its score on the filled (human + LLM) layer: ``filled.<metric>``,
    ``filled.judged_at_10``, ``filled.ndcg_lower_at_10`` / ``filled.ndcg_upper_at_10``, and the tags
    ``medbench.filled_judgements`` (entry@key) and ``medbench.circular`` (the builders of the judge's family, or 'no')."""
    for c in cells:
        if not c.filled or "metrics_key" not in c.provenance:
            continue
        mean = c.filled["mean"]
        metrics = {f"filled.{m}": float(mean[m]) for m in (metric, "judged_at_10", "ndcg_lower_at_10", "ndcg_upper_at_10") if m in mean}
        tags = {"medbench.filled_judgements": c.filled["judgements"], "medbench.circular": c.filled["circular"] or "no"}
        mlflow.annotate_run(experiment, c.provenance["metrics_key"], metrics, tags)
