"""Every metric against pytrec_eval-terrier (trec_eval 9) to 1e-9, on real runs and small hand-made ones.

Mapping to trec_eval measures: ndcg_at_10 = ndcg_cut_10, recall_at_K = recall_K,
map_at_100 = map_cut_100, mrr_at_10 = recip_rank of the run cut to its top 10 (trec_eval has
no cutoff for recip_rank). trec_eval leaves out judged queries that are missing from the run;
medbench scores them 0 (trec_eval -c), so the means are compared over every judged query.
"""

import math
from pathlib import Path

import pytest
import pytrec_eval

from medbench_core.evaluation.metrics import DEFAULT_METRICS, TREC_METRICS, evaluate, parse_metric, qrels_to_dict, run_to_dict
from medbench_core.retrieval import bm25_index
from medbench_core.taskdata.catalog import build_task, load_catalog

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = ROOT.parent / "shared" / "data"
TOL = 1e-9
TREC_MEASURES = {"ndcg_cut_10", "recall_10", "recall_100", "map_cut_100"}
OURS_TO_TREC = {"ndcg_at_10": "ndcg_cut_10", "recall_at_10": "recall_10", "recall_at_100": "recall_100", "map_at_100": "map_cut_100"}


def top10_trec_order(docs: dict[str, float]) -> dict[str, float]:
    # trec_eval ranks by score descending, then doc id descending (comp_sim_docno).
    return dict(sorted(docs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:10])


def reference(qrels: dict, run: dict) -> dict[str, dict[str, float]]:
    """pytrec_eval's per-query values under medbench's metric names (judged queries in the run only)."""
    full = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES).evaluate(run)
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate({q: top10_trec_order(d) for q, d in run.items()})
    out = {}
    for q, vals in full.items():
        out[q] = {ours: vals[trec] for ours, trec in OURS_TO_TREC.items()}
        out[q]["mrr_at_10"] = rr[q]["recip_rank"]
    return out


def assert_matches_trec_eval(qrels: dict, run: dict) -> None:
    ours = evaluate(qrels, run, TREC_METRICS)
    ref = reference(qrels, run)
    assert set(ours.per_query) == set(qrels)
    for q in qrels:
        for m in TREC_METRICS:
            want = ref[q][m] if q in ref else 0.0  # absent from the run: 0, as trec_eval -c
            assert ours.per_query[q][m] == pytest.approx(want, abs=TOL), (q, m)
    for m in TREC_METRICS:
        want = sum(ref.get(q, {}).get(m, 0.0) for q in qrels) / len(qrels)
        assert ours.mean[m] == pytest.approx(want, abs=TOL), m


@pytest.fixture(scope="module")
def bm25_runs(tmp_path_factory):
    """BM25 top-100 runs on SciFact train (binary qrels) and LiveQA-MedQuAD (graded 0-3)."""
    catalog = load_catalog(ROOT / "tasks.yaml")
    out = {}
    for name in ("scifact", "liveqa_medquad"):
        task = build_task(catalog.task(name), SHARED_DATA, tmp_path_factory.mktemp(name))
        retriever = bm25_index.fit(task.doc_text())
        run = bm25_index.search(retriever, task.queries["query_id"].to_list(), task.queries["text"].to_list(), task.corpus["doc_id"].to_list(), 100)
        out[name] = (qrels_to_dict(task.qrels), run_to_dict(run))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("task", ["scifact", "liveqa_medquad"])
def test_real_bm25_runs_match_trec_eval(bm25_runs, task):
    qrels, run = bm25_runs[task]
    assert len(run) == len(qrels) and all(len(d) == 100 for d in run.values())
    assert_matches_trec_eval(qrels, run)


@pytest.mark.slow
def test_liveqa_has_graded_gains_that_matter(bm25_runs):
    # Guard that the graded case is really exercised: with binary gains nDCG would differ.
    qrels, run = bm25_runs["liveqa_medquad"]
    assert {r for rels in qrels.values() for r in rels.values()} == {0, 1, 2, 3}
    binary = {q: {d: int(r > 0) for d, r in rels.items()} for q, rels in qrels.items()}
    graded = evaluate(qrels, run).mean["ndcg_at_10"]
    assert abs(graded - evaluate(binary, run).mean["ndcg_at_10"]) > 1e-3


@pytest.mark.slow
def test_real_run_with_a_query_removed_and_scores_tied(bm25_runs):
    qrels, run = bm25_runs["scifact"]
    first = sorted(run)[0]
    # Rounded scores create many ties, whose order (doc id descending) must match trec_eval's.
    tied = {q: {d: round(s, 0) for d, s in docs.items()} for q, docs in run.items() if q != first}
    assert sum(len(d) - len(set(d.values())) for d in tied.values()) > 10_000
    assert_matches_trec_eval(qrels, tied)
    assert evaluate(qrels, tied, TREC_METRICS).per_query[first] == {m: 0.0 for m in TREC_METRICS}


