"""LLM relevance judgements (medbench_core/evaluation/judging): entries, pool, parsing, files, the
filled layer, agreement against reference implementations, the circularity guard, and the real
judge path on a tiny random-weight causal LM built offline (tests/core/_expansion_fixtures.tiny_lm).
"""

import json
import random
import sys
from pathlib import Path

import krippendorff
import numpy as np
import polars as pl
import pytest
from scipy.stats import kendalltau
from sklearn.metrics import cohen_kappa_score

from medbench_core.errors import DataError
from medbench_core.evaluation.judging.agreement import (
    krippendorff_alpha_ordinal,
    moved_intervals,
    pair_agreement,
    ranking_agreement,
    rbo_ext,
    weighted_kappa,
)
from medbench_core.evaluation.judging.circularity import cell_builders, circular, family_sources
from medbench_core.evaluation.judging.judge import Verdict
from medbench_core.evaluation.judging.layers import llm_fill, score_filled
from medbench_core.evaluation.judging.pool import build_pool
from medbench_core.evaluation.judging.prompt import cut_words, parse_grade, render
from medbench_core.evaluation.judging.spec import JudgementSpec, grade_mapping, parse_judgements
from medbench_core.evaluation.judging.stage import build_judgements, judgement_stage_key
from medbench_core.evaluation.metrics import evaluate_frame
from medbench_core.taskdata.task import TaskMeta, make_task

ROOT = Path(__file__).resolve().parents[2]


# --- a synthetic task with complete qrels ------------------------------------------------------


def filled_qrels(human: pl.DataFrame, judgements: pl.DataFrame) -> pl.DataFrame:
    """The filled layer's qrels (human grades plus the LLM's on the pairs they leave unjudged)."""
    return llm_fill(human, judgements)[0]


def families(name: str) -> frozenset[str]:
    return frozenset(family_sources(name))


def complete_task(n_queries: int = 12, n_docs: int = 15, seed: int = 3):
    """Every (query, document) pair judged 0-2; returns the task and its complete qrels."""
    rng = random.Random(seed)
    docs = [f"d{i:02d}" for i in range(n_docs)]
    qs = [f"q{i:02d}" for i in range(n_queries)]
    rows = [(q, d, rng.choice([0, 0, 0, 1, 2])) for q in qs for d in docs]
    for q in qs:  # at least one positive per query
        rows.append((q, "d00", 2)) if not any(g > 0 for qq, _, g in rows if qq == q) else None
    rows = list({(q, d): (q, d, g) for q, d, g in rows}.values())
    qrels = pl.DataFrame(rows, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "relevance": pl.Int64}, orient="row")
    task = make_task(
        TaskMeta(name="synthetic", source="test"),
        pl.DataFrame({"query_id": qs, "text": [f"question number {q}" for q in qs]}),
        pl.DataFrame({"doc_id": docs, "text": [f"passage about topic {d}" for d in docs]}),
        qrels,
    )
    return task, qrels


def full_run(task, seed: int) -> pl.DataFrame:
    rng = random.Random(seed)
    rows = []
    for q in task.queries["query_id"].to_list():
        docs = task.corpus["doc_id"].to_list()
        rng.shuffle(docs)
        rows += [(q, d, i + 1, float(len(docs) - i)) for i, d in enumerate(docs)]
    return pl.DataFrame(rows, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "rank": pl.Int64, "score": pl.Float64}, orient="row")


class OracleJudge:
    """A stub judge that returns each pair's grade from a table (``wrong``: the share of pairs whose grade it changes)."""

    revision = "stub-1"

    def __init__(self, task, truth: dict, wrong: float = 0.0, seed: int = 0, grades=(0, 1, 2, 3)):
        texts_q = dict(zip(task.queries["query_id"], task.queries["text"]))
        texts_d = dict(zip(task.corpus["doc_id"], task.doc_text()))
        self.by_text = {(texts_q[q], texts_d[d]): g for (q, d), g in truth.items()}
        self.rng = random.Random(seed)
        self.wrong, self.grades, self.calls = wrong, grades, 0

    def judge(self, queries, passages, cache=None, progress=False):
        self.calls += 1
        out = []
        for q, p in zip(queries, passages):
            g = self.by_text[(q, p)]
            if self.rng.random() < self.wrong:
                g = self.rng.choice([x for x in self.grades if x != g])
            out.append(Verdict(g, f"##final score: {g}"))
        return out, {"judged": len(out), "seconds": 0.0, "seconds_total": 0.0}


