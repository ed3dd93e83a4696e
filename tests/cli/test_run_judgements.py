"""`medbench run` with a judgement file in UMBRELA's output format (issue 33's "done when").

The operated tiny world (tests/orchestration/operating_env.py: three SciFact-like claims, five
abstracts, one relevant abstract each) and a ``judgements:`` entry reading UMBRELA's JSONL judge
output (texts only, no ids, as UMBRELA writes it): every unjudged pair graded, two of them
relevant (3, 2), one reply UMBRELA could not parse (``result_status`` 0), one pair the humans also
judged. One main-job run scores the task on both layers: the filled value in every file equals
pytrec_eval-terrier on the human + LLM qrels; the judgement artifact, its MLflow run and the
cell's annotated MLflow run say what was judged and how well it agrees with the humans.
"""

from __future__ import annotations

import json

import pytest
import pytrec_eval

from tests.cli.test_run import _main_env
from tests.forked import python_m
from tests.orchestration.operating_env import BM25, SCI_DOCS, SCI_QRELS, SCI_QUERIES, new_world

pytestmark = pytest.mark.slow

# (query, document) -> UMBRELA's judgment; pairs the humans judged are absent except q1/s1 (calibration).
LLM = {("q1", "s5"): 2, ("q2", "s1"): 3, ("q1", "s1"): 3}
UNPARSED = ("q3", "s4")


def umbrela_records() -> list[dict]:
    human = {(q, d) for q, d, _ in SCI_QRELS}
    out = []
    for q, qt in SCI_QUERIES.items():
        for d, dt in SCI_DOCS.items():
            if (q, d) in human and (q, d) not in LLM:
                continue
            grade = LLM.get((q, d), 0)
            rec = {
                "model": "gpt-4o",
                "query": qt,
                "passage": dt,
                "prompt": "...",
                "prediction": f"##final score: {grade}",
                "judgment": grade,
                "result_status": 1,
            }
            if (q, d) == UNPARSED:
                rec |= {"prediction": "I cannot tell.", "judgment": 0, "result_status": 0}
            out.append(rec)
    return out


def test_a_umbrela_judgement_file_scores_the_task_on_both_layers(tmp_path):
    world = new_world(tmp_path / "w", [BM25])
    (world.root / "judgements").mkdir()
    (world.root / "judgements" / "scifact.jsonl").write_text("".join(json.dumps(r) + "\n" for r in umbrela_records()))
    doc = json.loads(world.models_file.read_text())
    doc["judgements"] = [
        {"name": "umbrela-gpt4o", "source": "file", "format": "umbrela", "judge": "gpt-4o", "path": "./judgements/{task}.jsonl", "tasks": ["scifact"]}
    ]
    world.models_file.write_text(json.dumps(doc))
    out = python_m("medbench_cli", "run", "--tasks", "scifact", env=_main_env(world, tmp_path), timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "[judge] scifact" in out.stdout and " ok " in out.stdout.split("[judge] scifact")[1].splitlines()[0] + " "

    # The expected filled value: pytrec_eval on the human qrels plus the LLM grades of unjudged pairs
    # (binary task: UMBRELA's 2 and 3 are relevant), the unparsed pair left a hole.
    data = world.root / "data"
    (run_dir,) = (data / "artifacts" / "bm25" / "scifact" / "run").iterdir()
    run: dict = {}
    for line in (run_dir / "run.trec").read_text().splitlines():
        q, _, d, _, s, _ = line.split()
        run.setdefault(q, {})[d] = float(s)
    human = {q: {} for q in SCI_QUERIES}
    for q, d, g in SCI_QRELS:
        human[q][d] = g
    filled = {q: dict(v) for q, v in human.items()}
    for r in umbrela_records():
        q = next(k for k, v in SCI_QUERIES.items() if v == r["query"])
        d = next(k for k, v in SCI_DOCS.items() if v == r["passage"])
        if d not in human[q] and r["result_status"] == 1:
            filled[q][d] = int(r["judgment"] >= 2)

    def ndcg(qrels):
        vals = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(run)
        return sum(v["ndcg_cut_10"] for v in vals.values()) / len(qrels)

    board = json.loads((data / "reports" / "leaderboard.json").read_text())
    (cell,) = [c for c in board["trust"]["cells"] if c["model"] == "bm25" and c["task"] == "scifact"]
    assert cell["value"] == pytest.approx(ndcg(human), abs=1e-9)
    assert cell["filled"] == pytest.approx(ndcg(filled), abs=1e-9) and cell["filled"] != pytest.approx(cell["value"], abs=1e-6)
    assert cell["judgements"].startswith("umbrela-gpt4o@") and cell["circular"] is None  # gpt judge, bm25 built with no LLM
    layer = board["trust"]["layers"]["scifact"]
    assert (layer["n_fill"], layer["n_calibration"], layer["n_unparsed"]) == (12, 1, 1)
    assert layer["agreement"]["n_pairs"] == 1 and layer["ranking"]["models"] == 1
    md = (data / "reports" / "leaderboard.md").read_text()
    assert f"| bm25 | scifact | {cell['value']:.4f} | {cell['filled']:.4f} | {cell['filled'] - cell['value']:+.4f} |" in md
    assert "Agreement between the human and the LLM layers" in md and "on 1 calibration pairs" in md
    csv_head = (data / "reports" / "leaderboard.csv").read_text().splitlines()[0]
    assert "filled.scifact" in csv_head and "judged_at_10.scifact" in csv_head

    (judged,) = (data / "judgements" / "umbrela-gpt4o" / "scifact").iterdir()
    info = json.loads((judged / "info.json").read_text())
    assert info["key"] == judged.name and info["identity"]["format"] == "umbrela" and info["grade_map"] == {"0": 0, "1": 0, "2": 1, "3": 1}
    assert sorted((judged / "qrels.llm.trec").read_text().splitlines())[:2] == ["q1 0 s1 1", "q1 0 s2 0"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{world.root / 'state' / 'mlflow.db'}")
    (jrun,) = client.search_runs([client.get_experiment_by_name("medbench-test-judgements").experiment_id])
    assert jrun.data.params["judgement.judge"] == "gpt-4o" and jrun.data.metrics["judgement.n_unparsed"] == 1.0
    (prun,) = [r for r in client.search_runs([client.get_experiment_by_name("medbench-test").experiment_id]) if r.data.tags.get("medbench.model") == "bm25"]
    assert prun.data.metrics["filled.ndcg_at_10"] == pytest.approx(ndcg(filled), abs=1e-9)
    assert prun.data.metrics["judged_at_10"] < 1.0 and "ndcg_upper_at_10" in prun.data.metrics
    assert prun.data.tags["medbench.circular"] == "no"
