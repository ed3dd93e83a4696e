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
rematerialise, and the saved reports stay as they were. That policy is
:mod:`medbench_core.evaluation.stale`; this module gathers its inputs (and what Dagster knows of each partition).
"""

import re
from pathlib import Path

import dagster as dg

from assets.stage import ASSET_OF_STAGE
from medbench_core.errors import DataError, MedbenchError
from medbench_core.evaluation.contamination.board import admitted, contamination_marks
from medbench_core.evaluation.contamination.cells import MARKS
from medbench_core.evaluation.contamination.cells import mlflow_metrics as contamination_mlflow_metrics
from medbench_core.evaluation.exports import mteb_models, mteb_task_names
from medbench_core.evaluation.floors import floors_mlflow_metrics
from medbench_core.evaluation.judging.layers import attach_filled
from medbench_core.evaluation.judging.spec import load_judgements
from medbench_core.evaluation.mlflow_names import mlflow_name
from medbench_core.evaluation.multilingual import ENGLISH, multilingual_mlflow_metrics, query_groups
from medbench_core.evaluation.published import load_sources
from medbench_core.evaluation.reports import REPORT_NAMES, STALE_KEY, Cell, Significance, write_leaderboard
from medbench_core.evaluation.reuse import Results, reusing
from medbench_core.evaluation.run_record import DAGSTER_RUN_TAG
from medbench_core.evaluation.stale import lost_to_corrupt_artifacts, saved_cells, task_cells, task_stale, unconfirmed_reason, with_stale
from medbench_core.evaluation.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, TESTS
from medbench_core.evaluation.trust import JUDGED_THRESHOLD, TrustSettings
from medbench_core.provenance import artifact_key, stage_version
from medbench_core.retrieval.expansion.spec import load_expansions
from medbench_core.retrieval.model_registry import ModelSpec
from medbench_core.storage import move_into, staging_folder
from medbench_core.taskdata.contracts import read_gate
from runtime.partitions import Partitions, partition_key
from runtime.resources import ArtifactStoreResource, MLflowResource, RegistryResource
from runtime.world import foreign, world_tags

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
    keep_circular: bool = False  # keep cells built with the judge's family in the filled layer's rankings (docs/trust.md)


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


def unconfirmed_cells(instance: dg.DagsterInstance, tasks: list[str], cells: list[Cell], ours: dict[str, str] | None = None) -> dict[tuple[str, str], str]:
    """(model, task) -> why, for each cell with a value whose task_metrics partition Dagster shows as FAILED or
    IN_PROGRESS (its status in the UI: the last run that planned it failed, or has not ended, after its
    last materialisation): that value is not a result the pipeline stood behind, whatever its artifact holds.

    ``ours`` (:func:`runtime.world.world_tags`): the state this leaderboard belongs to. When the instance also
    holds runs of another state (one DAGSTER_HOME for two), the partition's status in the instance is that of
    whichever ran it last, so each partition is judged by the last run of this state that planned it instead
    (:func:`own_partition_status`; issue 44.7)."""
    filled = {str(partition_key(c.model, c.task)): (c.model, c.task) for c in cells if c.value() is not None}
    if not filled:
        return {}
    asset = dg.AssetKey(ASSET_OF_STAGE["metrics"])
    if ours and shared_with_another_state(instance, ours):
        status, planned_runs = own_partition_status(instance, asset, list(filled), ours)
    else:
        status = instance.get_status_by_partition(asset, list(filled), Partitions(tasks).model_task) or {}
        planned_runs = {}
    out = {}
    for key, (model, task) in filled.items():
        if status.get(key) not in (dg.AssetPartitionStatus.FAILED, dg.AssetPartitionStatus.IN_PROGRESS):
            continue
        if key in planned_runs:
            run = planned_runs[key]
        else:
            planned = instance.get_latest_planned_materialization_info(asset, key)
            run = instance.get_run_by_id(planned.run_id) if planned else None
        failed = status[key] == dg.AssetPartitionStatus.FAILED
        error = run_error(instance, run.run_id) if failed and run else ""
        out[(model, task)] = unconfirmed_reason(model, task, failed, run.run_id if run else None, run.status.value if run else None, error)
    return out


def shared_with_another_state(instance: dg.DagsterInstance, ours: dict[str, str]) -> bool:
    """Whether a run of this instance names another data root or MLflow store than ``ours``."""
    for key, values in instance.get_run_tags(tag_keys=list(ours)):
        if values - {ours[key]}:
            return True
    return False


_ENDED_BADLY = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


def own_partition_status(
    instance: dg.DagsterInstance, asset: dg.AssetKey, keys: list[str], ours: dict[str, str], look_back: int = 100
) -> tuple[dict[str, dg.AssetPartitionStatus], dict[str, object]]:
    """Each partition's status as the runs of this state (``ours``) leave it, and the run that decided it: the last
    of them that planned ``asset[key]`` (runs of another state skipped) failed or was cancelled without
    materialising it (FAILED), has not ended (IN_PROGRESS), or else materialised it (MATERIALIZED). A partition no
    run of this state planned among its last ``look_back`` plans has no status here."""
    status: dict[str, dg.AssetPartitionStatus] = {}
    deciding: dict[str, object] = {}
    for key in keys:
        plans = instance.fetch_planned_materializations(dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[key]), limit=look_back).records
        for plan in plans:  # newest first
            run = instance.get_run_by_id(plan.run_id)
            if run is None or foreign(run.tags, ours):
                continue
            if run.status == dg.DagsterRunStatus.SUCCESS:
                status[key] = dg.AssetPartitionStatus.MATERIALIZED
            elif run.status in _ENDED_BADLY:
                made = instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[key], after_storage_id=plan.storage_id), limit=look_back
                ).records
                materialised = any(r.run_id == run.run_id for r in made)
                status[key] = dg.AssetPartitionStatus.MATERIALIZED if materialised else dg.AssetPartitionStatus.FAILED
            else:
                status[key] = dg.AssetPartitionStatus.IN_PROGRESS
            deciding[key] = run
            break
    return status, deciding


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
            first = re.sub(r"^(?:\w+\.)+(\w+): ", r"\1: ", text[0]) if text else ""  # "medbench_core.errors.DiskFull: ..." -> "DiskFull: ..."
            return f"{entry.step_key}: {first[:300]}" if first else str(entry.step_key)
    return ""


@dg.asset(
    deps=[ASSET_OF_STAGE["metrics"], "relevance_judgements", "contamination_audit"],
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
    trust = TrustSettings(config.judged_threshold, config.metric, config.keep_circular)
    expansions = load_expansions(registry.models_file)
    catalog = registry.catalog()
    cells: list[Cell] = []
    copies: dict[tuple[str, str], int] = {}
    previous = saved_cells(store.layout)
    groups, pivots = {}, {}  # task -> its queries' languages, concepts and relevant documents (and its pivot), for the multilingual section
    loaded = {}
    for t in catalog.tasks:
        try:
            task = loaded[t.name] = store.load_task(t.name)
        except MedbenchError:
            continue  # not curated: its column shows '-'
        if task.queries["language"].drop_nulls().n_unique() >= 2:
            groups[t.name] = query_groups(task.queries, task.qrels)
            pivots[t.name] = task.meta.pivot_language or ENGLISH  # the paired gap: pivot minus each language
        stale = task_stale(store.layout, t, store.shared_data)
        got, leaks = task_cells(
            store.layout, specs, task, expansions, split=str(t.options.get("split") or "test"), online=registry.online, stale=stale, previous=previous
        )  # fmt: skip
        cells += got
        copies |= leaks
    cells, judged = filled_layers(store, registry, catalog, cells, specs, expansions)
    # Each task's qrels holes as its contract counted them (GATE.json), marked or none: shown under the table, for the
    # tasks with a figure (one refused by its gate or the overlap gate has none: the run that refused it says why).
    scored = {c.task for c in cells if c.metrics is not None}
    data_holes = {t.name: (read_gate(store.layout.gate_file(t.name)) or {}).get("holes") for t in catalog.tasks if t.name in scored}
    data_holes = {t: h for t, h in data_holes.items() if h}
    unconfirmed = unconfirmed_cells(context.instance, catalog.names, cells, world_tags(store.layout.root, mlflow.tracking_uri))
    if unconfirmed:
        context.log.warning("cells whose partition failed or has not finished, marked: " + "; ".join(f"{m}/{t}" for m, t in sorted(unconfirmed)))
    cells = with_stale(cells, unconfirmed)
    lost = lost_to_corrupt_artifacts(store.layout, previous, cells)
    if lost:
        raise DataError(
            f"the saved leaderboard {store.layout.leaderboard_file('md')} was not replaced: it would lose {len(lost)} cell(s) to artifacts "
            "that fail their manifest:\n" + "\n".join(lost)
        )
    research_only = [t.name for t in catalog.tasks if t.research_only]
    # Each cell's trained-on-task / zero-shot / unknown mark and decontaminated score, from the task audits at their current keys.
    audited = admitted(store.layout, loaded, keep=scored)
    marks = contamination_marks(store.layout, specs, catalog.tasks, audited, cells, metric=config.metric, n_resamples=config.resamples, seed=config.seed)
    provenance = {f"{c.model}/{c.task}": {**c.provenance, **({STALE_KEY: c.stale} if c.stale else {}),
                                          **({"contamination": marks[(c.model, c.task)]} if (c.model, c.task) in marks else {})}
                  for c in cells if c.metrics is not None}  # fmt: skip
    out = store.reports_dir()
    sources = load_sources(registry.tasks_file, store.shared_data, config.published or None)
    names = {m: meta["name"] for m, meta in mteb_models(specs, {c.model: c.model_revision for c in cells}).items()} if sources else {}
    evaluated = [c for c in cells if c.metrics is not None and c.applicable]
    mteb_tasks = {t: v["mteb_task"] for t, v in mteb_task_names(evaluated).items() if v["mteb_task"]} if sources else {}
    # The CIs and tests of the last leaderboard, by their inputs: only the cells and pairs whose values are new are computed.
    results = Results.load(stats_results_file(store))
    # The reports are written aside and replace the saved ones only once MLflow holds their run (issue 44.10): a
    # store that refuses it (a full disk) leaves the saved leaderboard as it was, as the failed command says.
    with staging_folder(out / "leaderboard") as staged:
        with reusing(results):
            written = write_leaderboard(
                cells, [s.name for s in specs], catalog.names, sig, staged, research_only=research_only, specs=specs, copies=copies,
                footer=f"code version {REPORTS_VERSION}, git {registry.git_sha()}; per-cell provenance in leaderboard.json, tests in stats.csv",
                extra_json={"benchmark": catalog.benchmark, "cells": provenance}, published=sources, model_names=names, mteb_tasks=mteb_tasks,
                trust=trust, qrels_holes=data_holes, judgements=judged,
                query_groups=groups, pivots=pivots, contamination=marks, previous_dir=out,
            )  # fmt: skip
        results.save(stats_results_file(store))
        context.log.info(f"statistics: {results.computed} computed, {results.hits} reused from the last leaderboard")
        md = written["markdown"]
        context.log.info("\n" + md)
        run_id, reused = log_leaderboard(context, mlflow, leaderboard_experiment(catalog.benchmark), sig, provenance, copies, written, staged, trust)
        with mlflow.annotating(catalog.benchmark):  # every cell's run found in one search, not one per annotation
            annotate_partition_runs(mlflow, catalog.benchmark, provenance, written["published"])
            annotate_filled_runs(mlflow, catalog.benchmark, cells, config.metric)
            annotate_contamination_runs(mlflow, catalog.benchmark, provenance, config.metric)
        move_into(staged, out, REPORT_NAMES)
    built_by = {"git": registry.git_sha(), "dagster_run_id": context.run_id, "mlflow_run_id": run_id}
    site = write_site(context, store, registry, catalog, specs, mlflow, out, built_by)
    heatmap = out / "heatmap.png"
    plots = {f"{Path(f).parent.name}_{Path(f).stem}": dg.MetadataValue.path(str(out / f)) for f in written["files"] if f.startswith(("diff/", "trust/"))}
    return dg.MaterializeResult(
        metadata={
            "leaderboard": dg.MetadataValue.md(md),
            "path": dg.MetadataValue.path(str(out / "leaderboard.md")),
            # The same as pages (`medbench ui` serves them), or why they are not there.
            **({"site": dg.MetadataValue.path(str(site["index"])), "site_bytes": site["bytes"]} if "index" in site else {"site": site["error"]}),
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
            "contamination_marks": dg.MetadataValue.json({m: sum(v["mark"] == m for v in marks.values()) for m in MARKS}),
            "mlflow_run_id": run_id,
            "mlflow_run_reused": reused,
            "stats_computed": results.computed,  # CIs and tests computed for this leaderboard
            "stats_reused": results.hits,  # ... and taken from the last one (their inputs unchanged)
            "mlflow_heatmap": f"runs:/{run_id}/heatmap.png",
        },
    )


SITE_DIR = "site"  # data/reports/site: the leaderboard as pages (medbench_core.site), rebuilt with every leaderboard


def write_site(
    context, store: ArtifactStoreResource, registry: RegistryResource, catalog, specs: list[ModelSpec], mlflow: MLflowResource, out: Path, build: dict
) -> dict:
    """The leaderboard's site beside it (``<reports>/site``), from the leaderboard.json just written and the stored provenance,
    with each cell's MLflow run found by its metrics key and the released versions of this checkout.

    The pages are a view of what was saved: when they cannot be built, the leaderboard stands, the pages of an earlier
    leaderboard are removed (they would show other figures) and a warning says why (``{"error": ...}``). They are built
    again when the saved leaderboard, its MLflow run, the code or the released versions changed, not when a run saved
    the same leaderboard again (a refused input changes nothing, pages included: test_bad_inputs)."""
    import shutil

    from medbench_core.provenance import code_versions
    from medbench_core.site import SiteInputs, UiLinks, build_site
    from medbench_core.site.build import built_from
    from medbench_core.storage import sha256_file

    try:
        versions_dir = registry.checkout() / "versions"
        links = UiLinks(metrics_asset=ASSET_OF_STAGE["metrics"])
        code = code_versions()
        digest = artifact_key(
            kind="site", leaderboard=sha256_file(out / "leaderboard.json"), git=build.get("git"),
            mlflow_run_id=build.get("mlflow_run_id"), code=code, links=repr(links),
            versions={p.name: sha256_file(p) for p in sorted(versions_dir.glob("*.json"))},
        )  # fmt: skip
        was, size = built_from(out / SITE_DIR)
        if was == digest:
            return {"index": out / SITE_DIR / "index.html", "bytes": size, "reused": True}
        inputs = SiteInputs(
            leaderboard=out / "leaderboard.json", data_root=store.root_path, catalog=catalog, shared_data=Path(store.shared_data), specs=specs,
            versions_dir=versions_dir, build=build, mlflow_runs=mlflow.finished_runs_by_key(catalog.benchmark),
            links=links, code_versions=code, built_from=digest,
        )  # fmt: skip
        return build_site(out / SITE_DIR, inputs)
    except Exception as exc:  # any failure of the view: the leaderboard above is saved and logged already
        shutil.rmtree(out / SITE_DIR, ignore_errors=True)
        why = f"not built: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        context.log.warning(f"the leaderboard's site was {why} (`medbench export --site DIR` builds it again, with the error)")
        return {"error": why}


def stats_results_file(store: ArtifactStoreResource) -> Path:
    """Where the leaderboard keeps its CIs and tests between builds (:class:`medbench_core.evaluation.stats.Results`): run state, not data."""
    return store.scratch_dir("leaderboard") / "stats_results.json"


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
    from medbench_core.evaluation.trust import trust_mlflow_metrics

    stats = written["stats"]
    published = written["published"]
    marked = {k: v["contamination"] for k, v in provenance.items() if "contamination" in v}
    trusted = written.get("trust")
    filled = {f"{r['model']}/{r['task']}": r["judgements"] for r in trusted.iter_rows(named=True) if r["judgements"]} if trusted is not None else {}
    run_key = artifact_key(
        **({"trust": (trust or TrustSettings()).describe(), "filled": filled} if trusted is not None and trusted.height else {}),
        kind="leaderboard", code=REPORTS_VERSION, significance=sig.describe(), cells={k: v["metrics_key"] for k, v in provenance.items()},
        table=written["board"].columns + written["board"]["model"].to_list(), copies={f"{m}/{t}": n for (m, t), n in copies.items()},
        **({"published": published.select("model", "task", "published", "status", "file").to_dicts()} if published.height else {}),
        **({"stale": {f"{m}/{t}": why for (m, t), why in written["stale"].items()}} if written["stale"] else {}),
        **({"contamination": {k: [v["mark"], v.get("share"), v.get("decontaminated")] for k, v in marked.items()}} if marked else {}),
    )  # fmt: skip
    params = {**{f"significance.{k}": v for k, v in sig.describe().items()}, "cells": len(provenance), "code_version": REPORTS_VERSION}
    metrics: dict[str, float] = {}
    for r in stats.iter_rows(named=True):
        prefix = mlflow_name(f"{r['task']}/{r['model']}")
        for col in ("mean", "ci_low", "ci_high", "diff", "p_ttest", "p_perm", "p_holm"):
            if r[col] is not None:
                metrics[f"{prefix}/{col}"] = float(r[col])
        if r["p_holm"] is not None:
            metrics[f"{prefix}/significant"] = 1.0 if r["significant"] else 0.0
        if (r["model"], r["task"]) in written["stale"]:
            metrics[f"{prefix}/stale"] = 1.0
    groups: dict[str, list[str]] = {}
    for r in written["ranks"].iter_rows(named=True):  # per task and for the average (task "average")
        prefix = mlflow_name(f"{r['task']}/{r['model']}")
        for col in ("rank", "rank_low", "rank_high"):
            metrics[f"{prefix}/{col}"] = float(r[col])
        groups.setdefault(r["task"], []).append(f"{r['model']}: {r['group']}")
    params |= {f"groups.{task}": "; ".join(g) for task, g in groups.items()}  # the letters of the groups no test separates
    for r in published.iter_rows(named=True):
        prefix = mlflow_name(f"{r['task']}/{r['model']}")
        metrics[f"{prefix}/published"] = float(r["published"])
        if r["diff"] is not None:
            metrics[f"{prefix}/published_diff"] = float(r["diff"])
            metrics[f"{prefix}/published_in_ci"] = 1.0 if r["in_ci"] else 0.0
    if written.get("multilingual"):  # per language and script, paired gaps, balanced aggregate, language variance
        metrics |= multilingual_mlflow_metrics(written["multilingual"])
    if written.get("floors") is not None and written["floors"].height:  # chance per task; tie-aware, its flag, chance-corrected per cell
        metrics |= floors_mlflow_metrics(written["floors"])
    if marked:  # near-duplicate share, decontaminated score and its CI, zero-shot (1/0) per cell
        metrics |= contamination_mlflow_metrics({tuple(k.split("/", 1)): v for k, v in marked.items()})
    if published.height:
        from medbench_core.evaluation.published import summary

        params["published"] = summary(published)
    if trusted is not None and trusted.height:
        metrics |= trust_mlflow_metrics(trusted)
        params["trust.judged_threshold"] = (trust or TrustSettings()).judged_threshold
        params["trust.keep_circular"] = (trust or TrustSettings()).keep_circular
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


def annotate_contamination_runs(mlflow: MLflowResource, experiment: str, provenance: dict, metric: str) -> None:
    """Each marked cell's own MLflow run gets the tags ``medbench.contamination`` (trained-on-task, zero-shot or unknown),
    ``medbench.contamination_evidence``, ``medbench.near_dup_share`` and ``medbench.decontaminated`` (``<metric> <value> [lo, hi] n=N``).
    Tags, not metrics: a cell's run holds what scoring logged, which a release records and ``medbench reproduce`` recomputes
    (an audit figure there would be "not recomputed"); the figures as metrics are on the leaderboard run (``<task>/<model>/...``)."""
    for prov in provenance.values():
        c = prov.get("contamination")
        if not c or "metrics_key" not in prov:
            continue
        tags = {"medbench.contamination": c["mark"], "medbench.contamination_evidence": c["evidence"][:5000]}
        if c.get("share") is not None:
            tags["medbench.near_dup_share"] = str(c["share"])
        if c.get("decontaminated") is not None:
            lo, hi = c["decontaminated_ci"]
            tags["medbench.decontaminated"] = f"{metric} {c['decontaminated']} [{lo}, {hi}] n={c['n_clean']}"
        mlflow.annotate_run(experiment, prov["metrics_key"], {}, tags)


def annotate_filled_runs(mlflow: MLflowResource, experiment: str, cells: list[Cell], metric: str) -> None:
    """Each cell's own MLflow run gets its score on the filled (human + LLM) layer: ``filled.<metric>``,
    ``filled.judged_at_10``, the bounds on the metric when it has some (``filled.ndcg_lower_at_10`` /
    ``filled.ndcg_upper_at_10``), and the tags ``medbench.filled_judgements`` (entry@key), ``medbench.circular``
    (the builders of the judge's family, or 'no') and ``medbench.families`` (each builder's families and where read)."""
    from medbench_core.evaluation.trust import bound_metrics

    for c in cells:
        if not c.filled or "metrics_key" not in c.provenance:
            continue
        mean = c.filled["mean"]
        metrics = {f"filled.{m}": float(mean[m]) for m in (metric, "judged_at_10", *(bound_metrics(metric) or ())) if m in mean}
        tags = {"medbench.filled_judgements": c.filled["judgements"], "medbench.circular": c.filled["circular"] or "no",
                "medbench.families": str(c.filled.get("families") or "")[:5000]}  # fmt: skip
        mlflow.annotate_run(experiment, c.provenance["metrics_key"], metrics, tags)