def spec_of(**kw) -> JudgementSpec:
    base = {"name": "stub", "source": "generate", "judge": "stub-judge", "pool": {"models": ["a", "b"], "depth": 15, "calibration": 40, "seed": 0},
            "grade_map": {0: 0, 1: 1, 2: 2, 3: 2}}  # fmt: skip
    return JudgementSpec(**(base | kw))


def test_the_filled_layer_recovers_the_complete_score_when_the_judge_is_right():
    # Delete 40% of a complete qrels set; the judge grades the holes in two models' whole runs
    # right: the filled layer is the complete qrels again, and so is every score.
    task, complete = complete_task()
    rng = random.Random(1)
    pairs = sorted(complete.select("query_id", "doc_id").iter_rows())
    keep = set(rng.sample(pairs, int(0.6 * len(pairs))))
    partial = complete.filter(pl.struct("query_id", "doc_id").map_elements(lambda s: (s["query_id"], s["doc_id"]) in keep, return_dtype=pl.Boolean))
    for q in task.queries["query_id"]:  # every query keeps a judgment (the human layer scores the same queries)
        if not partial.filter(pl.col("query_id") == q).height:
            partial = pl.concat([partial, complete.filter(pl.col("query_id") == q).head(1)])
    sparse = make_task(task.meta, task.queries, task.corpus, partial)
    truth = {(q, d): g for q, d, g in complete.iter_rows()}
    runs = {"a": full_run(task, 10), "b": full_run(task, 11)}
    frame, info = build_judgements(spec_of(), sparse, runs=runs, run_keys={"a": "ka", "b": "kb"}, judge=OracleJudge(task, truth))
    assert info["n_fill"] == len(pairs) - partial.height and info["n_unparsed"] == 0
    assert info["agreement"]["kappa_quadratic"] == 1.0 and info["agreement"]["alpha_ordinal"] == 1.0
    assert filled_qrels(sparse.qrels, frame).sort("query_id", "doc_id").equals(complete.sort("query_id", "doc_id"))
    for run in runs.values():
        truth_scores = evaluate_frame(complete, run).mean
        partial_scores = evaluate_frame(sparse.qrels, run).mean
        filled = score_filled(sparse, run, frame)["mean"]
        for m in ("ndcg_at_10", "recall_at_100", "map_at_100", "judged_at_10"):
            assert filled[m] == pytest.approx(truth_scores[m], abs=1e-12), m
        assert partial_scores["ndcg_at_10"] != truth_scores["ndcg_at_10"]
        assert filled["judged_at_10"] == 1.0


def test_the_pool_holds_the_holes_of_the_top_k_and_a_calibration_sample_over_the_grades():
    task, complete = complete_task(n_queries=4, n_docs=8)
    sparse = make_task(task.meta, task.queries, task.corpus, complete.filter(pl.col("doc_id") < "d04"))
    runs = {"a": full_run(task, 1), "b": full_run(task, 2)}
    pool = build_pool(sparse, runs, depth=3, calibration=6, seed=0)
    fill, calib = pool.filter(pl.col("role") == "fill"), pool.filter(pl.col("role") == "calibration")
    tops = {(q, d) for r in runs.values() for q, d, k in r.select("query_id", "doc_id", "rank").iter_rows() if k <= 3}
    assert set(fill.select("query_id", "doc_id").iter_rows()) == {p for p in tops if p[1] >= "d04"}
    assert calib.height == 6 and set(calib["human"].to_list()) == set(sparse.qrels["relevance"].to_list())  # every grade drawn
    assert build_pool(sparse, runs, depth=3, calibration=6, seed=0).equals(pool)  # seeded


