"""Registering a hub model pins its revision (orchestration/registry_sync.py): the branch resolves to a
commit sha (models.pin_revision), recorded in the model_spec observation and its data version, shown
by ``medbench models sync``; models.yaml is never rewritten. Offline from a local hub cache layout;
online with the hub client's answer faked (no network), which is then written to the cache's refs.
"""

from __future__ import annotations

import json
import types

import dagster as dg
import pytest

from medbench_core.retrieval.model_registry import load_registry
from medbench_core.retrieval.model_versions import model_version
from orchestration.registry_sync import observed_model_version, pin_revisions, sync_model_partitions
from runtime.resources import RegistryResource
from tests.cli.command import medbench
from tests.core.hf_layouts import hub_cache
from tests.orchestration.operating_env import BM25, new_world

HUB_ID = "medbench-test/minilm"
SHA, MOVED = "a" * 40, "b" * 40
HUBBY = {"name": "hubby", "kind": "sentence-transformers", "path": HUB_ID, "revision": "main", "settings": {"normalize": True}}


def write_config(folder):
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))


def observation(instance: dg.DagsterInstance, model: str):
    records = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("model_spec"), asset_partitions=[model]), limit=1).records
    return records[0].event_log_entry.asset_observation


@pytest.fixture
def hub(tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache, _ = hub_cache(tmp_path / "hub", HUB_ID, write_config, sha=SHA, repo_type="model")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_sync_pins_a_hub_branch_to_its_commit_and_a_moved_branch_makes_the_model_stale(tmp_path, hub):
    world = new_world(tmp_path / "w", [BM25, HUBBY])
    before = world.models_file.read_bytes()
    registry = world.resources()["registry"]
    pins = pin_revisions(registry)
    assert set(pins) == {"hubby"}  # BM25 has no hub id
    assert pins["hubby"].sha == SHA and pins["hubby"].describe() == f"hubby: {HUB_ID}@main -> {SHA}"
    spec = next(s for s in load_registry(world.models_file) if s.name == "hubby")
    with world.instance() as instance:
        assert sync_model_partitions(instance, registry, pins) == ["bm25", "hubby"]
        obs = observation(instance, "hubby")
        assert obs.metadata["pinned_revision"].value == SHA and obs.metadata["revision"].value == "main"
        assert observed_model_version(instance, "hubby") == model_version(spec, revision=SHA)
        # The branch moves (as a download of the new main would record it): a new version, so its partitions are stale.
        (hub / f"models--{HUB_ID.replace('/', '--')}" / "refs" / "main").write_text(MOVED)
        sync_model_partitions(instance, registry)
        assert observation(instance, "hubby").metadata["pinned_revision"].value == MOVED
        assert observed_model_version(instance, "hubby") == model_version(spec, MOVED) != model_version(spec, revision=SHA)
    assert world.models_file.read_bytes() == before  # never rewritten


def test_online_the_hub_answers_and_the_commit_is_written_to_the_cache_refs(tmp_path, hub, monkeypatch):
    import huggingface_hub

    asked = []

    def repo_info(self, repo_id, revision=None, repo_type=None, **kw):
        asked.append((repo_id, revision, repo_type))
        return types.SimpleNamespace(sha=MOVED)

    monkeypatch.setattr(huggingface_hub.HfApi, "repo_info", repo_info)
    world = new_world(tmp_path / "w", [HUBBY])
    offline = pin_revisions(world.resources()["registry"])
    assert offline["hubby"].sha == SHA and asked == []  # offline: the cache answers, the hub is not asked
    online = RegistryResource(models_file=str(world.models_file), tasks_file=str(world.root / "tasks.yaml"), online=True)
    assert pin_revisions(online)["hubby"].sha == MOVED and asked == [(HUB_ID, "main", "model")]
    assert (hub / f"models--{HUB_ID.replace('/', '--')}" / "refs" / "main").read_text() == MOVED
    # Every later offline step now reads the same commit (the stages key their artifacts by it).
    from medbench_core.hub import resolve_revision

    assert resolve_revision(HUB_ID, "main", repo_type="model") == MOVED


def test_an_unresolvable_revision_is_recorded_as_such_and_the_command_says_so(tmp_path, hub):
    missing = {**HUBBY, "name": "elsewhere", "path": "medbench-test/not-cached"}
    world = new_world(tmp_path / "w", [BM25, HUBBY, missing])
    with world.instance() as instance:
        sync_model_partitions(instance, world.resources()["registry"])
        meta = observation(instance, "elsewhere").metadata
    assert meta["pinned_revision"].value.startswith(
        "unresolved: model elsewhere: model medbench-test/not-cached: revision 'main' is not in the local hub cache"
    )
    env = {"DAGSTER_HOME": str(world.dagster_home), "MEDBENCH_MODELS": str(world.models_file), "MEDBENCH_TASKS": str(world.root / "tasks.yaml"),
           "MEDBENCH_DATA": str(world.root / "data"), "MEDBENCH_STATE": str(world.root / "state"), "HF_HUB_CACHE": str(hub)}  # fmt: skip
    out = medbench("models", "sync", env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "added: none"  # added in-process above
    assert lines[1].startswith("hub revisions, resolved by the local hub cache (MEDBENCH_ONLINE=1 asks the hub); recorded in the model_spec observations")
    assert f"  hubby: {HUB_ID}@main -> {SHA}" in lines
    assert any(line.startswith("  elsewhere: medbench-test/not-cached@main not resolved (") for line in lines)
