"""Hole-aware measures (medbench_core/evaluation/holes.py): by hand, against ir_measures, and the bounds.

ir_measures 0.4.3 is called directly: ``Judged@10`` (its own provider, OpenNIR's definition),
``Bpref`` and ``nDCG(judged_only=True)@10`` (pytrec_eval's bpref and trec_eval -J). Its Judged
provider breaks score ties by doc id ascending where trec_eval (and medbench) take descending, so
it gets each run with our ranks as scores; the pytrec_eval measures get the scores themselves.
"""

import itertools
import math
import random
from pathlib import Path

import ir_measures
import numpy as np
import polars as pl
import pytest
import pytrec_eval
from ir_measures import Bpref, Judged, nDCG

from medbench_core.evaluation.metrics import DEFAULT_METRICS, HOLE_METRICS, evaluate, evaluate_frame, qrels_to_dict, run_to_dict

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = ROOT.parent / "shared" / "data"
TOL = 1e-9
OURS_TO_IRM = {"judged_at_10": "Judged@10", "bpref_at_100": "Bpref", "ndcg_condensed_at_10": "nDCG(judged_only=True)@10", "ndcg_at_10": "nDCG@10"}


def trec_ranks(run: dict) -> dict:
    """Each query's documents scored by their trec_eval rank (score descending, doc id descending): no ties left."""
    out = {}
    for q, docs in run.items():
        order = sorted(docs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        out[q] = {d: float(len(order) - i) for i, (d, _) in enumerate(order)}
    return out


def ir_measures_values(qrels: dict, run: dict) -> dict[str, dict[str, float]]:
    """measure -> query -> value, from ir_measures itself (queries present in the run only, as ir_measures reports them)."""
    out: dict[str, dict[str, float]] = {}
    for m in ir_measures.iter_calc([Bpref, nDCG(judged_only=True) @ 10, nDCG @ 10], qrels, run):
        out.setdefault(str(m.measure), {})[m.query_id] = m.value
    for m in ir_measures.iter_calc([Judged @ 10], qrels, trec_ranks(run)):
        out.setdefault(str(m.measure), {})[m.query_id] = m.value
    return out


def assert_equals_ir_measures(qrels: dict, run: dict) -> int:
    ours = evaluate(qrels, run, list(OURS_TO_IRM))
    ref = ir_measures_values(qrels, run)
    compared = 0
    for m, name in OURS_TO_IRM.items():
        assert set(ref[name]) == {q for q in qrels if run.get(q)}
        for q, want in ref[name].items():
            assert ours.per_query[q][m] == pytest.approx(want, abs=TOL), (q, m)
            compared += 1
    return compared


# --- by hand --------------------------------------------------------------------------------


def test_values_worked_out_by_hand():
    # Ranking d1 > d2 > d3 > d4 > d5; judged: d1 (2), d3 (0), d5 (1), and d9 (3, not retrieved). Holes: d2, d4.
    qrels = {"q": {"d1": 2, "d3": 0, "d5": 1, "d9": 3}}
    run = {"q": {"d1": 5.0, "d2": 4.0, "d3": 3.0, "d4": 2.0, "d5": 1.0}}
    got = evaluate(qrels, run, [*HOLE_METRICS, "ndcg_at_10"], unjudged={"q": 6}).per_query["q"]
    log = np.log2
    assert got["judged_at_10"] == 3 / 5  # 5 ranked (fewer than 10): the share of what is there
    assert got["holes_at_10"] == 2
    # bpref: R = 3 relevant, N = 1 judged non-relevant; d1 has none above (1), d5 has d3 above: 1 - min(1, 3)/min(1, 3) = 0.
    assert got["bpref_at_100"] == pytest.approx((1 + 0) / 3)
    # condensed list d1, d3, d5: DCG 2/log2(2) + 1/log2(4); ideal 3, 2, 1.
    idcg = 3 + 2 / log(3) + 1 / log(4)
    assert got["ndcg_condensed_at_10"] == pytest.approx((2 + 1 / log(4)) / idcg)
    dcg0 = 2 + 1 / log(6)
    assert got["ndcg_at_10"] == pytest.approx(dcg0 / idcg)
    # The bounds: brute force over all 4^6 completions of the 6 unjudged documents (d2, d4 and four not ranked).
    lo, hi = brute_force_bounds(qrels["q"], ranking_of(run["q"]), ["d2", "d4", "x1", "x2", "x3", "x4"], top=3, k=10)
    assert got["ndcg_lower_at_10"] == pytest.approx(lo, abs=1e-12) and got["ndcg_upper_at_10"] == pytest.approx(hi, abs=1e-12)


def test_a_query_with_nothing_ranked_or_nothing_relevant():
    qrels = {"a": {"x": 1}, "b": {"y": 0}}
    run = {"b": {"z": 1.0, "y": 0.5}}
    got = evaluate(qrels, run, HOLE_METRICS, unjudged={"a": 3, "b": 3}).per_query
    assert got["a"] == {m: 0.0 for m in HOLE_METRICS} | {"ndcg_upper_at_10": 0.0}  # absent from the run: 0, as every metric
    # b: no relevant document judged; its hole z could be relevant, making nDCG 1; no completion scores below 0.
    assert got["b"]["ndcg_upper_at_10"] == 1.0 and got["b"]["ndcg_lower_at_10"] == 0.0 and got["b"]["bpref_at_100"] == 0.0
    assert got["b"]["judged_at_10"] == 0.5 and got["b"]["holes_at_10"] == 1


def test_a_negative_grade_is_in_the_pool_unjudged_as_trec_eval_reads_it():
    # trec_eval's form_res_rels.c reads a negative grade as RELVALUE_UNJUDGED: not among bpref's
    # judged non-relevant (N), dropped from the condensed list (-J), unjudged to m_unjudged.c.
    # pytrec_eval-terrier gives the reference values; Judged@10 and the holes count a and e as unjudged.
    qrels = {"q": {"a": -1, "b": 1, "c": 0, "d": 2, "e": -2}, "p": {"x": -1, "y": 1}}
    run = {"q": {"a": 5.0, "b": 4.0, "x": 3.0, "c": 2.0, "d": 1.0, "e": 0.5}, "p": {"x": 2.0, "y": 1.0, "z": 0.5}}
    names = ["bpref_at_100", "ndcg_condensed_at_10", "ndcg_at_10", "judged_at_10", "holes_at_10", "ndcg_lower_at_10", "ndcg_upper_at_10"]
    got = evaluate(qrels, run, names, unjudged={"q": 3, "p": 2}).per_query
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"bpref", "ndcg_cut.10", "num_nonrel_judged_ret"}).evaluate(run)
    condensed = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}, judged_docs_only_flag=True).evaluate(run)
    for q in qrels:
        assert got[q]["bpref_at_100"] == pytest.approx(ref[q]["bpref"], abs=1e-12), q
        assert got[q]["ndcg_at_10"] == pytest.approx(ref[q]["ndcg_cut_10"], abs=1e-12), q
        assert got[q]["ndcg_condensed_at_10"] == pytest.approx(condensed[q]["ndcg_cut_10"], abs=1e-12), q
    assert ref["q"]["num_nonrel_judged_ret"] == 1.0 and ref["q"]["bpref"] == 0.5  # c alone is judged non-relevant
    assert (got["q"]["judged_at_10"], got["q"]["holes_at_10"]) == (3 / 6, 3.0)  # a, x, e unjudged among 6 ranked
    assert (got["p"]["judged_at_10"], got["p"]["holes_at_10"]) == (1 / 3, 2.0)
    # The bounds let a and e (and x) take any grade, as every unjudged document.
    lo, hi = brute_force_bounds({"b": 1, "c": 0, "d": 2}, ranking_of(run["q"]), ["a", "e", "x"], top=2, k=10)
    assert (got["q"]["ndcg_lower_at_10"], got["q"]["ndcg_upper_at_10"]) == (pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12))


