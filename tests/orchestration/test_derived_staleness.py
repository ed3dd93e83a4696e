"""Staleness of models built from upstreams, as the UI shows it (Dagster's CachingStaleStatusResolver).

A tiny world, one task (scifact), every partition materialised and fresh:

    bm25 ──┬── rrf (fusion) ── bm25-k12 ──┬── (LameR's upstream run)
           └── rerank (cross-encoder)     │
    bm25-b04 ──┬── bm25+hyde  <- hyde-g  (generated, tiny LM)
               └── bm25+lamer <- lamer-g (generated, prompt carries bm25-k12's top passages)

The ``model_spec`` version of a derived model hashes its identity and each upstream's version (and
an expanded model's expansion: prompt text, generator revision, decoding, LameR's upstream), so:
changing BM25 makes bm25's, the fusion's and the reranker's partitions stale; changing a prompt
template, the seed or LameR's upstream makes the expansion and what is built on it stale, and
nothing else. Running exactly the due partitions rematerialises only them and leaves all fresh.
"""

from __future__ import annotations

import json
from datetime import UTC

import pytest

from medbench_core.retrieval.derived import registry_partition_keys
from orchestration.freshness import EVALUATION_ASSETS, due_partitions, stale_status_resolver
from orchestration.registry_sync import sync_model_partitions
from tests.orchestration.derived_env import (
    BM25_K12,
    evaluate,
    failure_message,
    mlflow_runs,
    tiny_cross_encoder,
    tiny_generator,
    write_prompts,
    write_registry,
)
from tests.orchestration.operating_env import BM25, World, curate, materialization_ids, new_world

pytestmark = pytest.mark.slow

BM25_B04 = {**BM25, "name": "bm25-b04", "settings": {**BM25["settings"], "b": 0.4}}
MODELS = ["bm25", "bm25-k12", "bm25-b04", "rrf", "rerank", "bm25+hyde", "bm25+lamer"]  # evaluation order
DECODING = {"seed": 1, "max_new_tokens": 8}


def registry(root, *, bm25=BM25, lamer_upstream="bm25-k12", lamer_seed=1) -> None:
    models = [
        bm25, BM25_K12, BM25_B04,
        {"name": "rrf", "kind": "fusion", "fusion": {"method": "rrf", "k": 60, "runs": ["bm25", "bm25-k12"]}},
        {"name": "rerank", "kind": "cross-encoder", "path": str(CE_DIR[0]), "rerank": {"upstream": "bm25", "depth": 5}, "batch_size": 8},
        {"name": "bm25+hyde", "kind": "expanded", "retriever": "bm25-b04", "expansion": "hyde-g"},
        {"name": "bm25+lamer", "kind": "expanded", "retriever": "bm25-b04", "expansion": "lamer-g"},
    ]  # fmt: skip
    expansions = [
        {"name": "hyde-g", "method": "hyde", "source": "generate", "generator": "./lm", "decoding": DECODING, "batch_size": 2},
        {"name": "lamer-g", "method": "lamer", "source": "generate", "generator": "./lm", "decoding": {**DECODING, "seed": lamer_seed},
         "upstream": lamer_upstream, "upstream_k": 3, "passage_words": 20, "batch_size": 2},
    ]  # fmt: skip
    write_registry(root / "models.yaml", models, expansions)


_TEMPLATE: dict[str, World] = {}
CE_DIR: list = []  # the cross-encoder folder (a model path resolves from the working directory, so it stays absolute)


@pytest.fixture
def world(tmp_path_factory, tmp_path) -> World:
    if "world" not in _TEMPLATE:
        root = tmp_path_factory.mktemp("derived_staleness") / "w"
        w = new_world(root, [BM25])
        # The generator sits beside models.yaml (an expansion's paths resolve there, and move with the copies).
        CE_DIR.append(tiny_cross_encoder(root.parent / "tiny-ce"))
        tiny_generator(root / "lm")
        write_prompts(root)
        registry(root)
        defs = w.defs()
        with w.instance() as instance:
            sync_model_partitions(instance, w.resources()["registry"])
            curate(w, instance, defs, ["scifact", "liveqa_medquad"])
            for m in MODELS:
                res = evaluate(instance, defs, m, "scifact")
                assert res.success, failure_message(res)
        _TEMPLATE["world"] = w
    return _TEMPLATE["world"].copy_to(tmp_path / "w")


