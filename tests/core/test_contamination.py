"""The contamination audit (issue 49): declared training data, task identity, near-duplicate texts
(MinHash LSH) and images (pHash + dHash), each cell's mark and its decontaminated score.

The signatures and hashes are checked against datasketch and imagehash called directly; the marks
and scores against values worked out by hand on a task of five queries whose per-query nDCG@10 is
set, before and after near-duplicates (a reworded query, a resized and recompressed image) are put
into a training manifest and into a second task.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from medbench_core.errors import DataError
from medbench_core.evaluation.contamination import texts as tx
from medbench_core.evaluation.contamination.audit import audit_key, audit_task, store_audit
from medbench_core.evaluation.contamination.board import audit_inputs, contamination_marks
from medbench_core.evaluation.contamination.cells import TRAINED, UNKNOWN, ZERO_SHOT
from medbench_core.evaluation.contamination.declared import Declared, declarations, mteb_training_datasets
from medbench_core.evaluation.reports import Cell, Significance, build_tables, write_leaderboard
from medbench_core.layout import Layout
from medbench_core.retrieval.model_registry import load_registry
from medbench_core.taskdata import image_hashes as ih
from medbench_core.taskdata.catalog import TaskEntry
from medbench_core.taskdata.task import TaskMeta, make_task
from medbench_core.taskdata.task_identity import task_identity

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT.parent / "shared" / "data" / "vqa_rad" / "images"
PICS = sorted(IMAGES.glob("*.jpg"))[:4]


def shingle_hash(shingle: str | bytes) -> int:
    """The 32-bit hash of one shingle as texts.signatures computes it for a whole batch: its code points as digits
    in base texts._BASE, modulo 2**32 (the one-shingle reference form, handed to datasketch below)."""
    if isinstance(shingle, bytes):
        shingle = shingle.decode("utf-8")
    h = 0
    for ch in shingle:
        h = (h * int(tx._BASE) + ord(ch)) & 0xFFFFFFFF
    return h


def test_signatures_equal_datasketch_minhash_of_the_same_shingles():
    from datasketch import MinHash

    texts = [tx.normalise(t) for t in ("Does aspirin reduce the risk of colorectal cancer?", "ab", "", "肺炎の胸部X線画像", "x y " * 900)]
    sigs = tx.signatures(texts)
    for text, sig in zip(texts, sigs):
        m = MinHash(num_perm=tx.NUM_PERM, hashfunc=shingle_hash)
        m.update_batch(tx.shingles(text))
        assert np.array_equal(m.hashvalues, sig), text[:20]
    # Texts that span several blocks of shingles, and one longer than a block, as a batch: each signature as datasketch's.
    rng = np.random.default_rng(0)
    words = ("lung", "opacity", "pneumonia", "x", "ray", "fever", "cough", "antibiotic")
    many = [" ".join(rng.choice(words, int(n))) for n in rng.integers(1, 400, 60)] + ["nodule " * 3000, "a"]
    for text, sig in zip(many, tx.signatures(many)):
        m = MinHash(num_perm=tx.NUM_PERM, hashfunc=shingle_hash)
        m.update_batch(tx.shingles(text))
        assert np.array_equal(m.hashvalues, sig), text[:20]
    assert sum(len(tx.shingles(t)) for t in many) > 3 * tx._BATCH_SHINGLES and len(tx.shingles(many[-2])) > tx._BATCH_SHINGLES
    # Dropping one short word from a nine-word query keeps 39 of its 47 shingles: Jaccard 39/47 >= 0.7.
    assert tx.jaccard(texts[0], tx.normalise("does aspirin reduce risk of colorectal cancer")) == pytest.approx(39 / 47)


def test_image_hashes_equal_imagehash_and_survive_resizing_and_recompression():
    import imagehash

    img = Image.open(PICS[0])
    got = ih.hash_image(img)
    assert f"{got.phash:016x}" == str(imagehash.phash(img)) and f"{got.dhash:016x}" == str(imagehash.dhash(img))
    copy = _resized_jpeg(PICS[0])
    other = ih.hash_image(copy)
    assert other.pixels != got.pixels  # not the same pixels: only the perceptual hashes can see it
    ((_, _, dp, dd, exact),) = ih.close_pairs([got], [other])
    assert dp <= ih.PHASH_MAX and dd <= ih.DHASH_MAX and not exact
    assert ih.close_pairs([got], [ih.hash_image(Image.open(PICS[1]))]) == []


def test_training_data_errors_name_the_file_and_line(tmp_path):
    models = tmp_path / "models.yaml"
    models.write_text("models:\n  - name: a\n    kind: bm25\n    training_data:\n      - MSMARCO\n      - {textz: x.txt}\n")
    with pytest.raises(DataError, match=r"models.yaml:6: model 'a': training_data\[1\]: unknown kind 'textz' \(did you mean 'texts'\?\)"):
        load_registry(models)
    models.write_text("models:\n  - name: a\n    kind: bm25\n    training_data:\n      - {texts: missing.txt}\n")
    with pytest.raises(DataError, match=r"models.yaml:5: .*texts manifest missing.txt not found"):
        load_registry(models)
    models.write_text("models:\n  - name: a\n    kind: bm25\n    training_data: MSMARCO\n")
    with pytest.raises(DataError, match=r"models.yaml:4: model 'a': training_data must be a list"):
        load_registry(models)


def test_all_minilm_declares_what_mteb_lists_read_offline():
    import mteb

    meta = mteb.get_model_meta("sentence-transformers/all-MiniLM-L6-v2", fetch_from_hf=False)
    assert {"MSMARCO", "NQ"} <= meta.training_datasets and len(meta.training_datasets) == 10
    specs = load_registry(ROOT / "models.yaml")
    d = declarations(specs)
    assert set(d["all-MiniLM-L6-v2"].names) == set(mteb_training_datasets("sentence-transformers/all-MiniLM-L6-v2")) >= meta.training_datasets
    assert d["bm25"].known and not d["bm25"].names
    # The fusion has no weights of its own: it is what its two upstreams declare.
    assert d["bm25-minilm-rrf"].known and set(d["bm25-minilm-rrf"].names) == set(d["all-MiniLM-L6-v2"].names)
    # The export's model_meta.json carries them as MTEB's training_datasets (None: declares nothing).
    from medbench_core.evaluation.exports import mteb_models

    metas = mteb_models(specs)
    assert metas["all-MiniLM-L6-v2"]["training_datasets"] == sorted(d["all-MiniLM-L6-v2"].names) and metas["bm25"]["training_datasets"] == []


def test_declarations_look_up_only_the_models_asked_about_and_their_upstreams(tmp_path):
    """The leaderboard asks about the models with a cell alone: a registered model without one is never looked up in mteb
    (``import mteb`` was several CPU seconds of a cold run of bm25 alone, issue 52). Asked about everything, it is as before."""
    (tmp_path / "models.yaml").write_text(
        "models:\n"
        "  - {name: lex, kind: bm25, training_data: []}\n"
        "  - {name: known, kind: bm25, training_data: [{mteb: org/known}]}\n"
        "  - {name: other, kind: bm25, training_data: [{mteb: org/other}]}\n"
        "  - {name: fused, kind: fusion, fusion: {method: rrf, runs: [lex, known]}}\n"
    )
    specs = load_registry(tmp_path / "models.yaml")
    asked: list[str] = []

    def lookup(name: str) -> tuple[str, ...]:
        asked.append(name)
        return {"org/known": ("SetA",), "org/other": ("SetB",)}[name]

    assert declarations(specs, lookup, only=["lex", "unregistered"]) == {"lex": Declared("lex")} and asked == []
    fused = declarations(specs, lookup, only=["fused"])
    assert asked == ["org/known"] and sorted(fused) == ["fused", "known", "lex"]
    assert fused["fused"].names == {"SetA": "known: mteb org/known"} and fused["known"] == declarations(specs, lookup)["known"]
    asked.clear()
    every = declarations(specs, lookup)
    assert asked == ["org/known", "org/other"] and sorted(every) == ["fused", "known", "lex", "other"]
    assert every["other"].names == {"SetB": "other: mteb org/other"} and every["fused"] == fused["fused"]


# --- the audit, by hand -------------------------------------------------------------------

QUERIES = {
    "q1": "Vitamin D supplementation prevents fractures in older adults",
    "q2": "Statins lower the incidence of ischaemic stroke in diabetic patients",
    "q3": "Metformin is associated with reduced cancer mortality",
    "q4": "Antibiotic prophylaxis reduces infection after caesarean section",
    "q5": "What organ is shown in this radiograph",
}
NDCG = {"q1": 0.9, "q2": 0.6, "q3": 0.0, "q4": 1.0, "q5": 1.0}  # mean 0.7


def _resized_jpeg(path: Path) -> Image.Image:
    im = Image.open(path).convert("RGB")
    im = im.resize((im.width * 2 // 3, im.height * 2 // 3))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=60)
    return Image.open(io.BytesIO(buf.getvalue()))


def _task(name: str, folder: Path, queries: dict[str, str], docs: dict[str, str], query_images: dict[str, Image.Image], doc_images: dict[str, Image.Image]):
    root = folder / "images"
    root.mkdir(parents=True, exist_ok=True)
    for rid, im in {**query_images, **doc_images}.items():
        im.convert("RGB").save(root / f"{rid}.png")
    meta = TaskMeta(name=name, source="hand-made", licences=("CC0-1.0",), query_modality="both", doc_modality="both")
    q = pl.DataFrame({"query_id": list(queries), "text": list(queries.values()), "image": [f"{k}.png" if k in query_images else None for k in queries],
                      "licence": ["CC0-1.0"] * len(queries), "modality": ["text"] * len(queries)})  # fmt: skip
    c = pl.DataFrame({"doc_id": list(docs), "text": list(docs.values()), "image": [f"{k}.png" if k in doc_images else None for k in docs],
                      "licence": ["CC0-1.0"] * len(docs), "modality": ["text"] * len(docs)})  # fmt: skip
    qrels = pl.DataFrame({"query_id": list(queries), "doc_id": [list(docs)[0]] * len(queries), "relevance": [1] * len(queries)})
    return make_task(meta, q, c, qrels, image_root=root)


def _models(tmp_path: Path, texts: list[str], images: list[str]) -> list:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "train_texts.txt").write_text("".join(t + "\n" for t in texts))
    (tmp_path / "train_images.txt").write_text("".join(i + "\n" for i in images))
    (tmp_path / "models.yaml").write_text(
        "models:\n"
        "  - {name: m0, kind: bm25, training_data: []}\n"
        "  - {name: m1, kind: bm25, training_data: [{texts: train_texts.txt}, {images: train_images.txt}]}\n"
        "  - {name: m2, kind: bm25, training_data: [OtherSet]}\n"
        "  - {name: m3, kind: bm25}\n"
        "  - {name: f03, kind: fusion, fusion: {method: rrf, runs: [m0, m3]}}\n"
        "  - {name: f01, kind: fusion, fusion: {method: rrf, runs: [m0, m1]}}\n"
    )
    return load_registry(tmp_path / "models.yaml")


def _marks(tmp_path: Path, specs: list, task_a, task_b) -> dict:
    idents = ((task_a, {"beir": ("a-set",)}), (task_b, {"dataset": ("OtherSet",)}))
    entries = [TaskEntry(t.name, "beir", t.name, identity=task_identity(t.name, ident, {})) for t, ident in idents]
    tasks = {task_a.name: task_a, task_b.name: task_b}
    layout = Layout(tmp_path / "data")
    for t in tasks.values():
        others, manifests = audit_inputs(t, tasks, specs)
        pairs, info = audit_task(t, others, manifests)
        store_audit(layout.audit_dir(t.name, audit_key(t, others, manifests)), pairs, info, t, others, {})
    pq = pl.DataFrame({"query_id": list(NDCG), "ndcg_at_10": list(NDCG.values())})
    cells = [Cell(s.name, "a", {"mean": {"ndcg_at_10": 0.7}}, per_query=pq) for s in specs]
    cells += [Cell(s.name, "b", {"mean": {"ndcg_at_10": 0.5}}, per_query=pl.DataFrame({"query_id": ["b1"], "ndcg_at_10": [0.5]})) for s in specs]
    return contamination_marks(layout, specs, entries, tasks, cells, n_resamples=1000, seed=0), cells


def test_near_duplicates_in_a_manifest_and_a_second_task_change_the_marks_and_the_decontaminated_score(tmp_path):
    pics = {f"p{i}": Image.open(p) for i, p in enumerate(PICS)}
    task_a = _task("a", tmp_path / "a", QUERIES, {"d1": "Fracture prevention trial", "d2": "Stroke outcomes in diabetes", "d3": "An abdominal CT"},
                   {"q5": pics["p0"]}, {"d3": pics["p1"]})  # fmt: skip
    clean_b = _task("b", tmp_path / "b", {"b1": "Sleep duration and memory consolidation"}, {"e1": "A study of sleep", "e2": "A scan"}, {}, {"e2": pics["p2"]})
    before = _models(tmp_path / "before", ["Exercise improves mood in adolescents"], [" ".join(ih.hash_image(pics["p3"]).hex())])
    marks, _ = _marks(tmp_path / "before", before, task_a, clean_b)
    assert {m: marks[(m, "a")]["mark"] for m in ("m0", "m1", "m2", "m3", "f03", "f01")} == {
        "m0": ZERO_SHOT, "m1": ZERO_SHOT, "m2": ZERO_SHOT, "m3": UNKNOWN, "f03": UNKNOWN, "f01": ZERO_SHOT,
    }  # fmt: skip
    assert marks[("m2", "b")]["mark"] == TRAINED and "declares OtherSet" in marks[("m2", "b")]["evidence"]
    assert all(marks[(m, "a")]["share"] == 0.0 and marks[(m, "a")]["decontaminated"] == pytest.approx(0.7) for m in ("m0", "m1", "m2", "m3"))

    # Inserted: q4 lower-cased with "a" added before "caesarean" in the texts manifest;
    # q5's image resized to 2/3 and recompressed as JPEG (quality 60) in the images manifest, by hash;
    # q2 with "ischaemic" spelt "ischemic" and d3's image resized and recompressed in the second task.
    after = _models(
        tmp_path / "after",
        ["Exercise improves mood in adolescents", "antibiotic prophylaxis reduces infection after a caesarean section"],
        [" ".join(ih.hash_image(_resized_jpeg(PICS[0])).hex())],
    )
    b_queries = {"b1": "Sleep duration and memory consolidation", "b2": "Statins lower the incidence of ischemic stroke in diabetic patients"}
    dirty_b = _task("b", tmp_path / "b2", b_queries,
                    {"e1": "A study of sleep", "e2": "A scan"}, {}, {"e2": _resized_jpeg(PICS[1])})  # fmt: skip
    marks, cells = _marks(tmp_path / "after", after, task_a, dirty_b)
    # m1: q4 (text) and q5 (image) near-duplicated in its manifests: share 2/5, clean = mean(0.9, 0.6, 0.0) = 0.5.
    m1 = marks[("m1", "a")]
    assert (m1["mark"], m1["contaminated_queries"], m1["share"], m1["n_clean"], m1["decontaminated"]) == (TRAINED, 2, 0.4, 3, 0.5)
    assert "texts:" in m1["evidence"] and "images:" in m1["evidence"]
    # m2 declares OtherSet, which is task b: q2 reworded there, and d3's image: share 1/5, clean = (0.9 + 0.0 + 1.0 + 1.0) / 4 = 0.725.
    m2 = marks[("m2", "a")]
    assert (m2["mark"], m2["contaminated_queries"], m2["share"], m2["decontaminated"], m2["contaminated_docs"]) == (TRAINED, 1, 0.2, 0.725, 1)
    lo, hi = m2["decontaminated_ci"]
    assert lo <= 0.725 <= hi
    # Declaring nothing stays unknown; declaring nothing relevant stays zero-shot; a fusion inherits its upstreams'.
    assert (marks[("m3", "a")]["mark"], marks[("m0", "a")]["mark"], marks[("f03", "a")]["mark"]) == (UNKNOWN, ZERO_SHOT, UNKNOWN)
    assert (marks[("f01", "a")]["mark"], marks[("f01", "a")]["decontaminated"]) == (TRAINED, 0.5)

    # The leaderboard: zero-shot share beside the average, the marks in its JSON and CSV.
    tables = build_tables(cells, [s.name for s in after], ["a", "b"], Significance("m0", n_resamples=1000), contamination=marks)
    written = write_leaderboard(tables, tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "leaderboard.json").read_text())
    assert doc["contamination"]["cells"]["m1/a"]["mark"] == TRAINED
    # m0: a and b zero-shot; m2: trained on both (b by name, a by evidence); m3: unknown.
    assert doc["contamination"]["zero_shot"] == {"m0": 100, "m1": 50, "m2": 0, "m3": None, "f03": None, "f01": 50}
    csv = pl.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert csv.filter(pl.col("model") == "m1")["decontaminated.a"].item() == 0.5
    assert "| m1 | 0.6000 | 50% | trained-on-task: 40.0% near-dup, clean 0.5000" in written["markdown"]


def test_identical_pixels_across_splits_are_exact_and_near_images_carry_their_distances(tmp_path):
    pics = {f"val_{i:04d}": Image.open(p) for i, p in enumerate(PICS[:2])}
    pics["test_0000"] = Image.open(PICS[0]).convert("RGB")  # same pixels as val_0000, another file
    pics["test_0001"] = _resized_jpeg(PICS[1])
    task = _task("pn", tmp_path / "pn", {"q": "a chest X-ray"}, {k: k for k in pics}, {}, pics)
    pairs, info = audit_task(task, [], [], splits={"pn": "test"})
    rows = pairs.filter(pl.col("kind") == "image").select("id", "split", "other_id", "other_split", "exact").rows()
    assert rows == [("val_0000", "val", "test_0000", "test", True), ("val_0001", "val", "test_0001", "test", False)]
    assert info["n_images"] == 4


def test_the_overlap_gate_refuses_the_same_pixels_in_two_test_splits_when_asked(tmp_path):
    from medbench_core.taskdata.contracts import validate_tasks

    a = _task("a", tmp_path / "a", {"q": "a chest X-ray"}, {"d1": "x"}, {}, {"d1": Image.open(PICS[0])})
    # The same pixels written as another PNG (different bytes: the sha256 check of files cannot see it) in another task.
    b = _task("b", tmp_path / "b", {"q2": "an abdominal CT scan"}, {"e1": "y"}, {}, {"e1": Image.open(PICS[0])})
    Image.open(PICS[0]).convert("RGB").save(tmp_path / "b" / "images" / "e1.png", compress_level=1)
    assert (tmp_path / "a" / "images" / "d1.png").read_bytes() != (tmp_path / "b" / "images" / "e1.png").read_bytes()
    refused = validate_tasks([a, b], tmp_path / "refuse", test_image_duplicates="refuse")
    assert not refused.passed and "no image (its decoded pixels) in two test splits" in refused.message
    marked = validate_tasks([a, b], tmp_path / "mark", test_image_duplicates="mark")
    assert marked.passed
    assert validate_tasks([a, b], tmp_path / "ignore").passed


def test_the_audit_key_moves_with_its_inputs_only(tmp_path):
    from medbench_core.evaluation.contamination.audit import read_text_manifest

    a = _task("a", tmp_path / "a", {"q1": QUERIES["q1"]}, {"d1": "x"}, {}, {})
    b = _task("b", tmp_path / "b", {"b1": "another question"}, {"e1": "y"}, {}, {})
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"text": "one"}\n')
    key = audit_key(a, [b], [("texts", str(manifest))])
    assert audit_key(a, [b], [("texts", str(manifest))]) == key  # the same inputs: the stored audit is reused
    b2 = _task("b", tmp_path / "b2", {"b1": "another question, changed"}, {"e1": "y"}, {}, {})
    assert audit_key(a, [b2], [("texts", str(manifest))]) != key  # another task's content
    manifest.write_text('{"text": "two"}\n')
    assert audit_key(a, [b], [("texts", str(manifest))]) != key  # the manifest's bytes
    manifest.write_text('{"text": "one"}\n{"txt": "two"}\n')
    with pytest.raises(DataError, match=r"m.jsonl:2: no string 'text' field"):
        read_text_manifest(str(manifest))


def test_medbench_runs_up_to_date_key_reads_every_declared_manifests_bytes(tmp_path):
    # models.yaml unchanged, a manifest edited: `medbench run` must not answer "nothing changed" (its audits would be stale).
    from medbench_cli.uptodate import training_manifests
    from medbench_core.provenance import file_hash

    specs = _models(tmp_path, ["one text"], [])
    texts, images = (str((tmp_path / n).resolve()) for n in ("train_texts.txt", "train_images.txt"))
    before = training_manifests(specs)
    assert before == {f"texts:{texts}": file_hash(texts), f"images:{images}": file_hash(images)}
    (tmp_path / "train_texts.txt").write_text("one text\nanother text\n")
    after = training_manifests(specs)
    assert after[f"texts:{texts}"] != before[f"texts:{texts}"] and after[f"images:{images}"] == before[f"images:{images}"]
    assert training_manifests([s for s in specs if s.name != "m1"]) == {}  # no manifest declared: nothing enters the key