# --- the bounds are exact: brute force over every completion ----------------------------------


def ranking_of(scores: dict) -> list[str]:
    """trec_eval's order: score descending, doc id descending."""
    return [d for d, _ in sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


def ndcg_by_definition(qrels: dict, ranking: list[str], k: int) -> float:
    """trec_eval's ndcg_cut (gain = grade, log2 discount, ideal from every positive grade), written out."""
    dcg = sum(max(qrels.get(d, 0), 0) / math.log2(i + 2) for i, d in enumerate(ranking[:k]))
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]))
    return dcg / idcg if idcg else 0.0


def brute_force_bounds(judged: dict, ranking: list[str], unjudged: list[str], top: int, k: int) -> tuple[float, float]:
    """The lowest and highest nDCG@k over all (top + 1)^len(unjudged) completions."""
    values = [ndcg_by_definition(judged | dict(zip(unjudged, grades)), ranking, k) for grades in itertools.product(range(top + 1), repeat=len(unjudged))]
    return min(values), max(values)


def test_the_written_out_ndcg_is_trec_evals():
    # The brute force's nDCG is pytrec_eval's ndcg_cut on random completions, ties and absent documents included.
    rng = random.Random(5)
    for _ in range(50):
        docs = [f"d{i}" for i in range(12)]
        qrels = {d: rng.randint(0, 3) for d in rng.sample(docs, rng.randint(1, 12))} | {"absent": rng.randint(0, 3)}
        run = {d: float(rng.randint(0, 5)) for d in rng.sample(docs, rng.randint(1, 12))}
        for k in (5, 10):
            want = pytrec_eval.RelevanceEvaluator({"q": qrels}, {f"ndcg_cut.{k}"}).evaluate({"q": run})["q"][f"ndcg_cut_{k}"]
            assert ndcg_by_definition(qrels, ranking_of(run), k) == pytest.approx(want, abs=1e-12)


