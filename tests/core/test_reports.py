"""Reports from what the stages write: tables against hand-computed values, PNGs that decode with
the expected size, and an MTEB-format export that round-trips with the right values.

Two tiny tasks, one relevant document per query, runs placing it at rank 1 (nDCG@10 = 1), rank 2
(1 / log2(3) = 0.63093) or not at all (0):

t1 (English; a, b easy, c, d hard)   bm25: 1, 0.63093, 0, 1 -> 0.65773 (easy 0.81546, hard 0.5)
                                     dense: 1, 1, 1, 0.63093 -> 0.90773 (easy 1, hard 0.81546)
t2 (e English, f French)             bm25: 1, 0 -> 0.5 (en 1, fr 0; gap en 0, fr 1)
                                     dense: 0.63093, 1 -> 0.81546 (en 0.63093, fr 1; gap en 0.36907, fr 0)
img (bm25 cannot read it)            dense: 0.4 (given)
average: bm25 over t1, t2 = (0.65773 + 0.5) / 2 = 0.57887; dense over all three = (0.90773 + 0.81546 + 0.4) / 3 = 0.70773.
"""

import json
import math

import numpy as np
import polars as pl
import pytest
from PIL import Image

from medbench_core.evaluation.board_markdown import BoardView
from medbench_core.evaluation.exports import export, mteb_result
from medbench_core.evaluation.plots import diff_plot_png, diff_plot_size, heatmap_png, heatmap_size
from medbench_core.evaluation.reports import (
    Cell,
    breakdown_table,
    leaderboard,
    leaderboard_markdown,
    load_cell,
    significance,
    wide,
)
from medbench_core.evaluation.scoring import score
from medbench_core.evaluation.stats import compare, format_cell
from medbench_core.retrieval.ranking import write_trec
from medbench_core.taskdata.task import TaskMeta, make_task

R2 = 1 / math.log2(3)
TASK_QUERIES = {
    "t1": {"a": ("en", "easy"), "b": ("en", "easy"), "c": ("en", "hard"), "d": ("en", "hard")},
    "t2": {"e": ("en", None), "f": ("fr", None)},
}
# model -> task -> query -> rank of the relevant document (None: not retrieved)
PLACES = {
    "bm25": {"t1": {"a": 1, "b": 2, "c": None, "d": 1}, "t2": {"e": 1, "f": None}},
    "dense": {"t1": {"a": 1, "b": 1, "c": 1, "d": 2}, "t2": {"e": 2, "f": 1}},
}


def make(name: str):
    qs = TASK_QUERIES[name]
    langs = sorted({lang for lang, _ in qs.values()})
    return make_task(
        TaskMeta(name=name, source="test", languages=tuple(langs)),
        pl.DataFrame(
            {
                "query_id": list(qs),
                "text": [f"query {q}" for q in qs],
                "language": [lang for lang, _ in qs.values()],
                "tier": [t for _, t in qs.values()],
                "discipline": ["cardiology"] * len(qs),
            }
        ),
        pl.DataFrame({"doc_id": [f"d{q}" for q in qs] + ["zz"], "text": ["x"] * (len(qs) + 1)}),
        pl.DataFrame({"query_id": list(qs), "doc_id": [f"d{q}" for q in qs], "relevance": [1] * len(qs)}),
    )