def test_hand_computed_ndcg_with_graded_gains_and_an_unjudged_doc():
    qrels = {"q1": {"d1": 3, "d2": 2, "d3": 0, "d4": 1}}
    run = {"q1": {"d3": 0.9, "d1": 0.8, "d5": 0.7, "d4": 0.6, "d2": 0.5}}  # d5 is unjudged
    # Ranking d3 d1 d5 d4 d2, gains 0 3 0 1 2 (trec_eval: gain = grade, discount log2(rank + 1)).
    dcg = 0 / math.log2(2) + 3 / math.log2(3) + 0 / math.log2(4) + 1 / math.log2(5) + 2 / math.log2(6)
    # = 1.892789 + 0.430677 + 0.773706 = 3.097172
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)  # = 3 + 1.261860 + 0.5 = 4.761860
    assert dcg / idcg == pytest.approx(0.650412182, abs=1e-9)
    ev = evaluate(qrels, run)
    assert ev.per_query["q1"]["ndcg_at_10"] == pytest.approx(0.650412182, abs=1e-9)
    assert ev.per_query["q1"]["mrr_at_10"] == 0.5  # first relevant (d1) at rank 2
    # relevant at ranks 2, 4, 5: (1/2 + 2/4 + 3/5) / 3
    assert ev.per_query["q1"]["map_at_100"] == pytest.approx((1 / 2 + 2 / 4 + 3 / 5) / 3, abs=1e-12)
    assert ev.per_query["q1"]["recall_at_10"] == 1.0
    assert_matches_trec_eval(qrels, run)


def test_ties_are_ordered_by_doc_id_descending_as_trec_eval():
    # All three score 1.0: trec_eval orders d9 > d2 > d10 (byte order, descending).
    qrels = {"q": {"d2": 1}}
    run = {"q": {"d10": 1.0, "d2": 1.0, "d9": 1.0}}
    assert evaluate(qrels, run).per_query["q"]["mrr_at_10"] == 0.5
    assert_matches_trec_eval(qrels, run)


def test_tie_straddling_the_cutoff():
    # Twelve documents tied; which two fall outside the top 10 is decided by doc id.
    qrels = {"q": {"a00": 1, "a11": 2, "a05": 1}}
    run = {"q": {f"a{i:02d}": 0.5 for i in range(12)}}
    ev = evaluate(qrels, run)
    # Descending ids: a11 .. a02 in the top 10; a00 (and a01) fall out.
    assert ev.per_query["q"]["recall_at_10"] == pytest.approx(2 / 3)
    assert ev.per_query["q"]["mrr_at_10"] == 1.0
    assert_matches_trec_eval(qrels, run)


def test_queries_missing_from_run_unjudged_only_and_no_relevant():
    qrels = {
        "hit": {"a": 1, "b": 0},
        "absent": {"x": 2},  # judged but not in the run -> 0
        "none_relevant": {"n": 0},  # IDCG 0 -> 0
        "unjudged_only": {"j": 1},  # the run retrieves only unjudged documents
    }
    run = {"hit": {"b": 2.0, "a": 1.0}, "none_relevant": {"n": 1.0}, "unjudged_only": {"u1": 3.0, "u2": 2.0}, "not_judged": {"z": 1.0}}
    ev = evaluate(qrels, run)
    assert set(ev.per_query) == set(qrels)  # the unjudged run query is ignored
    assert ev.per_query["absent"] == {m: 0.0 for m in DEFAULT_METRICS}  # nothing retrieved: nothing judged, no holes, bounds 0
    # two unjudged documents retrieved: Judged@10 0, two holes; once judged, nDCG@10 is 0 (both non-relevant) up to
    # both at the task's top grade 2, (2 + 2/log2 3) / (2 + 2/log2 3 + 1/log2 4): the relevant j, never retrieved, stays in the ideal.
    assert {m: ev.per_query["unjudged_only"][m] for m in ("judged_at_10", "holes_at_10", "ndcg_lower_at_10")} == {
        "judged_at_10": 0.0,
        "holes_at_10": 2.0,
        "ndcg_lower_at_10": 0.0,
    }
    assert ev.per_query["unjudged_only"]["ndcg_upper_at_10"] == pytest.approx((2 + 2 / math.log2(3)) / (2 + 2 / math.log2(3) + 0.5), abs=1e-12)
    assert ev.per_query["hit"]["mrr_at_10"] == 0.5
    # mean over the four judged queries: only "hit" scores
    assert ev.mean["recall_at_10"] == pytest.approx(1 / 4)
    assert_matches_trec_eval(qrels, run)


