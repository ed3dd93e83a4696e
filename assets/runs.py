"""Retrieval runs per model x task: the top k documents for every query, in TREC format."""


import json

import dagster as dg

from assets._shared import CODE_VERSIONS, RetrievalConfig, not_applicable_result, open_partition, provenance_metadata, shared_encoder
from medbench_core.pipeline import retrieve
from orchestration.partitions import model_task_partitions
from orchestration.resources import ArtifactStoreResource, ComputeResource, RegistryResource


@dg.asset(
    partitions_def=model_task_partitions,
    deps=["corpus_index"],
    code_version=CODE_VERSIONS["run"],
    group_name="retrieval",
    kinds={"parquet"},
    pool="encode",
    retry_policy=dg.RetryPolicy(max_retries=2, delay=1),
    description="Top-k ranking per query (ties by doc id, as trec_eval orders them), query vectors kept for re-scoring.",
)
def retrieval_run(
    context: dg.AssetExecutionContext,
    config: RetrievalConfig,
    store: ArtifactStoreResource,
    registry: RegistryResource,
    compute: ComputeResource,
) -> dg.MaterializeResult:
    p = open_partition(context, store, registry, config.k)
    if p.not_applicable:
        return not_applicable_result(p, "run")

    def build(tmp):
        device = compute.torch_device()
        encoder = shared_encoder(p.spec, device, config.progress)
        _, info = retrieve(p.spec, p.task, p.dir("embeddings"), p.dir("index"), tmp, k=config.k, device=device, progress=config.progress, encoder=encoder)
        return [*info["files"], "info.json"]

    hit = p.materialize("run", build, force=config.force, needs=("embeddings", "index"))
    info = json.loads((p.dir("run") / "info.json").read_text())
    return dg.MaterializeResult(
        metadata={**provenance_metadata(p, "run"), "cache_hit": hit, "k": info["k"], "rows": info["n_rows"], "seconds": info["seconds"]},
        data_version=dg.DataVersion(p.keys["run"]),
    )
