"""What a gate says: each expectation's outcome with the rows at fault, and the verdict of a task or a set of tasks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medbench_core.storage import write_json_atomic
from medbench_core.taskdata.task import CANDIDATES_SCHEMA, CORPUS_SCHEMA, QRELS_SCHEMA, QUERY_SCHEMA

NEAR_DUPLICATE_THRESHOLD = 0.9
NGRAM_RANGE = (3, 5)

GATE_FILE = "GATE.json"
OVERLAP_GATE_FILE = "OVERLAP_GATE.json"
RESULTS_FILE = "gx_results.json"
CONTRACT_FILE = "contract.json"
DOCS_DIR = "data_docs"
ALL_TASKS = "all_tasks"

SHOW_ROWS = 10  # rows named per failure in a message

TABLE_FILES = {
    "queries": "queries.parquet",
    "corpus": "corpus.parquet",
    "qrels": "qrels.parquet",
    "candidates": "candidates.parquet",
}
TABLE_SCHEMAS = {
    "queries": QUERY_SCHEMA,
    "corpus": CORPUS_SCHEMA,
    "qrels": QRELS_SCHEMA,
    "candidates": CANDIDATES_SCHEMA,
}
ID_COLUMNS = {"queries": ("query_id",), "corpus": ("doc_id",), "qrels": ("query_id", "doc_id"), "candidates": ("query_id", "doc_id")}


@dataclass(frozen=True)
class Outcome:
    """One expectation's verdict and the rows at fault.

    ``rows`` are readable record ids (``query_id``, ``doc_id``, ``query_id -> doc_id``,
    ``task:query_id``); ``values`` holds, aligned with ``rows``, the offending value of each
    (a licence, an image problem, a shared text).
    """

    aspect: str  # schema | integrity | licence | overlap | holes | identity
    table: str
    file: str
    expectation: str
    column: str | None
    rule: str
    success: bool
    blocking: bool = True
    element_count: int | None = None
    unexpected_count: int | None = None
    rows: tuple[str, ...] = ()
    values: tuple[str | None, ...] = ()
    observed: str | None = None
    error: str | None = None

    def describe(self) -> str:
        """One line: the file, the rule, and the rows and values at fault."""
        head = f"{self.file}: {self.rule}"
        if self.error:
            return f"{head}: could not be evaluated ({self.error})"
        if self.unexpected_count is None:
            return f"{head}: observed {self.observed}"
        n = self.unexpected_count
        of = f" of {self.element_count}" if self.element_count is not None else ""
        parts = [f"{head}: {n}{of} row(s) at fault"]
        if self.values and any(v is not None for v in self.values):
            by_value: dict[str, list[str]] = {}
            for r, v in zip(self.rows, self.values):
                by_value.setdefault(str(v), []).append(r)
            shown = [f"{v!r} ({_ids(rs)})" for v, rs in list(by_value.items())[:SHOW_ROWS]]
            more = f"; and {len(by_value) - SHOW_ROWS} more value(s)" if len(by_value) > SHOW_ROWS else ""
            parts.append("values: " + "; ".join(shown) + more)
        elif self.rows:
            parts.append(f"rows: {_ids(self.rows)}")
        return " -- ".join(parts)


@dataclass(frozen=True)
class NearDuplicate:
    """Two queries of different tasks whose similarity is at or above the threshold."""

    task_a: str
    query_a: str
    task_b: str
    query_b: str
    similarity: float
    text_a: str
    text_b: str


@dataclass(frozen=True)
class ContractResult:
    """The verdict of one gate: a task (``name`` = task) or a set of tasks (``all_tasks``)."""

    name: str
    passed: bool
    outcomes: tuple[Outcome, ...]
    message: str
    research_only: bool = False
    content_hash: str | None = None
    task_hashes: Mapping[str, str] = field(default_factory=dict)
    licences: Mapping[str, int] = field(default_factory=dict)
    near_duplicates: tuple[NearDuplicate, ...] = ()
    failed_tasks: tuple[str, ...] = ()
    # queries whose id is also a document's id, those judged relevant, and whether scoring drops such
    # a retrieved document (:func:`medbench_core.taskdata.task.identical_id_pairs`)
    identical_ids: Mapping[str, Any] = field(default_factory=dict)
    results_path: Path | None = None
    contract_path: Path | None = None
    data_docs_path: Path | None = None
    holes: Mapping[str, Any] = field(default_factory=dict)  # a task's qrels holes (contracts/holes.py), recorded in GATE.json

    @property
    def failures(self) -> tuple[Outcome, ...]:
        """The blocking outcomes that failed."""
        return tuple(o for o in self.outcomes if not o.success and o.blocking)

    @property
    def warnings(self) -> tuple[Outcome, ...]:
        """Failed outcomes that do not block (near-duplicates when configured so)."""
        return tuple(o for o in self.outcomes if not o.success and not o.blocking)

    def failing_rows(self) -> dict[str, list[str]]:
        """``file -> ids`` of every row named by a blocking failure."""
        out: dict[str, list[str]] = {}
        for o in self.failures:
            seen = out.setdefault(o.file, [])
            seen.extend(r for r in o.rows if r not in seen)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (paths as strings)."""
        return {
            "name": self.name,
            "passed": self.passed,
            "research_only": self.research_only,
            "content_hash": self.content_hash,
            "task_hashes": dict(self.task_hashes),
            "licences": dict(self.licences),
            "failed_tasks": list(self.failed_tasks),
            "message": self.message,
            "outcomes": [o.__dict__ | {"rows": list(o.rows), "values": list(o.values)} for o in self.outcomes],
            "near_duplicates": [n.__dict__ for n in self.near_duplicates],
            "identical_ids": dict(self.identical_ids),
            "results_path": str(self.results_path) if self.results_path else None,
            "contract_path": str(self.contract_path) if self.contract_path else None,
            "data_docs_path": str(self.data_docs_path) if self.data_docs_path else None,
            "holes": dict(self.holes),
        }


def _ids(rows: Sequence[str]) -> str:
    shown = ", ".join(rows[:SHOW_ROWS])
    return shown + (f", ... and {len(rows) - SHOW_ROWS} more" if len(rows) > SHOW_ROWS else "")


def summarise(name: str, outcomes: Sequence[Outcome], extra: Sequence[str] = ()) -> tuple[bool, str]:
    failed = [o for o in outcomes if not o.success and o.blocking]
    warned = [o for o in outcomes if not o.success and not o.blocking]
    if failed:
        head = f"{name}: gate FAILED ({len(failed)} of {len(outcomes)} expectations)"
    else:
        head = f"{name}: gate passed ({len(outcomes)} expectations)"
    lines = [head, *extra]
    lines += [f"- {o.describe()}" for o in failed]
    lines += [f"- warning: {o.describe()}" for o in warned]
    return not failed, "\n".join(lines)


def write_contract(out_dir: Path | None, result: ContractResult) -> ContractResult:
    if out_dir is None:
        return result
    path = Path(out_dir) / CONTRACT_FILE
    result = replace_result(result, contract_path=path)
    write_json_atomic(path, result.to_dict())
    return result


def replace_result(result: ContractResult, **changes: Any) -> ContractResult:
    import dataclasses

    return dataclasses.replace(result, **changes)
