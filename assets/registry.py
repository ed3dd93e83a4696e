"""The model registry (models.yaml) as an external asset with one data version per model.

Dagster marks a partition stale when an upstream data version changes. Model settings live in
the registry file, not in any asset, so ``corpus_embeddings`` depends on ``model_spec``: a
changed entry gets a new observed version (``assets._shared.model_version``) and exactly that
model's partitions turn stale. The observations are recorded by the registry sensor, the nightly
schedule and ``sync_model_partitions`` (orchestration/registry_sync.py), before any run uses them.
"""

import dagster as dg

from orchestration.partitions import model_partitions

MODEL_SPEC = dg.AssetKey("model_spec")

model_spec = dg.AssetSpec(
    MODEL_SPEC,
    partitions_def=model_partitions,
    group_name="models",
    kinds={"yaml"},
    description="One models.yaml entry per model partition; its data version hashes the model's identity and weights' revision.",
)
