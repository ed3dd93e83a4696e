"""Published scores beside ours, from a fixture folder in both published layouts.

MTEB's results repository (results/<org>__<model>/<revision>/<Task>.json + model_meta.json, fields as in
embeddings-benchmark/results, e.g. BAAI__bge-large-en-v1.5/d4aa6901.../R2MEDBiologyRetrieval.json) and
R2MED's result files (results/base retriever/<retriever>/<Task>.json with ``ndcg_at_10``;
results/gar/<method>/<generator>/<retriever>/<Task>.json with ``NDCG@10`` and, in the first release,
older task names such as Stack-Biology). Our per-query values are chosen so the verdicts are plain:

bge-large-en-v1.5 x r2med_biology: 20 queries at 0.12, 20 at 0.134: mean 0.127, 95% CI about +-0.002; published 0.12706 -> inside
bm25 x r2med_biology: 0.5 on every query, CI [0.5, 0.5]; R2MED's bm25 0.19188 -> outside, difference +0.30812
bm25+hyde-gpt4 x r2med_biology: 0.58237 on every query; R2MED's hyde/gpt4/bm25 (Stack-Biology, NDCG@10) 0.58237 -> inside
bge-large-en-v1.5 x r2med_bioinformatics: published at another dataset revision -> not compared
bge-old x r2med_biology: published model revision is not ours -> not compared
"""

import json
from pathlib import Path

import polars as pl
import pytest

from medbench_core.errors import DataError
from medbench_core.evaluation.published import (
    PublishedSource,
    compare_published,
    load_sources,
    parse_sources,
    read_published,
    summary,
)
from medbench_core.evaluation.reports import Cell, Significance, build_tables, write_leaderboard

BIO, BIOINF = "8b9fec2db9eda4b5742d03732213fbaee8169556", "6021fce366892cbfd7837fa85a4128ea93315e18"
BGE = "d4aa6901d3a41ba39fb536a557fa166f842b0e09"


def write(path, doc) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def mteb_file(task: str, revision: str, ndcg: float) -> dict:
    entry = {"ndcg_at_10": ndcg, "map_at_10": 0.07706, "main_score": ndcg, "hf_subset": "default", "languages": ["eng-Latn"]}
    return {
        "dataset_revision": revision,
        "task_name": task,
        "mteb_version": "1.38.20",
        "scores": {"test": [entry]},
        "evaluation_time": 108.4,
        "kg_co2_emissions": None,
    }


@pytest.fixture
def published(tmp_path):
    root = tmp_path / "published"
    bge = root / "mteb" / "results" / "BAAI__bge-large-en-v1.5" / BGE
    write(bge / "model_meta.json", {"name": "BAAI/bge-large-en-v1.5", "revision": BGE, "framework": ["Sentence Transformers"]})
    write(bge / "R2MEDBiologyRetrieval.json", mteb_file("R2MEDBiologyRetrieval", BIO, 0.12706))
    write(bge / "R2MEDBioinformaticsRetrieval.json", mteb_file("R2MEDBioinformaticsRetrieval", "0" * 40, 0.27039))
    write(bge / "NFCorpus.json", mteb_file("NFCorpus", "ec0fa4fe99da2ff19ca1214b7966684033a58814", 0.38061))  # not ours: never opened as a match
    r2 = root / "r2med" / "results"
    write(
        r2 / "base retriever" / "bm25" / "Biology.json",
        {"dataset_name": "Biology", "evaluation_time": "0.21 minutes", "model_name": "bm25", "test": {"ndcg_at_10": 0.19188, "mrr": 0.27195}},
    )
    write(r2 / "gar" / "hyde" / "gpt4" / "bm25" / "Stack-Biology.json",
          {"dataset_name": "Stack-Biology", "evaluation_time": "0.21 minutes", "gar_llm": "gpt4", "gar_method": "hyde", "retriever_name": "bm25",
           "test": {"NDCG@10": 0.58237, "MRR": 0.67346}})  # fmt: skip
    return root


def cell(model: str, task: str, values: list[float], *, revision: str, model_revision: str = BGE) -> Cell:
    dataset = {"r2med_biology": "R2MED/Biology", "r2med_bioinformatics": "R2MED/Bioinformatics"}[task]
    pq = pl.DataFrame({"query_id": [f"q{i:02d}" for i in range(len(values))], "ndcg_at_10": values})
    return Cell(model, task, metrics={"mean": {"ndcg_at_10": sum(values) / len(values)}}, per_query=pq, model_revision=model_revision,
                task_revision=revision, dataset=dataset, subset=dataset.split("/")[1])  # fmt: skip


