"""Data contracts: Great Expectations suites that gate curated tasks.

Two gates, each a set of GX Core 1.x expectation suites run by checkpoints:

* :func:`validate_task` judges one task, table by table (queries, corpus, qrels,
  candidates):

  - schema: every column of the task data model present with its type; ids not null and
    unique; every record has non-empty text or an image; an image reference resolves, through
    :func:`medbench_core.model.resolve_inside` (no ``..``, absolute paths or symbolic links),
    to a file inside the task's image folder that decodes as an image;
  - integrity: every table has at least one row (GX passes an empty frame unless told);
    qrels and candidates name existing queries and documents; no pair is judged twice;
    every query has at least one positive judgment (and, with candidates, a non-empty pool
    that holds its positives);
  - licence: every record carries a licence (``unknown`` when the source states none, never
    null) and its canonical form (:func:`medbench_core.licences.normalise_licence`) is in the
    policy's allowlist; a research-only task also admits ``unknown``, NC and ND.

* :func:`validate_tasks` judges a set of tasks against each other: no query shared after
  :func:`normalise_query` (NFKC, case, whitespace, punctuation); no pair of queries from
  different tasks at or above :data:`NEAR_DUPLICATE_THRESHOLD` similarity; no query concept id
  in two tasks; no image (sha256 of its bytes) in two tasks.

GX quirks handled here: ``checkpoint.run()`` never raises, an empty frame passes, an all-null
column passes an in-set expectation, and a missing column only makes its own expectations
fail. So the suites carry explicit row-count and not-null expectations, every required
column has an existence expectation, and the verdict is computed from the per-expectation
outcomes rather than trusted from GX. Derived columns (``has_content``, ``image_check``,
``licence_canonical``, ``doc_id_known``...) are computed in polars and judged by GX, so the
suites stay small and the data docs readable.

Each validation can store its GX results (``gx_results.json``), our verdict
(``contract.json``) and GX data docs (``data_docs/index.html``) under a folder the caller
passes; the paths come back on the :class:`ContractResult`.

The gate verdict of a task is recorded in ``<task dir>/GATE.json`` (:func:`record_gate`) and the
cross-task verdict in ``<tasks root>/OVERLAP_GATE.json`` (:func:`record_overlap_gate`);
:func:`gate_refusal` tells a downstream step whether it may build on a task, which makes a
failed gate hold across separate runs.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.errors import ContractError, DataError
from medbench_core.licences import DEFAULT_POLICY, LicencePolicy, normalise_licence
from medbench_core.model import (
    CANDIDATES_SCHEMA,
    CORPUS_SCHEMA,
    MODALITIES,
    QRELS_SCHEMA,
    QUERY_SCHEMA,
    Task,
)
from medbench_core.storage import replace_dir_atomic, sha256_file, write_json_atomic

# Character 3-5-gram TF-IDF cosine (within word boundaries, on normalised text). At 0.9 two
# queries differ by little more than a typo, a plural or one short word in a sentence;
# distinct questions on the same topic score well below (across the six shared datasets the
# closest cross-task pair scores 0.57: "a chest X-ray showing pneumonia" / "Is this image
# showing the chest?").
NEAR_DUPLICATE_THRESHOLD = 0.9
NGRAM_RANGE = (3, 5)

GATE_FILE = "GATE.json"
OVERLAP_GATE_FILE = "OVERLAP_GATE.json"
RESULTS_FILE = "gx_results.json"
CONTRACT_FILE = "contract.json"
DOCS_DIR = "data_docs"
ALL_TASKS = "all_tasks"

_SHOW = 10  # rows named per failure in a message

_TABLE_FILES = {
    "queries": "queries.parquet",
    "corpus": "corpus.parquet",
    "qrels": "qrels.parquet",
    "candidates": "candidates.parquet",
}
_TABLE_SCHEMAS = {
    "queries": QUERY_SCHEMA,
    "corpus": CORPUS_SCHEMA,
    "qrels": QRELS_SCHEMA,
    "candidates": CANDIDATES_SCHEMA,
}
_ID_COLUMNS = {"queries": ("query_id",), "corpus": ("doc_id",), "qrels": ("query_id", "doc_id"), "candidates": ("query_id", "doc_id")}


# --- results -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """One expectation's verdict and the rows at fault.

    ``rows`` are readable record ids (``query_id``, ``doc_id``, ``query_id -> doc_id``,
    ``task:query_id``); ``values`` holds, aligned with ``rows``, the offending value of each
    (a licence, an image problem, a shared text).
    """

    aspect: str  # schema | integrity | licence | overlap
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
            shown = [f"{v!r} ({_ids(rs)})" for v, rs in list(by_value.items())[:_SHOW]]
            more = f"; and {len(by_value) - _SHOW} more value(s)" if len(by_value) > _SHOW else ""
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
    results_path: Path | None = None
    contract_path: Path | None = None
    data_docs_path: Path | None = None

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
            "results_path": str(self.results_path) if self.results_path else None,
            "contract_path": str(self.contract_path) if self.contract_path else None,
            "data_docs_path": str(self.data_docs_path) if self.data_docs_path else None,
        }


def _ids(rows: Sequence[str]) -> str:
    shown = ", ".join(rows[:_SHOW])
    return shown + (f", ... and {len(rows) - _SHOW} more" if len(rows) > _SHOW else "")


# --- normalisation -----------------------------------------------------------------------

_SPACE = re.compile(r"\s+")


def normalise_query(text: str | None) -> str:
    """Query text as compared across tasks: NFKC, case-folded, punctuation to spaces, spaces collapsed."""
    if not text:
        return ""
    s = unicodedata.normalize("NFKC", text).casefold()
    s = unicodedata.normalize("NFKC", s)
    s = "".join(" " if unicodedata.category(c).startswith("P") else c for c in s)
    return _SPACE.sub(" ", s).strip()


# --- GX plumbing -------------------------------------------------------------------------


@dataclass
class _Spec:
    """An expectation to build: GX class name, its kwargs, and what it means to us."""

    kind: str
    kwargs: dict[str, Any]
    aspect: str
    rule: str
    blocking: bool = True
    show_values: bool = True


@dataclass
class _Table:
    name: str
    file: str
    frame: pl.DataFrame  # carries a ``record_id`` column naming each row
    specs: list[_Spec]


def _pandas_dtype(dtype: pl.DataType) -> str:
    # The dtype pandas gives this polars type depends on the library versions: ask them.
    return str(pl.DataFrame(schema={"c": dtype}).to_pandas().dtypes["c"])


def _context():
    """A fresh in-memory GX context: no files, no analytics, no progress bars."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    cfg = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
    )
    return gx.get_context(project_config=cfg, mode="ephemeral")


