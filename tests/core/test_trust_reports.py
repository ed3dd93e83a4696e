"""What each cell rests on, in the leaderboard's files (medbench_core/evaluation/trust.py; issues 33, 46).

One task of four queries, each with one relevant document d<q> and one judged non-relevant n<q>;
the corpus also holds unjudged documents u0..u9. bm25 ranks the relevant document first, then
unjudged ones (Judged@10 = 1/10 per query: marked); dense ranks the relevant and the non-relevant
first, then unjudged ones (2/10, marked at threshold 0.5, not at 0.15).
"""

import itertools
import json
import math
from pathlib import Path

import ir_measures
import polars as pl
import pytest
from ir_measures import Bpref, nDCG
from PIL import Image
from scipy.stats import kendalltau

from medbench_core.evaluation.judging.spec import JudgementSpec, grade_mapping
from medbench_core.evaluation.reports import Cell, Significance, build_tables, load_cell, write_leaderboard
from medbench_core.evaluation.scoring import score
from medbench_core.evaluation.trust import MARK, UNINFORMATIVE, TrustSettings, agreement_markdown, cell_suffix, trust_markdown, trust_table
from medbench_core.taskdata.task import TaskMeta, make_task

ROOT = Path(__file__).resolve().parents[2]
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


def run_of(first: list[str]) -> pl.DataFrame:
    rows = []
    for q in QS:
        ranked = [d.format(q=q) for d in first] + UNJUDGED
        rows += [(q, d, float(len(ranked) - i)) for i, d in enumerate(ranked)]
    return pl.DataFrame(rows, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64}, orient="row")


def cells(tmp_path, metrics=None):
    t = task()
    out = []
    for model, first in (("bm25", ["d{q}"]), ("dense", ["d{q}", "n{q}"])):
        d = tmp_path / model
        d.mkdir()
        score(t, run_of(first), d, **({"metrics": metrics} if metrics else {}))
        out.append(load_cell(model, t, metrics_dir=d))
    return out


def lowest_ndcg(ranked_grades: list, holes: list[int], extras: int, k: int = 10) -> float:
    """Brute force: the lowest nDCG@k over every binary completion of the holes (positions in ``ranked_grades``)
    and of ``extras`` unjudged documents outside the top k (interchangeable: how many are relevant is what counts)."""
    best = math.inf
    judged_relevant = sum(1 for g in ranked_grades if g) + 0  # the judged relevant document is ranked in both runs
    for grades in itertools.product([0, 1], repeat=len(holes)):
        ranked = list(ranked_grades)
        for pos, g in zip(holes, grades):
            ranked[pos] = g
        dcg = sum(g / math.log2(i + 2) for i, g in enumerate(ranked[:k]))
        for e in range(extras + 1):
            n_rel = judged_relevant + sum(grades) + e
            idcg = sum(1 / math.log2(i + 2) for i in range(min(n_rel, k)))
            best = min(best, dcg / idcg)
    return best