def test_entries_are_checked_naming_the_file_and_the_field(tmp_path):
    where = tmp_path / "models.yaml"
    with pytest.raises(DataError, match="unknown field.*'pol'.*did you mean 'pool'"):
        parse_judgements([{"name": "j", "source": "generate", "judge": "x", "pol": {}}], where)
    with pytest.raises(DataError, match="needs 'pool: {models"):
        parse_judgements([{"name": "j", "source": "generate", "judge": "x"}], where)
    with pytest.raises(DataError, match=r"pool model\(s\) \['nope'\] are not entries"):
        parse_judgements([{"name": "j", "source": "generate", "judge": "x", "pool": {"models": ["nope"]}}], where, ["bm25"])
    with pytest.raises(DataError, match="does not take"):
        parse_judgements([{"name": "j", "source": "file", "judge": "x", "path": "a", "decode": "generate"}], where)
    with pytest.raises(DataError, match="unknown format"):
        parse_judgements([{"name": "j", "source": "file", "judge": "x", "path": "a", "format": "csv"}], where)


def test_grade_mapping_and_constrained_parsing():
    s = spec_of()
    assert grade_mapping(JudgementSpec(name="j", source="file", judge="x", path="p"), 1) == {0: 0, 1: 0, 2: 1, 3: 1}  # binary: 2+ relevant
    assert grade_mapping(JudgementSpec(name="j", source="file", judge="x", path="p"), 3) == {0: 0, 1: 1, 2: 2, 3: 3}
    assert grade_mapping(s, 1) == {0: 0, 1: 1, 2: 2, 3: 2}  # given explicitly
    assert parse_grade("##final score: 2") == 2
    assert parse_grade("M: 2, T: 1\n##Final Score: 3") == 3
    assert parse_grade("##final score: 1 ... ##final score: 0") == 0  # the last marker wins
    assert parse_grade(" 3 ") == 3
    for unparsed in ("The passage is relevant (category 2).", "##final score: 7", "", "I would say 2 or 3"):
        assert parse_grade(unparsed) is None, unparsed  # UMBRELA would read a digit anywhere, or fall back to 0
    assert render("Q: {query} P: {passage}", "a {passage}", "b") == "Q: a {passage} P: b"


# --- the edges: other queries, negative grades, identical ids (issue 46) ---------------------------


def trec_ndcg_mean(qrels: pl.DataFrame, run: pl.DataFrame) -> tuple[float, int]:
    """pytrec_eval's mean ndcg_cut_10 over the queries of ``qrels`` (absent from the run: 0), and their number."""
    import pytrec_eval

    q: dict = {}
    for qid, d, g in qrels.select("query_id", "doc_id", "relevance").iter_rows():
        q.setdefault(qid, {})[d] = int(g)
    r: dict = {}
    for qid, d, sc in run.select("query_id", "doc_id", "score").iter_rows():
        r.setdefault(qid, {})[d] = float(sc)
    vals = pytrec_eval.RelevanceEvaluator(q, {"ndcg_cut.10"}).evaluate(r)
    return sum(vals.get(qid, {}).get("ndcg_cut_10", 0.0) for qid in q) / len(q), len(q)


def test_the_filled_layer_holds_the_humans_queries_only():
    # A judgement file may grade queries the humans never judged: those grades stay out of the
    # filled layer (counted), so both layers score the same queries. Expected: pytrec_eval on the
    # human qrels plus the LLM grades of the humans' queries.
    task, complete = complete_task(n_queries=6, n_docs=8)
    humans = ["q00", "q01", "q02", "q03"]
    sparse = make_task(task.meta, task.queries, task.corpus, complete.filter(pl.col("query_id").is_in(humans) & (pl.col("doc_id") <= "d02")))
    fill = [{"query_id": q, "doc_id": d, "role": "fill", "grade": g} for q, d, g in complete.filter(pl.col("doc_id") > "d02").iter_rows()]
    from medbench_core.evaluation.judging.frame import judgement_frame

    frame = judgement_frame(fill)
    run = full_run(task, 3)
    got = score_filled(sparse, run, frame)
    others = sum(1 for r in fill if r["query_id"] not in humans)
    want_qrels = pl.concat([sparse.qrels, complete.filter(pl.col("query_id").is_in(humans) & (pl.col("doc_id") > "d02"))], how="vertical_relaxed")
    want, n = trec_ndcg_mean(want_qrels, run)
    assert got["n_queries"] == n == 4 and got["n_llm_other_queries"] == others == 2 * 5
    assert set(got["per_query"]["query_id"].to_list()) == set(humans)
    assert got["mean"]["ndcg_at_10"] == pytest.approx(want, abs=1e-12)
    assert set(filled_qrels(sparse.qrels, frame)["query_id"].to_list()) == set(humans)