def test_the_issues_example_an_upper_bound_no_completion_reaches_is_gone():
    # Issue 46: a judged non-relevant document at rank 1, a relevant one not retrieved, nine holes
    # below. Independent best DCG over worst IDCG said 1.00; the best completion (every hole
    # relevant) gives (IDCG of 10 - 1) / IDCG of 10 = 0.78.
    run = {"q": {"n": 10.0, **{f"u{i}": 9.0 - i for i in range(9)}}}
    qrels = {"n": 0, "r": 1}
    got = evaluate({"q": qrels}, run, ["ndcg_lower_at_10", "ndcg_upper_at_10"], unjudged={"q": 9}).mean
    lo, hi = brute_force_bounds(qrels, ranking_of(run["q"]), [f"u{i}" for i in range(9)], top=1, k=10)
    idcg10 = sum(1 / math.log2(i + 2) for i in range(10))
    assert hi == pytest.approx((idcg10 - 1) / idcg10) and round(hi, 2) == 0.78
    assert got["ndcg_upper_at_10"] == pytest.approx(hi, abs=1e-12) and got["ndcg_lower_at_10"] == lo == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_the_bounds_equal_brute_force_over_every_completion_and_are_reached(seed):
    # Random queries: grades 0..top (1 to 4), ties, documents ranked or not, judged documents absent
    # from the universe, cut-offs shorter than the ranking; every completion of the unjudged
    # documents enumerated. Each bound equals the brute-force extreme (so some completion reaches it).
    rng = random.Random(seed)
    checked = 0
    while checked < 150:
        docs = [f"d{i}" for i in range(rng.randint(2, 11))]
        top = rng.choice([1, 2, 3, 4])
        judged = {d: rng.randint(0, top) for d in rng.sample(docs, rng.randint(0, len(docs)))}
        if rng.random() < 0.4:
            judged["absent"] = rng.randint(0, top)  # a judged document outside the universe: in the ideal, never ranked
        unjudged = [d for d in docs if d not in judged]
        if not judged or (top + 1) ** len(unjudged) > 3000:
            continue
        run = {"q": {d: float(rng.randint(0, 4)) for d in rng.sample(docs, rng.randint(1, len(docs)))}}
        k = rng.choice([3, 5, 10])
        names = [f"ndcg_lower_at_{k}", f"ndcg_upper_at_{k}"]
        # Another query holds the task's top grade (the grade every unjudged document may take).
        got = evaluate({"q": judged, "other": {"z": top}}, run, names, unjudged={"q": len(unjudged)}).per_query["q"]
        lo, hi = brute_force_bounds(judged, ranking_of(run["q"]), unjudged, top, k)
        assert (got[names[0]], got[names[1]]) == (pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12)), (judged, run, k)
        checked += 1


