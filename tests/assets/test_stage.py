"""The shared body of the four stage assets (assets/stage.py): the gate it asks first, and a stage with no artifact of its own.

The happy path (artifacts, cache hits, the MLflow run) is tests/assets/test_partition.py.
"""

import dagster as dg
import pytest

from assets.stage import ASSET_OF_STAGE, PARTITION_ASSETS, STAGE_ASSETS, RetrievalConfig, Stage, stage_asset
from medbench_core.layout import STAGES
from medbench_core.retrieval.stages import partition_keys
from runtime.partitions import MODEL_PARTITIONS_NAME, partition_key
from tests.assets.project import PARTITIONS, corpus_embeddings, corpus_index, retrieval_run, task_metrics
from tests.orchestration.operating_env import BM25, QUIET, curate, new_world

pytestmark = pytest.mark.slow


def test_the_asset_names_follow_the_stage_list():
    assert tuple(ASSET_OF_STAGE) == STAGES
    assert STAGE_ASSETS == ("corpus_embeddings", "corpus_index", "retrieval_run", "task_metrics")
    assert [a.key.to_user_string() for a in (corpus_embeddings, corpus_index, retrieval_run, task_metrics)] == list(STAGE_ASSETS)


def test_a_task_without_a_gate_verdict_is_refused_before_anything_is_written(tmp_path):
    world = new_world(tmp_path / "w", [BM25])
    resources = world.resources()
    defs = world.defs()
    with world.instance() as instance:
        instance.add_dynamic_partitions(MODEL_PARTITIONS_NAME, ["bm25"])
        curate(world, instance, defs, ["scifact", "liveqa_medquad"])
        (world.root / "data" / "tasks" / "scifact" / "GATE.json").unlink()  # as if the checks never ran on this content
        context = dg.build_asset_context(partition_key=str(partition_key("bm25", "scifact")), resources=resources, instance=instance)
        with pytest.raises(Exception, match="task scifact: no data-contract verdict"):
            corpus_embeddings(context, RetrievalConfig())  # direct invocation of the asset, as in dagster-university lesson 3
    assert not (world.root / "data" / "artifacts").exists()


def test_a_text_model_on_an_image_task_writes_nothing_and_says_why(tmp_path):
    """BM25 reads text only; PneumoniaMNIST's documents are images: every stage answers n/a with its own key."""
    world = new_world(tmp_path / "w", [BM25], real_data=True)
    defs = world.defs()
    with world.instance() as instance:
        instance.add_dynamic_partitions(MODEL_PARTITIONS_NAME, ["bm25"])
        curate(world, instance, defs, ["pneumoniamnist"])
        res = defs.resolve_job_def("evaluate_partition").execute_in_process(
            instance=instance, partition_key=partition_key("bm25", "pneumoniamnist"), run_config=QUIET
        )
    task = world.resources()["store"].load_task("pneumoniamnist")
    keys = partition_keys(world.resources()["registry"].model("bm25"), task)
    events = {e.asset_key.to_user_string(): e for e in res.get_asset_materialization_events()}
    assert set(events) == set(PARTITION_ASSETS)
    for stage, asset in ASSET_OF_STAGE.items():
        md = {k: v.value for k, v in events[asset].materialization.metadata.items()}
        assert md["applicable"] is False and md["model"] == "bm25" and md["task"] == "pneumoniamnist"
        assert md["reason"].startswith("bm25 reads text only and ") and "of pneumoniamnist have no text" in md["reason"]
        assert events[asset].materialization.tags["dagster/data_version"] == f"n/a-{keys[stage]}"
    # BM25 has no expansion on any task: one constant data version, whatever else holds.
    md = {k: v.value for k, v in events["query_expansion"].materialization.metadata.items()}
    assert md["label"] == "none" and md["reason"] == "bm25 reads the task's own queries (no expansion)"
    assert events["query_expansion"].materialization.tags["dagster/data_version"] == "none"
    assert not (world.root / "data" / "artifacts").exists()


def test_a_stage_says_what_is_its_own_and_the_factory_does_the_rest():
    calls = []
    probe = Stage(
        "index",
        build=lambda run, tmp: calls.append("build") or [],
        finish=lambda run: {},
        description="probe",
        group="g",
        kinds=("faiss",),
        needs=("embeddings",),
    )
    asset = stage_asset(probe, PARTITIONS)
    assert asset.key == dg.AssetKey("corpus_index") and asset.partitions_def == PARTITIONS.model_task
    assert asset.group_names_by_key[asset.key] == "g" and asset.descriptions_by_key[asset.key] == "probe"
    assert {d.asset_key for d in asset.specs_by_key[asset.key].deps} == {dg.AssetKey("corpus_embeddings")}
    assert asset.required_resource_keys - {"io_manager"} == {"store", "registry"}
    assert asset.op.pool is None  # index loads no encoder; embeddings and run share the "encode" pool
    assert corpus_embeddings.op.pool == retrieval_run.op.pool == "encode"
    first = {d.asset_key for d in corpus_embeddings.specs_by_key[corpus_embeddings.key].deps}
    assert first == {dg.AssetKey("curated_task"), dg.AssetKey("model_spec")}
    assert calls == []  # nothing runs when an asset is defined


def test_the_bundled_fusion_is_na_where_an_upstream_is_and_writes_nothing(tmp_path):
    """bm25-minilm-rrf on PneumoniaMNIST: its text upstreams cannot read images, so neither can it (n/a, not a failure)."""
    import yaml

    from tests.orchestration.derived_env import write_registry
    from tests.orchestration.operating_env import ROOT

    bundled = {m["name"]: m for m in yaml.safe_load((ROOT / "models.yaml").read_text())["models"]}
    world = new_world(tmp_path / "w", [BM25], real_data=True)
    write_registry(world.models_file, [BM25, bundled["all-MiniLM-L6-v2"], bundled["bm25-minilm-rrf"]])
    defs = world.defs()
    with world.instance() as instance:
        instance.add_dynamic_partitions(MODEL_PARTITIONS_NAME, ["bm25", "all-MiniLM-L6-v2", "bm25-minilm-rrf"])
        curate(world, instance, defs, ["pneumoniamnist"])
        res = defs.resolve_job_def("evaluate_partition").execute_in_process(
            instance=instance, partition_key=partition_key("bm25-minilm-rrf", "pneumoniamnist"), run_config=QUIET
        )
    events = {e.asset_key.to_user_string(): e.materialization.metadata for e in res.get_asset_materialization_events()}
    assert set(events) == set(PARTITION_ASSETS)
    assert events.pop("query_expansion")["label"].value == "none"
    for md in events.values():
        assert md["applicable"].value is False and md["label"].value == "n/a"
        assert md["reason"].value.startswith("bm25-minilm-rrf builds on bm25: bm25 reads text only and ")
    assert not (world.root / "data" / "artifacts").exists()
