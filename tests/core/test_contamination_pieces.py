"""The contamination audit put together from per-source pieces (issue 51: a task added to five).

A task's audit is its pairs against every other task, every declared manifest and its own images. Each of those is a
piece, stored under the content of both sides, so that adding task F computes F's pieces once, and every other task's
audit takes its pairs against F from F's piece with the sides swapped, comparing nothing again. These tests count the
LSH indexes built and the image comparisons made (patched), and check every composed audit against the audit computed
afresh from nothing stored (``audit_task``), on a board of real-format tasks with texts, images (real VQA-RAD pictures,
one resized and recompressed), ``val_``/``test_`` ids and both kinds of manifest.
"""

from __future__ import annotations

import polars as pl
import pytest
from PIL import Image

from medbench_core.evaluation.contamination import audit as audit_module
from medbench_core.evaluation.contamination import texts as tx
from medbench_core.evaluation.contamination.audit import _compute_pieces, audit_task, compose_audit, piece_key, swap_piece
from medbench_core.layout import Layout
from medbench_core.taskdata import image_hashes as ih
from tests.core.test_contamination import PICS, _resized_jpeg, _task


@pytest.fixture
def counted(monkeypatch) -> dict[str, list]:
    """Every LSH index built (the sources it holds) and every image comparison made (its two sizes); caches emptied."""
    seen: dict[str, list] = {"lsh": [], "images": []}
    real_index, real_close = tx.LshIndex, ih.close_pairs

    class CountingIndex(real_index):
        def __init__(self, others, *a, **kw):
            seen["lsh"].append(sorted({o.source for o in others}))
            super().__init__(others, *a, **kw)

    def counting_close(left, right, **kw):
        seen["images"].append((len(left), len(right)))
        return real_close(left, right, **kw)

    monkeypatch.setattr(tx, "LshIndex", CountingIndex)
    monkeypatch.setattr(ih, "close_pairs", counting_close)
    monkeypatch.setattr(audit_module, "_TEXTS", {})
    monkeypatch.setattr(audit_module, "_SIGNATURES", {})
    return seen


def _board(tmp_path):
    """Tasks a, b, c and a task f to add; a texts and an images manifest. Near-duplicates: f's query s1 of a's query q1
    (case and punctuation), f's document image of b's (resized, recompressed), b's query of the texts manifest, c's val
    and test images (the same pixels) and a's query image of the images manifest."""
    pics = [Image.open(p) for p in PICS]
    a = _task("a", tmp_path / "a", {"q1": "Vitamin D supplementation prevents fractures in older adults", "q2": "What organ is shown in this radiograph"},
              {"d1": "Fracture prevention trial", "d2": "An abdominal CT"}, {"q2": pics[0]}, {"d2": pics[1]})  # fmt: skip
    b = _task("b", tmp_path / "b", {"b1": "Statins lower the incidence of ischaemic stroke in diabetic patients"},
              {"e1": "A study of sleep", "e2": "A chest film"}, {}, {"e2": pics[2]})  # fmt: skip
    c = _task("c", tmp_path / "c", {"c1": "an unrelated question about sleep"},
              {"val_0000": "val image", "test_0000": "test image", "test_0001": "another"}, {},
              {"val_0000": pics[3], "test_0000": pics[3].convert("RGB"), "test_0001": pics[1]})  # fmt: skip
    f = _task("f", tmp_path / "f", {"s1": "vitamin D supplementation prevents fractures in older adults!"},
              {"g1": "A resized chest film"}, {}, {"g1": _resized_jpeg(PICS[2])})  # fmt: skip
    texts = tmp_path / "train.txt"
    texts.write_text("statins lower the incidence of ischemic stroke in diabetic patients\nnothing alike\n")
    images = tmp_path / "train_images.txt"
    images.write_text(" ".join(ih.hash_image(_resized_jpeg(PICS[0])).hex()) + "\n")
    return {"a": a, "b": b, "c": c, "f": f}, [("images", str(images)), ("texts", str(texts))], {"c": "test", "f": "val"}


def _others(tasks: dict, name: str) -> list:
    return [t for n, t in sorted(tasks.items()) if n != name]


