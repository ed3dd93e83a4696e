"""Fusion against ranx's ``fuse`` on real runs, and a case small enough to work out by hand.

Real runs: BM25 on SciFact train with two settings (bm25s Lucene k1=1.5, b=0.75 and R2MED's k1=0.9,
b=0.4), top 100 each. Weighted-sum fusion depends on scores only, so ranx is given the runs as they
are. RRF depends on ranks, and ranx orders tied scores arbitrarily (on the BM25 run it disagrees with
trec_eval's order on 42 of 809 queries), whereas medbench ranks ties by doc id descending; ranx is
therefore also given the runs with their medbench ranks made explicit (score = 1000 - rank), and
must then agree on every query, and on the raw scores it must agree on every query without ties.
"""

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import pytrec_eval

from medbench_core.errors import DataError
from medbench_core.evaluation.metrics import evaluate, qrels_to_dict, run_to_dict
from medbench_core.retrieval import bm25_index
from medbench_core.retrieval.fuse_rerank import fuse, ranked
from medbench_core.retrieval.ranking import RUN_SCHEMA
from medbench_core.taskdata.catalog import build_task, load_catalog

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = ROOT.parent / "shared" / "data"


def run_frame(rows: list[tuple[str, str, float]]) -> pl.DataFrame:
    df = pl.DataFrame(rows, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64}, orient="row")
    return ranked(df).select(list(RUN_SCHEMA))


def as_ranx(df: pl.DataFrame, explicit_ranks: bool = False):
    from ranx import Run

    r = ranked(df)
    if explicit_ranks:
        r = r.with_columns(score=1000.0 - pl.col("rank").cast(pl.Float64))
    return Run(run_to_dict(r))


def fused_dict(df: pl.DataFrame) -> dict[str, dict[str, float]]:
    return run_to_dict(df)


def test_rrf_and_wsum_by_hand():
    a = run_frame([("q", "d1", 3.0), ("q", "d2", 2.0), ("q", "d3", 1.0)])
    b = run_frame([("q", "d3", 0.9), ("q", "d4", 0.5)])
    rrf = fuse({"a": a, "b": b}, "rrf", k=60)
    # d3: 1/63 + 1/61; d1: 1/61; d2: 1/62; d4: 1/62 -> d2 and d4 tie, doc id descending puts d4 first.
    assert rrf["doc_id"].to_list() == ["d3", "d1", "d4", "d2"]
    assert rrf["score"].to_list() == pytest.approx([1 / 63 + 1 / 61, 1 / 61, 1 / 62, 1 / 62], abs=1e-15)
    assert rrf["rank"].to_list() == [1, 2, 3, 4]
    assert rrf.schema == pl.Schema(RUN_SCHEMA)
    ws = fuse({"a": a, "b": b}, "wsum", weights=[0.25, 0.75], norm="min-max")
    # min-max in a: d1 1, d2 0.5, d3 0; in b: d3 1, d4 0. d3 = 0.75, d1 = 0.25, d2 = 0.125, d4 = 0.
    got = dict(zip(ws["doc_id"], ws["score"]))
    assert got == pytest.approx({"d3": 0.75, "d1": 0.25, "d2": 0.125, "d4": 0.0}, abs=1e-15)
    assert fuse({"a": a, "b": b}, "rrf", top_k=2)["doc_id"].to_list() == ["d3", "d1"]


def test_ties_in_an_input_are_ranked_by_doc_id():
    # d1 and d2 tie in a: trec_eval ranks d2 (the larger id) first, whatever order the rows come in.
    a = pl.DataFrame({"query_id": ["q", "q"], "doc_id": ["d1", "d2"], "score": [1.0, 1.0], "rank": [1, 2]})
    b = run_frame([("q", "d9", 1.0)])
    got = dict(zip(*fuse({"a": a, "b": b}, "rrf", k=60).select("doc_id", "score")))
    assert got["d2"] == pytest.approx(1 / 61) and got["d1"] == pytest.approx(1 / 62)


def test_bad_fusion_inputs():
    a = run_frame([("q", "d1", 1.0)])
    with pytest.raises(DataError, match="at least two runs"):
        fuse({"a": a}, "rrf")
    with pytest.raises(DataError, match="rrf takes no weights"):
        fuse({"a": a, "b": a}, "rrf", weights=[1, 2])
    with pytest.raises(DataError, match="2 weights for 3 runs"):
        fuse({"a": a, "b": a, "c": a}, "wsum", weights=[1, 2])
    with pytest.raises(DataError, match="norm 'l2' unknown"):
        fuse({"a": a, "b": a}, "wsum", norm="l2")
    twice = pl.DataFrame({"query_id": ["q", "q"], "doc_id": ["d1", "d1"], "score": [1.0, 0.5]})
    with pytest.raises(DataError, match="run 'b' lists document d1 twice for query q"):
        fuse({"a": a, "b": twice}, "rrf")


