"""Readers of the non-BEIR datasets: counts and spot checks on the real shared data, and bad input.

Counts come from the data's own README and a direct reading of the source files (622 test
questions, 1,148 PneumoniaMNIST images, 10 MedICaT records, 2,248 VQA-RAD questions).
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from medbench_core.errors import DataError
from medbench_core.taskdata.images import load_image
from medbench_core.taskdata.readers import ReadContext
from medbench_core.taskdata.readers.common import normalise_text, text_concept_id
from medbench_core.taskdata.readers.frenchmedmcqa import FrenchMedMCQAOptions, mcqa_tier, read_frenchmedmcqa
from medbench_core.taskdata.readers.medicat import MedicatOptions, read_medicat
from medbench_core.taskdata.readers.pneumoniamnist import PneumoniaMNISTOptions, read_pneumoniamnist
from medbench_core.taskdata.readers.vqa_rad import VqaRadOptions, read_vqa_rad
from medbench_core.taskdata.task import check_referential_integrity

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
if not DATA.exists():
    DATA = Path("/work/shared/data")

MEDICAT_LICENCES = {
    # pdf_hash prefix -> licence as the article's oa_info.oa.license gives it, normalised
    "26491ab7": "unknown",
    "57c9ad0f": "CC-BY-NC-ND",
    "b362a19e": "unknown",
    "e19039cd": "CC-BY-NC-ND",
    "5f2d2f2f": "CC-BY-NC",
}


# --- FrenchMedMCQA ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mcqa():
    return read_frenchmedmcqa(DATA / "frenchmedmcqa", FrenchMedMCQAOptions(split="test"))


def test_frenchmedmcqa_counts(mcqa):
    assert mcqa.queries.height == 622
    assert mcqa.corpus.height == 622 * 5
    assert mcqa.candidates.height == 622 * 5
    assert mcqa.qrels.height == 622 * 5  # every option judged, correct 1 and the rest 0
    # 321 questions with one correct option, 97 with two, 141 three, 56 four, 7 five.
    assert mcqa.qrels["relevance"].sum() == 321 + 2 * 97 + 3 * 141 + 4 * 56 + 5 * 7
    assert dict(Counter(mcqa.queries["tier"].to_list())) == {"hard": 321, "medium": 97 + 141, "easy": 56 + 7}
    assert mcqa.corpus["doc_id"].n_unique() == 3110
    for df in (mcqa.queries, mcqa.corpus):
        assert set(df["language"]) == {"fr"}
        assert set(df["licence"]) == {"Apache-2.0"}
        assert set(df["modality"]) == {"text"}
        assert set(df["discipline"]) == {"pharmacie"}
    assert mcqa.meta.languages == ("fr",) and mcqa.meta.licences == ("Apache-2.0",)
    check_referential_integrity(mcqa)


def test_frenchmedmcqa_first_question(mcqa):
    qid = "5987fa6bffd499eb439c90679d7fbca822d62bc639d1b9c94c68ae20e46f6004"
    q = mcqa.queries.filter(pl.col("query_id") == qid).row(0, named=True)
    assert q["text"].endswith("le pH le plus élevé est mesuré dans:")
    assert q["tier"] == "hard"
    assert q["concept_ids"] == [text_concept_id("Le suc pancréatique")]
    rel = dict(mcqa.qrels.filter(pl.col("query_id") == qid).select("doc_id", "relevance").iter_rows())
    assert rel == {f"{qid}:a": 0, f"{qid}:b": 0, f"{qid}:c": 1, f"{qid}:d": 0, f"{qid}:e": 0}
    doc = mcqa.corpus.filter(pl.col("doc_id") == f"{qid}:d").row(0, named=True)
    assert doc["text"] == "La salive"
    assert doc["concept_ids"] == [text_concept_id("la salive")]


def test_frenchmedmcqa_each_question_has_exactly_its_own_five_options(mcqa):
    pools = mcqa.candidates.group_by("query_id").agg(pl.col("doc_id").sort())
    assert pools.height == 622
    for qid, docs in pools.iter_rows():
        assert docs == [f"{qid}:{c}" for c in "abcde"]


def test_concept_ids_ignore_case_punctuation_and_spacing_but_not_symbols():
    assert normalise_text("  Le suc\u00a0PANCRÉATIQUE. ") == "le suc pancréatique"
    assert text_concept_id("Le suc pancréatique") == text_concept_id("le  suc pancréatique !")
    assert text_concept_id("Le suc pancréatique") != text_concept_id("Le suc gastrique")
    assert text_concept_id("Na+") != text_concept_id("Na")
    assert text_concept_id("x").startswith("txt:") and len(text_concept_id("x")) == 4 + 16


def _random_ndcg(n_correct: int) -> float:
    """Expected nDCG@10 of a uniformly random order of 5 options with n_correct relevant."""
    ideal = sum(1 / math.log2(i + 2) for i in range(n_correct))
    vals = [sum(1 / math.log2(i + 2) for i, d in enumerate(p) if d < n_correct) / ideal for p in itertools.permutations(range(5))]
    return sum(vals) / len(vals)


def test_tier_rule_follows_chance_level_ndcg():
    assert [mcqa_tier(n) for n in (1, 2, 3, 4, 5)] == ["hard", "medium", "medium", "easy", "easy"]
    # The documented rationale: a random ranking's nDCG@10 rises with the number correct.
    assert round(_random_ndcg(1), 2) == 0.59
    assert (round(_random_ndcg(2), 2), round(_random_ndcg(3), 2)) == (0.72, 0.83)
    assert round(_random_ndcg(4), 2) == 0.92 and _random_ndcg(5) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        mcqa_tier(0)


def test_frenchmedmcqa_dev_split_and_research_flag():
    t = read_frenchmedmcqa(DATA / "frenchmedmcqa", FrenchMedMCQAOptions(split="dev", name="fmcqa_dev", research_only=True))
    assert (t.name, t.queries.height, t.corpus.height, t.meta.research_only) == ("fmcqa_dev", 312, 1560, True)


def _mcqa_record(**over):
    rec = {
        "id": "q1",
        "question": "Quelle est la bonne réponse ?",
        "answers": {c: f"option {c}" for c in "abcde"},
        "correct_answers": ["b"],
        "subject_name": "pharmacie",
        "nbr_correct_answers": 1,
    }
    rec.update(over)
    return rec


def test_frenchmedmcqa_bad_input(tmp_path):
    with pytest.raises(DataError, match="test.json: file not found"):
        read_frenchmedmcqa(tmp_path)
    (tmp_path / "test.json").write_text('[\n  {"id": "q1",\n   "question": oops}\n]\n')
    with pytest.raises(DataError, match=r"test\.json:3: malformed JSON"):
        read_frenchmedmcqa(tmp_path)
    (tmp_path / "test.json").write_text(json.dumps([_mcqa_record(), _mcqa_record(id="q2", question="  ")]))
    with pytest.raises(DataError, match=r"question 1 \(id q2\): record has no question text"):
        read_frenchmedmcqa(tmp_path)
    (tmp_path / "test.json").write_text(json.dumps([_mcqa_record(correct_answers=["f"])]))
    with pytest.raises(DataError, match=r"id q1.*correct_answers"):
        read_frenchmedmcqa(tmp_path)
    (tmp_path / "test.json").write_text(json.dumps([_mcqa_record(), _mcqa_record()]))
    with pytest.raises(DataError, match="id q1.*appears twice"):
        read_frenchmedmcqa(tmp_path)
    (tmp_path / "test.json").write_text(json.dumps([_mcqa_record(answers={"a": "x", "b": "y"})]))
    with pytest.raises(DataError, match="id q1.*answers"):
        read_frenchmedmcqa(tmp_path)


# --- PneumoniaMNIST --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pneumonia(tmp_path_factory):
    image_dir = tmp_path_factory.mktemp("pneumonia_images")
    return read_pneumoniamnist(DATA / "pneumoniamnist" / "pneumoniamnist_val_test.npz", PneumoniaMNISTOptions(), ReadContext(scratch=image_dir)), image_dir


def test_pneumoniamnist_counts_and_relevance(pneumonia):
    task, image_dir = pneumonia
    assert task.corpus.height == 1148 == 524 + 624
    assert task.queries["query_id"].to_list() == ["normal_0", "normal_1", "pneumonia_0", "pneumonia_1"]
    assert task.qrels.height == 4 * 1148  # every image judged for every prompt
    positives = dict(task.qrels.filter(pl.col("relevance") == 1).group_by("query_id").len().iter_rows())
    # val: 389 pneumonia of 524; test: 390 of 624.
    assert positives == {"pneumonia_0": 779, "pneumonia_1": 779, "normal_0": 369, "normal_1": 369}
    assert task.image_root == image_dir
    assert set(task.corpus["licence"]) | set(task.queries["licence"]) == {"CC-BY-4.0"}
    assert set(task.corpus["modality"]) == {"image"} and set(task.queries["modality"]) == {"text"}
    assert task.corpus["text"].null_count() == 1148
    d = task.corpus.filter(pl.col("doc_id") == "test_0623").row(0, named=True)
    assert d["image"] == "test_0623.png"
    label = int(np.load(DATA / "pneumoniamnist" / "pneumoniamnist_val_test.npz")["test_labels"][623, 0])
    assert d["concept_ids"] == [["finding:normal", "finding:pneumonia"][label]]
    judged = dict(task.qrels.filter(pl.col("doc_id") == "test_0623").select("query_id", "relevance").iter_rows())
    assert judged == {"normal_0": 1 - label, "normal_1": 1 - label, "pneumonia_0": label, "pneumonia_1": label}


def test_pneumoniamnist_png_holds_the_source_pixels(pneumonia):
    task, image_dir = pneumonia
    npz = np.load(DATA / "pneumoniamnist" / "pneumoniamnist_val_test.npz")
    assert len(list(image_dir.glob("*.png"))) == 1148
    for did, split, i in (("val_0000", "val", 0), ("test_0400", "test", 400)):
        with Image.open(task.resolve_image(f"{did}.png")) as im:
            assert im.mode == "L" and im.size == (28, 28)
            np.testing.assert_array_equal(np.asarray(im), npz[f"{split}_images"][i])
    rgb = load_image(task.resolve_image("val_0001.png"), "val_0001")
    assert rgb.mode == "RGB" and rgb.size == (28, 28)


def test_pneumoniamnist_rewrite_is_idempotent_and_repairs(pneumonia):
    task, image_dir = pneumonia
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in image_dir.glob("*.png")}
    damaged = image_dir / "val_0005.png"
    damaged.write_bytes(b"not a png")
    again = read_pneumoniamnist(DATA / "pneumoniamnist", PneumoniaMNISTOptions(), ReadContext(scratch=image_dir))  # the folder works as well as the file
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in image_dir.glob("*.png")}
    assert after["val_0005.png"][1] == before["val_0005.png"][1]  # repaired to the same bytes
    unchanged = [n for n in before if n != "val_0005.png" and after[n][0] == before[n][0]]
    assert len(unchanged) == 1147  # nothing else rewritten
    assert not [p for p in image_dir.iterdir() if p.name.startswith(".")]  # no temporary files left
    assert again.content_hash() == task.content_hash()


def test_pneumoniamnist_bad_input(tmp_path):
    with pytest.raises(DataError, match="missing.npz: file not found"):
        read_pneumoniamnist(tmp_path / "missing.npz", PneumoniaMNISTOptions(), ReadContext(scratch=tmp_path / "img"))
    np.savez(tmp_path / "a.npz", val_images=np.zeros((2, 28, 28), np.uint8), val_labels=np.array([[0], [1]], np.uint8))
    with pytest.raises(DataError, match=r"split 'test' needs arrays 'test_images' and 'test_labels'"):
        read_pneumoniamnist(tmp_path / "a.npz", PneumoniaMNISTOptions(), ReadContext(scratch=tmp_path / "img"))
    assert not (tmp_path / "img").exists()  # the good val split was not written either
    np.savez(tmp_path / "b.npz", val_images=np.zeros((2, 28, 28), np.uint8), val_labels=np.array([[0], [2]], np.uint8))
    with pytest.raises(DataError, match=r"val_labels\[1\] = 2"):
        read_pneumoniamnist(tmp_path / "b.npz", PneumoniaMNISTOptions(splits=("val",)), ReadContext(scratch=tmp_path / "img"))
    np.savez(tmp_path / "c.npz", val_images=np.zeros((2, 28, 28), np.uint8), val_labels=np.array([0], np.uint8))
    with pytest.raises(DataError, match="2 images but val_labels has 1 labels"):
        read_pneumoniamnist(tmp_path / "c.npz", PneumoniaMNISTOptions(splits=("val",)), ReadContext(scratch=tmp_path / "img"))
    np.savez(tmp_path / "d.npz", val_images=np.array([object()] * 2, dtype=object), val_labels=np.zeros(2, np.uint8))
    with pytest.raises(DataError, match="d.npz: not a readable .npz of plain arrays"):
        read_pneumoniamnist(tmp_path / "d.npz", PneumoniaMNISTOptions(splits=("val",)), ReadContext(scratch=tmp_path / "img"))
    with pytest.raises(DataError, match="unknown finding"):
        read_pneumoniamnist(DATA / "pneumoniamnist", PneumoniaMNISTOptions(prompts={"covid": ["x"]}), ReadContext(scratch=tmp_path / "img"))


def test_pneumoniamnist_custom_prompts(tmp_path):
    np.savez(tmp_path / "s.npz", val_images=np.arange(3 * 4 * 4, dtype=np.uint8).reshape(3, 4, 4), val_labels=np.array([[1], [0], [1]], np.uint8))
    t = read_pneumoniamnist(
        tmp_path / "s.npz", PneumoniaMNISTOptions(splits=("val",), prompts={"pneumonia": ["lobar pneumonia"]}), ReadContext(scratch=tmp_path / "img")
    )
    assert t.queries["query_id"].to_list() == ["pneumonia_0"]
    assert sorted(t.qrels.filter(pl.col("relevance") == 1)["doc_id"]) == ["val_0000", "val_0002"]


# --- MedICaT ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def medicat():
    return read_medicat(DATA / "medicat_sample", MedicatOptions(research_only=True))


def test_medicat_shape_and_licences(medicat):
    t = medicat
    assert t.queries.height == 20 and t.corpus.height == 20 and t.qrels.height == 20
    assert t.candidates.height == 2 * 10 * 10
    assert t.meta.research_only is True
    assert t.meta.licences == ("CC-BY-NC", "CC-BY-NC-ND", "unknown")
    per_record = {
        q.split(":", 1)[1][:8]: lic for q, lic in t.queries.filter(pl.col("query_id").str.starts_with("fig2cap:")).select("query_id", "licence").iter_rows()
    }
    assert per_record == MEDICAT_LICENCES
    counts = Counter(t.queries.filter(pl.col("query_id").str.starts_with("cap2fig:"))["licence"])
    assert counts == {"CC-BY-NC-ND": 6, "CC-BY-NC": 2, "unknown": 2}
    # Corpus records carry the same article licence as the queries made from them.
    lic_q = dict(t.queries.select(pl.col("query_id").str.split_exact(":", 1).struct.field("field_1"), "licence").unique().iter_rows())
    lic_d = dict(t.corpus.select(pl.col("doc_id").str.split_exact(":", 1).struct.field("field_1"), "licence").unique().iter_rows())
    assert lic_q == lic_d
    assert dict(Counter(t.queries["modality"])) == {"image": 10, "text": 10}
    assert dict(Counter(t.corpus["modality"])) == {"image": 10, "text": 10}


def test_medicat_pairs_and_candidates(medicat):
    t = medicat
    key = "57c9ad0f4aab133f96d40992c46926fabc901ffa/Figure1"
    rel = t.qrels.filter(pl.col("query_id") == f"fig2cap:{key}").select("doc_id", "relevance").rows()
    assert rel == [(f"caption:{key}", 1)]
    assert t.qrels.filter(pl.col("query_id") == f"cap2fig:{key}")["doc_id"].to_list() == [f"figure:{key}"]
    fig = t.corpus.filter(pl.col("doc_id") == f"figure:{key}").row(0, named=True)
    assert fig["image"] == "57c9ad0f4aab133f96d40992c46926fabc901ffa_2-Figure1-1.png" and fig["text"] is None
    cap = t.corpus.filter(pl.col("doc_id") == f"caption:{key}").row(0, named=True)
    assert cap["text"].startswith("Figure 1. (A) Barium enema") and cap["image"] is None
    assert cap["discipline"] == "medical imaging"  # radiology flag false for this record
    c = t.candidates.with_columns(pl.col("query_id").str.split(":").list.first().alias("dir"), pl.col("doc_id").str.split(":").list.first().alias("side"))
    assert set(c.select("dir", "side").unique().rows()) == {("fig2cap", "caption"), ("cap2fig", "figure")}
    assert c.group_by("query_id").len()["len"].to_list() == [10] * 20
    for ref in t.corpus["image"].drop_nulls():
        assert load_image(t.resolve_image(ref), ref).mode == "RGB"


def test_medicat_figure_context_makes_image_plus_text_queries():
    t = read_medicat(DATA / "medicat_sample", MedicatOptions(figure_context=True))
    figs = t.queries.filter(pl.col("query_id").str.starts_with("fig2cap:"))
    # 7 of the 10 figures are cited in their article's text (s2orc_references).
    assert dict(Counter(figs["modality"])) == {"both": 7, "image": 3}
    assert figs.filter(pl.col("modality") == "both")["text"].str.len_chars().min() > 20
    assert t.meta.research_only is False


def _medicat_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "medicat"
    shutil.copytree(DATA / "medicat_sample", dst)
    # The shared source is read-only, and so is its copy: make the copy editable.
    for d in (dst, dst / "figures"):
        d.chmod(0o755)
    for p in dst.rglob("*"):
        if p.is_file():
            p.chmod(0o644)
    return dst


def test_medicat_bad_input(tmp_path):
    src = _medicat_copy(tmp_path)
    lines = (src / "sample.jsonl").read_text().splitlines()
    with pytest.raises(DataError, match="sample.jsonl: file not found"):
        read_medicat(tmp_path / "nowhere")

    (src / "sample.jsonl").write_text("\n".join([lines[0], "{not json", *lines[2:]]) + "\n")
    with pytest.raises(DataError, match=r"sample\.jsonl:2: malformed JSON"):
        read_medicat(src)

    rec = json.loads(lines[1])
    rec["s2_caption"], rec["fig_uri"] = "", ""
    (src / "sample.jsonl").write_text("\n".join([lines[0], json.dumps(rec), *lines[2:]]) + "\n")
    with pytest.raises(DataError, match=r"sample\.jsonl:2: record 57c9ad0f\w+/Figure1: has neither a caption"):
        read_medicat(src)

    (src / "sample.jsonl").write_text("\n".join(lines) + "\n")
    (src / "figures" / "b362a19e4c4b1854f7cbe246a19502a56f52c2b5_3-Figure2-1.png").unlink()
    with pytest.raises(DataError, match=r"sample\.jsonl:6: record b362a19e\w+/Figure2: image .*file not found"):
        read_medicat(src)

    (src / "figures" / "b362a19e4c4b1854f7cbe246a19502a56f52c2b5_3-Figure2-1.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    with pytest.raises(DataError, match=r"record b362a19e\w+/Figure2: image .*(unreadable|not an image)"):
        read_medicat(src)

    rec = json.loads(lines[0])
    rec["fig_uri"] = "../../etc/passwd"
    (src / "sample.jsonl").write_text(json.dumps(rec) + "\n")
    with pytest.raises(DataError, match=r"sample\.jsonl:1: record 26491ab7\w+/Figure4: image .* contains '\.\.'"):
        read_medicat(src)


# --- VQA-RAD ---------------------------------------------------------------------------------


def test_vqa_rad_test_split():
    t = read_vqa_rad(DATA / "vqa_rad", VqaRadOptions(split="test"))
    raw = json.loads((DATA / "vqa_rad" / "vqa_rad.json").read_text())
    assert len(raw) == 2248
    assert t.queries.height == 308 + 143  # test_freeform + test_para
    assert t.corpus.height == 315
    assert t.qrels.height == 451 and set(t.qrels["relevance"]) == {1}
    assert set(t.queries["discipline"]) == {"chest", "abdomen", "head"}
    assert set(t.queries["licence"]) | set(t.corpus["licence"]) == {"CC0-1.0"}
    # The one image no question asks about is still a (distractor) document.
    orphan = t.corpus.filter(pl.col("doc_id") == "synpic35356").row(0, named=True)
    assert orphan["discipline"] == "unknown" and orphan["image"] == "synpic35356.jpg"
    first = raw[0]
    assert first["phrase_type"] == "freeform" and f"q{first['qid']}" not in set(t.queries["query_id"])
    q = next(r for r in raw if r["phrase_type"] == "test_freeform")
    row = t.queries.filter(pl.col("query_id") == f"q{q['qid']}").row(0, named=True)
    assert row["text"] == q["question"].strip()
    assert t.qrels.filter(pl.col("query_id") == f"q{q['qid']}")["doc_id"].to_list() == [Path(q["image_name"]).stem]
    with pytest.raises(DataError, match="split 'val' unknown"):
        read_vqa_rad(DATA / "vqa_rad", VqaRadOptions(split="val"))


# --- images ----------------------------------------------------------------------------------


def test_load_image_converts_modes(tmp_path):
    Image.fromarray(np.array([[0, 77], [200, 255]], dtype=np.uint8)).save(tmp_path / "g.png")
    rgb = load_image(tmp_path / "g.png", "g")
    assert rgb.mode == "RGB" and np.asarray(rgb)[0, 1].tolist() == [77, 77, 77]
    # 16-bit grey is rescaled from its own min..max (PIL alone would clip 4000 to 255).
    Image.fromarray(np.array([[0, 1000], [2000, 4000]], dtype=np.uint16)).save(tmp_path / "d.png")
    assert np.asarray(load_image(tmp_path / "d.png", "d"))[..., 0].tolist() == [[0, 64], [128, 255]]
    Image.new("RGBA", (3, 2), (10, 20, 30, 0)).save(tmp_path / "a.png")
    assert load_image(tmp_path / "a.png", "a").getpixel((0, 0)) == (10, 20, 30)
    Image.new("CMYK", (2, 2), (0, 0, 0, 0)).save(tmp_path / "c.jpg")
    assert load_image(tmp_path / "c.jpg", "c").mode == "RGB"


def test_load_image_refuses_bad_files_naming_record_and_path(tmp_path):
    from medbench_core.taskdata.images import _to_rgb

    with pytest.raises(DataError, match=r"record r1: image .*missing\.png: file not found"):
        load_image(tmp_path / "missing.png", "r1")
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(DataError, match=r"record r2: image .*empty\.png: file is empty"):
        load_image(tmp_path / "empty.png", "r2")
    (tmp_path / "text.png").write_text("hello")
    with pytest.raises(DataError, match=r"record r3: image .*text\.png: not an image format"):
        load_image(tmp_path / "text.png", "r3")
    real = (DATA / "medicat_sample" / "figures" / "26491ab76c6e8d6acc582e71bb6b3b5f5601ccc2_3-Figure4-1.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(real[: len(real) // 2])
    with pytest.raises(DataError, match=r"record r4: image .*cut\.png: unreadable image"):
        load_image(tmp_path / "cut.png", "r4")
    # A PNG header declaring a zero width.
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    zero = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 0, 5, 8, 0, 0, 0, 0)) + chunk(b"IEND", b"")
    (tmp_path / "zero.png").write_bytes(zero)
    with pytest.raises(DataError, match=r"record r5: image .*zero\.png"):
        load_image(tmp_path / "zero.png", "r5")
    Image.fromarray(np.array([[0.0, np.nan]], dtype=np.float32)).save(tmp_path / "nan.tif")
    with pytest.raises(DataError, match=r"record r6: image .*nan\.tif: mode F image holds NaN"):
        load_image(tmp_path / "nan.tif", "r6")
    Image.new("L", (28, 28)).save(tmp_path / "big.png")
    with pytest.raises(DataError, match=r"record r7: .*28x28 pixels exceeds the limit of 100"):
        load_image(tmp_path / "big.png", "r7", max_pixels=100)
    with pytest.raises(DataError, match=r"where: cannot convert mode La to RGB"):
        _to_rgb(Image.new("La", (2, 2)), "where")
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(DataError, match="not a regular file"):
        load_image(tmp_path / "dir.png", "r8")