def test_adding_a_task_computes_only_its_pieces_and_every_audit_equals_one_computed_afresh(tmp_path, counted):
    tasks, manifests, splits = _board(tmp_path)
    layout = Layout(tmp_path / "data")
    five = {n: t for n, t in tasks.items() if n != "f"}
    for name, t in five.items():
        compose_audit(t, _others(five, name), manifests, splits=splits, piece_dir=layout.audit_piece_dir)

    counted["lsh"].clear(), counted["images"].clear()
    pairs_f, _, ledger = compose_audit(tasks["f"], _others(tasks, "f"), manifests, splits=splits, piece_dir=layout.audit_piece_dir)
    # f's pieces are new: computed, with one LSH index over every other task's texts and the texts manifest.
    assert sorted(ledger["computed"]) == sorted(["task:a", "task:b", "task:c", "task:f", f"texts:{manifests[1][1]}", f"images:{manifests[0][1]}"])
    assert ledger["reused"] == [] and ledger["swapped"] == []
    assert counted["lsh"] == [["task:a", "task:b", "task:c", f"texts:{manifests[1][1]}"]]
    # f's one image against itself, a's two, b's one, c's three, the manifest's one.
    assert sorted(counted["images"]) == [(1, 1), (1, 1), (1, 1), (1, 2), (1, 3)]

    counted["lsh"].clear(), counted["images"].clear()
    composed = {"f": pairs_f}
    for name in ("a", "b", "c"):
        pairs, info, ledger = compose_audit(tasks[name], _others(tasks, name), manifests, splits=splits, piece_dir=layout.audit_piece_dir)
        # A piece is stored under the task that computed it: b's against a is a's swapped, as it was before f came.
        assert ledger["swapped"] == {"a": ["task:f"], "b": ["task:a", "task:f"], "c": ["task:a", "task:b", "task:f"]}[name], name
        assert ledger["computed"] == [] and len(ledger["reused"]) + len(ledger["swapped"]) == 6, name
        composed[name] = pairs
    assert counted == {"lsh": [], "images": []}  # adding f compared nothing of a, b or c again

    for name, t in tasks.items():
        fresh, fresh_info = audit_task(t, _others(tasks, name), manifests, splits=splits)
        assert composed[name].equals(fresh), name
        _, info, _ = compose_audit(t, _others(tasks, name), manifests, splits=splits, piece_dir=layout.audit_piece_dir)
        assert {k: v for k, v in info.items() if k != "seconds"} == {k: v for k, v in fresh_info.items() if k != "seconds"}
    # The pairs are there, both ways round, with their splits (f's catalogue split is val, c's test).
    text_af = composed["a"].filter(pl.col("source") == "task:f").select("kind", "side", "id", "split", "other_id", "other_split", "jaccard").rows()
    assert text_af == [("text", "query", "q1", "test", "s1", None, 1.0)]
    assert composed["f"].filter(pl.col("source") == "task:a").select("id", "split", "other_id", "jaccard").rows() == [("s1", "val", "q1", 1.0)]
    image_bf = composed["b"].filter(pl.col("source") == "task:f").select("kind", "id", "split", "other_id", "other_split", "exact").rows()
    assert image_bf == [("image", "e2", "test", "g1", "val", False)]
    own_c = composed["c"].filter(pl.col("source") == "task:c").select("id", "split", "other_id", "other_split", "exact").rows()
    assert own_c == [("val_0000", "val", "test_0000", "test", True)]
    assert composed["a"].filter(pl.col("source").str.starts_with("images:"))["id"].to_list() == ["q2"]
    assert composed["b"].filter(pl.col("source").str.starts_with("texts:"))["other_id"].to_list() == ["line 1"]


def test_a_swapped_piece_equals_the_piece_computed_directly(tmp_path, counted):
    tasks, _, _ = _board(tmp_path)
    for x, y in (("f", "a"), ("f", "b"), ("a", "c")):
        theirs = _compute_pieces(tasks[x], [tasks[y]], [], False, 1_000)[f"task:{y}"]
        ours = _compute_pieces(tasks[y], [tasks[x]], [], False, 1_000)[f"task:{x}"]
        assert swap_piece(theirs, f"task:{x}").equals(ours), (x, y)
        assert swap_piece(ours, f"task:{y}").equals(theirs), (x, y)
    # Not vacuous: f against a holds a text pair, f against b an image pair, a against c an image pair (a's d2, c's test_0001).
    fa = _compute_pieces(tasks["f"], [tasks["a"]], [], False, 1_000)["task:a"]
    fb = _compute_pieces(tasks["f"], [tasks["b"]], [], False, 1_000)["task:b"]
    ac = _compute_pieces(tasks["a"], [tasks["c"]], [], False, 1_000)["task:c"]
    assert fa["kind"].to_list() == ["text"] and fb["kind"].to_list() == ["image"] and ac.select("id", "other_id").rows() == [("d2", "test_0001")]