def _run_tables(name: str, tables: list[_Table], out_dir: Path | None) -> tuple[list[Outcome], Path | None, Path | None]:
    """Run one suite + checkpoint per table; store GX results and data docs in ``out_dir``."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    ctx = _context()
    source = ctx.data_sources.add_pandas(f"{name}")
    ranked: list[tuple[int, int, Outcome]] = []
    raw_results: list[dict[str, Any]] = []
    for pos, table in enumerate(tables):
        # Expectations go in with the suite: add_expectation re-serialises the store each time.
        expectations = [
            getattr(gxe, spec.kind)(**spec.kwargs, meta={"aspect": spec.aspect, "rule": spec.rule, "table": table.name, "index": i})
            for i, spec in enumerate(table.specs)
        ]
        suite = ctx.suites.add(gx.ExpectationSuite(name=f"{name}.{table.name}", expectations=expectations))
        batch = source.add_dataframe_asset(table.name).add_batch_definition_whole_dataframe("whole")
        vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=f"{name}.{table.name}", data=batch, suite=suite))
        checkpoint = ctx.checkpoints.add(
            gx.Checkpoint(
                name=f"{name}.{table.name}",
                validation_definitions=[vd],
                result_format={"result_format": "COMPLETE", "unexpected_index_column_names": ["record_id"]},
            )
        )
        result = checkpoint.run(batch_parameters={"dataframe": table.frame.to_pandas()})
        for vr in result.run_results.values():
            raw_results.append(vr.to_json_dict())
            for r in vr.results:
                index = int(r.expectation_config.meta["index"])
                ranked.append((pos, index, _outcome(table, table.specs[index], r)))
    results_path = docs_path = None
    if out_dir is not None:
        out_dir = Path(out_dir)
        results_path = write_json_atomic(out_dir / RESULTS_FILE, raw_results)

        def build(tmp: Path) -> None:
            ctx.add_data_docs_site(
                site_name="medbench",
                site_config={
                    "class_name": "SiteBuilder",
                    "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
                    "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(tmp)},
                },
            )
            ctx.build_data_docs(site_names=["medbench"])

        replace_dir_atomic(out_dir / DOCS_DIR, build)
        docs_path = out_dir / DOCS_DIR / "index.html"
    # GX orders results its own way; keep the order the suites were written in.
    outcomes = [o for _, _, o in sorted(ranked, key=lambda x: (x[0], x[1]))]
    return outcomes, results_path, docs_path


def _outcome(table: _Table, spec: _Spec, r: Any) -> Outcome:
    res = dict(r.result or {})
    error = None
    info = r.exception_info or {}
    # exception_info is either one record or a dict of records keyed by metric.
    records = [info] if "raised_exception" in info else [v for v in info.values() if isinstance(v, dict)]
    for rec in records:
        if rec.get("raised_exception"):
            error = str(rec.get("exception_message") or "exception")
            break
    rows: list[str] = []
    values: list[str | None] = []
    for item in res.get("unexpected_index_list") or []:
        if isinstance(item, dict):
            rows.append(str(item.get("record_id")))
            col = spec.kwargs.get("column")
            v = item.get(col) if col else None
            values.append(None if v is None or (isinstance(v, float) and np.isnan(v)) or not spec.show_values else str(v))
        else:
            rows.append(f"row {item}")
            values.append(None)
    observed = res.get("observed_value")
    details = res.get("details")
    if spec.kind == "ExpectColumnToExist" and not r.success:
        observed = f"column {spec.kwargs['column']!r} missing; found {sorted(c for c in table.frame.columns if c != 'record_id')}"
    elif details and observed is None:
        observed = json.dumps(details, default=str)
    return Outcome(
        aspect=spec.aspect,
        table=table.name,
        file=table.file,
        expectation=r.expectation_config.type,
        column=spec.kwargs.get("column"),
        rule=spec.rule,
        success=bool(r.success),
        blocking=spec.blocking,
        element_count=res.get("element_count"),
        unexpected_count=res.get("unexpected_count"),
        rows=tuple(rows),
        values=tuple(values) if any(v is not None for v in values) else (),
        observed=None if observed is None else str(observed),
        error=error,
    )


def _record_ids(df: pl.DataFrame, table: str) -> pl.Series:
    """Readable id per row: the id column(s), or the row number when they are missing or null."""
    cols = [c for c in _ID_COLUMNS[table] if c in df.columns]
    rownum = [f"row {i}" for i in range(df.height)]
    if len(cols) != len(_ID_COLUMNS[table]):
        return pl.Series("record_id", rownum, dtype=pl.Utf8)
    parts = [df[c].cast(pl.Utf8).to_list() for c in cols]
    ids = [" -> ".join(p) if all(x is not None for x in p) else rownum[i] + " (null id)" for i, p in enumerate(zip(*parts))]
    return pl.Series("record_id", ids, dtype=pl.Utf8)


def _col(df: pl.DataFrame, name: str) -> list[Any]:
    """Values of a column as strings (None stays None); all None when the column is missing.

    Derived columns must not crash on a mistyped column: its type expectation reports it.
    """
    if name not in df.columns:
        return [None] * df.height
    return [None if v is None else v if isinstance(v, str) else str(v) for v in df[name].to_list()]


def _is_int(df: pl.DataFrame, name: str) -> bool:
    return name in df.columns and df.schema[name].is_integer()


# --- the per-task suites -----------------------------------------------------------------


def _image_checker(task: Task):
    """ref -> 'ok' or the reason it is refused; cached because many records share an image."""
    from medbench_core.images import load_image

    cache: dict[str, str] = {}

    def check(ref: str | None) -> str | None:
        if ref is None:
            return None
        if ref not in cache:
            try:
                path = task.resolve_image(ref)
                load_image(path, ref)
                cache[ref] = "ok"
            except DataError as exc:
                cache[ref] = str(exc)
        return cache[ref]

    return check


def _schema_specs(df: pl.DataFrame, table: str) -> list[_Spec]:
    file = _TABLE_FILES[table]
    specs = [_Spec("ExpectTableRowCountToBeBetween", {"min_value": 1}, "integrity", f"{file} has at least one row")]
    for col, dtype in _TABLE_SCHEMAS[table].items():
        specs.append(_Spec("ExpectColumnToExist", {"column": col}, "schema", f"column {col!r} is present"))
        if col in df.columns:
            want = _pandas_dtype(dtype)
            specs.append(_Spec("ExpectColumnTypeToBe", {"column": col, "type_": want}, "schema", f"column {col!r} has type {dtype} ({want} in pandas)"))
    for col in _ID_COLUMNS[table]:
        if col in df.columns:
            specs.append(_Spec("ExpectColumnValuesToNotBeNull", {"column": col}, "schema", f"every row has a {col}", show_values=False))
    return specs


def _record_table(task: Task, table: str, policy: LicencePolicy, research_only: bool, check_image) -> _Table:
    """queries or corpus, with derived columns for content, images and licences."""
    df = task.queries if table == "queries" else task.corpus
    key = _ID_COLUMNS[table][0]
    specs = _schema_specs(df, table)
    if key in df.columns:
        specs.append(_Spec("ExpectColumnValuesToBeUnique", {"column": key}, "schema", f"{key} is unique"))
    texts = _col(df, "text")
    titles = _col(df, "title") if table == "corpus" else [None] * df.height
    images = _col(df, "image")
    has_content = [bool((x or "").strip() or (t or "").strip()) or im is not None for x, t, im in zip(texts, titles, images)]
    what = "query" if table == "queries" else "document"
    specs.append(_Spec("ExpectColumnValuesToBeInSet", {"column": "has_content", "value_set": [True]}, "schema", f"every {what} has non-empty text or an image", show_values=False))
    derived: dict[str, pl.Series] = {"has_content": pl.Series(has_content, dtype=pl.Boolean)}
    if "image" in df.columns:
        derived["image_check"] = pl.Series([check_image(r) for r in images], dtype=pl.Utf8)
        specs.append(_Spec("ExpectColumnValuesToBeInSet", {"column": "image_check", "value_set": ["ok"]}, "schema", "every image reference resolves to a readable image inside the task's image folder"))
    if "modality" in df.columns:
        specs.append(_Spec("ExpectColumnValuesToBeInSet", {"column": "modality", "value_set": list(MODALITIES)}, "schema", f"modality is one of {list(MODALITIES)}"))
    if "licence" in df.columns:
        specs.append(_Spec("ExpectColumnValuesToNotBeNull", {"column": "licence"}, "licence", "every record carries a licence ('unknown' when the source states none)", show_values=False))
        derived["licence_canonical"] = pl.Series([None if v is None else normalise_licence(v) for v in _col(df, "licence")], dtype=pl.Utf8)
        allowed = sorted(policy.allowed(research_only))
        scope = "allowlist + unknown/NC/ND (research-only task)" if research_only else "licence allowlist"
        specs.append(_Spec("ExpectColumnValuesToBeInSet", {"column": "licence_canonical", "value_set": allowed}, "licence", f"every licence is in the {scope}"))
    if table == "queries" and key in df.columns:
        qids = df[key].to_list()
        if "query_id" in task.qrels.columns and _is_int(task.qrels, "relevance"):
            pos = task.qrels.filter(pl.col("relevance") > 0).group_by("query_id").len()
            n_pos = dict(zip(pos["query_id"].to_list(), pos["len"].to_list()))
            derived["positive_judgments"] = pl.Series([n_pos.get(q, 0) for q in qids], dtype=pl.Int64)
            specs.append(_Spec("ExpectColumnValuesToBeBetween", {"column": "positive_judgments", "min_value": 1}, "integrity", "every query has at least one positive judgment in qrels.parquet", show_values=False))
        if task.candidates is not None and "query_id" in task.candidates.columns:
            pools = task.candidates.group_by("query_id").len()
            n_cand = dict(zip(pools["query_id"].to_list(), pools["len"].to_list()))
            derived["candidates"] = pl.Series([n_cand.get(q, 0) for q in qids], dtype=pl.Int64)
            specs.append(_Spec("ExpectColumnValuesToBeBetween", {"column": "candidates", "min_value": 1}, "integrity", "every query has a non-empty candidate pool in candidates.parquet", show_values=False))
    frame = df.with_columns(_record_ids(df, table), *[s.alias(n) for n, s in derived.items()])
    return _Table(table, _TABLE_FILES[table], frame, specs)


def _pair_table(task: Task, table: str) -> _Table:
    """qrels or candidates: ids must join, no pair twice; qrels positives inside the pool."""
    df = task.qrels if table == "qrels" else task.candidates
    assert df is not None
    specs = _schema_specs(df, table)
    derived: dict[str, pl.Series] = {}
    if {"query_id", "doc_id"} <= set(df.columns):
        specs.append(_Spec("ExpectCompoundColumnsToBeUnique", {"column_list": ["query_id", "doc_id"]}, "schema", "no (query_id, doc_id) pair appears twice", show_values=False))
    for col, side, other in (("query_id", "queries", task.queries), ("doc_id", "corpus", task.corpus)):
        if col in df.columns:
            known = set(other[col].to_list()) if col in other.columns else set()
            derived[f"{col}_known"] = pl.Series([v in known for v in df[col].to_list()], dtype=pl.Boolean)
            specs.append(_Spec("ExpectColumnValuesToBeInSet", {"column": f"{col}_known", "value_set": [True]}, "integrity", f"every {col} names a row of {_TABLE_FILES[side]}", show_values=False))
    if table == "qrels" and task.candidates is not None and {"query_id", "doc_id"} <= set(df.columns) and _is_int(df, "relevance") and {"query_id", "doc_id"} <= set(task.candidates.columns):
        pool = set(zip(task.candidates["query_id"].to_list(), task.candidates["doc_id"].to_list()))
        in_pool = [None if (r is None or r <= 0) else (q, d) in pool for q, d, r in df.select("query_id", "doc_id", "relevance").iter_rows()]
        derived["positive_in_pool"] = pl.Series(in_pool, dtype=pl.Boolean)
        specs.append(_Spec("ExpectColumnValuesToBeInSet", {"column": "positive_in_pool", "value_set": [True]}, "integrity", "every positive judgment is inside its query's candidate pool", show_values=False))
    if "relevance" in df.columns:
        specs.append(_Spec("ExpectColumnValuesToNotBeNull", {"column": "relevance"}, "schema", "every judgment has a relevance", show_values=False))
    frame = df.with_columns(_record_ids(df, table), *[s.alias(n) for n, s in derived.items()])
    return _Table(table, _TABLE_FILES[table], frame, specs)


def _summarise(name: str, outcomes: Sequence[Outcome], extra: Sequence[str] = ()) -> tuple[bool, str]:
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


def _write_contract(out_dir: Path | None, result: ContractResult) -> ContractResult:
    if out_dir is None:
        return result
    path = Path(out_dir) / CONTRACT_FILE
    result = _replace(result, contract_path=path)
    write_json_atomic(path, result.to_dict())
    return result


def _replace(result: ContractResult, **changes: Any) -> ContractResult:
    import dataclasses

    return dataclasses.replace(result, **changes)


def validate_task(
    task: Task,
    out_dir: str | Path | None = None,
    *,
    policy: LicencePolicy = DEFAULT_POLICY,
    research_only: bool | None = None,
) -> ContractResult:
    """Run the schema, integrity and licence suites on one task.

    ``research_only`` defaults to ``task.meta.research_only``. With ``out_dir`` the GX results,
    the verdict and the data docs are written there (paths on the result). Never raises on bad
    data: the verdict is ``passed`` and ``message`` names the file, rows and values at fault.
    """
    research_only = task.meta.research_only if research_only is None else research_only
    check_image = _image_checker(task)
    tables = [_record_table(task, t, policy, research_only, check_image) for t in ("queries", "corpus")]
    tables.append(_pair_table(task, "qrels"))
    if task.candidates is not None:
        tables.append(_pair_table(task, "candidates"))
    outcomes, results_path, docs_path = _run_tables(task.name, tables, Path(out_dir) if out_dir else None)

    licences: dict[str, int] = {}
    for t in tables[:2]:
        if "licence_canonical" in t.frame.columns:
            for lic, n in t.frame["licence_canonical"].fill_null("null").value_counts().iter_rows():
                licences[lic] = licences.get(lic, 0) + n
    admitted = sorted(lic for lic in licences if lic != "null" and policy.needs_research_only(lic))
    extra = []
    if research_only:
        extra.append(
            "research-only task: " + (f"admits licence(s) {', '.join(f'{x} ({licences[x]} records)' for x in admitted)} outside the allowlist" if admitted else "every licence is also in the allowlist")
        )
    passed, message = _summarise(f"task {task.name}", outcomes, extra)
    try:
        digest = task.content_hash()
    except (DataError, OSError, pl.exceptions.PolarsError):
        digest = None  # a missing column or an image that cannot be hashed: the outcomes say which
    result = ContractResult(
        name=task.name,
        passed=passed,
        outcomes=tuple(outcomes),
        message=message,
        research_only=research_only,
        content_hash=digest,
        licences=dict(sorted(licences.items())),
        results_path=results_path,
        data_docs_path=docs_path,
    )
    return _write_contract(Path(out_dir) if out_dir else None, result)


# --- the cross-task suite ----------------------------------------------------------------


def _query_texts(tasks: Sequence[Task]) -> tuple[list[str], list[str], list[str], list[str]]:
    """task names, query ids, raw texts and normalised texts of every query with text."""
    names, qids, raw, norm = [], [], [], []
    for t in tasks:
        if not {"query_id", "text"} <= set(t.queries.columns):
            continue
        for q, x in t.queries.select("query_id", "text").iter_rows():
            n = normalise_query(x)
            if n:
                names.append(t.name)
                qids.append(str(q))
                raw.append(x)
                norm.append(n)
    return names, qids, raw, norm


def _nearest_other_task(names: list[str], norm: list[str], threshold: float) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, float]]]:
    """Per query: best similarity to a query of another task and its position; pairs >= threshold.

    Pairs whose normalised texts are equal are left out: they are exact overlaps, reported as such.
    """
    n = len(norm)
    best = np.full(n, np.nan)
    arg = np.full(n, -1, dtype=np.int64)
    pairs: list[tuple[int, int, float]] = []
    if n == 0 or len(set(names)) < 2:
        return best, arg, pairs
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(analyzer="char_wb", ngram_range=NGRAM_RANGE, sublinear_tf=True, dtype=np.float32)
    x = vec.fit_transform(norm)
    xt = x.T.tocsr()
    task_ix = np.unique(np.asarray(names), return_inverse=True)[1]
    norm_ix = np.unique(np.asarray(norm), return_inverse=True)[1]
    chunk = 512  # 512 x n float32 dense block: ~10 MB at n = 5k
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        sim = (x[start:stop] @ xt).toarray()
        rows = np.arange(start, stop)
        same = (task_ix[rows][:, None] == task_ix[None, :]) | (norm_ix[rows][:, None] == norm_ix[None, :])
        sim[same] = -1.0
        arg[start:stop] = sim.argmax(axis=1)
        best[start:stop] = sim[np.arange(stop - start), arg[start:stop]]
        for r, c in zip(*np.nonzero(sim >= threshold)):
            if start + r < c:
                pairs.append((int(start + r), int(c), float(sim[r, c])))
    best[best < 0] = np.nan  # no query of another task to compare with
    arg[np.isnan(best)] = -1
    return best, arg, pairs


def near_duplicates(tasks: Sequence[Task], threshold: float = NEAR_DUPLICATE_THRESHOLD) -> list[NearDuplicate]:
    """Pairs of queries from different tasks with char n-gram TF-IDF cosine >= ``threshold``.

    Texts are compared after :func:`normalise_query`; pairs equal after normalisation are exact
    overlaps and are not listed here. Sorted by decreasing similarity.
    """
    names, qids, raw, norm = _query_texts(tasks)
    _, _, pairs = _nearest_other_task(names, norm, threshold)
    out = [NearDuplicate(names[a], qids[a], names[b], qids[b], round(s, 4), raw[a], raw[b]) for a, b, s in pairs]
    return sorted(out, key=lambda d: (-d.similarity, d.task_a, d.query_a, d.task_b, d.query_b))


def _image_hashes(task: Task) -> dict[str, list[str]]:
    """sha256 -> image references of a task; references that do not resolve are the task gate's business."""
    refs: set[str] = set()
    for df in (task.queries, task.corpus):
        if "image" in df.columns:
            refs.update(r for r in df["image"].drop_nulls().to_list())
    out: dict[str, list[str]] = {}
    for ref in sorted(refs):
        try:
            path = task.resolve_image(ref)
            digest = sha256_file(path)
        except (DataError, OSError):
            continue
        out.setdefault(digest, []).append(ref)
    return out