def test_one_interval_per_cell_and_the_exact_bounds_in_the_table_beside(tmp_path):
    got = cells(tmp_path)
    table = trust_table(got, TrustSettings(judged_threshold=0.15))
    bm25 = table.filter(pl.col("model") == "bm25").row(0, named=True)
    dense = table.filter(pl.col("model") == "dense").row(0, named=True)
    assert bm25["judged_at_10"] == 0.1 and dense["judged_at_10"] == 0.2
    assert bm25["holes_at_10"] == 4 * 9 and dense["holes_at_10"] == 4 * 8
    assert bm25["low_judged"] and not dense["low_judged"]
    # Both score nDCG@10 = 1 (the relevant document first); no completion lifts it. The lowest completion,
    # by brute force: bm25 has 9 holes (ranks 2-10) and 16 - 9 = 7 unjudged documents outside its top 10;
    # dense 8 holes (ranks 3-10) and 8 outside.
    low_bm25 = lowest_ndcg([1] + [0] * 10, holes=list(range(1, 10)), extras=7)
    low_dense = lowest_ndcg([1, 0] + [0] * 9, holes=list(range(2, 10)), extras=8)
    assert bm25["value"] == 1.0 and bm25["upper"] == 1.0 and dense["upper"] == 1.0
    assert bm25["lower"] == pytest.approx(low_bm25, abs=1e-12) and dense["lower"] == pytest.approx(low_dense, abs=1e-12)
    assert (bm25["lower_metric"], bm25["upper_metric"]) == ("ndcg_lower_at_10", "ndcg_upper_at_10")
    assert cell_suffix(bm25) == MARK and cell_suffix(dense) == ""

    holes = {"t": {"mode": "refuse", "n_absent_doc_rows": 0, "n_queries_without_judgment": 0, "n_queries_without_positive": 0}}
    tables = build_tables(got, ["bm25", "dense"], ["t"], Significance("bm25", n_resamples=1000), trust=TrustSettings(judged_threshold=0.15), qrels_holes=holes)
    out = write_leaderboard(tables, tmp_path / "reports")
    md = out["markdown"]
    # The main table: the figure and its CI, one interval; the mark points to the table beside it.
    assert "| bm25 | 1.0000 [1.00, 1.00] † | 1.0000 |" in md and "| dense | 1.0000 [1.00, 1.00] | 1.0000 |" in md
    assert "J@10 0.10" not in md.split("What each cell rests on")[0] and "bounds [" not in md
    assert "are in the table 'What each cell rests on' below" in md
    assert f"| bm25 | t | 1.0000 | [{low_bm25:.4f}, 1.0000] | 0.10 † | 36 | 1.0000 | 1.0000 |" in md
    assert "one reaches each (ndcg_lower_at_10, ndcg_upper_at_10" in md
    assert "| t | 0 | 0 | 0 | refuse |" in md  # the task's qrels holes, from its contract
    csv = pl.read_csv(tmp_path / "reports" / "leaderboard.csv")
    assert csv["judged_at_10.t"].to_list() == [0.1, 0.2] and csv["low_judged.t"].to_list() == [True, False]
    assert csv["ndcg_lower_at_10.t"].to_list() == pytest.approx([low_bm25, low_dense], abs=1e-12)
    stats = pl.read_csv(tmp_path / "reports" / "stats.csv")
    assert stats.filter(pl.col("model") == "dense")["holes_at_10"].to_list() == [32]
    assert stats.filter(pl.col("model") == "dense")["bound_lower"].to_list() == pytest.approx([low_dense], abs=1e-12)
    doc = json.loads((tmp_path / "reports" / "leaderboard.json").read_text())
    assert doc["trust"]["settings"]["judged_threshold"] == 0.15 and len(doc["trust"]["cells"]) == 2
    assert doc["plots"]["trust"] == ["trust/bm25.png", "trust/dense.png"]
    with Image.open(tmp_path / "reports" / "trust" / "bm25.png") as im:
        assert im.size == (310, 420)


def test_labels_and_bounds_follow_the_configured_metric_and_a_metric_without_bounds_is_refused(tmp_path):
    # Recall@10 has no bounds in medbench: the trust table labels it Recall@10, shows its value, says
    # there are none, and puts no nDCG bounds beside it (CSV, JSON, MLflow keys). nDCG@20, with its
    # bounds stored, gets them under its own name.
    got = cells(tmp_path, metrics=("ndcg_at_10", "recall_at_10", "ndcg_at_20", "ndcg_lower_at_20", "ndcg_upper_at_20", "judged_at_10", "holes_at_10"))
    recall = TrustSettings(metric="recall_at_10")
    table = trust_table(got, recall)
    assert table["label"].to_list() == ["Recall@10"] * 2 and table["value"].to_list() == [1.0, 1.0]
    assert table["lower"].to_list() == [None, None] and table["no_bounds"][0].startswith("no bounds for Recall@10: medbench bounds nDCG@k")
    md = trust_markdown(table, ["bm25", "dense"], ["t"], recall)
    assert "| model | task | Recall@10 | bounds |" in md and "| bm25 | t | 1.0000 | none |" in md and "nDCG@10 beside" not in md
    assert "bounds: no bounds for Recall@10" in md
    sig = Significance("bm25", metric="recall_at_10", n_resamples=1000)
    out = write_leaderboard(build_tables(got, ["bm25", "dense"], ["t"], sig, trust=recall), tmp_path / "r")
    assert not any("lower" in c for c in pl.read_csv(tmp_path / "r" / "leaderboard.csv").columns)
    assert "Recall@10 by model and task" in out["markdown"] and "the bounds on its Recall@10" in out["markdown"]

    at20 = TrustSettings(metric="ndcg_at_20")
    row = trust_table(got, at20).row(0, named=True)
    mean = got[0].metrics["mean"]
    assert row["label"] == "nDCG@20" and (row["lower"], row["upper"]) == (mean["ndcg_lower_at_20"], mean["ndcg_upper_at_20"])
    assert row["lower"] != mean.get("ndcg_lower_at_10")  # its own bounds, not nDCG@10's
    assert "| model | task | nDCG@20 | bounds |" in trust_markdown(trust_table(got, at20), ["bm25"], ["t"], at20)
    # A bounded family whose bounds were not stored: said so, none shown.
    assert trust_table(got, TrustSettings(metric="ndcg_at_10"))["no_bounds"][0].startswith("no bounds stored for nDCG@10")