def run_of(places: dict[str, int | None]) -> pl.DataFrame:
    rows = []
    for q, place in places.items():
        if place == 1:
            rows += [(q, f"d{q}", 2.0, 1), (q, "zz", 1.0, 2)]
        elif place == 2:
            rows += [(q, "zz", 2.0, 1), (q, f"d{q}", 1.0, 2)]
        else:
            rows += [(q, "zz", 2.0, 1)]
    return pl.DataFrame(rows, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64, "rank": pl.Int32}, orient="row")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    tasks = {n: make(n) for n in TASK_QUERIES}
    cells = []
    for model, per_task in PLACES.items():
        for tname, places in per_task.items():
            run_dir, met_dir = root / model / tname / "run", root / model / tname / "metrics"
            run_dir.mkdir(parents=True)
            met_dir.mkdir(parents=True)
            run = run_of(places)
            run.write_parquet(run_dir / "run.parquet")
            (run_dir / "run.trec").write_text(write_trec(run, f"medbench-{model}"))
            (run_dir / "info.json").write_text(json.dumps({"k": 100, "seconds": 1.25}))
            score(tasks[tname], run, met_dir)
            cells.append(load_cell(model, tasks[tname], metrics_dir=met_dir, run_dir=run_dir, model_revision=f"rev:{model}", split="train"))
    cells.append(Cell("bm25", "img", applicable=False))
    cells.append(Cell("dense", "img", metrics={"mean": {"ndcg_at_10": 0.4}}))
    cells.append(Cell("late", "t1", metrics={"mean": {"ndcg_at_10": 0.3}}))  # t2 and img missing
    return root, tasks, cells


def test_leaderboard_with_average_over_applicable_tasks(world):
    _, _, cells = world
    board = leaderboard(cells, ["bm25", "dense", "late"], ["t1", "t2", "img"])
    rows = {r["model"]: r for r in board.iter_rows(named=True)}
    assert rows["bm25"]["t1"] == round((2 + R2) / 4, 4) == 0.6577
    assert rows["dense"]["t2"] == round((1 + R2) / 2, 4) == 0.8155
    assert rows["bm25"]["img"] is None and rows["dense"]["img"] == 0.4
    assert rows["bm25"]["average"] == round(((2 + R2) / 4 + 0.5) / 2, 4) == 0.5789
    assert rows["bm25"]["averaged_over"] == "t1, t2"
    assert rows["dense"]["average"] == round(((3 + R2) / 4 + (1 + R2) / 2 + 0.4) / 3, 4) == 0.7077
    assert rows["dense"]["averaged_over"] == "t1, t2, img"
    assert rows["late"]["average"] is None  # t2 and img not evaluated: no average over fewer tasks
    md = leaderboard_markdown(BoardView(board, not_applicable=frozenset({("bm25", "img")})))
    assert "| bm25 | 0.6577 | 0.5000 | n/a | 0.5789 |" in md
    assert "| late | 0.3000 | - | - | - |" in md
    assert "average: mean over the tasks each model can read: bm25: t1, t2; dense: t1, t2, img; late: t1, t2, img." in md


def test_breakdowns(world):
    _, _, cells = world
    tiers = breakdown_table(cells, "tier")
    got = {(r["model"], r["task"], r["tier"]): r["ndcg_at_10"] for r in tiers.iter_rows(named=True)}
    assert got == pytest.approx(
        {("bm25", "t1", "easy"): (1 + R2) / 2, ("bm25", "t1", "hard"): 0.5, ("dense", "t1", "easy"): 1.0, ("dense", "t1", "hard"): (1 + R2) / 2}, abs=1e-12
    )
    w = wide(tiers, "tier", models=["dense", "bm25"])
    assert w.columns == ["model", "t1/easy", "t1/hard"] and w["model"].to_list() == ["dense", "bm25"]
    assert w.row(1) == ("bm25", round((1 + R2) / 2, 4), 0.5)
    langs = {(r["model"], r["task"], r["language"]): r["ndcg_at_10"] for r in breakdown_table(cells, "language").iter_rows(named=True)}
    assert langs[("dense", "t2", "fr")] == 1.0 and langs[("dense", "t2", "en")] == pytest.approx(R2, abs=1e-12)
    assert langs[("bm25", "t1", "en")] == pytest.approx((2 + R2) / 4, abs=1e-12)
    disc = breakdown_table(cells, "discipline")
    assert set(disc["discipline"]) == {"cardiology"} and disc.height == 4


