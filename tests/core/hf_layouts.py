"""Small datasets written in the published layouts (MTEB / HF retrieval, R2MED's repository, the hub cache).

One fixed content, 24 documents, 9 queries (8 judged) and 19 graded judgments, written in each
layout, so that every reader can be checked against the same expected task and the same metrics.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl

DOCS = [
    ("d01", "Gout", "Gout is an inflammatory arthritis caused by urate crystals, often in the big toe."),
    ("d02", "Gout treatment", "Colchicine and NSAIDs treat acute gout flares; allopurinol lowers serum urate."),
    ("d03", "Hyperuricemia", "High uric acid in the blood may lead to gout and kidney stones."),
    ("d04", "Asthma", "Asthma narrows the airways and causes wheezing, cough and shortness of breath."),
    ("d05", "Asthma inhalers", "Inhaled corticosteroids control asthma; salbutamol relieves acute bronchospasm."),
    ("d06", "", "Chronic obstructive pulmonary disease is mostly caused by smoking."),
    ("d07", "Type 2 diabetes", "Insulin resistance and high blood glucose define type 2 diabetes."),
    ("d08", "Metformin", "Metformin is the first-line drug for type 2 diabetes and lowers hepatic glucose output."),
    ("d09", "Hypoglycaemia", "Low blood glucose causes sweating, tremor and confusion in patients on insulin."),
    ("d10", "Myocardial infarction", "A heart attack presents with chest pain radiating to the left arm and sweating."),
    ("d11", "Troponin", "Troponin rises within hours of myocardial injury and confirms infarction."),
    ("d12", "Angina", "Stable angina is chest pain on exertion relieved by rest or nitrates."),
    ("d13", "Stroke", "Sudden facial droop, arm weakness and slurred speech suggest an acute stroke."),
    ("d14", "Thrombolysis", "Alteplase given within 4.5 hours of ischaemic stroke onset improves outcome."),
    ("d15", "Migraine", "Migraine headache is throbbing, one-sided and often comes with nausea and aura."),
    ("d16", "Tension headache", "Tension-type headache feels like a tight band around the head."),
    ("d17", "Iron deficiency anaemia", "Iron deficiency causes microcytic anaemia, fatigue and pale skin."),
    ("d18", "Vitamin B12", "Vitamin B12 deficiency causes macrocytic anaemia and neuropathy."),
    ("d19", "Hypothyroidism", "An underactive thyroid causes weight gain, cold intolerance and fatigue."),
    ("d20", "Levothyroxine", "Levothyroxine replaces thyroid hormone in hypothyroidism."),
    ("d21", "Pneumonia", "Community-acquired pneumonia presents with fever, cough and consolidation on chest X-ray."),
    ("d22", "Urinary tract infection", "Dysuria and frequency suggest a urinary tract infection, often E. coli."),
    ("d23", "Appendicitis", "Appendicitis pain starts around the navel and moves to the right lower abdomen."),
    ("d24", "Kidney stones", "Renal colic is severe flank pain radiating to the groin, caused by kidney stones."),
]

QUERIES = [
    ("q1", "What causes gout in the big toe?", "musculoskeletal"),
    ("q2", "How is an asthma attack treated with an inhaler?", "respiratory"),
    ("q3", "first drug for type 2 diabetes", "endocrine"),
    ("q4", "chest pain spreading to the arm and sweating", "cardiovascular"),
    ("q5", "signs of a stroke and its emergency treatment", "nervous"),
    ("q6", "one-sided throbbing headache with nausea", ""),
    ("q7", "tired and pale because of low iron", "hematologic"),
    ("q8", "severe flank pain going to the groin", "urinary"),
    ("q9", "an unjudged question about thyroid hormone", "endocrine"),
]

# (query, document, grade): grades 0-2, as R2MED and MTEB give them.
QRELS = [
    ("q1", "d01", 2),
    ("q1", "d03", 1),
    ("q1", "d02", 1),
    ("q2", "d05", 2),
    ("q2", "d04", 1),
    ("q3", "d08", 2),
    ("q3", "d07", 1),
    ("q4", "d10", 2),
    ("q4", "d11", 1),
    ("q4", "d12", 0),
    ("q5", "d13", 2),
    ("q5", "d14", 2),
    ("q6", "d15", 2),
    ("q6", "d16", 0),
    ("q7", "d17", 2),
    ("q7", "d18", 0),
    ("q8", "d24", 2),
    ("q8", "d03", 1),
    ("q8", "d22", 0),
]

EXPECTED_QRELS = {(q, d): g for q, d, g in QRELS}
JUDGED = sorted({q for q, _, _ in QRELS})


def doc_text(doc_id: str) -> str:
    """Title and text joined as the task's doc_text() joins them."""
    _, title, text = next(d for d in DOCS if d[0] == doc_id)
    return f"{title} {text}".strip() if title else text


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_mteb_jsonl(folder: Path) -> Path:
    """MTEB's classic files: corpus.jsonl, queries.jsonl (``_id``) and qrels/test.tsv."""
    write_jsonl(folder / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in DOCS])
    write_jsonl(folder / "queries.jsonl", [{"_id": i, "text": x} for i, x, _ in QUERIES])
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in QRELS))
    return folder


