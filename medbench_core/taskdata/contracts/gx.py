"""Great Expectations plumbing: an in-memory context, one suite and checkpoint per table, outcomes read back per expectation."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.storage import replace_dir_atomic, write_json_atomic
from medbench_core.taskdata.contracts.gx_views import site_views
from medbench_core.taskdata.contracts.results import DOCS_DIR, ID_COLUMNS, RESULTS_FILE, Outcome

CHUNK_ROWS = 50_000  # rows turned into Python values at a time by the derived columns


@dataclass
class Spec:
    """An expectation to build: GX class name, its kwargs, and what it means to us."""

    expectation: str  # the GX class name
    kwargs: dict[str, Any]
    aspect: str
    rule: str
    blocking: bool = True
    show_values: bool = True


@dataclass
class Table:
    name: str
    file: str
    frame: pl.DataFrame  # carries a ``record_id`` column naming each row
    specs: list[Spec]


def pandas_dtype(dtype: pl.DataType) -> str:
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


def run_tables(name: str, tables: list[Table], out_dir: Path | None) -> tuple[list[Outcome], Path | None, Path | None]:
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
            getattr(gxe, spec.expectation)(**spec.kwargs, meta={"aspect": spec.aspect, "rule": spec.rule, "table": table.name, "index": i})
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
        result = checkpoint.run(batch_parameters={"dataframe": judged_frame(table).to_pandas()})
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
                    **site_views(),  # GX's views, their templates compiled once (gx_views.py)
                    "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(tmp)},
                },
            )
            ctx.build_data_docs(site_names=["medbench"])

        replace_dir_atomic(out_dir / DOCS_DIR, build)
        docs_path = out_dir / DOCS_DIR / "index.html"
    # GX orders results its own way; keep the order the suites were written in.
    outcomes = [o for _, _, o in sorted(ranked, key=lambda x: (x[0], x[1]))]
    return outcomes, results_path, docs_path


def _outcome(table: Table, spec: Spec, r: Any) -> Outcome:
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
    if spec.expectation == "ExpectColumnToExist" and not r.success:
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


def record_ids(df: pl.DataFrame, table: str) -> pl.Series:
    """Readable id per row: the id column(s), or the row number when they are missing or null."""
    cols = [c for c in ID_COLUMNS[table] if c in df.columns]
    rownum = pl.format("row {}", pl.int_range(pl.len()))
    if len(cols) != len(ID_COLUMNS[table]):
        return df.select(rownum.alias("record_id")).to_series()
    ids = [pl.col(c).cast(pl.Utf8) for c in cols]
    joined = pl.concat_str(ids, separator=" -> ")  # null when one part is null
    return df.select(pl.when(joined.is_not_null()).then(joined).otherwise(pl.format("{} (null id)", rownum)).alias("record_id")).to_series()


def judged_frame(table: Table) -> pl.DataFrame:
    """The frame GX reads: text columns that only their presence and type are judged on are blanked.

    Such a column (a corpus's ``text`` and ``title``, ``concept_ids``; their content enters the
    contract through derived columns such as ``has_content``) keeps its name and type, so its
    expectations judge the same thing, but its pandas copy no longer holds a second corpus.
    """
    valued = {"record_id"}
    for spec in table.specs:
        if spec.expectation not in ("ExpectColumnToExist", "ExpectColumnTypeToBe"):
            valued.update([spec.kwargs["column"]] if "column" in spec.kwargs else spec.kwargs.get("column_list", []))
    blank = []
    for name, dtype in table.frame.schema.items():
        if name in valued:
            continue
        if dtype == pl.Utf8:
            blank.append(pl.lit("", dtype=pl.Utf8).alias(name))
        elif dtype == pl.List(pl.Utf8):
            # null rather than []: the same pandas type (object), but a column GX can fingerprint by
            # hashing, instead of pickling the whole frame (lists are unhashable)
            blank.append(pl.lit(None, dtype=pl.List(pl.Utf8)).alias(name))
    return table.frame.with_columns(blank) if blank else table.frame


def column_values(df: pl.DataFrame, name: str) -> list[Any]:
    """Values of a column as strings (None stays None); all None when the column is missing.

    Derived columns must not crash on a mistyped column: its type expectation reports it.
    """
    if name not in df.columns:
        return [None] * df.height
    return [None if v is None else v if isinstance(v, str) else str(v) for v in df[name].to_list()]


def is_int_column(df: pl.DataFrame, name: str) -> bool:
    return name in df.columns and df.schema[name].is_integer()
