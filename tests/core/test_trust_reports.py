"""What each cell rests on, in the leaderboard's files (medbench_core/evaluation/trust.py).

One task of four queries, each with one relevant document d<q> and one judged non-relevant n<q>;
the corpus also holds unjudged documents u0..u9. bm25 ranks the relevant document first, then
unjudged ones (Judged@10 = 1/10 per query: marked); dense ranks the relevant and the non-relevant
first, then unjudged ones (2/10, marked at threshold 0.5, not at 0.15).
"""

import json
import math

import polars as pl
from PIL import Image

from medbench_core.evaluation.reports import Significance, load_cell, write_leaderboard
from medbench_core.evaluation.scoring import score
from medbench_core.evaluation.trust import MARK, TrustSettings, cell_suffix, trust_table
from medbench_core.taskdata.task import TaskMeta, make_task

QS = ["a", "b", "c", "d"]
UNJUDGED = [f"u{i}" for i in range(10)]


def task():
    docs = [f"d{q}" for q in QS] + [f"n{q}" for q in QS] + UNJUDGED
    return make_task(
        TaskMeta(name="t", source="test"),
        pl.DataFrame({"query_id": QS, "text": [f"query {q}" for q in QS]}),
        pl.DataFrame({"doc_id": docs, "text": ["x"] * len(docs)}),
        pl.DataFrame({"query_id": QS * 2, "doc_id": [f"d{q}" for q in QS] + [f"n{q}" for q in QS], "relevance": [1] * 4 + [0] * 4}),
    )


def run_of(first: list[str]) -> dict:
    rows = []
    for q in QS:
        ranked = [d.format(q=q) for d in first] + UNJUDGED
        rows += [(q, d, float(len(ranked) - i)) for i, d in enumerate(ranked)]
    return pl.DataFrame(rows, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64}, orient="row")


def cells(tmp_path):
    t = task()
    out = []
    for model, first in (("bm25", ["d{q}"]), ("dense", ["d{q}", "n{q}"])):
        d = tmp_path / model
        d.mkdir()
        score(t, run_of(first), d)
        out.append(load_cell(model, t, metrics_dir=d))
    return out


def test_the_cells_show_judged_at_10_and_the_bounds(tmp_path):
    got = cells(tmp_path)
    table = trust_table(got, TrustSettings(judged_threshold=0.15))
    bm25 = table.filter(pl.col("model") == "bm25").row(0, named=True)
    dense = table.filter(pl.col("model") == "dense").row(0, named=True)
    assert bm25["judged_at_10"] == 0.1 and dense["judged_at_10"] == 0.2
    assert bm25["holes_at_10"] == 4 * 9 and dense["holes_at_10"] == 4 * 8
    assert bm25["low_judged"] and not dense["low_judged"]
    # Both score nDCG@10 = 1 (the relevant document first); no completion can lift it, and the lower
    # bound lets the 10 unjudged documents of each query be relevant: IDCG_G over 10 relevant at grade 1.
    idcg_g = sum(1 / math.log2(i + 2) for i in range(10))
    assert bm25["value"] == 1.0 and bm25["ndcg_upper_at_10"] == 1.0
    assert abs(bm25["ndcg_lower_at_10"] - 1 / idcg_g) < 1e-12 and abs(dense["ndcg_lower_at_10"] - 1 / idcg_g) < 1e-12
    assert cell_suffix(bm25) == f"J@10 0.10, bounds [{1 / idcg_g:.2f}, 1.00] {MARK}"

    out = write_leaderboard(got, ["bm25", "dense"], ["t"], Significance("bm25", n_resamples=1000), tmp_path / "reports",
                            trust=TrustSettings(judged_threshold=0.15), qrels_holes={"t": {"mode": "refuse", "n_absent_doc_rows": 0,
                            "n_queries_without_judgment": 0, "n_queries_without_positive": 0}})  # fmt: skip
    md = out["markdown"]
    assert f"1.0000 [1.00, 1.00] · J@10 0.10, bounds [0.22, 1.00] {MARK} |" in md
    assert "· J@10 0.20, bounds [0.22, 1.00] |" in md
    assert "| bm25 | t | 1.0000 | [0.2201, 1.0000] | 0.10 † | 36 | 1.0000 | 1.0000 |" in md
    assert "| t | 0 | 0 | 0 | refuse |" in md  # the task's qrels holes, from its contract
    csv = pl.read_csv(tmp_path / "reports" / "leaderboard.csv")
    assert csv["judged_at_10.t"].to_list() == [0.1, 0.2] and csv["low_judged.t"].to_list() == [True, False]
    stats = pl.read_csv(tmp_path / "reports" / "stats.csv")
    assert stats.filter(pl.col("model") == "dense")["holes_at_10"].to_list() == [32]
    doc = json.loads((tmp_path / "reports" / "leaderboard.json").read_text())
    assert doc["trust"]["settings"]["judged_threshold"] == 0.15 and len(doc["trust"]["cells"]) == 2
    assert doc["plots"]["trust"] == ["trust/bm25.png", "trust/dense.png"]
    with Image.open(tmp_path / "reports" / "trust" / "bm25.png") as im:
        assert im.size == (310, 420)
