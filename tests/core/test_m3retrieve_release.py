"""M3Retrieve as published (issue 22.1, 22.4): discipline folders with captions, float qrels, images.zip,
the card's licence at the repository root; from a local folder and from a Hugging Face hub cache
snapshot (links into the repository's blobs), offline. The fixtures are written here in that layout
with real (PIL-made) PNG and JPEG images (tests/core/reader_fixtures.py); BM25 on the captions equals
bm25s + pytrec_eval."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import polars as pl
import pytest
import pytrec_eval
from reader_fixtures import DISCIPLINES, SHA, bare_bm25, hub_snapshot, image_bytes, jpeg, jsonl, png, write_release

from medbench_core.errors import DataError
from medbench_core.taskdata.catalog import build_task, load_catalog
from medbench_core.taskdata.readers import ReadContext
from medbench_core.taskdata.readers.m3retrieve import M3RetrieveOptions, read_m3retrieve

ROOT = Path(__file__).resolve().parents[2]


def catalogue(path: Path, source: str) -> Path:
    path.write_text(f"tasks:\n  - {{name: m3r, reader: m3retrieve, {source}, subsets: [Cardiology, 'Anatomy and Physiology']}}\n")
    return path


@pytest.fixture
def local(tmp_path):
    data = tmp_path / "data"
    write_release(data / "M3Retrieve")
    catalog = load_catalog(catalogue(tmp_path / "tasks.yaml", "path: M3Retrieve"))
    return data, catalog


def test_one_entry_reads_every_discipline_with_captions_images_float_qrels_and_the_cards_licence(local, tmp_path):
    data, catalog = local
    assert catalog.names == ["m3r_cardiology", "m3r_anatomy_and_physiology"]
    for name, disc in (("m3r_cardiology", "Cardiology"), ("m3r_anatomy_and_physiology", "Anatomy and Physiology")):
        d = DISCIPLINES[disc]
        task = build_task(catalog.task(name), data, tmp_path / "work" / name)
        q = {r["query_id"]: r for r in task.queries.iter_rows(named=True)}
        assert {k: (v["text"], v["image"], v["modality"]) for k, v in q.items()} == {qid: (c, p, "both") for qid, c, p in d["queries"]}
        for qid, _, p in d["queries"]:
            assert task.resolve_image(q[qid]["image"]).read_bytes() == image_bytes(p)  # the archive's bytes, unchanged
        # Title and text joined as BEIR joins them (a record without a title is its text).
        texts = dict(zip(task.corpus["doc_id"].to_list(), task.doc_text()))
        assert texts == {i: f"{t} {x}" if t else x for i, t, x in d["corpus"]}
        assert sorted(task.qrels.rows()) == sorted((a, b, 1) for a, b, _ in d["qrels"])  # "1.0" read as grade 1
        assert set(task.queries["licence"]) | set(task.corpus["licence"]) == {"CC-BY-SA-4.0"}  # the root card's licence
        assert set(task.queries["discipline"]) | set(task.corpus["discipline"]) == {disc}
        assert (task.meta.subset, task.meta.dataset, task.meta.query_modality, task.meta.doc_modality) == (disc, "M3Retrieve", "both", "text")
        assert task.meta.source_revision.startswith("sha256:") and task.meta.licences == ("CC-BY-SA-4.0",)


def test_the_local_revision_covers_the_image_archive(local, tmp_path):
    data, catalog = local
    entry = catalog.task("m3r_cardiology")
    before = build_task(entry, data, tmp_path / "w").meta.source_revision
    with zipfile.ZipFile(data / "M3Retrieve" / "images.zip", "a") as zf:
        zf.writestr("images/Cardiology/extra.png", png(99))
    assert build_task(entry, data, tmp_path / "w").meta.source_revision != before


def test_the_curated_task_passes_its_contract(local, tmp_path):
    from medbench_core.taskdata.contracts import validate_task

    data, catalog = local
    task = build_task(catalog.task("m3r_anatomy_and_physiology"), data, tmp_path / "work")
    verdict = validate_task(task)
    assert verdict.passed, verdict.message
    assert verdict.licences == {"CC-BY-SA-4.0": 5}


@pytest.mark.parametrize("shared_store", [False, True], ids=["blobs", "xet-shared-store"])
def test_a_hub_cache_snapshot_gives_the_same_tasks_offline(local, tmp_path, shared_store):
    data, catalog = local
    cache = tmp_path / "hub"
    snap = hub_snapshot(cache, "Tensorists/M3Retrieve", data / "M3Retrieve", shared_store=shared_store)
    assert (snap / "Cardiology" / "queries.jsonl").is_symlink() and (snap / "images.zip").is_symlink()
    hub = load_catalog(catalogue(tmp_path / "hub.yaml", "dataset: Tensorists/M3Retrieve, revision: main"))
    for name in catalog.names:
        mine = build_task(catalog.task(name), data, tmp_path / "local" / name)
        theirs = build_task(hub.task(name), tmp_path / "no-data", tmp_path / "hubwork" / name, hub_cache=cache)
        assert theirs.meta.dataset == "Tensorists/M3Retrieve" and theirs.meta.source_revision == SHA  # main resolved offline through refs/main
        for frame in ("queries", "corpus", "qrels"):
            assert getattr(theirs, frame).equals(getattr(mine, frame)), frame
        for ref in theirs.queries["image"].to_list():
            img = theirs.resolve_image(ref)  # inside the scratch folder: a plain file, no link
            assert not img.is_symlink() and img.read_bytes() == mine.resolve_image(ref).read_bytes()
        assert theirs.meta.licences == ("CC-BY-SA-4.0",)  # the card at the snapshot's root


def test_a_snapshot_link_leading_outside_its_blobs_is_refused(local, tmp_path):
    data, _ = local
    cache = tmp_path / "hub"
    snap = hub_snapshot(cache, "Tensorists/M3Retrieve", data / "M3Retrieve")
    outside = tmp_path / "outside.jsonl"
    outside.write_text((data / "M3Retrieve" / "Cardiology" / "corpus.jsonl").read_text())
    link = snap / "Cardiology" / "corpus.jsonl"
    link.unlink()
    link.symlink_to(outside)
    hub = load_catalog(catalogue(tmp_path / "hub.yaml", f"dataset: Tensorists/M3Retrieve, revision: {SHA}"))
    with pytest.raises(DataError) as err:
        build_task(hub.task("m3r_cardiology"), tmp_path, tmp_path / "w", hub_cache=cache)
    assert str(err.value).startswith(f"{link}: a symbolic link to '{outside}' ({outside}), which is not a file in the repository's blobs")
    # A blob of the repository linking anywhere but the cache-wide store is refused too.
    link.unlink()
    blob = cache / "datasets--Tensorists--M3Retrieve" / "blobs" / ("0" * 64)
    blob.symlink_to(outside)
    link.symlink_to(f"../../../blobs/{blob.name}")
    with pytest.raises(DataError, match=r"which is not a file in the repository's blobs"):
        build_task(hub.task("m3r_cardiology"), tmp_path, tmp_path / "w", hub_cache=cache)


def test_bm25_on_the_captions_equals_bm25s_and_pytrec_eval(local, tmp_path):
    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve, score

    data, catalog = local
    task = build_task(catalog.task("m3r_cardiology"), data, tmp_path / "work")
    spec = {m.name: m for m in load_registry(ROOT / "models.yaml")}["bm25"]
    emb, idx, out, met = (tmp_path / n for n in ("emb", "idx", "run", "met"))
    for d in (emb, idx, out, met):
        d.mkdir()
    embed_corpus(spec, task, emb)
    build_corpus_index(spec, emb, idx)
    run, _ = retrieve(spec, task, emb, idx, out, k=100)
    result = score(task, run, met)

    qrels, bare = bare_bm25("Cardiology", data / "M3Retrieve")
    ours = {q: dict(zip(g["doc_id"].to_list(), g["score"].to_list())) for (q,), g in run.group_by("query_id")}
    assert set(ours) == set(bare)
    for q, scores in ours.items():
        for d, s in scores.items():
            assert s == pytest.approx(bare[q][d], rel=1e-6), (q, d)
        assert all(bare[q][d] == 0 for d in set(bare[q]) - set(scores))  # what was not retrieved scores 0
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate({q: {d: s for d, s in r.items() if s > 0} for q, r in bare.items()})
    expected = sum(v["ndcg_cut_10"] for v in ref.values()) / len(qrels)
    assert result["mean"]["ndcg_at_10"] == pytest.approx(expected, abs=1e-9)
    assert expected > 0.5  # the captions carry the queries: a caption-less (image-only) query would score 0 here


def test_every_query_reaches_the_encoders_with_its_caption_and_its_image(local, tmp_path):
    from medbench_core.retrieval.records import side_records

    data, catalog = local
    task = build_task(catalog.task("m3r_cardiology"), data, tmp_path / "work")
    ids, texts, images, _ = side_records(task, "query")  # what every encoder (CLIP among them) is given
    captions = {q: c for q, c, _ in DISCIPLINES["Cardiology"]["queries"]}
    assert dict(zip(ids, texts)) == captions
    assert all(p is not None and p.is_file() for p in images)
    assert set(task.queries["modality"]) == {"both"}


# --- errors: named by file, line, record and path ------------------------------------------------


def test_an_image_found_nowhere_names_the_places_and_the_archive(local, tmp_path):
    data, catalog = local
    queries = data / "M3Retrieve" / "Cardiology" / "queries.jsonl"
    rows = [json.loads(line) for line in queries.read_text().splitlines()]
    rows[1]["image_path"] = "missing.jpg"
    jsonl(queries, rows)
    with pytest.raises(DataError) as err:
        build_task(catalog.task("m3r_cardiology"), data, tmp_path / "w")
    root = data / "M3Retrieve"
    assert str(err.value) == (
        f"{queries}:2: record c-q2: image 'missing.jpg' not found: looked in {root / 'Cardiology'}, {root} "
        f"and in {root / 'images.zip'} (members such as 'images/Anatomy and Physiology/a1.png')"
    )


def test_two_matching_members_are_refused_as_ambiguous(local, tmp_path):
    data, catalog = local
    with zipfile.ZipFile(data / "M3Retrieve" / "images.zip", "a") as zf:
        zf.writestr("images/c1.jpg", jpeg(1))  # c1.jpg is also images/Cardiology/c1.jpg
    with pytest.raises(
        DataError,
        match=r"queries.jsonl:1: record c-q1: image 'c1.jpg' matches 2 members of .*images.zip: \['images/c1.jpg', 'images/Cardiology/c1.jpg'\]; refusing to guess",
    ):
        build_task(catalog.task("m3r_cardiology"), data, tmp_path / "w")


@pytest.mark.parametrize("member", ["../evil.jpg", "/abs/evil.jpg"])
def test_an_unsafe_archive_is_refused_before_anything_is_written(local, tmp_path, member):
    data, catalog = local
    with zipfile.ZipFile(data / "M3Retrieve" / "images.zip", "a") as zf:
        zf.writestr(member, b"x")
    with pytest.raises(DataError, match=rf"images.zip: member '{member}'.*refusing the archive"):
        build_task(catalog.task("m3r_cardiology"), data, tmp_path / "w")
    assert not (tmp_path / "w" / "images").exists()


def test_a_missing_discipline_lists_those_there_are(local, tmp_path):
    data, _ = local
    cat = tmp_path / "t.yaml"
    cat.write_text("tasks:\n  - {name: m3r, reader: m3retrieve, path: M3Retrieve, subsets: [Cardiologgy]}\n")
    with pytest.raises(
        DataError, match=r"task m3r_cardiologgy: discipline folder 'Cardiologgy' not found in .*M3Retrieve; it holds \['Anatomy and Physiology', 'Cardiology'\]"
    ):
        build_task(load_catalog(cat).task("m3r_cardiologgy"), data, tmp_path / "w")


def test_the_case_study_collection_keeps_its_disciplines_in_a_folder(tmp_path):
    # ArkaAcharya/M3Retrieve_CaseStudyRetrieval: Case_Study_Retrieval/<specialty>/...
    cache = tmp_path / "hub"
    src = write_release(tmp_path / "src", disciplines_folder="Case_Study_Retrieval")
    hub_snapshot(cache, "ArkaAcharya/M3Retrieve_CaseStudyRetrieval", src)
    cat = tmp_path / "t.yaml"
    cat.write_text(
        "tasks:\n  - {name: m3r_case, reader: m3retrieve, dataset: ArkaAcharya/M3Retrieve_CaseStudyRetrieval, revision: main,\n"
        "     disciplines_folder: Case_Study_Retrieval, subsets: [Cardiology]}\n"
    )
    task = build_task(load_catalog(cat).task("m3r_case_cardiology"), tmp_path, tmp_path / "w", hub_cache=cache)
    assert task.queries["text"].to_list() == [c for _, c, _ in DISCIPLINES["Cardiology"]["queries"]]
    assert task.resolve_image("c3.png").read_bytes() == image_bytes("c3.png") and task.meta.licences == ("CC-BY-SA-4.0",)


def test_reading_without_a_scratch_folder_says_so(tmp_path):
    write_release(tmp_path / "r")
    with pytest.raises(DataError, match=r"task t: this reader writes files \(images\) and needs a scratch folder"):
        read_m3retrieve(tmp_path / "r", M3RetrieveOptions(name="t", subset="Cardiology"))
    task = read_m3retrieve(tmp_path / "r", M3RetrieveOptions(name="t", subset="Cardiology"), ReadContext(scratch=tmp_path / "s"))
    assert task.image_root == tmp_path / "s" and pl.Series(task.queries["image"]).null_count() == 0


@pytest.mark.parametrize(
    "option, message",
    [
        ("disciplines_folder: ../x", r"task t_cardiology: disciplines_folder '../x' contains '..'"),
        ("images: ../images.zip", r"task t_cardiology: option 'images' '../images.zip' contains '..'"),
        ("images: nowhere", r"task t_cardiology: option 'images': 'nowhere' is neither an archive nor a folder"),
    ],
)
def test_folder_options_stay_inside_the_dataset(tmp_path, option, message):
    write_release(tmp_path / "data" / "r")
    cat = tmp_path / "t.yaml"
    cat.write_text(f"tasks:\n  - {{name: t, reader: m3retrieve, path: r, {option}, subsets: [Cardiology]}}\n")
    with pytest.raises(DataError, match=message):
        build_task(load_catalog(cat).task("t_cardiology"), tmp_path / "data", tmp_path / "w")