def statuses(instance, defs) -> dict[tuple[str, str], str]:
    resolver = stale_status_resolver(instance, defs.resolve_asset_graph())
    return {(a.to_user_string(), m): resolver.get_status(a, f"{m}|scifact").value for a in EVALUATION_ASSETS for m in MODELS}


def stale(instance, defs) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for (asset, model), status in statuses(instance, defs).items():
        if status == "STALE":
            out.setdefault(model, set()).add(asset)
    return out


def ids(instance) -> dict[str, dict[str, int]]:
    return {a.to_user_string(): materialization_ids(instance, a.to_user_string()) for a in EVALUATION_ASSETS}


def observe_and_rerun(world: World, expected: set[str]) -> None:
    """Record the registry's versions; exactly ``expected`` is stale and due; running them changes only them and leaves all fresh."""
    defs = world.defs()
    with world.instance() as instance:
        sync_model_partitions(instance, world.resources()["registry"])
        now = stale(instance, defs)
        assert set(now) == expected
        # Dagster flags the first assets whose inputs moved: the two that read the registry entry.
        assert all(assets == {"corpus_embeddings", "query_expansion"} for assets in now.values()), now
        due = due_partitions(instance, defs.resolve_asset_graph(), MODELS, ["scifact"])
        assert [d.model for d in due] == [m for m in MODELS if m in expected]
        assert all(d.reason.startswith("stale: corpus_embeddings has a new dependency data version (model_spec)") for d in due)
        before = ids(instance)
        for d in due:
            res = evaluate(instance, defs, d.model, "scifact")
            assert res.success, failure_message(res)
        after = ids(instance)
        for asset, by_partition in after.items():
            assert {p.split("|")[0] for p, i in by_partition.items() if i != before[asset].get(p)} == expected, asset
        assert set(statuses(instance, defs).values()) == {"FRESH"}


def expansion_folders(world: World, name: str) -> set[str]:
    return {p.name for p in (world.root / "data" / "expansions" / name / "scifact").iterdir() if not p.name.startswith(".")}


def test_a_built_world_is_fresh(world):
    defs = world.defs()
    with world.instance() as instance:
        assert set(statuses(instance, defs).values()) == {"FRESH"}
        assert due_partitions(instance, defs.resolve_asset_graph(), MODELS, ["scifact"]) == []
    # The expansions were generated once each and passed their contract.
    for name in ("hyde-g", "lamer-g"):
        (key,) = expansion_folders(world, name)
        gate = json.loads((world.root / "data" / "expansions" / name / "scifact" / key / "EXPANSION_GATE.json").read_text())
        assert gate["passed"] and gate["key"] == key
    # One MLflow run per expansion x task, with the generation's figures; LameR's names its upstream run.
    runs = {r.data.tags["medbench.expansion"]: r for r in mlflow_runs(world, experiment="medbench-test-expansions")}
    assert sorted(runs) == ["hyde-g", "lamer-g"]
    for r in runs.values():
        assert r.data.metrics["expansion.generated_tokens"] > 0 and r.data.metrics["expansion.tokens_per_second"] > 0
        assert r.data.params["expansion.decoding.seed"] == "1" and r.data.params["expansion.source"] == "generate"
    store, registry = world.resources()["store"], world.resources()["registry"]
    keys = registry_partition_keys(registry.models(), store.load_task("scifact"), names=["bm25+lamer"], expansions=registry.expansions())
    assert runs["lamer-g"].data.params["expansion.upstream_run"] == keys["bm25-k12"]["run"]
    assert runs["lamer-g"].data.params["expansion.key"] == keys["bm25+lamer"]["expansion"] == expansion_folders(world, "lamer-g").pop()