def test_negative_grades_are_in_the_pool_unjudged_for_the_judge_the_agreement_and_the_filled_layer(tmp_path):
    # trec_eval reads a negative grade as "in the pool, unjudged" (form_res_rels.c). A human -1 is a
    # hole the judge fills (never a calibration pair); a -1 in a TREC judgement file is no grade; the
    # agreement leaves such pairs out instead of failing on them (KeyError: -1 before issue 46).
    agree = pair_agreement([-1, 0, 1, 2, 2, 0, 1, 1], [0, 0, 1, 2, 1, 1, -1, 1], [0, 1, 2], n_resamples=50)
    kept_h, kept_l = [0, 1, 2, 2, 0, 1], [0, 1, 2, 1, 1, 1]
    assert agree["n_pairs"] == 6 and agree["n_unjudged"] == 2
    assert agree["kappa_quadratic"] == pytest.approx(cohen_kappa_score(kept_h, kept_l, weights="quadratic", labels=[0, 1, 2]), abs=1e-12)
    with pytest.raises(ValueError, match=r"grade\(s\) \[7\] are not on the scale"):
        pair_agreement([0, 7], [0, 1], [0, 1, 2])

    task, complete = complete_task(n_queries=3, n_docs=4)
    human = pl.DataFrame(
        [("q00", "d00", 1), ("q00", "d01", -1), ("q01", "d00", 0), ("q01", "d02", 2), ("q02", "d03", 1)],
        schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "relevance": pl.Int64},
        orient="row",
    )
    sparse = make_task(task.meta, task.queries, task.corpus, human)
    pool = build_pool(sparse, {"a": full_run(task, 1)}, depth=4, calibration=10, seed=0)
    assert ("q00", "d01") in set(pool.filter(pl.col("role") == "fill").select("query_id", "doc_id").iter_rows())
    assert ("q00", "d01") not in set(pool.filter(pl.col("role") == "calibration").select("query_id", "doc_id").iter_rows())
    (tmp_path / "j.trec").write_text("q00 0 d01 2\nq01 0 d00 1\nq00 0 d02 -1\n")
    spec = JudgementSpec(name="t", source="file", judge="gpt-4o", path="j.trec", format="trec", base_dir=str(tmp_path), grade_map={0: 0, 1: 1, 2: 2, 3: 2})
    frame, info = build_judgements(spec, sparse)
    rows = {(r["query_id"], r["doc_id"]): r for r in frame.iter_rows(named=True)}
    assert rows[("q00", "d01")]["role"] == "fill" and rows[("q00", "d01")]["grade"] == 2  # the human -1 is a hole
    assert rows[("q00", "d02")]["judge_grade"] is None and info["n_unparsed"] == 1  # the file's -1: no grade
    assert rows[("q01", "d00")]["role"] == "calibration" and info["agreement"]["n_pairs"] == 1
    filled = {(q, d): g for q, d, g in filled_qrels(sparse.qrels, frame).iter_rows()}
    assert filled[("q00", "d01")] == 2 and ("q00", "d02") not in filled and filled[("q01", "d00")] == 0