def _cross_tables(tasks: Sequence[Task], threshold: float, fail_on_near_duplicates: bool) -> tuple[list[_Table], list[NearDuplicate]]:
    S = _Spec
    task_frame = pl.DataFrame(
        {
            "record_id": [t.name for t in tasks],
            "task": [t.name for t in tasks],
            "queries": [t.queries.height for t in tasks],
        },
        schema={"record_id": pl.Utf8, "task": pl.Utf8, "queries": pl.Int64},
    )
    tables = [
        _Table(
            "tasks",
            "task list",
            task_frame,
            [
                S("ExpectTableRowCountToBeBetween", {"min_value": 1}, "integrity", "at least one task to compare"),
                S("ExpectColumnValuesToBeUnique", {"column": "task"}, "integrity", "task names are unique"),
            ],
        )
    ]

    names, qids, raw, norm = _query_texts(tasks)
    # One row per (task, normalised text) so a query repeated inside one task is not an overlap.
    grouped: dict[tuple[str, str], list[str]] = {}
    for t, q, n in zip(names, qids, norm):
        grouped.setdefault((t, n), []).append(q)
    shared = pl.DataFrame(
        {
            "record_id": [f"{t}:{','.join(qs[:3])}{'...' if len(qs) > 3 else ''}" for (t, _), qs in grouped.items()],
            "normalised_query": [n for (_, n) in grouped],
        },
        schema={"record_id": pl.Utf8, "normalised_query": pl.Utf8},
    )
    tables.append(
        _Table(
            "shared_queries",
            "queries.parquet of every task",
            shared,
            [S("ExpectColumnValuesToBeUnique", {"column": "normalised_query"}, "overlap", "no query text shared between tasks (after NFKC, case folding, punctuation and whitespace normalisation)")],
        )
    )

    best, arg, pairs = _nearest_other_task(names, norm, threshold)
    near = pl.DataFrame(
        {
            "record_id": [f"{names[i]}:{qids[i]} ~ {names[arg[i]]}:{qids[arg[i]]}" if arg[i] >= 0 else f"{names[i]}:{qids[i]}" for i in range(len(names))],
            "max_cross_task_similarity": [None if np.isnan(b) else round(float(b), 4) for b in best],
        },
        schema={"record_id": pl.Utf8, "max_cross_task_similarity": pl.Float64},
    )
    tables.append(
        _Table(
            "near_duplicate_queries",
            "queries.parquet of every task",
            near,
            [
                S(
                    "ExpectColumnValuesToBeBetween",
                    {"column": "max_cross_task_similarity", "max_value": threshold, "strict_max": True},
                    "overlap",
                    f"no query has a near-duplicate in another task (char {NGRAM_RANGE[0]}-{NGRAM_RANGE[1]}-gram TF-IDF cosine < {threshold})",
                    blocking=fail_on_near_duplicates,
                )
            ],
        )
    )
    dups = [NearDuplicate(names[a], qids[a], names[b], qids[b], round(s, 4), raw[a], raw[b]) for a, b, s in pairs]
    dups.sort(key=lambda d: (-d.similarity, d.task_a, d.query_a, d.task_b, d.query_b))

    concepts: dict[tuple[str, str], list[str]] = {}
    for t in tasks:
        for df, key in ((t.queries, "query_id"), (t.corpus, "doc_id")):
            if {key, "concept_ids"} <= set(df.columns):
                for rid, cids in df.select(key, "concept_ids").iter_rows():
                    for c in cids or []:
                        if c:
                            concepts.setdefault((t.name, c), []).append(str(rid))
    tables.append(
        _Table(
            "shared_concepts",
            "queries.parquet and corpus.parquet of every task",
            pl.DataFrame(
                {
                    "record_id": [f"{t}:{','.join(ids[:3])}{'...' if len(ids) > 3 else ''}" for (t, _), ids in concepts.items()],
                    "concept_id": [c for (_, c) in concepts],
                },
                schema={"record_id": pl.Utf8, "concept_id": pl.Utf8},
            ),
            [S("ExpectColumnValuesToBeUnique", {"column": "concept_id"}, "overlap", "no concept id shared between tasks")],
        )
    )

    images: list[tuple[str, str]] = []
    shas: list[str] = []
    for t in tasks:
        for digest, refs in _image_hashes(t).items():
            images.append((t.name, refs[0] + (f" (+{len(refs) - 1} same bytes)" if len(refs) > 1 else "")))
            shas.append(digest)
    tables.append(
        _Table(
            "shared_images",
            "images of every task",
            pl.DataFrame(
                {"record_id": [f"{t}:{r}" for t, r in images], "image_sha256": shas},
                schema={"record_id": pl.Utf8, "image_sha256": pl.Utf8},
            ),
            [S("ExpectColumnValuesToBeUnique", {"column": "image_sha256"}, "overlap", "no image (sha256 of its bytes) shared between tasks")],
        )
    )
    return tables, dups