def test_changing_bm25_makes_bm25_the_fusion_and_the_reranker_stale(world):
    registry(world.root, bm25={**BM25, "settings": {**BM25["settings"], "k1": 1.3}})
    observe_and_rerun(world, {"bm25", "rrf", "rerank"})


def test_changing_a_prompt_template_makes_the_expansion_and_what_is_built_on_it_stale(world):
    before = {n: expansion_folders(world, n) for n in ("hyde-g", "lamer-g")}
    write_prompts(world.root, hyde="Write a passage that answers this claim: {query}")
    observe_and_rerun(world, {"bm25+hyde"})
    # A new expansion artifact beside the old one (content-addressed); the other expansion untouched.
    assert len(expansion_folders(world, "hyde-g")) == 2 and before["hyde-g"] < expansion_folders(world, "hyde-g")
    assert expansion_folders(world, "lamer-g") == before["lamer-g"]


def test_changing_the_seed_makes_only_that_expansion_and_its_model_stale(world):
    registry(world.root, lamer_seed=2)
    observe_and_rerun(world, {"bm25+lamer"})
    assert len(expansion_folders(world, "lamer-g")) == 2 and len(expansion_folders(world, "hyde-g")) == 1


def test_changing_lamers_upstream_makes_only_that_expansion_and_its_model_stale(world):
    registry(world.root, lamer_upstream="bm25")
    observe_and_rerun(world, {"bm25+lamer"})


def test_changing_lamers_upstream_run_makes_it_and_what_is_built_on_that_run_stale(world):
    """bm25-k12 feeds the fusion and LameR's prompt: both follow it, the rest does not."""
    models = json.loads((world.root / "models.yaml").read_text())
    models["models"][1]["settings"]["k1"] = 1.1
    (world.root / "models.yaml").write_text(json.dumps(models))
    observe_and_rerun(world, {"bm25-k12", "rrf", "bm25+lamer"})


def nightly(world: World, instance, defs) -> list[str]:
    from datetime import datetime

    import dagster as dg

    from orchestration.schedules import nightly_evaluation

    with dg.build_schedule_context(  # a context manager: see tests/orchestration/test_sensors.py tick()
        instance=instance, resources=world.resources(), repository_def=defs.get_repository_def(), scheduled_execution_time=datetime(2026, 11, 24, 2, tzinfo=UTC)
    ) as context:
        requests = nightly_evaluation.evaluate_tick(context).run_requests or []
    return [str(r.partition_key) for r in requests if r.partition_key.keys_by_dimension["task"] == "scifact"]


def test_the_nightly_runs_a_fusion_and_a_reranker_after_their_stale_upstream(world):
    registry(world.root, bm25={**BM25, "settings": {**BM25["settings"], "k1": 1.3}})
    defs = world.defs()
    with world.instance() as instance:
        # bm25 first: the fusion and the reranker would otherwise start before its new run exists.
        assert nightly(world, instance, defs) == ["bm25|scifact"]
        assert evaluate(instance, defs, "bm25", "scifact").success
        assert nightly(world, instance, defs) == ["rrf|scifact", "rerank|scifact"]


def test_the_sensor_requests_a_new_fusion_after_its_new_upstream(world):
    from orchestration.sensors import registry_tick

    models = json.loads((world.root / "models.yaml").read_text())
    models["models"] += [{**BM25, "name": "bm25-k09", "settings": {**BM25["settings"], "k1": 0.9}},
                         {"name": "rrf-new", "kind": "fusion", "fusion": {"method": "rrf", "runs": ["bm25", "bm25-k09"]}}]  # fmt: skip
    (world.root / "models.yaml").write_text(json.dumps(models))
    with world.instance() as instance:
        tick = registry_tick(instance, world.resources()["registry"], world.resources()["store"])
    # Its upstream now; the fusion once bm25-k09 is evaluated (then it is missing, and the nightly requests it).
    assert sorted(str(r.partition_key) for r in tick.run_requests) == ["bm25-k09|liveqa_medquad", "bm25-k09|scifact"]
