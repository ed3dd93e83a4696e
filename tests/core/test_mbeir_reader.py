"""UniIR's M-BEIR layout (issue 22.1): query JSONL, candidate pool, qrels under qrels/<split>/, images under
the M-BEIR root; each record's declared modality checked against what it carries; local and hub cache."""

from __future__ import annotations

import pytest
from reader_fixtures import hub_snapshot, jsonl, png

from medbench_core.errors import DataError
from medbench_core.taskdata.catalog import build_task, load_catalog

SHA = "98dc570c2645fec8e1fd42c7d4ac9853f46051fd"

QUERIES = [
    # CIRR-like task 7: an image and a modification text -> an image
    {
        "qid": "7:1",
        "query_txt": "make the dog sit on grass",
        "query_img_path": "mbeir_images/cirr_images/q1.png",
        "query_modality": "image,text",
        "query_src_content": '{"id": 1}',
        "pos_cand_list": ["7:11"],
        "neg_cand_list": [],
        "task_id": 7,
    },
    {
        "qid": "7:2",
        "query_txt": "the same cat, but black",
        "query_img_path": "mbeir_images/cirr_images/q2.png",
        "query_modality": "image,text",
        "query_src_content": "{}",
        "pos_cand_list": ["7:12"],
        "neg_cand_list": ["7:11"],
        "task_id": 7,
    },
]
POOL = [
    {"did": "7:11", "txt": "", "img_path": "mbeir_images/cirr_images/c11.png", "modality": "image", "src_content": "{}"},
    {"did": "7:12", "txt": "", "img_path": "mbeir_images/cirr_images/c12.png", "modality": "image", "src_content": "{}"},
    {"did": "7:13", "txt": "a black cat on a sofa", "img_path": "mbeir_images/cirr_images/c13.png", "modality": "image,text", "src_content": "{}"},
    {"did": "7:14", "txt": "a dog sitting on grass", "img_path": None, "modality": "text", "src_content": "{}"},
]
QRELS = "7:1 0 7:11 1 7\n7:2 0 7:12 1 7\n"


def write_mbeir(root, subset="cirr_task7", pool_name=None):
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text("---\nlicense: mit\n---\n## Dataset Structure Overview\n")
    images = root / "mbeir_images" / "cirr_images"
    images.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(("q1", "q2", "c11", "c12", "c13")):
        (images / f"{name}.png").write_bytes(png(40 + i))
    jsonl(root / "query" / "test" / f"mbeir_{subset}_test.jsonl", QUERIES)
    jsonl(root / "cand_pool" / "local" / f"mbeir_{pool_name or subset}_cand_pool.jsonl", POOL)
    (root / "qrels" / "test").mkdir(parents=True, exist_ok=True)
    (root / "qrels" / "test" / f"mbeir_{subset}_test_qrels.txt").write_text(QRELS)
    return root


def entry(tmp_path, source="path: M-BEIR", extra=""):
    cat = tmp_path / "tasks.yaml"
    cat.write_text(f"tasks:\n  - {{name: mbeir, reader: mbeir, {source}, subsets: [cirr_task7]{extra}}}\n")
    return load_catalog(cat).task("mbeir_cirr_task7")


def test_mbeir_records_map_text_image_and_modality(tmp_path):
    data = tmp_path / "data"
    write_mbeir(data / "M-BEIR")
    task = build_task(entry(tmp_path), data, tmp_path / "w")
    q = {r["query_id"]: r for r in task.queries.iter_rows(named=True)}
    assert {k: (v["text"], v["image"], v["modality"]) for k, v in q.items()} == {
        "7:1": ("make the dog sit on grass", "mbeir_images/cirr_images/q1.png", "both"),
        "7:2": ("the same cat, but black", "mbeir_images/cirr_images/q2.png", "both"),
    }
    d = {r["doc_id"]: (r["text"], r["image"], r["modality"]) for r in task.corpus.iter_rows(named=True)}
    assert d["7:11"] == ("", "mbeir_images/cirr_images/c11.png", "image")
    assert d["7:13"] == ("a black cat on a sofa", "mbeir_images/cirr_images/c13.png", "both")
    assert d["7:14"] == ("a dog sitting on grass", None, "text")
    assert sorted(task.qrels.rows()) == [("7:1", "7:11", 1), ("7:2", "7:12", 1)]
    assert task.meta.licences == ("MIT",) and task.meta.subset == "cirr_task7" and task.meta.dataset == "M-BEIR"
    assert task.resolve_image("mbeir_images/cirr_images/c12.png").read_bytes() == png(43)  # paths relative to the M-BEIR root


def test_a_declared_modality_the_record_does_not_carry_is_refused(tmp_path):
    data = tmp_path / "data"
    root = write_mbeir(data / "M-BEIR")
    rows = [dict(q) for q in QUERIES]
    rows[1]["query_txt"] = ""  # declared image,text: the text half is gone
    path = jsonl(root / "query" / "test" / "mbeir_cirr_task7_test.jsonl", rows)
    with pytest.raises(DataError) as err:
        build_task(entry(tmp_path), data, tmp_path / "w")
    assert str(err.value) == (
        f"{path}:2: record 7:2: declares query_modality 'image,text' but carries image; the record lost part of its content or mislabels it"
    )


def test_the_pool_defaults_to_the_subsets_then_per_split_and_can_be_named(tmp_path):
    data = tmp_path / "data"
    write_mbeir(data / "M-BEIR", pool_name="cirr_task7_test")  # MSCOCO's pools are named per split
    assert build_task(entry(tmp_path), data, tmp_path / "w").corpus.height == len(POOL)
    with pytest.raises(DataError, match=r"task mbeir_cirr_task7: no candidate pool for 'cirr_task7'; looked for .*mbeir_other_cand_pool.jsonl.*\(set 'pool'\)"):
        build_task(entry(tmp_path, extra=", pool: other"), data, tmp_path / "w")


def test_a_hub_snapshot_of_mbeir_is_read_offline_with_its_images_copied_out_of_the_cache(tmp_path):
    src = write_mbeir(tmp_path / "src")
    cache = tmp_path / "hub"
    hub_snapshot(cache, "TIGER-Lab/M-BEIR", src, sha=SHA)
    task = build_task(entry(tmp_path, source=f"dataset: TIGER-Lab/M-BEIR, revision: {SHA}"), tmp_path, tmp_path / "w", hub_cache=cache)
    assert task.meta.source_revision == SHA and task.image_root == tmp_path / "w" / "images"
    img = task.resolve_image("mbeir_images/cirr_images/q1.png")
    assert not img.is_symlink() and img.read_bytes() == png(40)
    assert sorted(task.qrels.rows()) == [("7:1", "7:11", 1), ("7:2", "7:12", 1)]
