"""What each leaderboard cell rests on (issue 33): its holes, the bounds on its score, and its score
on the human + LLM ("filled") qrels layer when the task has judgements.

Reads what the metrics stage stored (``metrics.json``'s means of the hole-aware measures of
:mod:`medbench_core.evaluation.holes` and its ``holes`` summary) and, for the filled layer, what
the judgement stage scored (:attr:`medbench_core.evaluation.reports.Cell.filled`); computes nothing
from a run. Sections of the leaderboard kept apart from the others (their own table, CSV columns,
JSON key ``trust``, MLflow keys and ``trust/<model>.png``), so that the main table only gains a
short suffix per cell: ``J@10 0.11, bounds [0.16, 1.00] †``.

**The mark.** A cell whose mean Judged@10 is below :data:`JUDGED_THRESHOLD` (0.5) is marked ``†``:
fewer than half of the documents it shows in its top 10 were ever judged, so its nDCG@10 counts
more unjudged documents as non-relevant than judged ones, and its bounds are wide. 0.5 is where
the holes outnumber the judged documents; TREC-style pools aim at Judged@10 near 1, and BEIR's
sparse qrels measure 0.1-0.5 for neural models (Thakur et al., SIGIR 2024, on Touché 2020). The
threshold is a setting of the leaderboard (``LeaderboardConfig.judged_threshold``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

JUDGED_THRESHOLD = 0.5
MARK = "†"
KEY = "trust"  # leaderboard.json's section
# metric of metrics.json -> column of the trust table
HOLE_COLUMNS = {
    "judged_at_10": "judged_at_10",
    "bpref_at_100": "bpref_at_100",
    "ndcg_condensed_at_10": "ndcg_condensed_at_10",
    "ndcg_lower_at_10": "ndcg_lower_at_10",
    "ndcg_upper_at_10": "ndcg_upper_at_10",
}
TRUST_SCHEMA: dict[str, pl.DataType] = {
    "task": pl.Utf8, "model": pl.Utf8, "metric": pl.Utf8, "value": pl.Float64, "judged_at_10": pl.Float64, "holes_at_10": pl.Int64,
    "bpref_at_100": pl.Float64, "ndcg_condensed_at_10": pl.Float64, "ndcg_lower_at_10": pl.Float64, "ndcg_upper_at_10": pl.Float64,
    "low_judged": pl.Boolean, "filled": pl.Float64, "filled_judged_at_10": pl.Float64, "filled_ndcg_lower_at_10": pl.Float64,
    "filled_ndcg_upper_at_10": pl.Float64, "judgements": pl.Utf8, "circular": pl.Utf8,
}  # fmt: skip


@dataclass(frozen=True)
class TrustSettings:
    """How the trust sections read: the Judged@10 below which a cell is marked, and the metric whose filled value is shown."""

    judged_threshold: float = JUDGED_THRESHOLD
    metric: str = "ndcg_at_10"

    def describe(self) -> dict[str, Any]:
        return {
            "judged_threshold": self.judged_threshold,
            "mark": f"{MARK}: mean Judged@10 below {self.judged_threshold:g}",
            "bounds": "nDCG@10 over every completion of the judgments (unjudged documents at any grade 0..top grade); lower = DCG0/IDCG_G, upper = min(1, DCG_G/IDCG0)",
            "filled": "the same run scored on the human qrels plus the LLM judgements of pairs the humans did not judge",
        }


def trust_table(cells: Iterable[Any], settings: TrustSettings = TrustSettings()) -> pl.DataFrame:
    """One row per evaluated cell: its main value, Judged@10, hole count, bpref, condensed nDCG@10,
    the bounds, whether it is marked, and its filled-layer values (null without judgements)."""
    rows = []
    for c in cells:
        if c.metrics is None or not c.applicable:
            continue
        mean = c.metrics.get("mean", {})
        holes = c.metrics.get("holes") or {}
        judged = mean.get("judged_at_10")
        filled = getattr(c, "filled", None) or {}
        fmean = filled.get("mean") or {}
        row = {
            "task": c.task, "model": c.model, "metric": settings.metric, "value": _f(mean.get(settings.metric)),
            **{col: _f(mean.get(m)) for m, col in HOLE_COLUMNS.items()},
            "holes_at_10": holes.get("holes_at_10"), "low_judged": None if judged is None else bool(judged < settings.judged_threshold),
            "filled": _f(fmean.get(settings.metric)), "filled_judged_at_10": _f(fmean.get("judged_at_10")),
            "filled_ndcg_lower_at_10": _f(fmean.get("ndcg_lower_at_10")), "filled_ndcg_upper_at_10": _f(fmean.get("ndcg_upper_at_10")),
            "judgements": filled.get("judgements"), "circular": filled.get("circular") or None,
        }  # fmt: skip
        rows.append(row)
    return pl.DataFrame(rows, schema=TRUST_SCHEMA, orient="row") if rows else pl.DataFrame(schema=TRUST_SCHEMA)


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def _fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def cell_suffix(row: Mapping[str, Any]) -> str:
    """``J@10 0.11, bounds [0.16, 1.00] †`` (``†`` when Judged@10 is below the threshold), and the
    filled value when the task has judgements: ``filled 0.7312``; ``circular`` when the judge's family built the cell."""
    if row.get("judged_at_10") is None:
        return ""
    out = f"J@10 {_fmt(row['judged_at_10'])}, bounds [{_fmt(row['ndcg_lower_at_10'])}, {_fmt(row['ndcg_upper_at_10'])}]"
    if row.get("low_judged"):
        out += f" {MARK}"
    if row.get("filled") is not None:
        out += f"; filled {row['filled']:.4f}" + (" (circular)" if row.get("circular") else "")
    return out


