"""The registry sensor on a tmp instance: a model added to models.yaml is evaluated, and only it.

The world starts with bm25 and bm25-k12 evaluated on two tiny tasks. Ticks are evaluated with the real
sensor definition and applied as the daemon applies them (events, partitions, then runs).
"""

import dagster as dg
import pytest

from orchestration.definitions import build_definitions
from orchestration.registry_sync import retire_model
from orchestration.sensors import model_registry_sensor, registry_tick
from tests.orchestration.operating_env import BM25, BM25_K12, apply_sensor_result, materialization_ids, operated_world, write_models

pytestmark = pytest.mark.slow

EVALUATION = ("corpus_embeddings", "corpus_index", "retrieval_run", "task_metrics")
BM25_B05 = {**BM25, "name": "bm25-b05", "settings": {**BM25["settings"], "b": 0.5}}


@pytest.fixture
def world(tmp_path_factory, tmp_path):
    return operated_world(tmp_path_factory).copy_to(tmp_path / "w")


def tick(world, instance, defs) -> dg.SensorResult:
    # As a context manager: it builds the resources on an instance of its own and sets Dagster's current
    # state storage; left to the garbage collector, that is reset in whatever test runs next.
    with dg.build_sensor_context(instance=instance, resources=world.resources(), definitions=defs) as context:
        return model_registry_sensor(context)


def test_the_sensor_is_registered_and_running_by_default():
    sensor = build_definitions().get_repository_def().get_sensor_def("model_registry_sensor")
    assert sensor.job_name == "evaluate_partition"
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING


def test_a_new_model_is_picked_up_and_only_its_partitions_run_and_a_second_tick_launches_nothing(world):
    defs = world.defs()
    with world.instance() as instance:
        first = tick(world, instance, defs)
        assert first.run_requests == [] and first.dynamic_partitions_requests == [] and first.asset_events == []
        assert first.skip_reason.skip_message == "registry unchanged"

        write_models(world.models_file, [BM25, BM25_K12, BM25_B05])
        before = {a: materialization_ids(instance, a) for a in EVALUATION}
        result = tick(world, instance, defs)
        assert [(r.partitions_def_name, list(r.partition_keys)) for r in result.dynamic_partitions_requests] == [("models", ["bm25-b05"])]
        assert [(e.asset_key.to_user_string(), e.partition) for e in result.asset_events] == [("model_spec", "bm25-b05")]
        assert sorted(str(r.partition_key) for r in result.run_requests) == ["bm25-b05|liveqa_medquad", "bm25-b05|scifact"]
        assert {r.job_name for r in result.run_requests} == {"evaluate_partition"}
        assert {r.tags["medbench/trigger"] for r in result.run_requests} == {"model_registry_sensor"}

        runs = apply_sensor_result(instance, defs, result)
        assert [r.success for r in runs] == [True, True]
        assert instance.get_dynamic_partitions("models") == ["bm25", "bm25-k12", "bm25-b05"]
        for asset in EVALUATION:
            after = materialization_ids(instance, asset)
            assert {p: i for p, i in after.items() if not p.startswith("bm25-b05|")} == before[asset]  # the others untouched
            assert set(after) - set(before[asset]) == {"bm25-b05|scifact", "bm25-b05|liveqa_medquad"}

        again = tick(world, instance, defs)
        assert again.run_requests == [] and again.dynamic_partitions_requests == [] and again.asset_events == []


def test_only_usable_tasks_are_requested(world):
    # liveqa_medquad's gate verdict disappears (as after a content change not yet judged): not requested.
    (world.root / "data" / "tasks" / "liveqa_medquad" / "GATE.json").unlink()
    write_models(world.models_file, [BM25, BM25_K12, BM25_B05])
    with world.instance() as instance:
        result = registry_tick(instance, world.resources()["registry"], world.resources()["store"])
        assert [str(r.partition_key) for r in result.run_requests] == ["bm25-b05|scifact"]


def test_a_renamed_model_is_a_new_model_and_the_old_partition_keeps_its_history(world):
    write_models(world.models_file, [BM25_K12, {**BM25, "name": "bm25-lucene"}])
    with world.instance() as instance:
        before = materialization_ids(instance, "task_metrics")
        result = registry_tick(instance, world.resources()["registry"], world.resources()["store"])
        assert sorted(str(r.partition_key) for r in result.run_requests) == ["bm25-lucene|liveqa_medquad", "bm25-lucene|scifact"]
        assert result.dynamic_partitions_requests[0].partition_keys == ["bm25-lucene"]
        assert not any(isinstance(r, dg.DeleteDynamicPartitionsRequest) for r in result.dynamic_partitions_requests)
        apply_sensor_result(instance, world.defs(), result)
        assert instance.get_dynamic_partitions("models") == ["bm25", "bm25-k12", "bm25-lucene"]
        assert {p: i for p, i in materialization_ids(instance, "task_metrics").items() if p in before} == before

        # nothing new now; the skip message says what happened to the old name and how to retire it
        quiet = registry_tick(instance, world.resources()["registry"], world.resources()["store"])
        assert quiet.run_requests == []
        assert quiet.skip_reason.skip_message == ("no longer registered (kept with their history; retire with `medbench models retire NAME`): bm25")

        # retiring is deliberate: refused while registered, then the partition goes and the history stays
        with pytest.raises(ValueError, match="still listed"):
            retire_model(instance, world.resources()["registry"], "bm25-k12")
        retire_model(instance, world.resources()["registry"], "bm25")
        assert instance.get_dynamic_partitions("models") == ["bm25-k12", "bm25-lucene"]
        assert instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("task_metrics"), asset_partitions=["bm25|scifact"]), limit=1).records
