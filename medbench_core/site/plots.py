"""The site's plots as SVG files, each with the data it draws as a CSV file beside it (for a paper, or a check).

- ``plots/<task>/means.svg`` + ``means.csv``: each model's mean with its 95% CI, the baseline's mean
  (dashed) and the task's chance floor (dotted) where the leaderboard has one.
- ``plots/<task>/vs-<model>.svg``: the model against the baseline, query by query (one dot per query:
  the baseline's figure across, the model's up; above the diagonal the model wins), with wins,
  losses and ties counted in its title; ``plots/<task>/per_query.csv`` holds every model's figure per
  query, the data of all of them.

Written by hand (no plotting library): a few kilobytes each, the same bytes for the same numbers.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

W, H = 420, 300  # the scatter plots are square: H x H
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _f(v: float) -> str:
    """A coordinate with at most one decimal (what a screen or a print can show)."""
    return f"{v:.1f}".rstrip("0").rstrip(".")


def csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for r in rows:
        writer.writerow(["" if v is None else (f"{v:.6g}" if isinstance(v, float) else v) for v in r])
    return buf.getvalue()


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" {FONT}>'
        f"<title>{escape(title)}</title>"
        f'<rect width="{width}" height="{height}" fill="#fff"/>' + "".join(body) + "</svg>\n"
    )


def means_svg(rows: Sequence[Mapping[str, Any]], *, task: str, label: str, baseline: str, chance: float | None) -> str:
    """Forest plot: one line per model (``model``, ``mean``, ``ci_low``, ``ci_high``, ``significant``), best first."""
    rows = [r for r in rows if r.get("mean") is not None]
    rows = sorted(rows, key=lambda r: -r["mean"])
    left, right, top, row_h = 170, 20, 34, 18
    height = top + row_h * max(1, len(rows)) + 34
    lo = min([0.0] + [r["ci_low"] if r.get("ci_low") is not None else r["mean"] for r in rows])
    hi = max([1.0] + [r["ci_high"] if r.get("ci_high") is not None else r["mean"] for r in rows])
    span = (hi - lo) or 1.0

    def x(v: float) -> float:
        return left + (W - left - right) * (v - lo) / span

    body = [f'<text x="{W / 2}" y="16" text-anchor="middle" font-weight="bold">{escape(f"{label} on {task}: mean and 95% CI")}</text>']
    axis_y = top + row_h * max(1, len(rows)) + 4
    for i in range(5):
        v = lo + span * i / 4
        body.append(f'<line x1="{_f(x(v))}" x2="{_f(x(v))}" y1="{top - 6}" y2="{axis_y}" stroke="#ddd"/>')
        body.append(f'<text x="{_f(x(v))}" y="{axis_y + 14}" text-anchor="middle">{v:.2f}</text>')
    base = next((r for r in rows if r["model"] == baseline), None)
    if base is not None:
        body.append(f'<line x1="{_f(x(base["mean"]))}" x2="{_f(x(base["mean"]))}" y1="{top - 6}" y2="{axis_y}" stroke="#555" stroke-dasharray="4 3"/>')
    if chance is not None:
        body.append(f'<line x1="{_f(x(chance))}" x2="{_f(x(chance))}" y1="{top - 6}" y2="{axis_y}" stroke="#b00" stroke-dasharray="1 3"/>')
        body.append(f'<text x="{_f(x(chance) + 3)}" y="{top - 8}" fill="#b00">chance {chance:.3f}</text>')
    for i, r in enumerate(rows):
        y = top + row_h * i + row_h / 2
        name = r["model"] if len(r["model"]) <= 26 else r["model"][:25] + "…"
        body.append(f'<text x="{left - 6}" y="{_f(y + 4)}" text-anchor="end">{escape(name)}{" *" if r.get("significant") else ""}</text>')
        if r.get("ci_low") is not None and r.get("ci_high") is not None:
            body.append(f'<line x1="{_f(x(r["ci_low"]))}" x2="{_f(x(r["ci_high"]))}" y1="{_f(y)}" y2="{_f(y)}" stroke="#369" stroke-width="2"/>')
        body.append(f'<circle cx="{_f(x(r["mean"]))}" cy="{_f(y)}" r="3.5" fill="#036"/>')
    return _svg(W, height, f"{label} on {task}: mean and 95% CI per model (dashed: the baseline {baseline})", body)


def means_csv(rows: Sequence[Mapping[str, Any]], chance: float | None) -> str:
    cols = ["model", "mean", "ci_low", "ci_high", "significant", "rank", "rank_low", "rank_high", "group"]
    out = [[r.get(c) for c in cols] + [chance] for r in rows if r.get("mean") is not None]
    return csv_text([*cols, "chance"], out)


def wins(base: Sequence[float], other: Sequence[float]) -> tuple[int, int, int]:
    """(queries the model wins, loses, ties) against the baseline."""
    w = sum(1 for a, b in zip(base, other) if b > a)
    lo = sum(1 for a, b in zip(base, other) if b < a)
    return w, lo, len(base) - w - lo


def scatter_svg(base: Sequence[float], other: Sequence[float], *, task: str, model: str, baseline: str, label: str) -> str:
    """The model's per-query figure (up) against the baseline's (across), one dot per query."""
    side, pad_l, pad_b, pad_t = H, 44, 36, 40
    lo = min([0.0, *base, *other])
    hi = max([1.0, *base, *other])
    span = (hi - lo) or 1.0
    inner = side - pad_t - 10

    def px(v: float) -> float:
        return pad_l + inner * (v - lo) / span

    def py(v: float) -> float:
        return pad_t + inner * (1 - (v - lo) / span)

    w, lo_n, ties = wins(base, other)
    width = pad_l + inner + 16
    height = pad_t + inner + pad_b
    title = f"{label} per query on {task}: {model} (up) vs {baseline} (across)"
    body = [
        f'<text x="{width / 2}" y="14" text-anchor="middle" font-weight="bold">{escape(f"{model} vs {baseline} on {task}")}</text>',
        f'<text x="{width / 2}" y="29" text-anchor="middle">{escape(f"{len(base)} queries: {w} better, {lo_n} worse, {ties} tied")}</text>',
        f'<rect x="{pad_l}" y="{pad_t}" width="{inner}" height="{inner}" fill="none" stroke="#999"/>',
        f'<line x1="{_f(px(lo))}" y1="{_f(py(lo))}" x2="{_f(px(hi))}" y2="{_f(py(hi))}" stroke="#bbb" stroke-dasharray="4 3"/>',
    ]
    for i in range(5):
        v = lo + span * i / 4
        body.append(f'<text x="{_f(px(v))}" y="{pad_t + inner + 14}" text-anchor="middle">{v:.2f}</text>')
        body.append(f'<text x="{pad_l - 4}" y="{_f(py(v) + 4)}" text-anchor="end">{v:.2f}</text>')
    body.append(f'<text x="{_f(pad_l + inner / 2)}" y="{pad_t + inner + 30}" text-anchor="middle">{escape(baseline)}</text>')
    points = sorted({(_f(px(a)), _f(py(b))) for a, b in zip(base, other)})
    if points:
        # One path of zero-length segments with round caps: a dot per distinct place, darker where queries pile up (their count is in the CSV).
        d = "".join(f"M{x} {y}h0" for x, y in points)
        body.append(f'<path d="{d}" stroke="#036" stroke-opacity="0.45" stroke-width="6" stroke-linecap="round" fill="none"/>')
    return _svg(width, height, title, body)


def per_query_table(frames: Mapping[str, Any], metric: str) -> tuple[list[str], dict[str, dict[str, float]]]:
    """Query ids (in the baseline's or the first frame's order) and model -> query -> the metric, from per_query frames."""
    order: list[str] = []
    seen: set[str] = set()
    values: dict[str, dict[str, float]] = {}
    for model, frame in frames.items():
        if frame is None or metric not in frame.columns or "query_id" not in frame.columns:
            continue
        got = {str(q): float(v) for q, v in zip(frame["query_id"].to_list(), frame[metric].to_list()) if v is not None}
        values[model] = got
        for q in got:
            if q not in seen:
                seen.add(q)
                order.append(q)
    return order, values