def test_bpref_and_condensed_ndcg_are_left_out_of_queries_without_a_judged_nonrelevant_document(tmp_path):
    # SciFact-like: queries p and r judge one relevant document each and nothing else; q also judges a
    # non-relevant one. The run puts each relevant document at rank 90: nDCG@10 0, bpref and condensed
    # nDCG@10 1.0 on p and r (ir_measures), which the reports leave out: their figure is q's alone.
    docs = [f"x{i:03d}" for i in range(120)]
    qrels = pl.DataFrame(
        [("p", "x089", 1), ("r", "x089", 1), ("q", "x089", 1), ("q", "x000", 0)], schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "relevance": pl.Int64},
        orient="row",
    )  # fmt: skip
    t = make_task(TaskMeta(name="sf", source="test"), pl.DataFrame({"query_id": ["p", "q", "r"], "text": ["a", "b", "c"]}),
                  pl.DataFrame({"doc_id": docs, "text": ["x"] * len(docs)}), qrels)  # fmt: skip
    rows = [(q, d, float(200 - i)) for q in "pqr" for i, d in enumerate(docs[:100])]
    run = pl.DataFrame(rows, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64}, orient="row")
    (tmp_path / "m").mkdir()
    result = score(t, run, tmp_path / "m")
    ref = {
        (m.query_id, str(m.measure)): m.value for m in ir_measures.iter_calc([Bpref, nDCG(judged_only=True) @ 10, nDCG @ 10], qrels_dict(qrels), run_dict(run))
    }
    assert ref[("p", "Bpref")] == 1.0 and ref[("p", "nDCG(judged_only=True)@10")] == 1.0 and ref[("p", "nDCG@10")] == 0.0
    summary = result["holes"]["judged_nonrelevant"]
    assert (summary["queries_with"], summary["queries_without"]) == (1, 2)
    assert summary["mean"]["bpref_at_100"] == pytest.approx(ref[("q", "Bpref")], abs=1e-12)
    assert summary["mean"]["ndcg_condensed_at_10"] == pytest.approx(ref[("q", "nDCG(judged_only=True)@10")], abs=1e-12)
    cell = load_cell("bm25", t, metrics_dir=tmp_path / "m")
    row = trust_table([cell]).row(0, named=True)
    assert row["bpref_at_100"] == pytest.approx(ref[("q", "Bpref")], abs=1e-12) and row["queries_with_judged_nonrelevant"] == 1
    md = trust_markdown(trust_table([cell]), ["bm25"], ["sf"])
    assert f"| {ref[('q', 'Bpref')]:.4f} {UNINFORMATIVE} (1 of 3 queries) |" in md and f"{UNINFORMATIVE}: bpref and condensed nDCG@10 rank" in md
    # No query with a judged non-relevant document: left out everywhere (Markdown, JSON, MLflow keys).
    only_positive = make_task(t.meta, t.queries, t.corpus, qrels.filter(pl.col("relevance") > 0))
    (tmp_path / "p").mkdir()
    score(only_positive, run, tmp_path / "p")
    none = trust_table([load_cell("bm25", only_positive, metrics_dir=tmp_path / "p")])
    assert none.row(0, named=True)["bpref_at_100"] is None and none.row(0, named=True)["ndcg_condensed_at_10"] is None
    assert f"| - {UNINFORMATIVE} | - {UNINFORMATIVE} |" in trust_markdown(none, ["bm25"], ["sf"])
    from medbench_core.evaluation.exports import mteb_result
    from medbench_core.evaluation.scoring import flat_metrics
    from medbench_core.evaluation.trust import trust_mlflow_metrics

    assert not any(k.endswith(("bpref_at_100", "ndcg_condensed_at_10")) for k in trust_mlflow_metrics(none))
    # The cell's MLflow run marks it; the MTEB export carries the figure over the queries with one, or none.
    flat = flat_metrics(result)
    assert flat["judged_nonrelevant.queries_with"] == 1.0 and flat["judged_nonrelevant.bpref_at_100"] == pytest.approx(ref[("q", "Bpref")], abs=1e-12)
    scores = mteb_result(cell)["scores"]["test"][0]
    assert scores["bpref_at_100"] == pytest.approx(ref[("q", "Bpref")], abs=1e-12) and scores["queries_with_judged_nonrelevant"] == 1.0
    gone = mteb_result(load_cell("bm25", only_positive, metrics_dir=tmp_path / "p"))["scores"]["test"][0]
    assert "bpref_at_100" not in gone and "ndcg_condensed_at_10" not in gone and gone["ndcg_at_10"] == 0.0


