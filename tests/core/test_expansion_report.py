"""Reporting an expansion: expanded models beside their retrievers with the difference, MLflow
params and metrics, and the recorded gate verdict an expanded run checks before it retrieves."""

from __future__ import annotations

from _expansion_fixtures import scifact_subset, synthetic_expansions

from medbench_core.evaluation.reports import Cell, leaderboard
from medbench_core.retrieval.expansion.contract import expansion_gate_refusal, record_expansion_gate, validate_expansion
from medbench_core.retrieval.expansion.frame import expansion_frame
from medbench_core.retrieval.expansion.report import beside_retriever, expansion_mlflow_metrics, expansion_mlflow_params
from medbench_core.retrieval.model_registry import model_spec

MODELS = [
    model_spec(name="bm25", kind="bm25"),
    model_spec(name="bm25+hyde-g", kind="expanded", retriever="bm25", expansion="hyde-g"),
]


def test_expanded_beside_its_retriever_with_the_difference():
    def cell(model, task, value):
        return Cell(model, task, metrics=None if value is None else {"mean": {"ndcg_at_10": value}})

    # The leaderboard the product builds (evaluation/reports.py), its task columns as reports.expanded_beside passes them.
    board = leaderboard(
        [cell("bm25", "biology", 0.19191), cell("bm25+hyde-g", "biology", 0.5734), cell("bm25", "medqa", 0.0255), cell("bm25+hyde-g", "medqa", None)],
        ["bm25", "bm25+hyde-g"],
        ["biology", "medqa"],
    )
    assert board["average"].to_list() == [0.1087, None]  # (0.19191 + 0.0255) / 2; medqa not scored yet for the expanded model
    rows = beside_retriever(board.select("model", "biology", "medqa"), MODELS, copies={("bm25+hyde-g", "biology"): 2})
    assert rows.to_dicts() == [
        {"model": "bm25+hyde-g", "retriever": "bm25", "task": "biology", "value": 0.5734, "retriever_value": 0.1919, "delta": 0.3815, "copies": 2},
        {"model": "bm25+hyde-g", "retriever": "bm25", "task": "medqa", "value": None, "retriever_value": 0.0255, "delta": None, "copies": 0},
    ]


def test_mlflow_params_and_metrics():
    info = {
        "expansion": "hyde-g",
        "key": "k123",
        "prompt_sha256": "abc",
        "generated_tokens": 640,
        "seconds": 3.2,
        "tokens_per_second": 200.0,
        "n_queries": 10,
        "identity": {
            "source": "generate",
            "method": "hyde",
            "generator": "./gen",
            "revision": "sha256:1",
            "batch_size": 8,
            "dtype": "float32",
            "decoding": {"temperature": 0.7, "seed": 42},
        },
    }
    params = expansion_mlflow_params(info)
    assert params["expansion.key"] == "k123" and params["expansion.decoding.seed"] == "42" and params["expansion.revision"] == "sha256:1"
    assert "expansion.upstream_run" not in params and "expansion.file_sha256" not in params
    metrics = expansion_mlflow_metrics(info, {"max_shared_words": 41, "n_copies": 1, "copied_query_ids": ["q3"], "median_shared_words": 12.0})
    assert metrics == {
        "expansion.n_queries": 10.0,
        "expansion.generated_tokens": 640.0,
        "expansion.seconds": 3.2,
        "expansion.tokens_per_second": 200.0,
        "leakage.max_shared_words": 41.0,
        "leakage.n_copies": 1.0,
        "leakage.median_shared_words": 12.0,
    }


def test_recorded_gate_refuses_until_a_passing_verdict_on_the_same_texts(tmp_path):
    task = scifact_subset()
    texts = synthetic_expansions(task)
    assert "no expansion contract verdict" in expansion_gate_refusal(tmp_path, "key-1")
    good = validate_expansion(expansion_frame([{"query_id": q, "raw": t} for q, t in texts.items()]), task, "g")
    record_expansion_gate(tmp_path, good, "key-1")
    assert expansion_gate_refusal(tmp_path, "key-1") is None  # the leaky expansion only warns
    assert "judged expansion key-1" in expansion_gate_refusal(tmp_path, "key-2")
    q0 = task.queries["query_id"][0]
    # an empty answer only warns now (R2MED scores it); an expansion for a query the task lacks fails the gate
    bad = validate_expansion(expansion_frame([{"query_id": "ghost" if q == q0 else q, "raw": t} for q, t in texts.items()]), task, "g")
    record_expansion_gate(tmp_path, bad, "key-2")
    reason = expansion_gate_refusal(tmp_path, "key-2")
    assert reason.startswith("expansion contract failed") and "ghost" in reason and q0 in reason
