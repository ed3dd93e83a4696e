"""The model registry (models.yaml) as an external asset with one data version per model.

Dagster marks a partition stale when an upstream data version changes. Model settings live in
the registry file, not in any asset, so ``corpus_embeddings`` depends on ``model_spec``: a
changed entry gets a new observed version (:func:`model_version`) and exactly that model's
partitions turn stale. The observations are recorded by the registry sensor, the nightly schedule
and ``sync_model_partitions`` (orchestration/registry_sync.py), before any run uses them.
"""

import dagster as dg

from medbench_core.encoders import cached_revision
from medbench_core.models import ModelSpec
from medbench_core.provenance import artifact_key
from runtime.partitions import model_partitions

MODEL_SPEC = dg.AssetKey("model_spec")

model_spec = dg.AssetSpec(
    MODEL_SPEC,
    partitions_def=model_partitions,
    group_name="models",
    kinds={"yaml"},
    description="One models.yaml entry per model partition; its data version hashes the model's identity and weights' revision.",
)


def model_version(spec: ModelSpec, revision: str | None = None) -> str:
    """Data version of a registered model: everything that changes its vectors (identity, weights' revision).

    Recorded as observations of ``model_spec``, so that changing one model's settings marks
    exactly that model's partitions stale (Dagster compares upstream data versions).
    ``revision``: the commit sha a hub model's revision was pinned to at registration (a moved
    branch then gives a new version); by default the revision the stages key their artifacts by.
    """
    return artifact_key(model=spec.identity(), revision=revision or cached_revision(spec))