def write_mteb_parquet(folder: Path) -> Path:
    """MTEB's Parquet configs: corpus/, queries/ and default/ (qrels) with a test and a dev split."""
    (folder / "corpus").mkdir(parents=True, exist_ok=True)
    (folder / "queries").mkdir(parents=True, exist_ok=True)
    (folder / "default").mkdir(parents=True, exist_ok=True)
    pl.DataFrame({"_id": [d[0] for d in DOCS], "title": [d[1] for d in DOCS], "text": [d[2] for d in DOCS]}).write_parquet(
        folder / "corpus" / "corpus-00000-of-00001.parquet"
    )
    pl.DataFrame({"_id": [q[0] for q in QUERIES], "text": [q[1] for q in QUERIES]}).write_parquet(folder / "queries" / "queries-00000-of-00001.parquet")
    qrels = pl.DataFrame({"query-id": [r[0] for r in QRELS], "corpus-id": [r[1] for r in QRELS], "score": [r[2] for r in QRELS]})
    qrels.write_parquet(folder / "default" / "test-00000-of-00001.parquet")
    # A dev split judging one other pair: reading it instead of test would change the qrels.
    pl.DataFrame({"query-id": ["q9"], "corpus-id": ["d20"], "score": [1]}).write_parquet(folder / "default" / "dev-00000-of-00001.parquet")
    return folder


def write_r2med_hub(folder: Path, licence: str | None = None) -> Path:
    """R2MED's hub datasets: configs corpus, query, qrels named in the dataset card (``id``, ``q_id``/``p_id``)."""
    write_jsonl(folder / "data" / "corpus.jsonl", [{"id": i, "text": f"{t} {x}".strip() if t else x} for i, t, x in DOCS])
    write_jsonl(folder / "data" / "query.jsonl", [{"id": i, "text": x} for i, x, _ in QUERIES])
    write_jsonl(folder / "data" / "qrels.jsonl", [{"q_id": q, "p_id": d, "score": g} for q, d, g in QRELS])
    card = ["---"]
    if licence:
        card.append(f"license: {licence}")
    card += [
        "configs:",
        "- config_name: corpus",
        "  data_files:",
        "  - split: corpus",
        "    path: data/corpus.jsonl",
        "- config_name: query",
        "  data_files:",
        "  - split: query",
        "    path: data/query.jsonl",
        "- config_name: qrels",
        "  data_files:",
        "  - split: qrels",
        "    path: data/qrels.jsonl",
        "---",
        "# A dataset card",
    ]
    (folder / "README.md").write_text("\n".join(card) + "\n")
    return folder


def write_r2med_repo(folder: Path, qrels: str = "jsonl") -> Path:
    """R2MED's repository layout: corpus.jsonl, query.jsonl (with body_system) and qrels.jsonl or qrels.txt."""
    write_jsonl(folder / "corpus.jsonl", [{"id": i, "text": f"{t} {x}".strip() if t else x} for i, t, x in DOCS])
    write_jsonl(
        folder / "query.jsonl",
        [{"id": i, "text": x, "doc_id": [d for q, d, g in QRELS if q == i and g > 0], "answer": "", "body_system": b} for i, x, b in QUERIES],
    )
    if qrels == "jsonl":
        write_jsonl(folder / "qrels.jsonl", [{"q_id": q, "p_id": d, "score": g} for q, d, g in QRELS])
    else:
        (folder / "qrels.txt").write_text("".join(f"{q} {d} {g}\n" for q, d, g in QRELS))
    return folder


def hub_cache(cache: Path, repo_id: str, write, sha: str = "1" * 40, repo_type: str = "dataset", branch: str = "main") -> tuple[Path, str]:
    """A huggingface_hub cache holding one snapshot of ``repo_id`` (``refs/<branch>`` -> ``sha``)."""
    repo = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    snap = repo / "snapshots" / sha
    if snap.exists():
        shutil.rmtree(snap)
    snap.mkdir(parents=True)
    write(snap)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / branch).write_text(sha)
    return cache, sha