def cells() -> list[Cell]:
    bge_bio = [0.12] * 20 + [0.134] * 20
    return [
        cell("bm25", "r2med_biology", [0.5] * 40, revision=BIO, model_revision="bm25s-lucene"),
        cell("bge-large-en-v1.5", "r2med_biology", bge_bio, revision=BIO),
        cell("bm25+hyde-gpt4", "r2med_biology", [0.58237] * 40, revision=BIO, model_revision=""),
        cell("bge-old", "r2med_biology", bge_bio, revision=BIO, model_revision="1" * 40),
        cell("bm25", "r2med_bioinformatics", [0.3] * 40, revision=BIOINF, model_revision="bm25s-lucene"),
        cell("bge-large-en-v1.5", "r2med_bioinformatics", [0.25] * 40, revision=BIOINF),
    ]


SOURCES = lambda root: [  # noqa: E731
    PublishedSource(root / "mteb", models={"bge-old": "BAAI/bge-large-en-v1.5"}),
    PublishedSource(root / "r2med", models={"bm25": "bm25", "bm25+hyde-gpt4": "hyde/gpt4/bm25"}),
]
MTEB_TASKS = {"r2med_biology": "R2MEDBiologyRetrieval", "r2med_bioinformatics": "R2MEDBioinformaticsRetrieval"}  # as exports.mteb_task_names finds them
NAMES = {"bge-large-en-v1.5": "BAAI/bge-large-en-v1.5", "bge-old": "medbench/bge-old", "bm25": "medbench/bm25", "bm25+hyde-gpt4": "medbench/bm25+hyde-gpt4"}


def test_the_leaderboard_shows_the_published_value_the_difference_and_whether_it_lies_in_our_ci(published, tmp_path):
    sig = Significance("bm25", n_resamples=2000)
    models = ["bm25", "bge-large-en-v1.5", "bm25+hyde-gpt4", "bge-old"]
    tables = build_tables(cells(), models, ["r2med_biology", "r2med_bioinformatics"], sig, published=SOURCES(published), model_names=NAMES,
                          mteb_tasks=MTEB_TASKS)  # fmt: skip
    out = write_leaderboard(tables, tmp_path / "reports")
    rows = {(r["model"], r["task"]): r for r in out["published"].iter_rows(named=True)}
    assert set(rows) == {("bm25", "r2med_biology"), ("bge-large-en-v1.5", "r2med_biology"), ("bm25+hyde-gpt4", "r2med_biology"),
                         ("bge-old", "r2med_biology"), ("bge-large-en-v1.5", "r2med_bioinformatics")}  # fmt: skip
    bge = rows[("bge-large-en-v1.5", "r2med_biology")]
    stats = out["stats"].filter((pl.col("model") == "bge-large-en-v1.5") & (pl.col("task") == "r2med_biology")).row(0, named=True)
    assert stats["ci_low"] < 0.12706 < stats["ci_high"] and stats["ci_high"] - stats["ci_low"] < 0.006  # the case is what it says
    assert (bge["published"], bge["status"], bge["in_ci"], bge["published_model"], bge["layout"]) == (
        0.12706,
        "reproduced",
        True,
        "BAAI/bge-large-en-v1.5",
        "mteb",
    )
    assert bge["diff"] == pytest.approx(0.127 - 0.12706, abs=1e-12)
    bm25 = rows[("bm25", "r2med_biology")]
    assert (bm25["published"], bm25["status"], bm25["in_ci"], bm25["published_task"]) == (0.19188, "outside the CI", False, "Biology")
    assert bm25["diff"] == pytest.approx(0.5 - 0.19188, abs=1e-12) and bm25["note"] == "the source records no revisions"
    hyde = rows[("bm25+hyde-gpt4", "r2med_biology")]
    assert (hyde["published"], hyde["status"], hyde["published_model"], hyde["published_task"]) == (0.58237, "reproduced", "hyde/gpt4/bm25", "Biology")
    other = rows[("bge-large-en-v1.5", "r2med_bioinformatics")]
    assert (other["status"], other["diff"], other["in_ci"]) == ("not compared", None, None)
    assert other["note"] == f"dataset revision differs (ours {BIOINF[:12]}, published 000000000000)"
    old = rows[("bge-old", "r2med_biology")]
    assert old["status"] == "not compared" and old["note"] == f"model revision differs (ours 111111111111, published {BGE[:12]})"

    md = out["markdown"]
    assert "Published nDCG@10 beside ours" in md
    assert (
        f"| bge-large-en-v1.5 | r2med_biology | 0.1270 [{stats['ci_low']:.2f}, {stats['ci_high']:.2f}] | 0.1271 (BAAI/bge-large-en-v1.5, "
        "R2MEDBiologyRetrieval, MTEB results) | -0.0001 | inside our CI: reproduced |"
    ) in md
    assert (
        "| bm25 | r2med_biology | 0.5000 [0.50, 0.50] | 0.1919 (bm25, Biology, R2MED results) | +0.3081 | outside our CI (the source records no revisions) |"
    ) in md
    assert f"| not compared: dataset revision differs (ours {BIOINF[:12]}, published 000000000000) |" in md
    line = "published scores: 3 cells compared, 2 reproduced (inside our 95% CI), 1 outside the CI; 2 not compared (a model or dataset revision differs)"
    assert summary(out["published"]) == line and line + "." in md
    # The saved forms: new columns of leaderboard.csv and stats.csv, a field of leaderboard.json; the old ones as they were.
    board = pl.read_csv(tmp_path / "reports" / "leaderboard.csv")
    assert board.columns[:6] == ["model", "r2med_biology", "r2med_bioinformatics", "average", "averaged_over", "rank"]
    got = board.filter(pl.col("model") == "bm25").row(0, named=True)
    assert (got["published.r2med_biology"], got["published_in_ci.r2med_biology"]) == (0.19188, False)
    assert got["published_diff.r2med_biology"] == pytest.approx(0.30812, abs=1e-12) and got["published.r2med_bioinformatics"] is None
    st = pl.read_csv(tmp_path / "reports" / "stats.csv")
    at = st.columns.index("published")  # after the significance and rank columns; the trust columns (issue 33) follow
    assert st.columns[at : at + 4] == ["published", "published_diff", "published_in_ci", "published_status"]
    doc = json.loads((tmp_path / "reports" / "leaderboard.json").read_text())
    assert doc["published"]["summary"] == line and len(doc["published"]["cells"]) == 5


