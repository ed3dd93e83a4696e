"""Metrics per model x task, logged to MLflow: one run per partition, with its provenance."""

import json
from pathlib import Path

import dagster as dg
import polars as pl

from assets.stage import CORE_SOURCE_DIGEST, STAGE_VERSIONS, Stage, StageRun
from medbench_core.evaluation.run_record import derived_params, evaluation_params, evaluation_tags
from medbench_core.evaluation.scoring import flat_metrics, score
from medbench_core.retrieval.kinds.capabilities import scoring_family
from medbench_core.retrieval.kinds.derived_base import is_derived
from medbench_core.storage import verify_manifest
from runtime.resources import dagster_run_alive


def build(run: StageRun, tmp: Path) -> list[str]:
    p = run.partition
    family = scoring_family(p.spec, p.registry)  # identical query/doc ids: R2MED drops them from dense runs only
    return score(p.task, pl.read_parquet(run.dir("run") / "run.parquet"), tmp, family=family)["files"]


def finish(run: StageRun) -> dict:
    """Log (or reuse) the partition's MLflow run: the means, each mean's 95% bootstrap CI and the breakdowns; the means as metadata."""
    p, registry, mlflow = run.partition, run.resources.registry, run.resources.mlflow
    verify_manifest(run.dir("metrics"))
    result = json.loads((run.dir("metrics") / "metrics.json").read_text())
    benchmark = registry.catalog().benchmark
    params = evaluation_params(
        p.spec, p.task, revision=p.revision, keys=p.keys, k=run.config.k, code_version=CORE_SOURCE_DIGEST,
        code_version_metrics=STAGE_VERSIONS["metrics"], git_sha=registry.git_sha(), lock_hash=registry.lock_hash(),
    )  # fmt: skip
    if is_derived(p.spec):  # what it was built from: upstream run keys (an expanded model's expansion and combination)
        params |= derived_params(p.spec, p.upstream_run_keys(), json.loads((run.dir("run") / "info.json").read_text()))
    # Runs left RUNNING by killed attempts (of any partition) are marked KILLED, not left hanging.
    mlflow.reconcile_stale_runs(benchmark, is_alive=dagster_run_alive(run.context.instance))
    main = p.task.meta.main_metric
    run_id, reused = mlflow.log_run(
        benchmark,
        p.keys["metrics"],
        f"{p.model}/{p.task_name}",
        params,
        flat_metrics(result),
        evaluation_tags(p.model, p.task, benchmark, run.context.run_id),
        [run.dir("run") / "run.trec", run.dir("metrics") / "per_query.parquet", run.dir("metrics") / "metrics.json"],
        replace=run.config.force,
        columns=view_columns(main, result),
    )
    shown = {k: dg.MetadataValue.float(v) for k, v in result["mean"].items()}
    if main in result.get("ci", {}):
        shown[f"{main}_ci95"] = "[{:.4f}, {:.4f}]".format(*result["ci"][main])
    return {"mlflow_run_id": run_id, "mlflow_run_reused": reused, **shown}


# Beside the main metric and its CI, the runs view shows these means (every mean is logged): the table draws its metric
# columns in name order and only as many as fit, so the judgement-hole figures beyond Judged@10 would push these out.
VIEW_ALSO = ("recall_at_10", "recall_at_100", "mrr_at_10", "map_at_100", "ndcg_at_10", "judged_at_10")


def view_columns(main: str, result: dict) -> list[str]:
    """The metrics the MLflow runs view shows for a partition's run: the task's main metric and its CI, then the
    other headline means (:data:`VIEW_ALSO`, those the run has)."""
    ci = [f"ci_low.{main}", f"ci_high.{main}"] if main in result.get("ci", {}) else []
    also = [m for m in VIEW_ALSO if m in result["mean"] and m != main]
    return [main, *ci, *also] if main in result["mean"] else also or list(result["mean"])


STAGE = Stage(
    "metrics",
    build,
    finish,
    group="evaluation",
    kinds=("mlflow",),
    needs=("run",),
    resources=("mlflow",),
    description="nDCG@10, recall, MRR and MAP per query and mean, with breakdowns; one MLflow run per partition.",
)
