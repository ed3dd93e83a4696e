"""Search indices per model x task: exact FAISS inner-product (built on a GPU where one exists)."""


import json

import dagster as dg

from assets._shared import CODE_VERSIONS, RetrievalConfig, not_applicable_result, open_partition, provenance_metadata
from medbench_core.pipeline import build_corpus_index
from orchestration.partitions import model_task_partitions
from orchestration.resources import ArtifactStoreResource, ComputeResource, RegistryResource


@dg.asset(
    partitions_def=model_task_partitions,
    deps=["corpus_embeddings"],
    code_version=CODE_VERSIONS["index"],
    group_name="retrieval",
    kinds={"faiss"},
    retry_policy=dg.RetryPolicy(max_retries=2, delay=1),
    description="The FAISS index over one model's corpus vectors (BM25: none needed), with a sha256 manifest.",
)
def corpus_index(
    context: dg.AssetExecutionContext,
    config: RetrievalConfig,
    store: ArtifactStoreResource,
    registry: RegistryResource,
    compute: ComputeResource,
) -> dg.MaterializeResult:
    p = open_partition(context, store, registry, config.k)
    if p.not_applicable:
        return not_applicable_result(p, "index")

    def build(tmp):
        info = build_corpus_index(p.spec, p.dir("embeddings"), tmp, use_gpu=compute.use_gpu_for_faiss())
        return [*info["files"], "info.json"]

    hit = p.materialize("index", build, force=config.force, needs=("embeddings",))
    info = json.loads((p.dir("index") / "info.json").read_text())
    return dg.MaterializeResult(
        metadata={**provenance_metadata(p, "index"), "cache_hit": hit, "index_type": info["type"], "built_on": info["built_on"]},
        data_version=dg.DataVersion(p.keys["index"]),
    )