def test_a_changed_task_rekeys_only_the_pieces_that_involve_it(tmp_path, counted):
    tasks, manifests, splits = _board(tmp_path)
    layout = Layout(tmp_path / "data")
    for name, t in tasks.items():
        compose_audit(t, _others(tasks, name), manifests, splits=splits, piece_dir=layout.audit_piece_dir)
    stored = {p.parent.name + "/" + p.name for p in (tmp_path / "data" / "audit_pieces").glob("*/*")}
    assert len(stored) == 4 * 3 + 6  # each task against the two manifests and itself; each two tasks once (one swaps the other's)

    b_queries = {
        "b1": "Statins lower the incidence of ischaemic stroke in diabetic patients",
        "b2": "Vitamin D supplementation prevents fractures in older adults",
    }
    b2 = _task("b", tmp_path / "b2", b_queries,
               {"e1": "A study of sleep", "e2": "A chest film"}, {}, {"e2": _resized_jpeg(PICS[2])})  # fmt: skip
    changed = {**tasks, "b": b2}
    counted["lsh"].clear(), counted["images"].clear()
    ledgers, composed = {}, {}
    for name in ("a", "b", "c", "f"):
        composed[name], _, ledgers[name] = compose_audit(changed[name], _others(changed, name), manifests, splits=splits, piece_dir=layout.audit_piece_dir)
    built = list(counted["lsh"])
    for name in ("a", "b", "c", "f"):
        assert composed[name].equals(audit_task(changed[name], _others(changed, name), manifests, splits=splits)[0]), name
    # a computes its piece against the new b; b takes it from a's, computes its own against c, f, the manifests and
    # itself (its content is new); c and f take theirs against b from b's.
    assert ledgers["a"] == {
        "reused": ["task:c", "task:f", f"images:{manifests[0][1]}", f"texts:{manifests[1][1]}", "task:a"],
        "swapped": [],
        "computed": ["task:b"],
    }
    assert ledgers["b"]["swapped"] == ["task:a"] and sorted(ledgers["b"]["computed"]) == sorted(
        ["task:c", "task:f", "task:b", *(f"{k}:{p}" for k, p in manifests)]
    )
    assert (ledgers["c"]["swapped"], ledgers["c"]["computed"]) == (["task:a", "task:b"], [])  # against f: its own, as stored before
    assert (ledgers["f"]["swapped"], ledgers["f"]["computed"]) == (["task:a", "task:b", "task:c"], [])
    # The LSH indexes built: a's against b alone, then b's against c, f and the manifest.
    assert built == [["task:b"], ["task:c", "task:f", f"texts:{manifests[1][1]}"]]
    now = {p.parent.name + "/" + p.name for p in (tmp_path / "data" / "audit_pieces").glob("*/*")}
    b_sources = audit_module._piece_sources(b2, _others(changed, "b"), manifests)
    b_new = [f"b/{piece_key(b2.content_hash(), label, digest)}" for label, digest in b_sources.items() if label != "task:a"]
    assert sorted(now - stored) == sorted([f"a/{piece_key(tasks['a'].content_hash(), 'task:b', b2.content_hash())}", *b_new])
    # The new b's piece against a holds its new query's pair with a's q1.
    assert ("b2", "q1") in audit_task(b2, [tasks["a"]], [])[0].select("id", "other_id").rows()


def test_a_task_without_images_stores_no_piece_against_itself(tmp_path, counted):
    """Its own piece compares nothing (texts are never compared within a task): computed for free, not stored, so a
    benchmark of one text task keeps one artifact folder for its audit (tests/release/test_versioning.py counts them)."""
    layout = Layout(tmp_path / "data")
    solo = _task("solo", tmp_path / "solo", {"s1": "Aspirin lowers the risk of a second heart attack"}, {"d1": "Unrelated"}, {}, {})
    pairs, _, ledger = compose_audit(solo, [], [], piece_dir=layout.audit_piece_dir)
    assert (pairs.height, ledger) == (0, {"reused": [], "swapped": [], "computed": ["task:solo"]})
    assert not (tmp_path / "data" / "audit_pieces").exists() and counted == {"lsh": [], "images": []}
    other = _task("other", tmp_path / "other", {"o1": "ASPIRIN lowers the risk of a second heart attack."}, {"e1": "x"}, {}, {})
    pairs, _, ledger = compose_audit(solo, [other], [], piece_dir=layout.audit_piece_dir)
    assert pairs.select("id", "source", "other_id").rows() == [("s1", "task:other", "o1")] and ledger["computed"] == ["task:other", "task:solo"]
    theirs, _, ledger = compose_audit(other, [solo], [], piece_dir=layout.audit_piece_dir)
    assert theirs.select("id", "source", "other_id").rows() == [("o1", "task:solo", "s1")] and ledger["swapped"] == ["task:solo"]
    assert [p.parent.name for p in (tmp_path / "data" / "audit_pieces").glob("*/*")] == ["solo"]  # solo's piece against other, once