def test_cells_with_confidence_intervals_and_markers(world):
    _, _, cells = world
    stats = significance(cells, "bm25", ["t1", "t2", "img"], n_resamples=1000)
    # img has no baseline values (bm25 cannot read it): no comparison there.
    assert sorted(set(stats["task"])) == ["t1", "t2"]
    direct = compare({c.model: c.per_query for c in cells if c.task == "t1" and c.per_query is not None}, "bm25", task="t1", n_resamples=1000, n_boot=1000)
    r = direct.filter(pl.col("model") == "dense").row(0, named=True)
    # d = (0, 1 - R2, 1, R2 - 1), observed sum 1. Under sign flips the sum is s_c + (1 - R2)(s_b - s_d); it falls
    # below 1 in size only when s_b - s_d = -2 s_c, 1 of the 4 (s_b, s_d) patterns: 12 of 16 patterns reach it.
    assert r["p_perm"] == pytest.approx(12 / 16, abs=1e-12)
    board = leaderboard(cells, ["bm25", "dense"], ["t1", "t2", "img"])
    md = leaderboard_markdown(BoardView(board, stats, not_applicable=frozenset({("bm25", "img")})))
    assert f"| dense | {format_cell(r['mean'], r['ci_low'], r['ci_high'], False)} |" in md
    assert "*: differs from bm25 (paired randomisation test, Holm-Bonferroni" in md
    # A clear difference over 20 queries gets its star. 1000 random sign patterns (of 2^20) do not reach it:
    # p = 2 (0 + 1) / (1000 + 1) = 0.001998.
    ids = [f"q{i}" for i in range(20)]
    strong = [
        Cell("bm25", "s", metrics={"mean": {"ndcg_at_10": 0.0}}, per_query=pl.DataFrame({"query_id": ids, "ndcg_at_10": [0.0] * 20})),
        Cell("best", "s", metrics={"mean": {"ndcg_at_10": 0.9}}, per_query=pl.DataFrame({"query_id": ids, "ndcg_at_10": [0.8, 1.0] * 10})),
    ]
    st = significance(strong, "bm25", n_resamples=1000)
    best = st.filter(pl.col("model") == "best").row(0, named=True)
    assert best["p_perm"] == pytest.approx(2 / 1001, abs=1e-15) and best["significant"] is True
    md = leaderboard_markdown(BoardView(leaderboard(strong, ["bm25", "best"], ["s"]), st))
    assert f"| best | 0.9000 [{best['ci_low']:.2f}, {best['ci_high']:.2f}] * | 0.9000 |" in md
    assert "| bm25 | 0.0000 [0.00, 0.00] | 0.0000 |" in md


def test_heatmap_and_difference_plots_decode_with_their_size(world, tmp_path):
    _, _, cells = world
    board = leaderboard(cells, ["bm25", "dense", "late"], ["t1", "t2", "img"])
    p = heatmap_png(board, tmp_path / "heatmap.png", not_applicable={("bm25", "img")})
    with Image.open(p) as im:
        im.load()
        assert im.format == "PNG" and im.size == heatmap_size(3, 3) == (620, 260)
        assert len(np.unique(np.asarray(im.convert("RGB")).reshape(-1, 3), axis=0)) > 20  # drawn, not blank
    again = heatmap_png(board, tmp_path / "heatmap2.png", not_applicable={("bm25", "img")})
    assert p.read_bytes() == again.read_bytes()  # deterministic
    pq = {c.model: c.per_query for c in cells if c.task == "t1" and c.per_query is not None}
    d = diff_plot_png(pq, "bm25", tmp_path / "diff_t1.png", task="t1")
    with Image.open(d) as im:
        im.load()
        assert im.size == diff_plot_size(1) == (800, 300)