def test_the_filled_layer_drops_documents_retrieved_for_their_own_id_as_the_human_layer_does(tmp_path):
    # BEIR's rule (a task's ignore_identical_ids): scoring.score drops a document retrieved for a
    # query of its own id; scored on the filled layer with no LLM grade, the run gives the human value.
    from dataclasses import replace

    from medbench_core.evaluation.judging.frame import judgement_frame
    from medbench_core.evaluation.scoring import score

    task, complete = complete_task(n_queries=4, n_docs=6)
    docs = pl.DataFrame({"doc_id": [*task.corpus["doc_id"].to_list(), "q00", "q01"], "text": ["x"] * (task.corpus.height + 2)})
    qrels = complete.filter(pl.col("doc_id") <= "d02")
    t = make_task(replace(task.meta, ignore_identical_ids=True), task.queries, docs, qrels)
    run = pl.concat([full_run(task, 2), pl.DataFrame({"query_id": ["q00", "q01"], "doc_id": ["q00", "q01"], "rank": [0, 0], "score": [99.0, 99.0]})])
    human = score(t, run.drop("rank"), tmp_path)["mean"]
    filled = score_filled(t, run, judgement_frame([]))["mean"]
    want, _ = trec_ndcg_mean(qrels, run.filter(pl.col("query_id") != pl.col("doc_id")))
    kept, _ = trec_ndcg_mean(qrels, run)
    assert human["ndcg_at_10"] == pytest.approx(want, abs=1e-12) and kept != pytest.approx(want, abs=1e-6)
    assert filled["ndcg_at_10"] == pytest.approx(want, abs=1e-12) and filled["judged_at_10"] == human["judged_at_10"]
    # R2MED's rule ("dense"): dropped from a dense model's run only, on both layers alike.
    r2med = make_task(replace(task.meta, ignore_identical_ids="dense"), task.queries, docs, qrels)
    for family, expected in (("dense", want), ("lexical", kept), (None, kept)):
        (tmp_path / str(family)).mkdir()
        assert score(r2med, run.drop("rank"), tmp_path / str(family), family=family)["mean"]["ndcg_at_10"] == pytest.approx(expected, abs=1e-12)
        assert score_filled(r2med, run, judgement_frame([]), family=family)["mean"]["ndcg_at_10"] == pytest.approx(expected, abs=1e-12), family


# --- agreement against the reference implementations -------------------------------------------


def test_agreement_equals_sklearn_krippendorff_and_scipy_on_a_stub_judge_with_a_known_error_rate():
    task, complete = complete_task(n_queries=30, n_docs=15, seed=5)
    truth = {(q, d): g for q, d, g in complete.iter_rows()}
    runs = {"a": full_run(task, 1), "b": full_run(task, 2)}
    spec = spec_of(pool={"models": ["a", "b"], "depth": 5, "calibration": 400, "seed": 0}, grade_map={0: 0, 1: 1, 2: 2}, grades=(0, 1, 2))
    frame, info = build_judgements(spec, task, runs=runs, run_keys={"a": "1", "b": "2"}, judge=OracleJudge(task, truth, wrong=0.2, seed=4, grades=(0, 1, 2)))
    calib = frame.filter(pl.col("role") == "calibration")
    human, llm = calib["human"].to_list(), calib["grade"].to_list()
    agree = info["agreement"]
    assert agree["n_pairs"] == 400 and abs(agree["exact"] - 0.8) < 0.05  # the judge is wrong on about 20% of pairs
    assert agree["kappa_quadratic"] == pytest.approx(cohen_kappa_score(human, llm, weights="quadratic", labels=[0, 1, 2]), abs=1e-12)
    assert agree["alpha_ordinal"] == pytest.approx(krippendorff.alpha(reliability_data=[human, llm], level_of_measurement="ordinal"), abs=1e-12)
    lo, hi = agree["kappa_ci"]
    assert lo < agree["kappa_quadratic"] < hi and hi - lo < 0.3
    assert agree["confusion"][0][0] + agree["confusion"][1][1] + agree["confusion"][2][2] == round(agree["exact"] * 400)
    # linear weights and other data: still sklearn's and krippendorff's values
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 4, 300).tolist(), rng.integers(0, 4, 300).tolist()
    assert weighted_kappa(a, b, [0, 1, 2, 3], "linear") == pytest.approx(cohen_kappa_score(a, b, weights="linear", labels=[0, 1, 2, 3]), abs=1e-12)
    assert krippendorff_alpha_ordinal(a, b) == pytest.approx(krippendorff.alpha(reliability_data=[a, b], level_of_measurement="ordinal"), abs=1e-12)


