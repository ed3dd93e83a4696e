"""The model registry as an asset (assets/registry.py): one model_spec partition per model, its version everything that changes vectors."""

import dataclasses

from assets.registry import MODEL_SPEC, model_spec
from medbench_core.provenance import artifact_key
from medbench_core.retrieval.model_registry import model_spec as entry
from medbench_core.retrieval.model_versions import model_version
from runtime.partitions import MODEL_PARTITIONS_NAME

BM25 = entry(name="bm25", kind="bm25", revision="bm25s-lucene", settings={"k1": 1.5, "b": 0.75})


def test_model_spec_is_an_external_asset_partitioned_by_model():
    assert model_spec.key == MODEL_SPEC and MODEL_SPEC.to_user_string() == "model_spec"
    assert model_spec.partitions_def.name == MODEL_PARTITIONS_NAME


def test_the_version_hashes_identity_and_revision_and_nothing_else():
    # BM25 has no weights: its revision is the registry's; the version is the key of identity + revision.
    assert model_version(BM25) == artifact_key(model=BM25.identity(), revision="bm25s-lucene")
    assert model_version(dataclasses.replace(BM25, batch_size=128)) == model_version(BM25)  # a run knob
    assert model_version(entry(**{**BM25.to_entry(), "settings": {"k1": 1.2, "b": 0.75}})) != model_version(BM25)
    assert model_version(dataclasses.replace(BM25, name="bm25-copy")) != model_version(BM25)  # the name is identity