# --- the bounds hold for every completion ----------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_every_completion_of_the_judgments_lies_within_the_bounds(seed):
    rng = random.Random(seed)
    for _ in range(60):
        docs = [f"d{i}" for i in range(14)]
        judged = {d: rng.choice([0, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 8))}
        top = max(max(judged.values()), 1)
        run = {"q": {d: float(rng.randint(0, 6)) for d in rng.sample(docs, rng.randint(1, 14))}}  # ties included
        ev = evaluate({"q": judged}, run, ["ndcg_at_10", "ndcg_lower_at_10", "ndcg_upper_at_10"], unjudged={"q": len(docs) - len(judged)}).mean
        lo, hi = ev["ndcg_lower_at_10"], ev["ndcg_upper_at_10"]
        assert lo <= ev["ndcg_at_10"] <= hi
        completions = [{d: judged.get(d, rng.randint(0, top)) for d in docs} for _ in range(40)]
        completions += [{d: judged.get(d, g) for d in docs} for g in (0, top)]  # the two extreme completions
        for c in completions:
            v = ndcg_by_definition(c, ranking_of(run["q"]), 10)
            assert lo - 1e-12 <= v <= hi + 1e-12


def test_deleting_a_known_share_of_complete_qrels_keeps_the_truth_inside_the_bounds():
    # A synthetic task with complete qrels (every document judged for every query); 40% of the
    # judgments deleted at random. The bounds from what is left contain the complete-qrels score.
    rng = random.Random(7)
    docs = [f"d{i:02d}" for i in range(25)]
    complete = {f"q{i}": {d: rng.choice([0, 0, 0, 1, 2]) for d in docs} for i in range(30)}
    run = {q: {d: rng.random() for d in docs} for q in complete}
    pairs = sorted((q, d) for q, rels in complete.items() for d in rels)
    deleted = set(rng.sample(pairs, int(0.4 * len(pairs))))
    partial = {q: {d: g for d, g in rels.items() if (q, d) not in deleted} for q, rels in complete.items()}
    unjudged = {q: len(docs) - len(partial[q]) for q in complete}
    truth = evaluate(complete, run, ["ndcg_at_10"]).per_query
    got = evaluate(partial, run, ["ndcg_at_10", "ndcg_lower_at_10", "ndcg_upper_at_10", "judged_at_10"], unjudged=unjudged)
    assert 0.5 < got.mean["judged_at_10"] < 0.7  # about 60% of the top 10 still judged
    moved = 0
    for q in complete:
        v = got.per_query[q]
        assert v["ndcg_lower_at_10"] <= truth[q]["ndcg_at_10"] <= v["ndcg_upper_at_10"], q
        moved += v["ndcg_at_10"] != truth[q]["ndcg_at_10"]
    assert moved > 20  # the deletion did change the point values: the bounds are doing work


# --- equal to ir_measures ----------------------------------------------------------------------


def test_equal_to_ir_measures_on_random_runs_with_ties_and_short_lists():
    rng = random.Random(0)
    qrels, run = {}, {}
    for i in range(60):
        docs = [f"d{j}" for j in range(80)] + ["D7", "é1"]
        qrels[f"q{i}"] = {d: rng.choice([0, 0, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 25))}
        n = rng.randint(1, 60) if i % 5 else rng.randint(1, 9)  # some shorter than the cut
        run[f"q{i}"] = {d: float(rng.randint(0, 12)) for d in rng.sample(docs, n)}
    assert assert_equals_ir_measures(qrels, run) == 4 * 60