def test_ranking_agreement_tau_rbo_and_moved_intervals():
    human = {"a": 0.5, "b": 0.4, "c": 0.3, "d": 0.2}
    filled = {"a": 0.45, "b": 0.55, "c": 0.35, "d": 0.1}
    got = ranking_agreement(human, filled)
    assert got["kendall_tau"] == pytest.approx(kendalltau([0.5, 0.4, 0.3, 0.2], [0.45, 0.55, 0.35, 0.1]).statistic)
    assert got["order_filled"] == ["b", "a", "c", "d"]
    assert rbo_ext(["a", "b"], ["a", "b"]) == pytest.approx(1.0)
    assert rbo_ext(["a", "b"], ["b", "a"]) == pytest.approx(0.9)  # p^2 + (1-p)/p * (0 + 1 * p^2) = p, by hand
    # swapping the top two of four: X = 0, 2, 3, 4 -> 0.9^4 + 0.1/0.9 * (2/2 * 0.81 + 3/3 * 0.729 + 4/4 * 0.6561)
    assert got["rbo"] == pytest.approx(0.9**4 + 0.1 / 0.9 * (0.81 + 0.729 + 0.6561))
    h = [{"task": "t", "model": "a", "rank": 1, "rank_low": 1, "rank_high": 2}, {"task": "t", "model": "b", "rank": 2, "rank_low": 1, "rank_high": 2}]
    f = [{"task": "t", "model": "a", "rank": 2, "rank_low": 1, "rank_high": 2}, {"task": "t", "model": "b", "rank": 2, "rank_low": 1, "rank_high": 2}]
    assert moved_intervals(h, f) == [{"task": "t", "model": "a", "human": [1, 1, 2], "filled": [2, 1, 2]}]


def test_the_circularity_guard_names_the_model_of_the_judges_family(tmp_path):
    from medbench_core.retrieval.expansion.spec import parse_expansions
    from medbench_core.retrieval.model_registry import load_registry

    (tmp_path / "models.yaml").write_text(
        "models:\n  - {name: bm25, kind: bm25}\n  - {name: bm25+hyde, kind: expanded, retriever: bm25, expansion: hyde-qwen}\n"
        "expansions:\n  - {name: hyde-qwen, method: hyde, source: file, generator: qwen-7b-ins, path: ./x}\n"
    )
    specs = {s.name: s for s in load_registry(tmp_path / "models.yaml")}
    exps = {
        e.name: e
        for e in parse_expansions(
            [{"name": "hyde-qwen", "method": "hyde", "source": "file", "generator": "qwen-7b-ins", "path": "./x"}], tmp_path / "models.yaml"
        )
    }
    judge = families("Qwen/Qwen2.5-7B-Instruct")
    assert judge == {"qwen"} and families("r1-qwen-32b") == {"qwen", "deepseek"}
    assert circular(judge, cell_builders(specs["bm25+hyde"], specs, exps)) == "hyde-qwen (generator qwen-7b-ins) (qwen)"
    assert cell_builders(specs["bm25+hyde"], specs, exps)["hyde-qwen (generator qwen-7b-ins)"] == {"qwen": "name"}  # read from the name: said so
    assert circular(judge, cell_builders(specs["bm25"], specs, exps)) == ""
    assert circular(families("gpt-4o"), cell_builders(specs["bm25+hyde"], specs, exps)) == ""


def test_families_come_from_the_config_and_the_card_and_from_the_name_only_as_a_fallback(tmp_path):
    # Issue 46: HuatuoGPT-o1 is built on Llama 3.1 (8B, 70B) and Qwen2.5 (7B, 72B): its model card's
    # "Model Info" table. From a local folder: config.json's model_type and architectures, the card's
    # base_model; R2MED's generator names and the hub ids, which carry no folder: the card recorded.
    from medbench_core.evaluation.judging.circularity import describe, family_sources

    folder = tmp_path / "HuatuoGPT-o1-8B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    (folder / "README.md").write_text("---\nlicense: apache-2.0\nbase_model:\n- meta-llama/Llama-3.1-8B-Instruct\n---\n# HuatuoGPT-o1-8B\n")
    assert family_sources("FreedomIntelligence/HuatuoGPT-o1-8B", folder) == {"llama": "config"}
    card_only = tmp_path / "card-only"
    card_only.mkdir()
    (card_only / "README.md").write_text("---\nbase_model: Qwen/Qwen2.5-7B-Instruct\n---\n")
    assert family_sources("whatever", card_only) == {"qwen": "card"}
    assert family_sources("FreedomIntelligence/HuatuoGPT-o1-7B") == {"qwen": "recorded card"}  # the name alone said nothing before
    assert family_sources("huatuo-o1-8b") == {"llama": "recorded card"} and family_sources("huatuo-o1-70b") == {"llama": "recorded card"}
    assert family_sources("sky-32b") == {"qwen": "recorded card"}
    assert family_sources("HuatuoGPT2-7B") == {"huatuo": "name"} and family_sources("bm25s-lucene") == {}
    assert describe({"llama": "config", "qwen": "name"}) == "llama (config), qwen (name)" and describe({}) == "none"
    # A Llama judge now finds the R2MED HuatuoGPT-o1 expansions circular.
    assert circular(families("meta-llama/Llama-3.1-70B-Instruct"), {"hyde (generator huatuo-o1-70b)": family_sources("huatuo-o1-70b")}) == (
        "hyde (generator huatuo-o1-70b) (llama)"
    )