@pytest.fixture(scope="module")
def scifact_runs(tmp_path_factory):
    task = build_task(load_catalog(ROOT / "tasks.yaml").task("scifact"), SHARED_DATA, tmp_path_factory.mktemp("scifact"))
    qids, qtexts, dids = task.queries["query_id"].to_list(), task.queries["text"].to_list(), task.corpus["doc_id"].to_list()
    runs = {}
    for name, settings in {"bm25": {}, "bm25-r2med": {"k1": 0.9, "b": 0.4}}.items():
        retriever = bm25_index.fit(task.doc_text(), settings)
        runs[name] = bm25_index.search(retriever, qids, qtexts, dids, 100, settings)
    return qrels_to_dict(task.qrels), runs


def assert_same_scores(ours: pl.DataFrame, ranx_run, top_k: int = 100, queries=None) -> None:
    mine = fused_dict(ours)
    theirs = {q: dict(v) for q, v in ranx_run.run.items()}
    for q in queries if queries is not None else theirs:
        # ranx keeps every document; medbench keeps the top_k in trec_eval's order.
        want = dict(sorted(theirs[q].items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:top_k])
        assert set(mine[q]) == set(want), q
        for d, s in want.items():
            assert mine[q][d] == pytest.approx(s, abs=1e-12), (q, d)


def ndcg10_pytrec(qrels, run) -> float:
    per_q = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(run)
    return sum(per_q.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / len(qrels)


@pytest.mark.slow
def test_rrf_equals_ranx_on_real_runs(scifact_runs):
    from ranx import fuse as ranx_fuse

    qrels, runs = scifact_runs
    ours = fuse(runs, "rrf", k=60, top_k=100)
    assert ours.height == 809 * 100
    # Same rankings: equal on every query.
    theirs = ranx_fuse([as_ranx(runs["bm25"], True), as_ranx(runs["bm25-r2med"], True)], method="rrf", params={"k": 60})
    assert_same_scores(ours, theirs)
    # Raw scores: equal wherever neither input has tied scores (there ranx's order is trec_eval's).
    raw = ranx_fuse([as_ranx(runs["bm25"]), as_ranx(runs["bm25-r2med"])], method="rrf", params={"k": 60})
    tied = set()
    for r in runs.values():
        tied |= set(r.group_by("query_id", "score").len().filter(pl.col("len") > 1)["query_id"].to_list())
    untied = [q for q in run_to_dict(ours) if q not in tied]
    assert len(untied) > 500
    assert_same_scores(ours, raw, queries=untied)
    # nDCG@10 of the fused run: medbench's metric on medbench's run = pytrec_eval on ranx's run.
    ours_ndcg = evaluate(qrels, run_to_dict(ours), ["ndcg_at_10"]).mean["ndcg_at_10"]
    assert ours_ndcg == pytest.approx(ndcg10_pytrec(qrels, {q: dict(v) for q, v in theirs.run.items()}), abs=1e-9)
    # And the fusion is not one of its inputs.
    inputs = [evaluate(qrels, run_to_dict(r), ["ndcg_at_10"]).mean["ndcg_at_10"] for r in runs.values()]
    assert all(abs(ours_ndcg - v) > 1e-4 for v in inputs)


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["min-max", "max", "zmuv"])
def test_wsum_equals_ranx_on_real_runs(scifact_runs, norm):
    from ranx import fuse as ranx_fuse

    qrels, runs = scifact_runs
    weights = [0.3, 0.7]
    ours = fuse(runs, "wsum", weights=weights, norm=norm, top_k=100)
    theirs = ranx_fuse([as_ranx(runs["bm25"]), as_ranx(runs["bm25-r2med"])], norm=norm, method="wsum", params={"weights": weights})
    assert_same_scores(ours, theirs)
    ours_ndcg = evaluate(qrels, run_to_dict(ours), ["ndcg_at_10"]).mean["ndcg_at_10"]
    assert ours_ndcg == pytest.approx(ndcg10_pytrec(qrels, {q: dict(v) for q, v in theirs.run.items()}), abs=1e-9)


def test_fusion_of_runs_with_different_queries_keeps_every_query():
    a = run_frame([("q1", "d1", 1.0), ("q2", "d2", 1.0)])
    b = run_frame([("q2", "d3", 2.0), ("q3", "d1", 1.0)])
    out = fuse({"a": a, "b": b}, "rrf")
    assert out["query_id"].unique(maintain_order=True).to_list() == ["q1", "q2", "q3"]
    assert np.allclose(out.filter(pl.col("query_id") == "q2")["score"].to_numpy(), [1 / 61, 1 / 61])
    assert out.filter(pl.col("query_id") == "q2")["doc_id"].to_list() == ["d3", "d2"]