def _tasks_named(rows: Iterable[str]) -> set[str]:
    out = set()
    for r in rows:
        for part in r.split(" ~ "):
            if ":" in part:
                out.add(part.split(":", 1)[0])
    return out


def validate_tasks(
    tasks: Sequence[Task],
    out_dir: str | Path | None = None,
    *,
    threshold: float = NEAR_DUPLICATE_THRESHOLD,
    fail_on_near_duplicates: bool = True,
) -> ContractResult:
    """Run the cross-task overlap suite over ``tasks``.

    Fails when a query (after :func:`normalise_query`), a concept id or an image (sha256) occurs
    in two tasks, and, unless ``fail_on_near_duplicates`` is False (then they are warnings), when
    two queries of different tasks reach ``threshold`` similarity. ``failed_tasks`` names the
    tasks involved in a failure; ``task_hashes`` the content each task had when judged.
    """
    tables, dups = _cross_tables(tasks, threshold, fail_on_near_duplicates)
    outcomes, results_path, docs_path = _run_tables(ALL_TASKS, tables, Path(out_dir) if out_dir else None)
    failed_tasks = sorted(_tasks_named(r for o in outcomes if not o.success and o.blocking for r in o.rows))
    extra = []
    if dups:
        shown = "; ".join(f"{d.task_a}:{d.query_a} ~ {d.task_b}:{d.query_b} ({d.similarity:.3f}: {d.text_a[:60]!r} / {d.text_b[:60]!r})" for d in dups[:_SHOW])
        extra.append(f"{len(dups)} near-duplicate pair(s) at cosine >= {threshold}: {shown}")
    if failed_tasks:
        extra.append(f"tasks involved: {', '.join(failed_tasks)}")
    passed, message = _summarise(f"{len(tasks)} task(s) [{', '.join(t.name for t in tasks)}]", outcomes, extra)
    hashes: dict[str, str] = {}
    for t in tasks:
        try:
            hashes[t.name] = t.content_hash()
        except (DataError, OSError, pl.exceptions.PolarsError):
            hashes[t.name] = ""  # unhashable task (bad image): its own gate fails; never matches
    result = ContractResult(
        name=ALL_TASKS,
        passed=passed,
        outcomes=tuple(outcomes),
        message=message,
        task_hashes=hashes,
        near_duplicates=tuple(dups),
        failed_tasks=tuple(failed_tasks),
        results_path=results_path,
        data_docs_path=docs_path,
    )
    return _write_contract(Path(out_dir) if out_dir else None, result)


