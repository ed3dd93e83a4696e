"""The Markdown tables of the reports: one way to write them, and the section titles read back.

Not tabulate (in the lock): its pipe and github formats pad every cell to its column's width and write
``|:----|`` rules, and the reports' bytes are promised (golden outputs, byte-for-byte tests); ours are unpadded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl


def markdown_table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A table's lines: ``| a | b |``, the rule ``|---|---|``, one line per row; cells as given, unpadded."""
    return [_row(head), "|" + "---|" * len(head), *(_row(r) for r in rows)]


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def frame_markdown(df: pl.DataFrame, title: str = "", digits: int = 4) -> str:
    """A frame as a Markdown table; floats to ``digits`` places, nulls as '-'."""

    def fmt(v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        return f"{v:.{digits}f}" if isinstance(v, float) else str(v)

    lines = [title, ""] if title else []
    lines += markdown_table(df.columns, ([fmt(v) for v in row] for row in df.iter_rows()))
    return "\n".join(lines) + "\n"


def markdown_sections(md: str) -> list[str]:
    """The titles of the leaderboard's sections: each table's caption (a line, a blank line, a table) and each ``##`` heading,
    without what follows its first bracket."""
    lines = md.splitlines()
    out = []
    for i, line in enumerate(lines):
        heading = line.startswith("## ")
        if heading or (line and not line.startswith("|") and i + 2 < len(lines) and lines[i + 1] == "" and lines[i + 2].startswith("| ")):
            title = line.removeprefix("## ").split(" (")[0].split(": ")[0].strip()
            if title and title not in out:
                out.append(title)
    return out
