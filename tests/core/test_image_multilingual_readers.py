"""M3Retrieve-style image folders and MMed-Bench-IR-style multilingual folders: records, images,
languages, and the per-language metrics and cross-lingual gap they lead to."""

from __future__ import annotations

import io
import json

import numpy as np
import polars as pl
import pytest
import pytrec_eval
from hf_layouts import write_jsonl
from PIL import Image

from medbench_core.errors import DataError
from medbench_core.evaluation.scoring import score
from medbench_core.taskdata.catalog import build_task, load_catalog
from medbench_core.taskdata.contracts import validate_task
from medbench_core.taskdata.readers import ReadContext
from medbench_core.taskdata.readers.m3retrieve import M3RetrieveOptions, read_m3retrieve
from medbench_core.taskdata.readers.multilingual import MultilingualOptions, read_multilingual


def png(seed: int) -> bytes:
    arr = (np.random.default_rng(seed).random((8, 8, 3)) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def write_m3_folder(folder):
    """A discipline folder: image+text queries, an image-only query, passages and an image document."""
    (folder / "images").mkdir(parents=True)
    for i in range(4):
        (folder / "images" / f"x{i}.png").write_bytes(png(i))
    write_jsonl(
        folder / "queries.jsonl",
        [
            {"_id": "q1", "txt": "Which finding does this chest film show?", "img": "images/x0.png"},
            {"_id": "q2", "text": "", "image_path": "images/x1.png"},
            {"_id": "q3", "text": "pleural effusion treatment"},
        ],
    )
    write_jsonl(
        folder / "corpus.jsonl",
        [
            {"_id": "p1", "text": "A right lower lobe consolidation indicates pneumonia."},
            {"_id": "p2", "text": "Large pleural effusions are drained by thoracentesis."},
            {"_id": "p3", "text": "", "image": "images/x2.png"},
            {"_id": "p4", "text": "Cardiomegaly on a chest film", "img_path": "images/x3.png"},
        ],
    )
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tp1\t1\nq2\tp3\t1\nq3\tp2\t1\n")
    return folder


def test_m3retrieve_folder_records_images_and_modalities(tmp_path):
    task = read_m3retrieve(write_m3_folder(tmp_path / "m3" / "Thorax"), M3RetrieveOptions(name="m3_thorax", subset=""), ReadContext(scratch=tmp_path / "s"))
    q = {r["query_id"]: r for r in task.queries.iter_rows(named=True)}
    assert (q["q1"]["text"], q["q1"]["image"], q["q1"]["modality"]) == ("Which finding does this chest film show?", "images/x0.png", "both")
    assert (q["q2"]["text"], q["q2"]["image"], q["q2"]["modality"]) == ("", "images/x1.png", "image")
    assert (q["q3"]["image"], q["q3"]["modality"]) == (None, "text")
    d = {r["doc_id"]: r["modality"] for r in task.corpus.iter_rows(named=True)}
    assert d == {"p1": "text", "p2": "text", "p3": "image", "p4": "both"}
    assert task.meta.query_modality == "both,image,text" and task.meta.doc_modality == "both,image,text"
    assert task.resolve_image("images/x2.png").read_bytes() == png(2) and task.image_root == tmp_path / "s"
    # Its discipline is the subset's (one task per discipline folder through the catalogue).
    cat = tmp_path / "tasks.yaml"
    cat.write_text("tasks:\n  - {name: m3, reader: m3retrieve, path: m3, research_only: true, subsets: [Thorax]}\n")
    built = build_task(load_catalog(cat).task("m3_thorax"), tmp_path, tmp_path / "work")
    assert set(built.queries["discipline"]) == {"Thorax"} and built.meta.subset == "Thorax"
    # The GX contract sees readable images inside the task's folder, and unknown licences (research-only).
    verdict = validate_task(built)
    assert verdict.passed, verdict.message
    assert verdict.licences == {"unknown": 7}


def test_m3retrieve_parquet_image_bytes_are_written_to_the_scratch_folder(tmp_path):
    folder = tmp_path / "m3"
    (folder / "corpus").mkdir(parents=True)
    (folder / "queries").mkdir()
    (folder / "qrels").mkdir()
    pl.DataFrame({"id": ["p1", "p2"], "text": ["", "pneumonia"], "image": [{"bytes": png(5), "path": "a.png"}, None]}).write_parquet(
        folder / "corpus" / "test.parquet"
    )
    pl.DataFrame({"id": ["q1"], "text": ["consolidation"]}).write_parquet(folder / "queries" / "test.parquet")
    pl.DataFrame({"query-id": ["q1", "q1"], "corpus-id": ["p1", "p2"], "score": [1, 0]}).write_parquet(folder / "qrels" / "test.parquet")
    task = read_m3retrieve(folder, M3RetrieveOptions(name="m3"), ReadContext(scratch=tmp_path / "scratch"))
    ref = task.corpus.filter(pl.col("doc_id") == "p1")["image"].item()
    assert ref.startswith("corpus/p1-") and ref.endswith(".png")
    assert task.resolve_image(ref).read_bytes() == png(5) and task.image_root == tmp_path / "scratch"


def test_m3retrieve_errors_name_file_line_and_record(tmp_path):
    folder = write_m3_folder(tmp_path / "m3")
    (folder / "images" / "x2.png").unlink()
    context = ReadContext(scratch=tmp_path / "s")
    with pytest.raises(DataError, match=rf"^{folder / 'corpus.jsonl'}:3: record p3: image 'images/x2.png' not found: looked in {folder}$"):
        read_m3retrieve(folder, M3RetrieveOptions(name="m3"), context)
    write_jsonl(folder / "corpus.jsonl", [{"_id": "p1", "text": "", "image": "../outside.png"}])
    with pytest.raises(DataError, match=r"corpus.jsonl:1: record p1: image '../outside.png' contains '..'"):
        read_m3retrieve(folder, M3RetrieveOptions(name="m3"), context)
    write_jsonl(folder / "corpus.jsonl", [{"_id": "p1", "text": ""}])
    with pytest.raises(DataError, match=r"corpus.jsonl:1: corpus record p1 has no text and no image$"):
        read_m3retrieve(folder, M3RetrieveOptions(name="m3"), context)


# --- multilingual -------------------------------------------------------------------------------------

QUERIES = [
    ("q-en-1", "en", "gout treatment"),
    ("q-en-2", "en", "asthma inhaler"),
    ("q-fr-1", "fr", "traitement de la goutte"),
    ("q-fr-2", "fr", "inhalateur pour l'asthme"),
    ("q-ja-1", "ja", "痛風の治療"),
    ("q-ja-2", "ja", "喘息の吸入器"),
]
DOCS = [("d1", "Colchicine treats acute gout."), ("d2", "Inhaled steroids control asthma."), ("d3", "Metformin for diabetes.")]
QRELS = {"q-en-1": {"d1": 1}, "q-en-2": {"d2": 1}, "q-fr-1": {"d1": 1}, "q-fr-2": {"d2": 1}, "q-ja-1": {"d1": 1}, "q-ja-2": {"d2": 1}}
# A run in which English ranks both right, French one of two, Japanese one at rank 3 and misses the other.
RUN = {
    "q-en-1": {"d1": 3.0, "d2": 2.0, "d3": 1.0},
    "q-en-2": {"d2": 3.0, "d1": 2.0, "d3": 1.0},
    "q-fr-1": {"d1": 3.0, "d2": 2.0, "d3": 1.0},
    "q-fr-2": {"d3": 3.0, "d1": 2.0, "d2": 1.0},
    "q-ja-1": {"d3": 3.0, "d2": 2.0, "d1": 1.0},
    "q-ja-2": {"d3": 3.0, "d1": 2.0},
}


def write_multilingual(folder, drop_language_of: str | None = None):
    write_jsonl(folder / "queries.jsonl", [{"_id": q, "text": t, **({} if q == drop_language_of else {"language": lang})} for q, lang, t in QUERIES])
    write_jsonl(folder / "corpus.jsonl", [{"_id": d, "text": t} for d, t in DOCS])
    (folder / "qrels").mkdir(parents=True)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, r in QRELS.items() for d, g in r.items()))
    return folder