def test_without_a_mapping_a_model_meets_the_published_model_of_its_hub_id_only(published):
    stats = pl.DataFrame([{"task": "r2med_biology", "model": "bm25", "metric": "ndcg_at_10", "mean": 0.5, "ci_low": 0.5, "ci_high": 0.5}])
    # bm25 is not R2MED's BM25 (other k1, b, analyser): without a mapping it is not compared with it.
    none = compare_published(cells()[:1], stats, [PublishedSource(published / "r2med")], model_names={"bm25": "medbench/bm25"})
    assert none.height == 0
    mapped = compare_published(cells()[:1], stats, [PublishedSource(published / "r2med", models={"bm25": "bm25"})])
    assert mapped["published"].to_list() == [0.19188]


def test_reading_both_layouts_and_refusing_other_json(published):
    got = read_published(published, ["Biology", "R2MEDBiologyRetrieval"])
    assert {k: [p.value for p in v] for k, v in got.items()} == {
        ("BAAI/bge-large-en-v1.5", "R2MEDBiologyRetrieval"): [0.12706], ("bm25", "Biology"): [0.19188], ("hyde/gpt4/bm25", "Biology"): [0.58237],
    }  # fmt: skip
    (bge,) = got[("BAAI/bge-large-en-v1.5", "R2MEDBiologyRetrieval")]
    assert (bge.model_revision, bge.dataset_revision) == (BGE, BIO)
    write(published / "junk" / "Biology.json", {"hello": 1})
    with pytest.raises(DataError, match=r"junk/Biology.json: neither an MTEB result"):
        read_published(published, ["Biology"])


def test_the_published_results_block_of_tasks_yaml(tmp_path):
    base = tmp_path / "shared"
    (src,) = parse_sources({"path": "published", "models": {"bge": "BAAI/bge-large-en-v1.5"}, "tasks": {"r2med_biology": "Biology"}}, base, "tasks.yaml")
    assert src == PublishedSource(base / "published", {"bge": "BAAI/bge-large-en-v1.5"}, {"r2med_biology": "Biology"})
    assert parse_sources(["/abs/a", "b"], base, "tasks.yaml") == [PublishedSource(Path("/abs/a")), PublishedSource(base / "b")]
    for bad, message in (({"models": {}}, "give a folder"), ({"path": "p", "model": {}}, r"unknown field\(s\) \['model'\]"),
                         ({"path": "p", "models": ["bge"]}, "'models' maps medbench names")):  # fmt: skip
        with pytest.raises(DataError, match=message):
            parse_sources(bad, base, "tasks.yaml")
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("tasks: []\npublished_results: {path: published, models: {bm25: bm25}}\n")
    assert load_sources(tasks, base) == [PublishedSource(base / "published", {"bm25": "bm25"})]
    # --published DIR replaces the folder and keeps the mapping.
    assert load_sources(tasks, base, tmp_path / "other") == [PublishedSource(tmp_path / "other", {"bm25": "bm25"})]
    tasks.write_text("tasks: []\n")
    assert load_sources(tasks, base) == [] and load_sources(tasks, base, tmp_path / "x") == [PublishedSource(tmp_path / "x")]