def qrels_dict(qrels: pl.DataFrame) -> dict:
    out: dict = {}
    for q, d, g in qrels.iter_rows():
        out.setdefault(q, {})[d] = int(g)
    return out


def run_dict(run: pl.DataFrame) -> dict:
    out: dict = {}
    for q, d, s in run.iter_rows():
        out.setdefault(q, {})[d] = float(s)
    return out


# --- the filled layer: circular cells act, families listed, agreement said where it is measured ----


def filled_cells(circular_model: str = "m3") -> list[Cell]:
    """Four models on task t (five queries): human per-query values, and filled ones in which m3 (built with the judge's family) jumps to the top."""
    human = {"m1": [0.9, 0.8, 0.7, 0.9, 0.8], "m2": [0.6, 0.5, 0.7, 0.6, 0.5], "m3": [0.3, 0.2, 0.4, 0.3, 0.2], "m4": [0.1, 0.2, 0.1, 0.2, 0.1]}
    filled = {"m1": [0.7, 0.8, 0.7, 0.6, 0.8], "m2": [0.8, 0.9, 0.8, 0.9, 0.9], "m3": [1.0, 1.0, 1.0, 1.0, 1.0], "m4": [0.2, 0.1, 0.2, 0.1, 0.3]}
    out = []
    for m in human:
        hq = pl.DataFrame({"query_id": [f"q{i}" for i in range(5)], "ndcg_at_10": human[m], "judged_at_10": [0.5] * 5})
        fq = pl.DataFrame({"query_id": [f"q{i}" for i in range(5)], "ndcg_at_10": filled[m], "judged_at_10": [1.0] * 5})
        circ = "hyde-qwen (generator qwen-7b-ins) (qwen)" if m == circular_model else ""
        out.append(Cell(model=m, task="t", metrics={"mean": {"ndcg_at_10": sum(human[m]) / 5, "judged_at_10": 0.5}, "n_queries": 5}, per_query=hq,
                        filled={"mean": {"ndcg_at_10": sum(filled[m]) / 5, "judged_at_10": 1.0}, "per_query": fq, "judgements": "umb@k1",
                                "circular": circ, "families": f"{m} (./{m}): {'qwen (name)' if circ else 'bert (config)'}"}))  # fmt: skip
    return out


LAYER = {"t": {"judgement": "umb", "judge": "Qwen/Qwen2.5-7B-Instruct", "families": {"qwen": "name"}, "status": "judged", "n_pairs": 40, "n_fill": 10,
               "n_calibration": 30,
               "n_unparsed": 0, "grade_map": {"0": 0, "1": 0, "2": 1, "3": 2}, "n_llm_other_queries": 3,
               "agreement": {"n_pairs": 30, "kappa_quadratic": 0.5, "kappa_ci": [0.3, 0.7], "alpha_ordinal": 0.4, "alpha_ci": [0.2, 0.6]}}}  # fmt: skip