# --- bpref@100 and the condensed nDCG@10 past rank 100, against pytrec_eval ------------------------------


def trec_order(docs: dict) -> list:
    return [d for d, _ in sorted(docs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


def deep_runs_case(seed: int):
    """Runs 120-400 deep with ties; judgments sparse in some queries (their 10th judged document lies
    below rank 100), dense in others, some graded -1; queries with nothing relevant, with no judged non-relevant
    document, with only unjudged documents ranked, and one judged but absent from the run."""
    rng = random.Random(seed)
    docs = [f"d{j:03d}" for j in range(600)] + ["D7", "é1"]
    qrels, run = {}, {}
    for i in range(48):
        q = f"q{i}"
        ranked = rng.sample(docs, rng.randint(120, 400))
        run[q] = {d: float(rng.randint(0, 40)) for d in ranked}  # about ten documents share each score
        kind = i % 6
        if kind == 0:  # sparse: the judged documents sit deep in the ranking
            judged = rng.sample(trec_order(run[q])[90:], 14)
        elif kind == 1:  # nothing relevant
            qrels[q] = {d: 0 for d in rng.sample(docs, 30)}
            continue
        elif kind == 2:  # no judged non-relevant document
            qrels[q] = {d: rng.choice([1, 2, 3]) for d in rng.sample(ranked, 12) + rng.sample(docs, 3)}
            continue
        elif kind == 3:  # what is ranked is unjudged; the judgments name other documents
            qrels[q] = {d: rng.choice([0, 1, 2]) for d in rng.sample([d for d in docs if d not in run[q]], 8)}
            continue
        else:
            judged = rng.sample(docs, rng.randint(20, 200))
        # -1: trec_eval's "in the pool, unjudged" (left out of the condensed list, not in bpref's N)
        qrels[q] = {d: rng.choice([0, 0, 1, 2, 3, -1]) for d in judged}
    qrels["absent"] = {"d001": 2, "d002": 0}
    return qrels, run


def pytrec_eval_deep(qrels: dict, run: dict) -> dict[str, dict[str, float]]:
    """bpref of the run cut to its trec_eval top 100 (bpref_at_100) and trec_eval -J's ndcg_cut_10 (the condensed list)."""
    top100 = {q: {d: docs[d] for d in trec_order(docs)[:100]} for q, docs in run.items()}
    bpref = pytrec_eval.RelevanceEvaluator(qrels, {"bpref"}).evaluate(top100)
    condensed = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}, judged_docs_only_flag=True).evaluate(run)
    return {q: {"bpref_at_100": bpref[q]["bpref"], "ndcg_condensed_at_10": condensed[q]["ndcg_cut_10"]} for q in bpref}


@pytest.mark.parametrize("seed", range(3))
def test_bpref_and_condensed_ndcg_equal_pytrec_eval_past_rank_100(seed):
    qrels, run = deep_runs_case(seed)

    # The case reaches past the ranked top 100: queries whose 10th judged document lies below it.
    def judged(q, docs):
        return sum(qrels[q].get(d, -1) >= 0 for d in docs)

    deep = [q for q in run if q in qrels and judged(q, trec_order(run[q])[:100]) < 10 <= judged(q, run[q])]
    assert len(deep) >= 8
    # and a negative grade among them, judged in the qrels yet not in the condensed list
    assert any(qrels[q].get(d) == -1 for q in deep for d in trec_order(run[q])[100:])
    want = pytrec_eval_deep(qrels, run)
    for metrics in (["bpref_at_100", "ndcg_condensed_at_10"], DEFAULT_METRICS, ["ndcg_condensed_at_10"]):
        got = evaluate(qrels, run, metrics).per_query
        assert set(want) == set(run) and got["absent"] == {m: 0.0 for m in metrics}
        for q, values in want.items():
            for m, v in values.items():
                if m in metrics:
                    assert got[q][m] == pytest.approx(v, abs=TOL), (q, m, metrics)
    # The edge cases score what their definitions say: nothing relevant, 0; nothing judged ranked, 0.
    by_kind = {i % 6: f"q{i}" for i in range(48)}
    assert want[by_kind[1]] == {"bpref_at_100": 0.0, "ndcg_condensed_at_10": 0.0}
    assert want[by_kind[3]]["ndcg_condensed_at_10"] == 0.0
    assert want[by_kind[2]]["bpref_at_100"] > 0  # no judged non-relevant: each relevant document ranked adds 1


