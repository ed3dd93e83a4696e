"""Metrics per model x task, logged to MLflow: one run per partition, with its provenance."""


import json

import dagster as dg
import polars as pl

from assets._shared import CODE_VERSION, CODE_VERSIONS, RetrievalConfig, not_applicable_result, open_partition, provenance_metadata
from medbench_core.pipeline import flat_metrics, score
from medbench_core.provenance import file_hash, git_sha
from medbench_core.storage import verify_manifest
from orchestration import settings
from orchestration.partitions import model_task_partitions
from orchestration.resources import ArtifactStoreResource, MLflowResource, RegistryResource, dagster_run_alive


@dg.asset(
    partitions_def=model_task_partitions,
    deps=["retrieval_run"],
    code_version=CODE_VERSIONS["metrics"],
    group_name="evaluation",
    kinds={"mlflow"},
    retry_policy=dg.RetryPolicy(max_retries=2, delay=1),
    description="nDCG@10, recall, MRR and MAP per query and mean, with breakdowns; one MLflow run per partition.",
)
def task_metrics(
    context: dg.AssetExecutionContext,
    config: RetrievalConfig,
    store: ArtifactStoreResource,
    registry: RegistryResource,
    mlflow: MLflowResource,
) -> dg.MaterializeResult:
    p = open_partition(context, store, registry, config.k)
    if p.not_applicable:
        return not_applicable_result(p, "metrics")

    def build(tmp):
        return score(p.task, pl.read_parquet(p.dir("run") / "run.parquet"), tmp)["files"]

    hit = p.materialize("metrics", build, force=config.force, needs=("run",))
    verify_manifest(p.dir("metrics"))
    result = json.loads((p.dir("metrics") / "metrics.json").read_text())
    metrics = flat_metrics(result)
    benchmark = registry.catalog().benchmark
    params = {
        "model": p.model,
        "model_id": p.spec.path or p.spec.kind,
        "model_kind": p.spec.kind,
        "model_revision": p.revision,
        "model_settings": json.dumps(p.spec.settings, sort_keys=True),
        "task": p.task_name,
        "task_content_hash": p.task.content_hash(),
        "task_licences": ",".join(p.task.meta.licences),
        "research_only": p.task.meta.research_only,
        "code_version": CODE_VERSION,
        "code_version_metrics": CODE_VERSIONS["metrics"],
        "git_sha": git_sha(settings.ROOT),
        "lock_hash": file_hash(settings.ROOT / "requirements.lock"),
        # The benchmark version (data.dvc hash) is set as tag medbench.data_version at release.
        "k": config.k,
        "embeddings_key": p.keys["embeddings"],
        "index_key": p.keys["index"],
        "run_key": p.keys["run"],
    }
    tags = {
        "medbench.model": p.model,
        "medbench.task": p.task_name,
        "medbench.benchmark": benchmark,
        "medbench.research_only": str(p.task.meta.research_only).lower(),
        "medbench.dagster_run_id": context.run_id,
    }
    # Runs left RUNNING by killed attempts (of any partition) are marked KILLED, not left hanging.
    mlflow.reconcile_stale_runs(benchmark, is_alive=dagster_run_alive(context.instance))
    run_id, reused = mlflow.log_run(
        benchmark,
        p.keys["metrics"],
        f"{p.model}/{p.task_name}",
        params,
        metrics,
        tags,
        [p.dir("run") / "run.trec", p.dir("metrics") / "per_query.parquet", p.dir("metrics") / "metrics.json"],
        replace=config.force,
    )
    return dg.MaterializeResult(
        metadata={
            **provenance_metadata(p, "metrics"),
            "cache_hit": hit,
            "mlflow_run_id": run_id,
            "mlflow_run_reused": reused,
            **{k: dg.MetadataValue.float(v) for k, v in result["mean"].items()},
        },
        data_version=dg.DataVersion(p.keys["metrics"]),
    )
