"""Corpus representations per model x task: dense vectors, or BM25's sparse index."""


import dagster as dg

from assets._shared import CODE_VERSIONS, RetrievalConfig, not_applicable_result, open_partition, provenance_metadata, shared_encoder
from medbench_core.pipeline import embed_corpus
from medbench_core.storage import read_manifest
from orchestration.partitions import model_of_partition, model_task_partitions, task_of_partition
from orchestration.resources import ArtifactStoreResource, ComputeResource, RegistryResource


@dg.asset(
    partitions_def=model_task_partitions,
    deps=[
        dg.AssetDep("curated_task", partition_mapping=task_of_partition),
        dg.AssetDep("model_spec", partition_mapping=model_of_partition),  # settings changes -> stale
    ],
    code_version=CODE_VERSIONS["embeddings"],
    group_name="retrieval",
    kinds={"numpy"},
    pool="encode",
    retry_policy=dg.RetryPolicy(max_retries=2, delay=1),
    description="The corpus encoded by one model (float32 vectors, or a bm25s sparse index), keyed by its provenance.",
)
def corpus_embeddings(
    context: dg.AssetExecutionContext,
    config: RetrievalConfig,
    store: ArtifactStoreResource,
    registry: RegistryResource,
    compute: ComputeResource,
) -> dg.MaterializeResult:
    p = open_partition(context, store, registry, config.k)
    if p.not_applicable:
        return not_applicable_result(p, "embeddings")

    def build(tmp):
        device = compute.torch_device()
        encoder = shared_encoder(p.spec, device, config.progress)
        info = embed_corpus(p.spec, p.task, tmp, device=device, progress=config.progress, encoder=encoder)
        return [*info["files"], "info.json"]

    hit = p.materialize("embeddings", build, force=config.force)
    info = read_manifest(p.dir("embeddings"))
    return dg.MaterializeResult(
        metadata={**provenance_metadata(p, "embeddings"), "cache_hit": hit, "files": len(info["files"])},
        data_version=dg.DataVersion(p.keys["embeddings"]),
    )
