"""The contract on an expansion x task: a blocking Great Expectations gate and a leakage measure.

Blocking (the expanded models' runs must not be built on an expansion that fails them):

- every expansion names a query of the task, none twice, and every query has one.

Warned, not blocking: an expansion whose answer (the part retrieval uses) is empty. R2MED's code
scores such a query with the empty string and keeps it in the mean (eval_BM25.py l.124-133,
eval_retrieval.py l.37-44 at 62b7074), and so does medbench; the files' reader refuses what R2MED
fails on, and medbench's own plain formats refuse empty texts
(:mod:`medbench_core.retrieval.expansion.files`).

Leakage (reported, and a non-blocking warning): for each query, the longest run of consecutive
words its answer shares with any of the query's judged-relevant documents (relevance > 0).
Words are NFKC, case-folded ``\\w+`` tokens, so punctuation and case do not hide a copy. A run
of :data:`COPY_WORDS` or more words means the expansion copies a relevant passage: the
generator has seen the document (or the benchmark), and the expanded score says little about
retrieval. Reported per query and summarised per task.
"""

from __future__ import annotations

import re
import statistics
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.taskdata.contracts.gx import Spec, Table, run_tables
from medbench_core.taskdata.contracts.results import ContractResult, summarise, write_contract
from medbench_core.taskdata.task import Task

COPY_WORDS = 30  # a shared run this long is a copied passage
SHARED_TEXT_WORDS = 60  # words of the shared run kept in the report
_WORD = re.compile(r"\w+")

LEAKAGE_SCHEMA: dict[str, pl.DataType] = {
    "query_id": pl.Utf8,
    "longest_shared_words": pl.Int32,  # 0 when nothing is shared (or the query has no relevant document)
    "doc_id": pl.Utf8,  # the relevant document holding the longest shared run
    "shared_text": pl.Utf8,  # that run (its first SHARED_TEXT_WORDS words), normalised
    "copies_relevant": pl.Boolean,  # longest_shared_words >= COPY_WORDS
}


def words(text: str | None) -> list[str]:
    """Normalised words: NFKC, case-folded, ``\\w+`` runs."""
    return _WORD.findall(unicodedata.normalize("NFKC", text or "").casefold())


def longest_shared_run(a: list[str], b: list[str]) -> tuple[int, int]:
    """``(length, start in a)`` of the longest run of consecutive words in both ``a`` and ``b``.

    Dynamic programming over ``a`` with numpy rows over ``b``: O(len(a) * len(b)) comparisons,
    done len(a) vector operations at a time (exact, no hashing).
    """
    if not a or not b:
        return 0, 0
    vocab: dict[str, int] = {}
    ia = np.fromiter((vocab.setdefault(w, len(vocab)) for w in a), dtype=np.int64, count=len(a))
    ib = np.fromiter((vocab.get(w, -1) for w in b), dtype=np.int64, count=len(b))
    prev = np.zeros(len(b) + 1, dtype=np.int32)
    best, end = 0, 0
    for i, w in enumerate(ia):
        cur = np.zeros_like(prev)
        hit = ib == w
        cur[1:][hit] = prev[:-1][hit] + 1
        m = int(cur.max())
        if m > best:
            best, end = m, i + 1
        prev = cur
    return best, end - best


def measure_leakage(expansions: pl.DataFrame, task: Task, threshold: int = COPY_WORDS) -> pl.DataFrame:
    """Per query with an expansion: the longest word run its answer shares with a relevant document."""
    doc_words = dict(zip(task.corpus["doc_id"].to_list(), (words(t) for t in task.doc_text())))
    relevant: dict[str, list[str]] = {}
    for q, d, r in task.qrels.select("query_id", "doc_id", "relevance").iter_rows():
        if r is not None and r > 0 and d in doc_words:
            relevant.setdefault(q, []).append(d)
    rows = []
    for q, ans in expansions.select("query_id", "answer").iter_rows():
        aw = words(ans)
        best, best_doc, best_start = 0, None, 0
        for d in sorted(relevant.get(q, [])):
            n, start = longest_shared_run(aw, doc_words[d])
            if n > best:
                best, best_doc, best_start = n, d, start
        rows.append(
            {
                "query_id": q,
                "longest_shared_words": best,
                "doc_id": best_doc,
                "shared_text": " ".join(aw[best_start : best_start + min(best, SHARED_TEXT_WORDS)]) if best else "",
                "copies_relevant": best >= threshold,
            }
        )
    return pl.DataFrame(rows, schema=LEAKAGE_SCHEMA, orient="row") if rows else pl.DataFrame(schema=LEAKAGE_SCHEMA)


def leakage_summary(leakage: pl.DataFrame) -> dict[str, Any]:
    """Per-task figures: max, mean and median longest shared run, and the queries flagged as copies."""
    n = leakage["longest_shared_words"].to_list()
    flagged = leakage.filter(pl.col("copies_relevant"))["query_id"].to_list()
    return {
        "n_queries": len(n),
        "max_shared_words": max(n) if n else 0,
        "mean_shared_words": float(statistics.fmean(n)) if n else 0.0,
        "median_shared_words": float(statistics.median(n)) if n else 0.0,
        "n_copies": len(flagged),
        "copied_query_ids": flagged,
        "copy_threshold_words": COPY_WORDS,
    }


@dataclass(frozen=True)
class ExpansionVerdict:
    """The gate's verdict, the per-query leakage and its per-task summary."""

    contract: ContractResult
    leakage: pl.DataFrame
    summary: dict[str, Any]

    @property
    def passed(self) -> bool:
        return self.contract.passed

    @property
    def copies(self) -> list[str]:
        return list(self.summary["copied_query_ids"])