def test_multilingual_queries_give_per_language_metrics(tmp_path):
    task = read_multilingual(write_multilingual(tmp_path / "ml"), MultilingualOptions(name="ml", research_only=True))
    assert dict(task.queries.select("query_id", "language").iter_rows()) == {q: lang for q, lang, _ in QUERIES}
    assert set(task.corpus["language"]) == {"en"} and task.meta.languages == ("en", "fr", "ja")
    run = pl.DataFrame(
        [(q, d, s, r) for q, docs in RUN.items() for r, (d, s) in enumerate(sorted(docs.items(), key=lambda x: -x[1]), start=1)],
        schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64, "rank": pl.Int32},
        orient="row",
    )
    out = tmp_path / "metrics"
    out.mkdir()
    result = score(task, run, out)
    ref = pytrec_eval.RelevanceEvaluator(QRELS, {"ndcg_cut_10"}).evaluate(RUN)
    by_lang = {lang: np.mean([ref[q]["ndcg_cut_10"] for q, lg, _ in QUERIES if lg == lang]) for lang in ("en", "fr", "ja")}
    # By hand: en 1.0; fr (1 + 1/log2(4)) / 2 = 0.75; ja (1/log2(4) + 0, d2 not retrieved) / 2 = 0.25.
    assert (by_lang["en"], by_lang["fr"], by_lang["ja"]) == (1.0, 0.75, 0.25)
    for lang, v in by_lang.items():
        assert result["breakdowns"]["language"][lang]["ndcg_at_10"] == pytest.approx(v, abs=1e-9)
    # The one gap is the paired English minus L of the reports (evaluation/language_tables.py); metrics.json keeps none.
    assert "cross_lingual_gap" not in json.loads((out / "metrics.json").read_text())


def test_a_query_without_its_language_is_named(tmp_path):
    folder = write_multilingual(tmp_path / "ml", drop_language_of="q-fr-2")
    with pytest.raises(DataError, match=rf"^{folder / 'queries.jsonl'}:4: query q-fr-2 has no 'language'"):
        read_multilingual(folder, MultilingualOptions(name="ml"))