# --- judgement files ---------------------------------------------------------------------------


def test_umbrela_output_and_trec_qrels_are_read_matched_and_refused_line_by_line(tmp_path):
    task, complete = complete_task(n_queries=3, n_docs=4)
    sparse = make_task(task.meta, task.queries, task.corpus, complete.filter(pl.col("doc_id") == "d00"))
    q = dict(zip(task.queries["query_id"], task.queries["text"]))
    d = dict(zip(task.corpus["doc_id"], task.corpus["text"]))
    records = [  # as UMBRELA's judge writes them: texts, no ids
        {"model": "gpt-4o", "query": q["q00"], "passage": d["d01"], "prompt": "...", "prediction": "##final score: 3", "judgment": 3, "result_status": 1},
        {"model": "gpt-4o", "query": q["q01"], "passage": d["d02"], "prompt": "...", "prediction": "unclear", "judgment": 0, "result_status": 0},
        {"model": "gpt-4o", "query": q["q02"], "passage": d["d00"], "prompt": "...", "prediction": "##final score: 1", "judgment": 1, "result_status": 1},
        {"qid": "q02", "docid": "d03", "prediction": "##final score: 2", "judgment": 2, "result_status": 1},
    ]
    (tmp_path / "synthetic.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    spec = JudgementSpec(name="umb", source="file", judge="gpt-4o", path="{task}.jsonl", format="umbrela", base_dir=str(tmp_path))
    frame, info = build_judgements(spec, sparse)
    rows = {(r["query_id"], r["doc_id"]): r for r in frame.iter_rows(named=True)}
    onto = grade_mapping(spec, info["top_grade"])  # the task's scale: binary here (auto: UMBRELA's 2 and 3 are relevant)
    assert info["top_grade"] == 1 and onto == {0: 0, 1: 0, 2: 1, 3: 1}
    assert rows[("q00", "d01")]["judge_grade"] == 3 and rows[("q00", "d01")]["grade"] == 1 and rows[("q00", "d01")]["role"] == "fill"
    assert rows[("q01", "d02")]["grade"] is None  # UMBRELA's fallback 0 is not a grade
    assert (
        rows[("q02", "d00")]["role"] == "calibration"
        and rows[("q02", "d00")]["human"] == complete.filter((pl.col("query_id") == "q02") & (pl.col("doc_id") == "d00"))["relevance"][0]
    )
    assert info["n_unparsed"] == 1 and info["identity"]["source"] == "file" and len(info["identity"]["file_sha256"]) == 64
    (tmp_path / "synthetic.trec").write_text("q00 0 d01 3\nq01 Q0 d02 1\n")
    trec = JudgementSpec(name="trec", source="file", judge="gpt-4o", path="synthetic.trec", format="trec", base_dir=str(tmp_path))
    assert build_judgements(trec, sparse)[0].select("query_id", "doc_id", "judge_grade", "grade").rows() == [("q00", "d01", 3, 1), ("q01", "d02", 1, 0)]

    (tmp_path / "synthetic.jsonl").write_text(
        json.dumps({"query": "not a query", "passage": d["d01"], "judgment": 1})
        + "\n{broken\n"
        + json.dumps({"qid": "q00", "docid": "d09", "judgment": 1})
        + "\n"
        + json.dumps({"qid": "q00", "docid": "d01", "judgment": 5})
        + "\n"
    )
    with pytest.raises(DataError) as err:
        build_judgements(spec, sparse)
    msg = str(err.value)
    assert "4 problem(s)" in msg and "nothing stored" in msg
    for line, why in ((1, "matches no query"), (2, "malformed JSON"), (3, "document d09 is not in task synthetic's corpus"), (4, "grade 5 is not one of")):
        assert f"synthetic.jsonl:{line}: " in msg and why in msg


# --- the real judge path, on a tiny causal LM built offline --------------------------------------


@pytest.fixture(scope="module")
def tiny_judge(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).parent))
    from _expansion_fixtures import tiny_lm

    return tiny_lm(tmp_path_factory.mktemp("judge") / "tiny-judge")


