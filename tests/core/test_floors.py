"""Chance, chance-corrected and tie-aware figures beside every cell (issue 45): the leaderboard's chance row, its
floors section, CSV columns, JSON and MLflow keys on hand-made cells, and on the real wheel's bundled sample with
BM25: the chance of a five-option confusion set and of the corpus worked out by hand, and every query that shares
no token with its candidates at its chance value in the tie-aware figure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest

from medbench_core.evaluation.floors import floors_mlflow_metrics, floors_table
from medbench_core.evaluation.reports import Cell, Significance, build_tables, write_leaderboard

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
FIVE = (1 + 1 / math.log2(3) + 1 / 2 + 1 / math.log2(5) + 1 / math.log2(6)) / 5  # one relevant among five, uniformly placed


def _cell(model: str, task: str, mean: float, ci: tuple[float, float], tie: float, chance: float, corrected: bool) -> Cell:
    metrics = {
        "mean": {"ndcg_at_10": mean},
        "ci": {"ndcg_at_10": list(ci)},
        "tie_aware": {"ndcg_at_10": tie},
        "chance": {"ndcg_at_10": chance},
        "ties": {"queries_tied": 3, "queries_tie_continued": 1},
        **({"chance_corrected": {"ndcg_at_10": (mean - chance) / (1 - chance)}} if corrected else {}),
    }
    return Cell(model, task, metrics, per_query=pl.DataFrame({"query_id": ["q1", "q2"], "ndcg_at_10": [mean, mean]}))


def test_the_leaderboard_sets_chance_tie_aware_and_chance_corrected_beside_every_cell(tmp_path):
    cells = [
        _cell("bm25", "disc", 0.62, (0.60, 0.64), 0.66, FIVE, True),  # ties moved it by 0.04 > the half width 0.02: flagged
        _cell("dense", "disc", 0.80, (0.76, 0.84), 0.80, FIVE, True),
        _cell("bm25", "corpus", 0.30, (0.20, 0.40), 0.31, 0.0065, False),
        _cell("dense", "corpus", 0.50, (0.45, 0.55), 0.50, 0.0065, False),
    ]
    out = tmp_path / "reports"
    out.mkdir()
    written = write_leaderboard(build_tables(cells, ["bm25", "dense"], ["disc", "corpus"], Significance("bm25", n_resamples=1000)), out)
    md = written["markdown"]
    assert "| *chance (random order)* | *0.5897* | *0.0065* | - |" in md
    floors = {(r["model"], r["task"]): r for r in written["floors"].iter_rows(named=True)}
    assert floors[("bm25", "disc")]["tie_flag"] and not floors[("dense", "disc")]["tie_flag"] and not floors[("bm25", "corpus")]["tie_flag"]
    # chance-corrected, by hand, and its CI: the score's CI mapped the same way.
    cc = floors[("dense", "disc")]
    assert cc["chance_corrected"] == pytest.approx((0.80 - FIVE) / (1 - FIVE), abs=1e-12)
    assert (cc["chance_corrected_low"], cc["chance_corrected_high"]) == pytest.approx(((0.76 - FIVE) / (1 - FIVE), (0.84 - FIVE) / (1 - FIVE)), abs=1e-12)
    assert floors[("dense", "corpus")]["chance_corrected"] is None  # a corpus task: no chance-corrected figure
    assert "| bm25 | disc | 0.6200 | 0.6600 ⚑ | 3 | 0.5897 | 0.0739 [0.03, 0.12] |" in md
    assert "chance-corrected = (score - chance) / (1 - chance)" in md and md.count("chance-corrected = ") == 1  # its name explained once
    csv = pl.read_csv(out / "leaderboard.csv")
    assert csv["chance.disc"].to_list() == pytest.approx([FIVE, FIVE]) and csv["tie_flag.disc"].to_list() == [True, False]
    assert "chance_corrected.disc" in csv.columns and "chance_corrected.corpus" not in csv.columns
    doc = json.loads((out / "leaderboard.json").read_text())
    assert doc["floors"]["chance"] == pytest.approx({"disc": FIVE, "corpus": 0.0065}) and len(doc["floors"]["cells"]) == 4
    keys = floors_mlflow_metrics(written["floors"])
    assert keys["disc/chance.ndcg_at_10"] == pytest.approx(FIVE) and keys["disc/bm25/tie_flag"] == 1.0 and "corpus/bm25/chance_corrected" not in keys
    assert floors_table([Cell("m", "disc", None)], ["disc"], ["m"]).height == 0  # not evaluated: no row


@pytest.fixture(scope="module")
def bm25_sample(tmp_path_factory):
    """BM25 through the four stages on the bundled sample's discrimination and crosslingual tasks."""
    from medbench_core.evaluation.scoring import score
    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve
    from medbench_core.taskdata.catalog import build_task, load_catalog

    catalog = load_catalog(ROOT / "tasks.yaml")
    spec = {m.name: m for m in load_registry(ROOT / "models.yaml")}["bm25"]
    out = {}
    for name in ("icd10_discrimination", "icd10_crosslingual"):
        base = tmp_path_factory.mktemp(name)
        task = build_task(catalog.task(name), DATA, base / "task")
        dirs = [base / n for n in ("emb", "idx", "run", "metrics")]
        for d in dirs:
            d.mkdir()
        embed_corpus(spec, task, dirs[0])
        build_corpus_index(spec, dirs[0], dirs[1])
        run, _ = retrieve(spec, task, dirs[0], dirs[1], dirs[2], k=100)
        result = score(task, run, dirs[3])
        out[name] = (task, run, result, pl.read_parquet(dirs[3] / "per_query.parquet"))
    return out


