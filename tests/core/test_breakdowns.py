"""Breakdowns per difficulty tier, language and discipline, by hand (the paired cross-lingual gap: test_multilingual_reports.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from medbench_core.evaluation.metrics import breakdown, evaluate, qrels_to_dict, run_to_dict
from medbench_core.retrieval.index import build_index, search
from medbench_core.retrieval.records import candidate_pools, encode_side
from medbench_core.taskdata.task import TaskMeta, make_task

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
if not DATA.exists():
    DATA = Path("/work/shared/data")


def test_breakdown_means_per_group_by_hand():
    per_query = pl.DataFrame(
        {
            "query_id": ["q1", "q2", "q3", "q4", "q5"],
            "ndcg_at_10": [0.2, 0.4, 0.9, 1.0, 0.3],
            "mrr_at_10": [0.5, 1.0, 1.0, 1.0, 0.25],
        }
    )
    groups = pl.DataFrame(
        {
            # q5 has no tier (left out of the breakdown); qX is not in the evaluation.
            "query_id": ["q1", "q2", "q3", "q4", "q5", "qX"],
            "tier": ["hard", "hard", "medium", "easy", None, "hard"],
        }
    )
    out = breakdown(per_query, groups, "tier", ["ndcg_at_10", "mrr_at_10"])
    assert list(out) == ["easy", "hard", "medium"]
    assert out["hard"] == pytest.approx({"ndcg_at_10": 0.3, "mrr_at_10": 0.75})
    assert out["medium"] == pytest.approx({"ndcg_at_10": 0.9, "mrr_at_10": 1.0})
    assert out["easy"] == pytest.approx({"ndcg_at_10": 1.0, "mrr_at_10": 1.0})


class TextTable:
    """Fake RecordEncoder: looks each text up in a table of vectors (L2-normalised)."""

    def __init__(self, table):
        self.table = table

    def encode_records(self, texts, images, languages, role):
        v = np.array([self.table(t) if callable(self.table) else self.table[t] for t in texts], dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def _ndcg_correct_last(n_correct: int, n_options: int = 5) -> float:
    """nDCG@10 when the n correct options (gain 1) fill the last n ranks of n_options."""
    dcg = sum(1 / math.log2(r + 1) for r in range(n_options - n_correct + 1, n_options + 1))
    return dcg / sum(1 / math.log2(r + 1) for r in range(1, n_correct + 1))


@pytest.fixture(scope="module")
def inverted_mcqa_eval():
    """FrenchMedMCQA ranked by an encoder that puts every correct option below every wrong one."""
    from medbench_core.taskdata.readers.frenchmedmcqa import FrenchMedMCQAOptions, read_frenchmedmcqa

    task = read_frenchmedmcqa(DATA / "frenchmedmcqa", FrenchMedMCQAOptions(split="test"))
    # Option texts repeat across questions with different answers, so the fake encoder keys on
    # the document id: the corpus text is replaced by the id (the ranking is all we test).
    task.corpus = task.corpus.with_columns(pl.col("doc_id").alias("text"))
    correct = set(task.qrels.filter(pl.col("relevance") == 1)["doc_id"])
    enc = TextTable(lambda t: [0.0, 1.0] if t in correct else [1.0, 0.0])
    q = np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (task.queries.height, 1))  # every query = (1, 0)
    d = encode_side(enc, task, "passage")
    run = search(build_index(d)[0], q, task.queries["query_id"].to_list(), task.corpus["doc_id"].to_list(), 10, doc_emb=d, candidates=candidate_pools(task))
    ev = evaluate(qrels_to_dict(task.qrels), run_to_dict(run), ["ndcg_at_10", "mrr_at_10"])
    return task, ev


def test_inverted_ranking_per_tier_by_hand(inverted_mcqa_eval):
    task, ev = inverted_mcqa_eval
    # Counts by number of correct options: 1: 321, 2: 97, 3: 141, 4: 56, 5: 7.
    n = {1: 321, 2: 97, 3: 141, 4: 56, 5: 7}
    nd = {k: _ndcg_correct_last(k) for k in n}
    assert nd[1] == pytest.approx(1 / math.log2(6)) and nd[5] == pytest.approx(1.0)
    rr = {k: 1 / (6 - k) for k in n}  # first correct option at rank 6 - k
    tiers = breakdown(ev.per_query_frame(), task.queries.select("query_id", "tier"), "tier", ["ndcg_at_10", "mrr_at_10"])
    assert tiers["hard"]["ndcg_at_10"] == pytest.approx(nd[1], abs=1e-12)
    assert tiers["hard"]["mrr_at_10"] == pytest.approx(1 / 5, abs=1e-12)
    assert tiers["medium"]["ndcg_at_10"] == pytest.approx((97 * nd[2] + 141 * nd[3]) / 238, abs=1e-12)
    assert tiers["medium"]["mrr_at_10"] == pytest.approx((97 / 4 + 141 / 3) / 238, abs=1e-12)
    assert tiers["easy"]["ndcg_at_10"] == pytest.approx((56 * nd[4] + 7 * 1.0) / 63, abs=1e-12)
    assert tiers["easy"]["mrr_at_10"] == pytest.approx((56 / 2 + 7 / 1) / 63, abs=1e-12)
    assert ev.mean["ndcg_at_10"] == pytest.approx(sum(n[k] * nd[k] for k in n) / 622, abs=1e-12)
    assert ev.mean["mrr_at_10"] == pytest.approx(sum(n[k] * rr[k] for k in n) / 622, abs=1e-12)
    # One language, one discipline: those breakdowns equal the overall mean.
    lang = breakdown(ev.per_query_frame(), task.queries.select("query_id", "language"), "language", ["ndcg_at_10"])
    assert lang == {"fr": pytest.approx({"ndcg_at_10": ev.mean["ndcg_at_10"]})}
    disc = breakdown(ev.per_query_frame(), task.queries.select("query_id", "discipline"), "discipline", ["ndcg_at_10"])
    assert list(disc) == ["pharmacie"]


def test_pipeline_score_logs_tier_breakdowns_as_separate_metrics(inverted_mcqa_eval, tmp_path):
    from medbench_core.evaluation.scoring import flat_metrics, score

    task, ev = inverted_mcqa_eval
    run = pl.DataFrame(
        [(q, d, s) for q, docs in _inverted_scores(task).items() for d, s in docs.items()],
        schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64},
        orient="row",
    )
    result = score(task, run, tmp_path, ("ndcg_at_10",))
    flat = flat_metrics(result)
    assert flat["tier.hard.ndcg_at_10"] == pytest.approx(1 / math.log2(6), abs=1e-12)
    assert flat["ndcg_at_10"] == pytest.approx(ev.mean["ndcg_at_10"], abs=1e-12)
    assert flat["language.fr.ndcg_at_10"] == pytest.approx(ev.mean["ndcg_at_10"], abs=1e-12)
    assert "cross_lingual_gap" not in result  # the unpaired best-minus-each gap is gone (issue 45): one gap, paired, in the reports
    # Five options, the correct ones ranked last: chance and the chance-corrected figure beside the trec_eval one.
    assert flat["chance_corrected.ndcg_at_10"] == pytest.approx((flat["ndcg_at_10"] - flat["chance.ndcg_at_10"]) / (1 - flat["chance.ndcg_at_10"]), abs=1e-12)
    assert flat["chance_corrected.ndcg_at_10"] < 0 and flat["tie_aware.ndcg_at_10"] == pytest.approx(
        flat["ndcg_at_10"], abs=1e-12
    )  # ties only among options of one grade: every order scores the same


def _inverted_scores(task):
    """The inverted run as scores: wrong options 1, correct options 0."""
    rel = qrels_to_dict(task.qrels)
    return {q: {d: 0.0 if r else 1.0 for d, r in docs.items()} for q, docs in rel.items()}


def test_bilingual_task_breakdown_by_hand():
    # Three queries share one corpus; every query vector is (1, 0).
    # Documents: a (1, 0) -> score 1; b (.6, .8) -> .6; c (0, 1) -> 0.
    # en1 judges a relevant (rank 1, nDCG 1); en2 judges b (rank 2, nDCG 1/log2 3);
    # fr1 judges c (rank 3, nDCG 1/log2 4 = .5).
    table = {"Q": [1, 0], "a": [1, 0], "b": [0.6, 0.8], "c": [0, 1]}
    queries = pl.DataFrame(
        {"query_id": ["en1", "en2", "fr1"], "text": ["Q", "Q", "Q"], "language": ["en", "en", "fr"], "discipline": ["cardio", "neuro", "cardio"]}
    )
    corpus = pl.DataFrame({"doc_id": ["a", "b", "c"], "text": ["a", "b", "c"]})
    qrels = pl.DataFrame({"query_id": ["en1", "en2", "fr1"], "doc_id": ["a", "b", "c"], "relevance": [1, 1, 1]})
    task = make_task(TaskMeta(name="bilingual", source="test", languages=("en", "fr")), queries, corpus, qrels)
    enc = TextTable(table)
    q, d = encode_side(enc, task, "query"), encode_side(enc, task, "passage")
    run = search(build_index(d)[0], q, task.queries["query_id"].to_list(), ["a", "b", "c"], 10)
    ev = evaluate(qrels_to_dict(task.qrels), run_to_dict(run), ["ndcg_at_10", "recall_at_1"])
    per_q = ev.per_query_frame()
    langs = breakdown(per_q, task.queries.select("query_id", "language"), "language", ["ndcg_at_10", "recall_at_1"])
    en = (1 + 1 / math.log2(3)) / 2
    assert langs["en"] == pytest.approx({"ndcg_at_10": en, "recall_at_1": 0.5}, abs=1e-12)
    assert langs["fr"] == pytest.approx({"ndcg_at_10": 0.5, "recall_at_1": 0.0}, abs=1e-12)
    disc = breakdown(per_q, task.queries.select("query_id", "discipline"), "discipline", ["ndcg_at_10"])
    assert disc == {"cardio": pytest.approx({"ndcg_at_10": (1 + 0.5) / 2}), "neuro": pytest.approx({"ndcg_at_10": 1 / math.log2(3)})}