def test_metric_names_are_checked():
    assert parse_metric("map_at_100") == ("map", 100)
    for bad in ("ndcg@10", "ndcg_at_0", "precision_at_5", "ndcg_at_x"):
        with pytest.raises(ValueError, match="unknown metric"):
            parse_metric(bad)


def test_a_run_for_another_task_is_refused():
    from medbench_core.errors import DataError

    with pytest.raises(DataError, match="no run query id matches a judged query"):
        evaluate({"q1": {"d": 1}}, {"other": {"d": 1.0}})


# --- hit_rate_at_k: UniIR's "Recall@k" ----------------------------------------------------------


def uniir_compute_recall_at_k(relevant_docs, retrieved_indices, k):
    """UniIR's function as published (github.com/TIGER-AI-Lab/UniIR at 98dc570, src/common/mbeir_retriever.py l.149-166)."""
    if not relevant_docs:
        return 0.0
    top_k_retrieved_indices_set = set(retrieved_indices[:k])
    relevant_docs_set = set(relevant_docs)
    if relevant_docs_set.intersection(top_k_retrieved_indices_set):
        return 1.0
    else:
        return 0.0


def test_hit_rate_by_hand():
    qrels = {"first": {"a": 1}, "fifth": {"e": 2, "z": 1}, "sixth": {"f": 1}, "graded_zero": {"a": 0}, "absent": {"a": 1}}
    ranking = {d: 1.0 - i / 10 for i, d in enumerate("abcdef")}  # a b c d e f
    run = {q: dict(ranking) for q in ("first", "fifth", "sixth", "graded_zero")}
    ev = evaluate(qrels, run, ["hit_rate_at_1", "hit_rate_at_5", "recall_at_5"])
    assert {q: v["hit_rate_at_5"] for q, v in ev.per_query.items()} == {"first": 1.0, "fifth": 1.0, "sixth": 0.0, "graded_zero": 0.0, "absent": 0.0}
    assert ev.per_query["first"]["hit_rate_at_1"] == 1.0 and ev.per_query["fifth"]["hit_rate_at_1"] == 0.0
    assert ev.per_query["fifth"]["recall_at_5"] == 0.5  # one of two relevant found: recall 0.5, hit rate 1
    assert ev.mean["hit_rate_at_5"] == 2 / 5
    assert parse_metric("hit_rate_at_10") == ("hit_rate", 10)


def test_hit_rate_equals_uniir_and_trec_eval_success_on_random_runs():
    import random

    rng = random.Random(7)
    docs = [f"d{i:03d}" for i in range(25)]
    qrels, run = {}, {}
    for q in range(200):
        qid = f"q{q}"
        qrels[qid] = {d: rng.choice([0, 1, 1, 2]) for d in rng.sample(docs, rng.randint(1, 4))}
        scores = rng.sample(range(10_000), 20)  # distinct scores: one order, UniIR's FAISS order and trec_eval's agree
        run[qid] = {d: s / 10_000 for d, s in zip(rng.sample(docs, 20), scores)}
    ev = evaluate(qrels, run, ["hit_rate_at_1", "hit_rate_at_5", "hit_rate_at_10"])
    trec = pytrec_eval.RelevanceEvaluator(qrels, {"success.1,5,10"}).evaluate(run)
    for qid in qrels:
        relevant = [d for d, g in qrels[qid].items() if g > 0]  # UniIR's load_qrel keeps relevance_score > 0
        retrieved = sorted(run[qid], key=run[qid].get, reverse=True)
        for k in (1, 5, 10):
            assert ev.per_query[qid][f"hit_rate_at_{k}"] == uniir_compute_recall_at_k(relevant, retrieved, k) == trec[qid][f"success_{k}"]
    assert 0 < ev.mean["hit_rate_at_1"] < ev.mean["hit_rate_at_10"] < 1  # both outcomes occur at every k


@pytest.mark.slow
def test_hit_rate_on_real_bm25_runs_matches_trec_eval_success(bm25_runs):
    qrels, run = bm25_runs["liveqa_medquad"]
    ev = evaluate(qrels, run, ["hit_rate_at_5", "hit_rate_at_10"])
    trec = pytrec_eval.RelevanceEvaluator(qrels, {"success.5,10"}).evaluate(run)
    for q in qrels:
        for k in (5, 10):
            assert ev.per_query[q][f"hit_rate_at_{k}"] == trec.get(q, {}).get(f"success_{k}", 0.0), (q, k)
