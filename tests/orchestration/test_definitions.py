"""The definitions `dagster dev` loads: assets, checks, jobs, partitions and resources."""

import dagster as dg
import pytest

from medbench_core.taskdata.catalog import load_catalog
from orchestration.definitions import build_definitions
from runtime import settings
from runtime.partitions import MODEL_PARTITIONS_NAME, partition_key, split_key

MODEL_TASK_ASSETS = ("corpus_embeddings", "corpus_index", "retrieval_run", "task_metrics")
TASKS = load_catalog(settings.TASKS_FILE).names
defs = build_definitions()


def test_definitions_load_with_the_medbench_assets_checks_and_jobs():
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {"curated_task", *MODEL_TASK_ASSETS, "leaderboard"} <= keys
    checks = {(c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys}
    assert {("curated_task", "task_contract"), ("curated_task", "tasks_do_not_overlap"), ("query_expansion", "expansion_contract")} <= checks
    jobs = {j.name for j in defs.resolve_all_job_defs()}
    assert {"curate_tasks", "check_overlap", "evaluate_partition", "build_leaderboard", "audit_contamination"} <= jobs
    assert {"store", "registry", "compute", "mlflow"} <= set(defs.resources)


def test_the_lineage_runs_from_tasks_to_metrics_to_the_leaderboard():
    graph = defs.resolve_asset_graph()
    parents = {k: {p.to_user_string() for p in graph.get(dg.AssetKey(k)).parent_keys} for k in (*MODEL_TASK_ASSETS, "leaderboard")}
    assert "curated_task" in parents["corpus_embeddings"]
    assert parents["corpus_index"] == {"corpus_embeddings"}
    # The run reads the queries as the model sees them: the task's, or an expansion of them.
    assert parents["retrieval_run"] == {"corpus_index", "query_expansion"}
    assert {p.to_user_string() for p in graph.get(dg.AssetKey("query_expansion")).parent_keys} == {"curated_task", "model_spec"}
    assert parents["task_metrics"] == {"retrieval_run"}
    assert "task_metrics" in parents["leaderboard"]
    # Each task's contamination audit reads every curated task, and the leaderboard marks its cells from it.
    assert "contamination_audit" in parents["leaderboard"]
    audit = defs.resolve_assets_def("contamination_audit")
    assert audit.partitions_def.get_partition_keys() == TASKS
    assert {p.to_user_string() for p in graph.get(dg.AssetKey("contamination_audit")).parent_keys} == {"curated_task"}


def test_partitions_are_task_static_and_model_dynamic():
    curated = defs.resolve_assets_def("curated_task").partitions_def
    assert curated.get_partition_keys() == TASKS and {"scifact", "liveqa_medquad"} <= set(TASKS)
    for name in MODEL_TASK_ASSETS:
        pdef = defs.resolve_assets_def(name).partitions_def
        assert isinstance(pdef, dg.MultiPartitionsDefinition)
        dims = {d.name: d.partitions_def for d in pdef.partitions_defs}
        assert isinstance(dims["model"], dg.DynamicPartitionsDefinition) and dims["model"].name == MODEL_PARTITIONS_NAME
        assert dims["task"].get_partition_keys() == TASKS
    job = defs.resolve_job_def("evaluate_partition")
    assert job.partitions_def == defs.resolve_assets_def("task_metrics").partitions_def
    assert job.asset_layer.selected_asset_keys >= {dg.AssetKey(k) for k in (*MODEL_TASK_ASSETS, "query_expansion")}
    assert dg.AssetCheckKey(dg.AssetKey("query_expansion"), "expansion_contract") in job.asset_layer.asset_graph.asset_check_keys


def test_a_model_added_at_run_time_becomes_model_x_task_partitions():
    pdef = defs.resolve_assets_def("task_metrics").partitions_def
    with dg.instance_for_test() as instance:
        assert pdef.get_partition_keys(dynamic_partitions_store=instance) == []
        instance.add_dynamic_partitions(MODEL_PARTITIONS_NAME, ["bm25", "my-new-model"])
        keys = pdef.get_partition_keys(dynamic_partitions_store=instance)
    assert len(keys) == 2 * len(TASKS)
    assert partition_key("my-new-model", "scifact") in keys
    assert split_key(partition_key("my-new-model", "scifact")) == ("my-new-model", "scifact")
    assert split_key("model=bm25|task=liveqa_medquad") == ("bm25", "liveqa_medquad")


def test_curated_task_partitions_map_to_their_model_x_task_partitions():
    graph = defs.resolve_asset_graph()
    mapping = graph.get(dg.AssetKey("corpus_embeddings")).partition_mappings[dg.AssetKey("curated_task")]
    assert isinstance(mapping, dg.MultiToSingleDimensionPartitionMapping)
    assert mapping.partition_dimension_name == "task"


@pytest.mark.parametrize("stage", ["corpus_embeddings", "retrieval_run", "task_metrics"])
def test_partitioned_steps_retry(stage):
    node = defs.resolve_job_def("evaluate_partition").graph.node_named(stage)
    assert node.definition.retry_policy is not None and node.definition.retry_policy.max_retries >= 1