def suffixes(table: pl.DataFrame) -> dict[tuple[str, str], str]:
    """(model, task) -> :func:`cell_suffix`, for the main table."""
    return {(r["model"], r["task"]): s for r in table.iter_rows(named=True) if (s := cell_suffix(r))}


def trust_markdown(table: pl.DataFrame, models: list[str], tasks: list[str], settings: TrustSettings = TrustSettings()) -> str:
    """The trust section: per cell, Judged@10, the hole count, bpref, condensed nDCG@10 and the bounds
    beside the point value; with judgements, the human and filled values side by side; and its legend."""
    if not table.height:
        return ""
    by = {(r["model"], r["task"]): r for r in table.iter_rows(named=True)}
    shown = [t for t in tasks if any((m, t) in by for m in models)]
    lines = [
        "What each cell rests on: nDCG@10 [lower, upper] bounds over every completion of the judgments; J@10 = Judged@10; "
        "holes = unjudged documents in the top 10 (all queries); bpref; nDCG@10 on the condensed list (unjudged removed)",
        "",
        "| model | task | nDCG@10 | bounds | J@10 | holes | bpref | condensed nDCG@10 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in models:
        for t in shown:
            r = by.get((m, t))
            if r is None or r["judged_at_10"] is None:
                continue
            mark = f" {MARK}" if r["low_judged"] else ""
            lines.append(
                f"| {m} | {t} | {_fmt(r['value'], 4)} | [{_fmt(r['ndcg_lower_at_10'], 4)}, {_fmt(r['ndcg_upper_at_10'], 4)}] | "
                f"{_fmt(r['judged_at_10'])}{mark} | {r['holes_at_10'] if r['holes_at_10'] is not None else '-'} | "
                f"{_fmt(r['bpref_at_100'], 4)} | {_fmt(r['ndcg_condensed_at_10'], 4)} |"
            )
    lines += [
        "",
        f"{MARK}: Judged@10 below {settings.judged_threshold:g}: less than {settings.judged_threshold:.0%} of the cell's top 10 was ever "
        "judged, and trec_eval counts every unjudged document as non-relevant. The bounds hold whatever grade (0 to the task's top "
        "grade) an unjudged document turns out to have (docs/trust.md).",
    ]
    filled = table.filter(pl.col("filled").is_not_null())
    if filled.height:
        lines += ["", "nDCG@10 on the human qrels and on the filled layer (human + LLM judgements of the pairs the humans did not judge)", "",
                  "| model | task | human | filled | difference | J@10 human | J@10 filled | judgements |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for m in models:
            for t in shown:
                r = by.get((m, t))
                if r is None or r["filled"] is None:
                    continue
                diff = "-" if r["value"] is None else f"{r['filled'] - r['value']:+.4f}"
                circ = f" (circular: {r['circular']})" if r["circular"] else ""
                lines.append(f"| {m} | {t} | {_fmt(r['value'], 4)} | {r['filled']:.4f}{circ} | {diff} | {_fmt(r['judged_at_10'])} | "
                             f"{_fmt(r['filled_judged_at_10'])} | {r['judgements']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def csv_columns(board: pl.DataFrame, table: pl.DataFrame, tasks: list[str]) -> pl.DataFrame:
    """``board`` with, per task, ``judged_at_10.<task>``, ``ndcg_lower_at_10.<task>``, ``ndcg_upper_at_10.<task>``,
    ``low_judged.<task>`` and (with judgements) ``filled.<task>``."""
    for t in tasks:
        per = table.filter(pl.col("task") == t)
        if not per.height:
            continue
        cols = [pl.col("judged_at_10").alias(f"judged_at_10.{t}"), pl.col("ndcg_lower_at_10").alias(f"ndcg_lower_at_10.{t}"),
                pl.col("ndcg_upper_at_10").alias(f"ndcg_upper_at_10.{t}"), pl.col("low_judged").alias(f"low_judged.{t}")]  # fmt: skip
        if per["filled"].is_not_null().any():
            cols.append(pl.col("filled").alias(f"filled.{t}"))
        board = board.join(per.select("model", *cols), on="model", how="left", maintain_order="left")
    return board


def mlflow_metrics(table: pl.DataFrame) -> dict[str, float]:
    """The leaderboard run's keys: ``<task>/<model>/judged_at_10``, ``.../holes_at_10``, ``.../ndcg_lower_at_10``,
    ``.../ndcg_upper_at_10``, ``.../low_judged`` (1/0), ``.../filled``, ``.../filled_judged_at_10``, ``.../circular`` (1/0)."""
    out: dict[str, float] = {}
    for r in table.iter_rows(named=True):
        prefix = "".join(ch if ch.isalnum() or ch in "-_./" else "_" for ch in f"{r['task']}/{r['model']}")
        for col in (
            "judged_at_10",
            "holes_at_10",
            "bpref_at_100",
            "ndcg_condensed_at_10",
            "ndcg_lower_at_10",
            "ndcg_upper_at_10",
            "filled",
            "filled_judged_at_10",
        ):
            if r[col] is not None:
                out[f"{prefix}/{col}"] = float(r[col])
        if r["low_judged"] is not None:
            out[f"{prefix}/low_judged"] = 1.0 if r["low_judged"] else 0.0
        if r["filled"] is not None:
            out[f"{prefix}/circular"] = 1.0 if r["circular"] else 0.0
    return out


def trust_plot_png(table: pl.DataFrame, model: str, tasks: list[str], path: str | Path, settings: TrustSettings = TrustSettings()) -> Path:
    """One model's cells: nDCG@10 (dot) inside its bounds (bar), the filled value (diamond) when judged
    by an LLM, and Judged@10 under each task's name; marked tasks' names carry ``†``. Fixed size, no timestamp."""
    from medbench_core.evaluation.plots import _pyplot, _save

    plt = _pyplot()
    rows = {r["task"]: r for r in table.filter(pl.col("model") == model).iter_rows(named=True)}
    shown = [t for t in tasks if t in rows and rows[t]["judged_at_10"] is not None]
    w, h = 200 + 110 * max(len(shown), 1), 420
    fig, ax = plt.subplots(figsize=(w / 100, h / 100), dpi=100)
    for i, t in enumerate(shown):
        r = rows[t]
        low, high = r["ndcg_lower_at_10"], r["ndcg_upper_at_10"]
        colour = "#d95f02" if r["low_judged"] else "#1b9e77"
        ax.plot([i, i], [low, high], color=colour, linewidth=6, alpha=0.35, solid_capstyle="butt")
        ax.plot([i], [r["value"]], "o", color=colour, markersize=6)
        if r["filled"] is not None:
            ax.plot([i], [r["filled"]], "D", color="#7570b3", markersize=5)
    ax.set_xticks(range(len(shown)), labels=[f"{t}{' ' + MARK if rows[t]['low_judged'] else ''}\nJ@10 {_fmt(rows[t]['judged_at_10'])}" for t in shown],
                  rotation=20, ha="right", fontsize=7)  # fmt: skip
    ax.set_xlim(-0.6, max(len(shown), 1) - 0.4)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("nDCG@10", fontsize=8)
    ax.tick_params(labelsize=7)
    filled = any(rows[t]["filled"] is not None for t in shown)
    ax.set_title(f"{model}: nDCG@10 (dot) within its bounds (bar){', filled layer (diamond)' if filled else ''}; "
                 f"{MARK} Judged@10 < {settings.judged_threshold:g}", fontsize=8)  # fmt: skip
    fig.subplots_adjust(left=80 / w, right=1 - 20 / w, bottom=0.3, top=0.9)
    return _save(fig, Path(path))


def qrels_holes_markdown(holes: Mapping[str, Mapping[str, Any]], tasks: list[str]) -> str:
    """Per task, the holes its contract counted in the qrels themselves (``GATE.json``'s ``holes``):
    rows naming absent documents, queries without any judgment (not scored), without a positive (score 0),
    and whether the task refuses or marks them (``qrels_holes`` in tasks.yaml)."""
    lines = ["Holes in the qrels themselves (each task's contract)", "",
             "| task | qrels rows naming absent documents | queries without any judgment | queries without a positive | qrels_holes |",
             "|---|---|---|---|---|"]  # fmt: skip
    for t in tasks:
        h = holes.get(t)
        if not h:
            continue
        marked = h.get("mode") == "mark" and (h.get("n_absent_doc_rows") or h.get("n_queries_without_judgment") or h.get("n_queries_without_positive"))
        lines.append(f"| {t}{' ' + MARK if marked else ''} | {h.get('n_absent_doc_rows', 0)} | {h.get('n_queries_without_judgment', 0)} | "
                     f"{h.get('n_queries_without_positive', 0)} | {h.get('mode', 'refuse')} |")  # fmt: skip
    lines += ["", f"{MARK} on a task: it has qrels holes and its tasks.yaml entry marks them (qrels_holes: mark) instead of refusing the task; "
              "a query without any judgment is left out of every mean, one without a positive scores 0 for every model."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _ci(v: Any, ci: Any) -> str:
    if v is None:
        return "-"
    lo, hi = (ci or [None, None])[:2]
    return f"{v:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "")


def agreement_markdown(layers: Mapping[str, Mapping[str, Any]], tasks: list[str]) -> str:
    """Per task with an LLM layer: the judgement, the pairs it graded, its agreement with the humans on the
    pairs both graded (quadratic kappa, ordinal alpha, 95% CIs), and between the rankings of the two
    layers Kendall's tau, RBO and the cells whose rank interval moved; cells built with the judge's family."""
    lines = ["Agreement between the human and the LLM layers", "",
             "| task | judgements | pairs (fill + calibration) | unparsed | weighted kappa | Krippendorff alpha | Kendall tau | RBO | rank intervals moved |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    notes = []
    for t in tasks:
        e = layers.get(t)
        if not e:
            continue
        if e.get("status") != "judged":
            lines.append(f"| {t} | {e.get('judgement')} | - | - | - | - | - | - | {e.get('status')} |")
            continue
        a = e.get("agreement") or {}
        r = e.get("ranking") or {}
        moved = e.get("moved") or []
        moved_text = (
            "; ".join(
                f"{m['model']} {m['human'][0]} [{m['human'][1]}, {m['human'][2]}] -> {m['filled'][0]} [{m['filled'][1]}, {m['filled'][2]}]" for m in moved
            )
            or "none"
        )
        tau = "-" if r.get("kendall_tau") is None else f"{r['kendall_tau']:.2f}"
        rbo = "-" if r.get("rbo") is None else f"{r['rbo']:.2f}"
        lines.append(
            f"| {t} | {e['judgement']} ({e.get('judge')}) | {e.get('n_pairs')} ({e.get('n_fill')} + {e.get('n_calibration')}) | {e.get('n_unparsed')} | "
            f"{_ci(a.get('kappa_quadratic'), a.get('kappa_ci'))} | {_ci(a.get('alpha_ordinal'), a.get('alpha_ci'))} | {tau} | {rbo} | {moved_text} |"
        )
        for model, why in sorted((e.get("circular") or {}).items()):
            notes.append(f"- circular: {model} x {t} was built with a model of the judge's family: {why} (Clarke & Dietz, arXiv 2412.17156)")
    lines += ["", "kappa: Cohen's, quadratic weights, on the calibration pairs both graded (task scale); alpha: Krippendorff's, ordinal; "
              "[low, high]: 95% bootstrap over the pairs. tau and RBO (p = 0.9) compare the system rankings by mean nDCG@10 on the two layers; "
              "a moved interval is a rank or 95% rank interval that is not the same on the filled layer.", *notes]  # fmt: skip
    return "\n".join(lines) + "\n"
