"""The leaderboard: every registered model on every task, with CIs and paired tests against the baseline.

Reads what the stages stored (metrics.json, per_query.parquet, the run's info.json) for the
current registry and catalogue (each cell at its current provenance key), writes the reports
under data/reports (medbench_core.evaluation.reports: leaderboard.{md,csv,json}, stats.csv, heatmap.png, diff/<task>/<model>.png) and logs them as one MLflow
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

from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from assets.leaderboard_mlflow import (
    REPORTS_VERSION,
    annotate_contamination_runs,
    annotate_filled_runs,
    annotate_partition_runs,
    leaderboard_experiment,
    log_leaderboard,
)
from assets.partition_status import unconfirmed_cells
from assets.stage import ASSET_OF_STAGE
from medbench_core.errors import DataError, MedbenchError
from medbench_core.evaluation.contamination.board import admitted, contamination_marks
from medbench_core.evaluation.contamination.cells import MARKS
from medbench_core.evaluation.exports import mteb_models, mteb_task_names
from medbench_core.evaluation.judging.layers import attach_filled
from medbench_core.evaluation.judging.spec import load_judgements
from medbench_core.evaluation.multilingual import ENGLISH, query_groups
from medbench_core.evaluation.published import load_sources
from medbench_core.evaluation.reports import REPORT_NAMES, STALE_KEY, Cell, Significance, build_tables, write_leaderboard
from medbench_core.evaluation.reuse import Results, reusing
from medbench_core.evaluation.stale import lost_to_corrupt_artifacts, saved_cells, task_cells, task_stale, with_stale
from medbench_core.evaluation.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, TESTS
from medbench_core.evaluation.trust import JUDGED_THRESHOLD, TrustSettings
from medbench_core.provenance import artifact_key
from medbench_core.retrieval.expansion.spec import load_expansions
from medbench_core.retrieval.model_registry import ModelSpec
from medbench_core.storage import move_into, staging_folder
from medbench_core.taskdata.contracts import read_gate
from runtime.resources import ArtifactStoreResource, MLflowResource, RegistryResource
from runtime.world import world_tags


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


@dataclass(frozen=True)
class Gathered:
    """What the leaderboard is made from, as the stages stored it for the current registry and catalogue: the cells
    (stale and unconfirmed ones marked, with their filled layers), expansions flagged as copying ((model, task) ->
    count), each multilingual task's query groups and pivot, each scored task's qrels holes (GATE.json) and its filled
    layer's judgements, each cell's contamination mark, and per cell the provenance leaderboard.json records."""

    specs: list[ModelSpec]
    catalog: object
    cells: list[Cell]
    copies: dict[tuple[str, str], int]
    groups: dict
    pivots: dict[str, str]
    holes: dict
    judged: dict
    marks: dict
    provenance: dict


def gather(context: dg.AssetExecutionContext, config: LeaderboardConfig, store: ArtifactStoreResource, registry: RegistryResource, ours: dict) -> Gathered:
    """Every cell at its current provenance key, the saved leaderboard's where it is stale (:mod:`medbench_core.evaluation.stale`),
    marked unconfirmed where Dagster shows its partition failed or unfinished (``ours``: this state's tags); refuses to drop a
    saved cell to an artifact that fails its manifest."""
    specs, expansions, catalog = registry.models(), load_expansions(registry.models_file), registry.catalog()
    cells: list[Cell] = []
    copies: dict[tuple[str, str], int] = {}
    previous = saved_cells(store.layout)
    groups, pivots, loaded = {}, {}, {}  # task -> its queries' languages, concepts and relevant documents (and its pivot), for the multilingual section
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
    holes = {t.name: (read_gate(store.layout.gate_file(t.name)) or {}).get("holes") for t in catalog.tasks if t.name in scored}
    unconfirmed = unconfirmed_cells(context.instance, catalog.names, cells, ours)
    if unconfirmed:
        context.log.warning("cells whose partition failed or has not finished, marked: " + "; ".join(f"{m}/{t}" for m, t in sorted(unconfirmed)))
    cells = with_stale(cells, unconfirmed)
    lost = lost_to_corrupt_artifacts(store.layout, previous, cells)
    if lost:
        raise DataError(
            f"the saved leaderboard {store.layout.leaderboard_file('md')} was not replaced: it would lose {len(lost)} cell(s) to artifacts "
            "that fail their manifest:\n" + "\n".join(lost)
        )
    # Each cell's trained-on-task / zero-shot / unknown mark and decontaminated score, from the task audits at their current keys.
    audited = admitted(store.layout, loaded, keep=scored)
    marks = contamination_marks(store.layout, specs, catalog.tasks, audited, cells, metric=config.metric, n_resamples=config.resamples, seed=config.seed)
    provenance = {f"{c.model}/{c.task}": {**c.provenance, **({STALE_KEY: c.stale} if c.stale else {}),
                                          **({"contamination": marks[(c.model, c.task)]} if (c.model, c.task) in marks else {})}
                  for c in cells if c.metrics is not None}  # fmt: skip
    return Gathered(specs, catalog, cells, copies, groups, pivots, {t: h for t, h in holes.items() if h}, judged, marks, provenance)


def settings(config: LeaderboardConfig, registry: RegistryResource) -> tuple[Significance, TrustSettings]:
    """How cells are compared and what marks them, from the config; refuses an unknown test, baseline or threshold before anything is written."""
    if config.test not in TESTS:
        raise dg.Failure(f"leaderboard config: test {config.test!r} unknown; use one of {TESTS}")
    sig = Significance(registry.baseline(), config.metric, config.test, config.alpha, config.resamples, config.seed)
    if not 0.0 <= config.judged_threshold <= 1.0:
        raise dg.Failure(f"leaderboard config: judged_threshold {config.judged_threshold} is not a share between 0 and 1")
    return sig, TrustSettings(config.judged_threshold, config.metric, config.keep_circular)


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
    sig, trust = settings(config, registry)
    # The CIs and tests of the last leaderboard, by their inputs: only the cells and pairs whose values are new are computed,
    # each cell's decontaminated CI (gathered with its contamination mark) included.
    results = Results.load(stats_results_file(store))
    with reusing(results):
        g = gather(context, config, store, registry, world_tags(store.layout.root, mlflow.tracking_uri))
    out, benchmark = store.reports_dir(), g.catalog.benchmark
    # The reports are written aside and replace the saved ones only once MLflow holds their run (issue 44.10): a
    # store that refuses it (a full disk) leaves the saved leaderboard as it was, as the failed command says.
    with staging_folder(out / "leaderboard") as staged:
        with reusing(results):
            written = write_reports(g, sig, trust, config, registry, store, staged, out)
        results.save(stats_results_file(store))
        context.log.info(f"statistics: {results.computed} computed, {results.hits} reused from the last leaderboard")
        context.log.info("\n" + written["markdown"])
        run_id, reused = log_leaderboard(context, mlflow, leaderboard_experiment(benchmark), sig, g.provenance, g.copies, written, staged, trust)
        with mlflow.annotating(benchmark):  # every cell's run found in one search, not one per annotation
            annotate_partition_runs(mlflow, benchmark, g.provenance, written["published"])
            annotate_filled_runs(mlflow, benchmark, g.cells, config.metric)
            annotate_contamination_runs(mlflow, benchmark, g.provenance, config.metric)
        move_into(staged, out, REPORT_NAMES)
    built_by = {"git": registry.git_sha(), "dagster_run_id": context.run_id, "mlflow_run_id": run_id}
    site = write_site(context, store, registry, g.catalog, g.specs, mlflow, out, built_by)
    logged = {"mlflow_run_id": run_id, "mlflow_run_reused": reused, "stats_computed": results.computed, "stats_reused": results.hits,
              "mlflow_heatmap": f"runs:/{run_id}/heatmap.png"}  # fmt: skip
    return dg.MaterializeResult(metadata={**leaderboard_metadata(written, out, site, g, sig), **logged})


def write_reports(
    g: Gathered, sig: Significance, trust: TrustSettings, config: LeaderboardConfig, registry: RegistryResource, store: ArtifactStoreResource,
    staged: Path, out: Path,
) -> dict:  # fmt: skip
    """:func:`medbench_core.evaluation.reports.write_leaderboard` of the gathered cells into ``staged`` (the saved reports in ``out``
    are the last leaderboard), with the published results of tasks.yaml (or ``config.published``) beside them."""
    sources = load_sources(registry.tasks_file, store.shared_data, config.published or None)
    names = {m: meta["name"] for m, meta in mteb_models(g.specs, {c.model: c.model_revision for c in g.cells}).items()} if sources else {}
    evaluated = [c for c in g.cells if c.metrics is not None and c.applicable]
    mteb_tasks = {t: v["mteb_task"] for t, v in mteb_task_names(evaluated).items() if v["mteb_task"]} if sources else {}
    tables = build_tables(
        g.cells, [s.name for s in g.specs], g.catalog.names, sig, research_only=[t.name for t in g.catalog.tasks if t.research_only],
        specs=g.specs, copies=g.copies, published=sources, model_names=names, mteb_tasks=mteb_tasks, trust=trust, qrels_holes=g.holes,
        judgements=g.judged, query_groups=g.groups, pivots=g.pivots, contamination=g.marks,
    )  # fmt: skip
    return write_leaderboard(
        tables, staged, footer=f"code version {REPORTS_VERSION}, git {registry.git_sha()}; per-cell provenance in leaderboard.json, tests in stats.csv",
        extra_json={"benchmark": g.catalog.benchmark, "cells": g.provenance}, previous_dir=out,
    )  # fmt: skip


def leaderboard_metadata(written: dict, out: Path, site: dict, g: Gathered, sig: Significance) -> dict:
    """The asset's metadata: the table, where the files and the site are, the plots, and counts of what the cells are.

    One entry per trust plot (``trust_<model>``) and per task's folder of difference plots (``diff_<task>``: one plot per
    model, so a board of many models keeps its metadata to one entry per task); the ``plots`` list links every PNG."""
    md = written["markdown"]
    diffs: dict[str, list[str]] = {}  # task folder -> its plots, in the board's order
    for f in written["files"]:
        if f.startswith("diff/"):
            diffs.setdefault(str(Path(f).parent), []).append(f)
    plots = {f"trust_{Path(f).stem}": dg.MetadataValue.path(str(out / f)) for f in written["files"] if f.startswith("trust/")}
    plots |= {f"diff_{Path(folder).name}": dg.MetadataValue.path(str(out / folder)) for folder in diffs}
    links = [f"- [{f}]({(out / f).resolve().as_uri()})" for f in written["files"] if f.endswith(".png") and not f.startswith("diff/")]
    links += [f"- {folder}: " + " · ".join(f"[{Path(f).stem}]({(out / f).resolve().as_uri()})" for f in files) for folder, files in diffs.items()]
    return {
        "leaderboard": dg.MetadataValue.md(md),
        "path": dg.MetadataValue.path(str(out / "leaderboard.md")),
        # The same as pages (`medbench ui` serves them), or why they are not there.
        **({"site": dg.MetadataValue.path(str(site["index"])), "site_bytes": site["bytes"]} if "index" in site else {"site": site["error"]}),
        "heatmap": dg.MetadataValue.path(str(out / "heatmap.png")),
        # Markdown links render as clickable in the UI; the images themselves are in the MLflow run.
        "plots": dg.MetadataValue.md("\n".join(links)),
        **plots,
        "baseline": sig.baseline,
        "significant_cells": int(written["stats"]["significant"].sum()) if written["stats"].height else 0,
        "cells_filled": len(g.provenance),
        "stale_cells": len(written["stale"]),
        # Cells whose mean Judged@10 is below the threshold (docs/trust.md), marked in the table.
        "low_judged_cells": int(written["trust"]["low_judged"].fill_null(False).sum()) if written["trust"].height else 0,
        "contamination_marks": dg.MetadataValue.json({m: sum(v["mark"] == m for v in g.marks.values()) for m in MARKS}),
    }


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