# --- gate records: what makes a failed gate hold across separate runs --------------------


def gate_status_path(task_dir: str | Path) -> Path:
    """Where the verdict of a task's gate is kept: ``<task dir>/GATE.json``."""
    return Path(task_dir) / GATE_FILE


def overlap_gate_path(tasks_root: str | Path) -> Path:
    """Where the cross-task verdict is kept: ``<tasks root>/OVERLAP_GATE.json``."""
    return Path(tasks_root) / OVERLAP_GATE_FILE


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def record_gate(task_dir: str | Path, result: ContractResult, *, judged_with: str = "") -> Path:
    """Write a task gate's verdict atomically to ``GATE.json`` beside the task it judged.

    Fields: ``task``, ``passed``, ``content_hash`` (of the task judged), ``research_only``,
    ``message``, ``failing_rows``, ``licences``, report paths and ``recorded_at``.
    """
    if result.name == ALL_TASKS:
        raise ValueError("record_gate takes a task's result; use record_overlap_gate for validate_tasks")
    return write_json_atomic(
        gate_status_path(task_dir),
        {
            "task": result.name,
            "passed": result.passed,
            "content_hash": result.content_hash,
            "research_only": result.research_only,
            "message": result.message,
            "failing_rows": result.failing_rows(),
            "licences": dict(result.licences),
            "results_path": str(result.results_path) if result.results_path else None,
            "data_docs_path": str(result.data_docs_path) if result.data_docs_path else None,
            "judged_with": judged_with,
            "recorded_at": _now(),
        },
    )