def test_circular_cells_leave_the_filled_rankings_unless_kept_and_the_table_says_so(tmp_path):
    cells_ = filled_cells()
    sig = Significance("m1", n_resamples=1000)
    out = write_leaderboard(build_tables(cells_, ["m1", "m2", "m3", "m4"], ["t"], sig, trust=TrustSettings(), judgements=LAYER), tmp_path / "a")
    ranking = out["layers"]["t"]["ranking"]
    # tau over the three other models, as scipy computes it on their means
    means = {c.model: (c.value(), c.filled["mean"]["ndcg_at_10"]) for c in cells_ if c.model != "m3"}
    assert ranking["models"] == 3 and "m3" not in ranking["order_filled"]
    assert ranking["kendall_tau"] == pytest.approx(kendalltau([h for h, _ in means.values()], [f for _, f in means.values()]).statistic)
    assert all(m["model"] != "m3" for m in out["layers"]["t"]["moved"])
    md = out["markdown"]
    assert "| m3 | t | 0.2800 | left out: circular (hyde-qwen (generator qwen-7b-ins) (qwen)) | - |" in md
    assert "left out of the filled column, Kendall's tau, RBO and the moved rank intervals (setting keep_circular: false)" in md
    assert "| m1 | t | 0.8200 | 0.7200 | -0.1000 | 0.50 | 1.00 | umb@k1 | m1 (./m1): bert (config) |" in md  # each cell's families
    csv = pl.read_csv(tmp_path / "a" / "leaderboard.csv")
    assert csv.filter(pl.col("model") == "m3")["filled.t"].to_list() == [None]
    row = next(r for r in json.loads((tmp_path / "a" / "leaderboard.json").read_text())["trust"]["cells"] if r["model"] == "m3")
    assert row["filled"] is None and row["filled_circular"] == pytest.approx(1.0) and row["circular_left_out"] is True

    kept_tables = build_tables(cells_, ["m1", "m2", "m3", "m4"], ["t"], sig, trust=TrustSettings(keep_circular=True), judgements=LAYER)
    kept = write_leaderboard(kept_tables, tmp_path / "b")
    all4 = {c.model: (c.value(), c.filled["mean"]["ndcg_at_10"]) for c in cells_}
    assert kept["layers"]["t"]["ranking"]["models"] == 4 and kept["layers"]["t"]["ranking"]["order_filled"][0] == "m3"
    assert kept["layers"]["t"]["ranking"]["kendall_tau"] == pytest.approx(kendalltau([h for h, _ in all4.values()], [f for _, f in all4.values()]).statistic)
    assert "| m3 | t | 0.2800 | 1.0000 (circular, kept: hyde-qwen (generator qwen-7b-ins) (qwen)) | +0.7200 |" in kept["markdown"]
    assert "(setting keep_circular: true)" in kept["markdown"]


def test_the_agreement_says_it_is_measured_on_the_calibration_pairs_and_shows_the_grade_map():
    md = agreement_markdown(LAYER, ["t"])
    assert (
        "| t | umb (Qwen/Qwen2.5-7B-Instruct; families qwen (name)) | 0->0, 1->0, 2->1, 3->2 | 40 (10 + 30) | 0 | 0.50 [0.30, 0.70] on 30 calibration pairs |"
        in md
    )
    assert "on the calibration pairs: human-judged pairs drawn over the grades" in md and "not the holes the judge fills" in md
    assert "- t: 3 LLM grade(s) of queries the humans never judged are left out of the filled layer" in md
    # docs/trust.md's table of the automatic mapping is grade_mapping's own (UMBRELA 0-3 onto 0-1, 0-2, 0-3).
    doc = (ROOT / "docs" / "trust.md").read_text()
    spec = JudgementSpec(name="u", source="file", judge="j", path="x")
    for top in (1, 2, 3):
        onto = grade_mapping(spec, top)
        assert f"| 0-{top} | {' | '.join(str(onto[g]) for g in (0, 1, 2, 3))} |" in doc, top


def test_two_judgement_entries_on_one_task_are_refused_by_name_not_the_first_used_silently():
    from medbench_core.evaluation.judging.layers import attach_filled

    specs = [JudgementSpec(name="umb-a", source="file", judge="gpt-4o", path="a/{task}.jsonl"),
             JudgementSpec(name="umb-b", source="file", judge="claude", path="b/{task}.jsonl", tasks=("t",))]  # fmt: skip
    cells_, summary = attach_filled([], {"t": task()}, specs, layout=None, model_specs=[], expansions=[])
    assert summary["t"]["status"].startswith("refused: 2 judgements: entries judge t (umb-a, umb-b)")
    assert "refused: 2 judgements: entries judge t (umb-a, umb-b)" in agreement_markdown(summary, ["t"])