def validate_expansion(
    expansions: pl.DataFrame, task: Task, name: str, out_dir: str | Path | None = None, *, file: str = "expansions.parquet"
) -> ExpansionVerdict:
    """Run the expansion contract (see the module docstring). Never raises on bad data.

    With ``out_dir`` the GX results, the verdict (``contract.json``), data docs and
    ``leakage.parquet`` are written there.
    """
    qids = set(task.queries["query_id"].to_list())
    df = expansions.select(pl.col("query_id").cast(pl.Utf8), pl.col("answer").cast(pl.Utf8))
    leakage = measure_leakage(df.filter(pl.col("query_id").is_in(list(qids))), task)
    shared = dict(zip(leakage["query_id"].to_list(), leakage["longest_shared_words"].to_list()))
    ids = df["query_id"].to_list()
    frame = df.with_columns(
        pl.Series("record_id", [q if q is not None else f"row {i} (null id)" for i, q in enumerate(ids)], dtype=pl.Utf8),
        pl.Series("query_known", [q in qids for q in ids], dtype=pl.Boolean),
        pl.Series("has_answer", [bool((a or "").strip()) for a in df["answer"].to_list()], dtype=pl.Boolean),
        pl.Series("longest_shared_words", [shared.get(q, 0) for q in ids], dtype=pl.Int64),
    )
    specs = [
        Spec("ExpectTableRowCountToBeBetween", {"min_value": 1}, "integrity", f"{file} has at least one row"),
        Spec("ExpectColumnValuesToNotBeNull", {"column": "query_id"}, "schema", "every expansion has a query_id", show_values=False),
        Spec("ExpectColumnValuesToBeUnique", {"column": "query_id"}, "integrity", "one expansion per query id"),
        Spec(
            "ExpectColumnValuesToBeInSet",
            {"column": "query_known", "value_set": [True]},
            "integrity",
            f"every query_id is a query of task {task.name}",
            show_values=False,
        ),
        Spec(
            "ExpectColumnValuesToBeInSet",
            {"column": "has_answer", "value_set": [True]},
            "schema",
            "every expansion's answer (after any </think>) has text",
            show_values=False,
            blocking=False,  # an empty one is scored with the empty string, as R2MED's code scores it (module docstring)
        ),
        Spec(
            "ExpectColumnValuesToBeBetween",
            {"column": "longest_shared_words", "max_value": COPY_WORDS - 1},
            "leakage",
            f"no expansion shares a run of {COPY_WORDS}+ words with a relevant document of its query (a copied passage)",
            blocking=False,
        ),
    ]
    covered = set(ids)
    tq = task.queries.select("query_id").with_columns(
        pl.col("query_id").alias("record_id"),
        pl.Series("has_expansion", [q in covered for q in task.queries["query_id"].to_list()], dtype=pl.Boolean),
    )
    q_specs = [
        Spec(
            "ExpectColumnValuesToBeInSet",
            {"column": "has_expansion", "value_set": [True]},
            "integrity",
            f"every query of task {task.name} has an expansion",
            show_values=False,
        )
    ]
    tables = [Table("expansions", file, frame, specs), Table("task_queries", "queries.parquet", tq, q_specs)]
    outcomes, results_path, docs_path = run_tables(f"expansion.{name}.{task.name}", tables, Path(out_dir) if out_dir else None)
    summary = leakage_summary(leakage)
    extra = [
        (
            f"leakage: longest shared run max {summary['max_shared_words']} words, median {summary['median_shared_words']:g}; "
            f"{summary['n_copies']} expansion(s) copy a relevant passage ({COPY_WORDS}+ words)"
        )
    ]
    passed, message = summarise(f"expansion {name} x task {task.name}", outcomes, extra)
    result = ContractResult(
        name=f"{name}:{task.name}",
        passed=passed,
        outcomes=tuple(outcomes),
        message=message,
        content_hash=task.content_hash(),
        results_path=results_path,
        data_docs_path=docs_path,
    )
    result = write_contract(Path(out_dir) if out_dir else None, result)
    if out_dir is not None:
        leakage.write_parquet(Path(out_dir) / "leakage.parquet", statistics=False)
    return ExpansionVerdict(contract=result, leakage=leakage, summary=summary)


# --- the recorded verdict -----------------------------------------------------------------

GATE_FILE = "EXPANSION_GATE.json"


def record_expansion_gate(folder: str | Path, verdict: ExpansionVerdict, key: str, judged_with: str = "") -> Path:
    """Write the verdict on the expansion artifact ``key`` to ``<folder>/EXPANSION_GATE.json`` (atomically).

    ``judged_with`` names the rules that judged it (the contract's code version), so that a
    recorded verdict is reused only under the same rules.
    """
    from medbench_core.storage import write_json_atomic

    return write_json_atomic(
        Path(folder) / GATE_FILE,
        {
            "key": key,
            "judged_with": judged_with,
            "passed": verdict.passed,
            "message": verdict.contract.message,
            "failing_rows": verdict.contract.failing_rows(),
            "leakage": verdict.summary,
        },
    )


def expansion_gate_refusal(folder: str | Path, key: str) -> str | None:
    """Why an expanded run must not use the expansion ``key`` (None when it may): no verdict
    recorded in ``folder``, a verdict on other texts, or a failed gate. Leakage never refuses."""
    import json

    path = Path(folder) / GATE_FILE
    try:
        gate = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return f"no expansion contract verdict at {path}; run the expansion's check first"
    if gate.get("key") != key:
        return f"{path}: the contract judged expansion {str(gate.get('key'))[:12]}, not {key[:12]}; re-run the check"
    if not gate.get("passed"):
        return f"expansion contract failed, refusing to retrieve with it: {gate.get('message', '')}"
    return None