def test_the_frame_form_agrees_on_shuffled_rows():
    qrels, run = deep_runs_case(7)
    q = pl.DataFrame(
        {
            "query_id": [q for q, r in qrels.items() for _ in r],
            "doc_id": [d for r in qrels.values() for d in r],
            "relevance": [v for r in qrels.values() for v in r.values()],
        }
    )
    r = pl.DataFrame(
        {
            "query_id": [q for q, d in run.items() for _ in d],
            "doc_id": [x for d in run.values() for x in d],
            "score": [s for d in run.values() for s in d.values()],
        }
    )
    want = evaluate(qrels, run, DEFAULT_METRICS)
    got = evaluate_frame(q.sample(fraction=1.0, shuffle=True, seed=1), r.sample(fraction=1.0, shuffle=True, seed=2), DEFAULT_METRICS)
    assert got.per_query == want.per_query  # the mean adds queries in the qrels' order, which the shuffle moved


def test_bpref_with_a_tie_across_the_cut_at_100():
    # 101 documents scored alike: trec_eval's order (doc id descending) decides which 100 are ranked.
    run = {"q": {f"d{j:03d}": 1.0 for j in range(101)}}
    qrels = {"q": {"d000": 1, "d050": 0, "d100": 2, "d099": 0}}  # d000 is the one left out
    got = evaluate(qrels, run, ["bpref_at_100"]).per_query["q"]["bpref_at_100"]
    # Ranked: d100 (relevant, nothing above: 1), d099 (non-relevant), ..., d050 (non-relevant); R = 2, N = 2.
    assert got == pytest.approx(1 / 2)
    assert got == pytest.approx(pytrec_eval_deep(qrels, run)["q"]["bpref_at_100"], abs=TOL)


@pytest.fixture(scope="module")
def bundled_bm25_runs(tmp_path_factory):
    """BM25 top-100 runs (as the bundled `bm25` model ranks: bm25s, Lucene scoring) on the bundled text tasks:
    SciFact (binary, sparse), LiveQA-MedQuAD (graded 0-3, judged negatives) and FrenchMedMCQA (five candidates per question)."""
    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve
    from medbench_core.taskdata.catalog import build_task, load_catalog

    catalog = load_catalog(ROOT / "tasks.yaml")
    spec = next(s for s in load_registry(ROOT / "models.yaml") if s.name == "bm25")
    out = {}
    for name in ("scifact", "liveqa_medquad", "frenchmedmcqa"):
        tmp = tmp_path_factory.mktemp(name)
        task = build_task(catalog.task(name), SHARED_DATA, tmp / "work")
        dirs = {s: tmp / s for s in ("emb", "index", "run")}
        for d in dirs.values():
            d.mkdir()
        embed_corpus(spec, task, dirs["emb"])
        build_corpus_index(spec, dirs["emb"], dirs["index"])
        run, _ = retrieve(spec, task, dirs["emb"], dirs["index"], dirs["run"], k=100)
        out[name] = (qrels_to_dict(task.qrels), run_to_dict(run))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("task", ["scifact", "liveqa_medquad", "frenchmedmcqa"])
def test_equal_to_ir_measures_on_the_bundled_bm25_runs(bundled_bm25_runs, task):
    qrels, run = bundled_bm25_runs[task]
    assert assert_equals_ir_measures(qrels, run) >= 4 * len(run)
    judged = evaluate(qrels, run, ["judged_at_10"]).mean["judged_at_10"]
    # SciFact and LiveQA have holes in BM25's top 10; FrenchMedMCQA judges each of a question's five options.
    assert judged == 1.0 if task == "frenchmedmcqa" else judged < 1.0