@pytest.mark.slow
def test_bm25_on_the_bundled_sample_chance_and_ties_by_hand(bm25_sample):
    task, run, result, per_query = bm25_sample["icd10_discrimination"]
    assert per_query["chance.ndcg_at_10"].to_list() == pytest.approx([FIVE] * per_query.height, abs=1e-15)
    assert result["chance"]["ndcg_at_10"] == pytest.approx(FIVE, abs=1e-12)
    assert result["chance_corrected"]["ndcg_at_10"] == pytest.approx((result["mean"]["ndcg_at_10"] - FIVE) / (1 - FIVE), abs=1e-12)
    # A query whose five candidates all score 0 shares no token with any of them: its tie-aware figure is chance,
    # whatever the doc-id order gave trec_eval. The Japanese and Chinese queries are nearly all such.
    blank = run.group_by("query_id").agg((pl.col("score") == 0).all().alias("blank")).filter("blank")["query_id"]
    tied = per_query.filter(pl.col("query_id").is_in(blank.to_list()))
    assert tied.height > 150 and tied["tie_aware.ndcg_at_10"].to_list() == pytest.approx([FIVE] * tied.height, abs=1e-15)
    assert tied["ndcg_at_10"].n_unique() > 1  # trec_eval: the doc-id order, not chance
    langs = per_query.join(task.queries.select("query_id", "language"), on="query_id").group_by("language").agg(pl.col("tie_aware.ndcg_at_10").mean())
    assert dict(langs.iter_rows())["ja"] == pytest.approx(FIVE, abs=1e-12)  # no Japanese query shares a token with English records

    task, run, result, per_query = bm25_sample["icd10_crosslingual"]
    n = task.corpus.height
    corpus_chance = sum(1 / math.log2(i + 2) for i in range(10)) / n  # one relevant category among n, uniformly placed
    assert per_query["chance.ndcg_at_10"].to_list() == pytest.approx([corpus_chance] * per_query.height, abs=1e-15)
    assert "chance_corrected" not in result  # a corpus task
    blank = run.group_by("query_id").agg((pl.col("score") == 0).all().alias("blank")).filter("blank")["query_id"]
    tied = per_query.filter(pl.col("query_id").is_in(blank.to_list()))
    # The run holds 100 of n documents at score 0; the tie continues over the n - 100 left out: chance.
    assert tied.height > 100 and tied["tie_aware.ndcg_at_10"].to_list() == pytest.approx([corpus_chance] * tied.height, abs=1e-15)
    assert result["ties"]["queries_tie_continued"] >= tied.height