@pytest.mark.model
def test_the_real_judge_path_prompts_batches_constrains_caches_and_keys(tiny_judge, tmp_path):
    from medbench_core.evaluation.judging.stage import load_judge

    task, complete = complete_task(n_queries=6, n_docs=6)
    sparse = make_task(task.meta, task.queries, task.corpus, complete.filter(pl.col("doc_id") <= "d01"))
    runs = {"a": full_run(task, 1)}
    spec = JudgementSpec(
        name="tiny", source="generate", judge=str(tiny_judge), pool={"models": ["a"], "depth": 4, "calibration": 5}, batch_size=3, base_dir=str(ROOT)
    )
    judge = load_judge(spec)
    prompts = judge.prompts(["what is x"], ["x is y"])
    assert prompts[0].startswith("[user] Given a query and a passage") and "Query: what is x\nPassage: x is y" in prompts[0]
    assert prompts[0].endswith("[assistant]##final score: ")  # the reply begun with UMBRELA's marker
    cache = tmp_path / "cache"
    frame, info = build_judgements(spec, sparse, runs=runs, run_keys={"a": "k1"}, judge=judge, cache_dir=cache)
    n = info["n_pairs"]
    assert n == info["n_fill"] + 5 and info["n_unparsed"] == 0 and info["n_from_cache"] == 0
    assert set(frame["judge_grade"].to_list()) <= {0, 1, 2, 3} and frame["grade"].max() <= 2  # mapped onto the task's 0-2
    assert all(abs(sum(p) - 1) < 1e-5 and len(p) == 4 for p in frame["probabilities"].to_list())
    # One pair alone (batch of 1, no padding) gets the grade it got in its padded batch.
    texts = dict(zip(sparse.corpus["doc_id"], sparse.doc_text()))
    first_query = dict(zip(sparse.queries["query_id"], sparse.queries["text"]))[frame["query_id"][0]]
    alone, _ = judge.judge([first_query], [cut_words(texts[frame["doc_id"][0]], 512)])
    assert alone[0].judge_grade == frame["judge_grade"][0]
    # A second build reads every pair from the cache: same grades, nothing judged again.
    again, info2 = build_judgements(spec, sparse, runs=runs, run_keys={"a": "k1"}, judge=judge, cache_dir=cache)
    assert info2["n_from_cache"] == n and again["judge_grade"].to_list() == frame["judge_grade"].to_list() and info2["key"] == info["key"]
    # Keys: the pool's run keys and the prompt enter them.
    assert judgement_stage_key(spec, sparse, pool_runs={"a": "k2"}) != info["key"] == judgement_stage_key(spec, sparse, pool_runs={"a": "k1"})
    (tmp_path / "p.txt").write_text("Query: {query}\nPassage: {passage}\nGrade 0-3.")
    other = JudgementSpec(**(spec.to_dict() | {"prompt": str(tmp_path / "p.txt"), "base_dir": str(ROOT)}))
    assert judgement_stage_key(other, sparse, pool_runs={"a": "k1"}) != info["key"]
    # Free generation: a random LM states no grade; every reply is kept and counted unparsed, none becomes a 0.
    free = JudgementSpec(**(spec.to_dict() | {"decode": "generate", "max_new_tokens": 4, "base_dir": str(ROOT)}))
    gframe, ginfo = build_judgements(free, sparse, runs=runs, run_keys={"a": "k1"}, judge=load_judge(free))
    assert ginfo["n_unparsed"] == gframe.filter(pl.col("grade").is_null()).height and gframe["raw"].null_count() == 0
