"""Staleness as the UI shows it (Dagster's CachingStaleStatusResolver), on a tmp instance with BM25.

Two tiny tasks x two BM25 models, all materialised and fresh. Changing one task's source data
makes exactly that task's partitions stale; changing one model's registry entry makes exactly
that model's partitions stale; the nightly schedule then requests only those, and running them
leaves every other partition's materialisations untouched.
"""

import json
from datetime import datetime, timezone

import dagster as dg
import pytest

from orchestration.freshness import EVALUATION_ASSETS, due_partitions, stale_status_resolver
from orchestration.schedules import nightly_evaluation
from orchestration.sensors import registry_tick
from tests.orchestration.operating_env import (
    BM25,
    BM25_K12,
    apply_sensor_result,
    curate,
    data_version,
    evaluate,
    materialization_ids,
    operated_world,
    write_models,
)

pytestmark = pytest.mark.slow

MODELS = ["bm25", "bm25-k12"]
TASKS = ["scifact", "liveqa_medquad"]
ALL = {f"{m}|{t}" for m in MODELS for t in TASKS}
FIRST = ("corpus_embeddings", "query_expansion")  # the assets reading the task and the registry entry


@pytest.fixture
def world(tmp_path_factory, tmp_path):
    return operated_world(tmp_path_factory).copy_to(tmp_path / "w")


def statuses(instance, defs) -> dict[tuple[str, str], str]:
    resolver = stale_status_resolver(instance, defs.resolve_asset_graph())
    return {(a.to_user_string(), p): resolver.get_status(a, p).value for a in EVALUATION_ASSETS for p in sorted(ALL)}


def all_ids(instance) -> dict[str, dict[str, int]]:
    return {a.to_user_string(): materialization_ids(instance, a.to_user_string()) for a in EVALUATION_ASSETS}


def nightly(instance, defs, world) -> list[dg.RunRequest]:
    with dg.build_schedule_context(  # a context manager: see tests/orchestration/test_sensors.py tick()
        instance=instance,
        resources=world.resources(),
        repository_def=defs.get_repository_def(),
        scheduled_execution_time=datetime(2026, 11, 23, 2, tzinfo=timezone.utc),
    ) as context:
        return list(nightly_evaluation.evaluate_tick(context).run_requests or [])


def rerun(instance, defs, world, expected: set[str]) -> None:
    """The nightly requests exactly ``expected``; running them changes only those partitions."""
    requests = nightly(instance, defs, world)
    assert {str(r.partition_key) for r in requests} == expected
    before = all_ids(instance)
    for r in requests:
        evaluate(instance, defs, r.partition_key)
    after = all_ids(instance)
    for asset, ids in after.items():
        changed = {p for p in ids if ids[p] != before[asset][p]}
        assert changed == expected, asset
    assert due_partitions(instance, defs.resolve_asset_graph(), MODELS, TASKS) == []
    assert set(statuses(instance, defs).values()) == {"FRESH"}


def test_a_built_world_is_fresh_and_the_nightly_has_nothing_to_do(world):
    defs = world.defs()
    with world.instance() as instance:
        assert set(statuses(instance, defs).values()) == {"FRESH"}
        assert nightly(instance, defs, world) == []


def test_changing_one_tasks_data_makes_only_its_partitions_stale(world):
    defs = world.defs()
    corpus = world.shared / "lq" / "corpus.jsonl"
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    rows[3]["text"] += " Iron tablets and leafy greens help."  # one document of liveqa_medquad
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with world.instance() as instance:
        old = data_version(instance, "curated_task", "liveqa_medquad")
        curate(world, instance, defs, ["liveqa_medquad"])
        assert data_version(instance, "curated_task", "liveqa_medquad") != old

        # Dagster flags the first assets whose inputs moved: corpus_embeddings and query_expansion (both read the task) of that task, both models.
        status = statuses(instance, defs)
        assert {k for k, v in status.items() if v == "STALE"} == {(a, f"{m}|liveqa_medquad") for a in FIRST for m in MODELS}
        resolver = stale_status_resolver(instance, defs.resolve_asset_graph())
        causes = resolver.get_stale_causes(dg.AssetKey("corpus_embeddings"), "bm25|liveqa_medquad")
        assert [(c.reason, c.dependency.asset_key.to_user_string(), c.dependency.partition_key) for c in causes] == [
            ("has a new dependency data version", "curated_task", "liveqa_medquad")
        ]
        due = due_partitions(instance, defs.resolve_asset_graph(), MODELS, TASKS)
        assert [(d.model, d.task) for d in due] == [("bm25", "liveqa_medquad"), ("bm25-k12", "liveqa_medquad")]
        assert due[0].reason == "stale: corpus_embeddings has a new dependency data version (curated_task)"

        rerun(instance, defs, world, {"bm25|liveqa_medquad", "bm25-k12|liveqa_medquad"})


def test_changing_one_models_settings_makes_only_its_partitions_stale(world):
    defs = world.defs()
    registry, store = world.resources()["registry"], world.resources()["store"]
    write_models(world.models_file, [BM25, {**BM25_K12, "settings": {**BM25_K12["settings"], "b": 0.5}}])
    with world.instance() as instance:
        tick = registry_tick(instance, registry, store)
        assert [(e.asset_key.to_user_string(), e.partition) for e in tick.asset_events] == [("model_spec", "bm25-k12")]
        assert tick.run_requests == [] and tick.dynamic_partitions_requests == []
        apply_sensor_result(instance, defs, tick)

        status = statuses(instance, defs)
        assert {k for k, v in status.items() if v == "STALE"} == {(a, f"bm25-k12|{t}") for a in FIRST for t in TASKS}
        due = due_partitions(instance, defs.resolve_asset_graph(), MODELS, TASKS)
        assert [d.reason for d in due] == ["stale: corpus_embeddings has a new dependency data version (model_spec)"] * 2

        old = {p: data_version(instance, "corpus_embeddings", p) for p in ALL}
        rerun(instance, defs, world, {"bm25-k12|scifact", "bm25-k12|liveqa_medquad"})
        # a new provenance key (so a new artifact path) for the changed model only
        assert {p for p in ALL if data_version(instance, "corpus_embeddings", p) != old[p]} == {"bm25-k12|scifact", "bm25-k12|liveqa_medquad"}
