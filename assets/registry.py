"""The model registry (models.yaml) as an external asset with one data version per model.

Dagster marks a partition stale when an upstream data version changes. Model settings live in
the registry file, not in any asset, so ``corpus_embeddings`` (and ``query_expansion``) depend on
``model_spec``: a changed entry gets a new observed version (:func:`medbench_core.retrieval.model_versions.model_versions`) and exactly
that model's partitions turn stale. A model built from upstreams (fusion, cross-encoder, expanded)
has a version over its upstreams' versions, so changing BM25 also makes stale every fusion and
reranker built on it; an expanded model's version also hashes its expansion's identity on every
task (prompt text, generator revision, decoding settings, published files, LameR's upstream).
The observations are recorded by the registry sensor, the nightly schedule and
``sync_model_partitions`` (orchestration/registry_sync.py), before any run uses them.
"""

import dagster as dg

from runtime.partitions import model_partitions

MODEL_SPEC = dg.AssetKey("model_spec")

model_spec = dg.AssetSpec(
    MODEL_SPEC,
    partitions_def=model_partitions,
    group_name="models",
    kinds={"yaml"},
    description="One models.yaml entry per model partition; its data version hashes the model's identity and weights' revision "
    "(and a derived model's upstreams' versions).",
)