def record_overlap_gate(tasks_root: str | Path, result: ContractResult, *, judged_with: str = "") -> Path:
    """Write the cross-task verdict atomically: which tasks (at which content hash) it judged and which failed."""
    if result.name != ALL_TASKS:
        raise ValueError("record_overlap_gate takes the result of validate_tasks")
    return write_json_atomic(
        overlap_gate_path(tasks_root),
        {
            "passed": result.passed,
            "task_hashes": dict(result.task_hashes),
            "failed_tasks": list(result.failed_tasks),
            "message": result.message,
            "failing_rows": result.failing_rows(),
            "results_path": str(result.results_path) if result.results_path else None,
            "data_docs_path": str(result.data_docs_path) if result.data_docs_path else None,
            "judged_with": judged_with,
            "recorded_at": _now(),
        },
    )


def read_gate(path: str | Path) -> dict[str, Any] | None:
    """A recorded verdict, or None when there is none (or it cannot be read, which counts as none)."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def gate_refusal(task_dir: str | Path, content_hash: str, *, overlap_gate: str | Path | None = None) -> str | None:
    """Why a step must not build on the task in ``task_dir`` (None when it may).

    Refused when the task has no recorded verdict, its gate failed, or the gate judged other
    content than ``content_hash``; with ``overlap_gate`` (path of ``OVERLAP_GATE.json``), also
    when the cross-task check has not judged this content or named this task in a failure.
    """
    task_dir = Path(task_dir)
    name = task_dir.name
    gate = read_gate(gate_status_path(task_dir))
    if gate is None:
        return f"task {name}: no data-contract verdict at {gate_status_path(task_dir)}; run the task's checks first"
    if gate.get("content_hash") != content_hash:
        return f"task {name}: its gate judged content {str(gate.get('content_hash'))[:12]}, the task is now {content_hash[:12]}; re-run the checks"
    if not gate.get("passed"):
        return f"task {name}: data contract failed, refusing to build on it: {gate.get('message', '')}"
    if overlap_gate is not None:
        over = read_gate(overlap_gate)
        if over is None:
            return f"task {name}: no cross-task overlap verdict at {overlap_gate}; run the all-tasks check first"
        judged = (over.get("task_hashes") or {}).get(name)
        if judged != content_hash:
            return f"task {name}: the cross-task overlap check judged {'no version' if judged is None else 'content ' + str(judged)[:12]} of this task, it is now {content_hash[:12]}; re-run the all-tasks check"
        if name in (over.get("failed_tasks") or []):
            return f"task {name}: cross-task overlap check failed for this task: {over.get('message', '')}"
    return None


def require_gate(task_dir: str | Path, content_hash: str, *, overlap_gate: str | Path | None = None) -> None:
    """Raise :class:`ContractError` with the reason from :func:`gate_refusal`, if any."""
    reason = gate_refusal(task_dir, content_hash, overlap_gate=overlap_gate)
    if reason:
        raise ContractError(reason)