def test_export_writes_mteb_json_and_trec_runs(world, tmp_path):
    root, tasks, cells = world
    index = export(cells, tmp_path / "out", code_version="abc123")
    # No registry given: every model is medbench/<name>; tasks from no hub dataset keep medbench's names.
    want = [f"results/medbench__{m}/rev_{m}/{t}.json" for m in ("bm25", "dense") for t in ("t1", "t2")]
    assert sorted(index["results"]) == sorted(
        want + ["results/medbench__dense/no_revision_available/img.json", "results/medbench__late/no_revision_available/t1.json"]
    )
    assert index["skipped"] == [{"model": "bm25", "task": "img", "reason": "not applicable"}]
    assert index["tasks"]["t1"] == {"mteb_task": None, "kept_medbench_name": True, "reason": "not read from a hub dataset (a local or bundled source)"}
    assert index["models"] == {"bm25": "medbench/bm25", "dense": "medbench/dense", "late": "medbench/late"}
    doc = json.loads((tmp_path / "out" / "results/medbench__bm25/rev_bm25/t1.json").read_text())
    cell = next(c for c in cells if (c.model, c.task) == ("bm25", "t1"))
    assert doc == mteb_result(cell, "abc123")  # round trip
    # The fields MTEB's TaskResult reads, with the values medbench computed.
    assert doc["dataset_revision"] == tasks["t1"].content_hash()
    assert doc["task_name"] == "t1" and doc["mteb_version"] is None and doc["kg_co2_emissions"] is None
    assert doc["evaluation_time"] == 1.25
    (subset,) = doc["scores"]["train"]
    assert subset["hf_subset"] == "default" and subset["languages"] == ["eng-Latn"]
    assert subset["main_score"] == subset["ndcg_at_10"] == pytest.approx((2 + R2) / 4, abs=1e-15)
    assert subset["recall_at_10"] == 0.75 and subset["mrr_at_10"] == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    t2 = json.loads((tmp_path / "out" / "results/medbench__dense/rev_dense/t2.json").read_text())
    assert t2["scores"]["train"][0]["languages"] == ["eng-Latn", "fra-Latn"]
    meta = json.loads((tmp_path / "out" / "results/medbench__dense/rev_dense/model_meta.json").read_text())
    assert meta["name"] == "medbench/dense" and meta["revision"] == "rev:dense" and meta["framework"] == []
    # TREC runs: the run files as the stages wrote them.
    assert (tmp_path / "out" / "trec/dense/t2.trec").read_bytes() == (root / "dense" / "t2" / "run" / "run.trec").read_bytes()
    assert json.loads((tmp_path / "out" / "index.json").read_text()) == index


def test_a_task_without_baseline_results_gets_cis_but_no_test(world, tmp_path):
    from medbench_core.evaluation.reports import Significance, build_tables, write_leaderboard
    from medbench_core.evaluation.stats import bootstrap_ci

    _, _, cells = world
    values = [0.0, 0.5, 1.0, 0.25, 0.75]
    img = Cell("dense", "img", metrics={"mean": {"ndcg_at_10": 0.5}}, per_query=pl.DataFrame({"query_id": list("vwxyz"), "ndcg_at_10": values}))
    cells = [c for c in cells if (c.model, c.task) != ("dense", "img") and c.model != "late"] + [img]
    out = write_leaderboard(build_tables(cells, ["bm25", "dense"], ["t1", "t2", "img"], Significance("bm25", n_resamples=1000)), tmp_path)
    row = out["stats"].filter((pl.col("task") == "img") & (pl.col("model") == "dense")).row(0, named=True)
    lo, hi = bootstrap_ci(values, n_resamples=1000, seed=0)
    assert (row["mean"], row["ci_low"], row["ci_high"]) == (0.5, lo, hi) and row["baseline"] is None and row["p_perm"] is None
    assert f"| {format_cell(0.5, lo, hi)} |" in out["markdown"] and "| n/a |" in out["markdown"]
    assert "No test on img: bm25 has no result there (CIs only)." in out["markdown"]
    assert sorted(out["files"]) == sorted(
        ["leaderboard.md", "leaderboard.csv", "leaderboard.json", "stats.csv", "heatmap.png", "diff/t1/dense.png", "diff/t2/dense.png"]
        + ["trust/bm25.png", "trust/dense.png"]
    )  # what each cell rests on, per model (issue 33)
