"""Breakdowns of each cell by difficulty tier, language and discipline, read from the ``breakdowns`` of its metrics.json."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from medbench_core.evaluation.cell import Cell

BREAKDOWNS = ("tier", "language", "discipline")


def breakdown_table(cells: Iterable[Cell], by: str, metric: str = "ndcg_at_10") -> pl.DataFrame:
    """Long table (model, task, ``by`` value, metric) from the ``breakdowns`` of metrics.json.

    ``by`` is ``tier``, ``language`` or ``discipline``; cells without that breakdown give no rows.
    """
    rows = []
    for c in cells:
        if c.metrics is None or not c.applicable:
            continue
        for group, vals in sorted(c.metrics.get("breakdowns", {}).get(by, {}).items()):
            if metric in vals:
                rows.append({"model": c.model, "task": c.task, by: str(group), metric: float(vals[metric])})
    return pl.DataFrame(rows, schema={"model": pl.Utf8, "task": pl.Utf8, by: pl.Utf8, metric: pl.Float64})


def wide(long: pl.DataFrame, by: str, metric: str = "ndcg_at_10", models: list[str] | None = None) -> pl.DataFrame:
    """One row per model, one column per ``task/group`` (4 places), from :func:`breakdown_table`."""
    if long.height == 0:
        return pl.DataFrame(schema={"model": pl.Utf8})
    keyed = long.with_columns((pl.col("task") + "/" + pl.col(by)).alias("_col"), pl.col(metric).round(4))
    cols = keyed.select("task", by, "_col").unique().sort("task", by)["_col"].to_list()
    out = keyed.pivot(on="_col", index="model", values=metric).select("model", *cols)
    if models is not None:
        out = pl.DataFrame({"model": [m for m in models if m in out["model"].to_list()]}).join(out, on="model", how="left")
    return out
