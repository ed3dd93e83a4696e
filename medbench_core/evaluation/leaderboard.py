"""The model x task leaderboard of a main metric, as text, Markdown and CSV."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class Entry:
    model: str
    task: str
    value: float | None  # None: not evaluated (missing, or its task's gate failed)
    research_only: bool = False
    applicable: bool = True  # False: the model cannot read the task's records (e.g. text model, image corpus)


def table(entries: list[Entry], models: list[str], tasks: list[str]) -> pl.DataFrame:
    """Wide frame: one row per model, one column per task, values rounded to 4 places."""
    by = {(e.model, e.task): e.value for e in entries}
    rows = []
    for m in models:
        row: dict[str, object] = {"model": m}
        for t in tasks:
            v = by.get((m, t))
            row[t] = None if v is None else round(v, 4)
        rows.append(row)
    return pl.DataFrame(rows, schema={"model": pl.Utf8, **{t: pl.Float64 for t in tasks}})


def to_markdown(df: pl.DataFrame, research_only: set[str], metric: str = "nDCG@10", not_applicable: set[tuple[str, str]] = frozenset()) -> str:
    """Markdown table; '-' is not evaluated, 'n/a' a model that cannot read the task."""
    tasks = [c for c in df.columns if c != "model"]
    head = ["model"] + [f"{t} (research-only)" if t in research_only else t for t in tasks]
    lines = [f"{metric} by model and task", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in df.iter_rows(named=True):
        cells = [row["model"]] + ["n/a" if (row["model"], t) in not_applicable else "-" if row[t] is None else f"{row[t]:.4f}" for t in tasks]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
