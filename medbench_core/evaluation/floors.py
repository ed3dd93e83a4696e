"""Floors beside every cell of the leaderboard: chance, chance-corrected and tie-aware figures (issue 45).

Read from each cell's ``metrics.json`` (what :func:`medbench_core.evaluation.scoring.tie_aware_and_chance`
wrote; :mod:`medbench_core.evaluation.ties` for the definitions):

- **chance**: a task's expected metric under a uniformly random order of each query's universe (its
  candidate pool, else the corpus), the same for every model; the leaderboard prints it as a row under
  the models;
- **chance-corrected** (candidate-set tasks: FrenchMedMCQA, ICD-10 discrimination): ``(score - chance) /
  (1 - chance)``: 0 for a model no better than a random order of the options, 1 for a perfect one, below
  0 for a worse one; its CI is the score's CI mapped the same way (chance is a constant of the task);
- **tie-aware**: the expected metric over every order of the model's tied scores, beside the trec_eval
  figure (which orders ties by doc id); a cell is **flagged** when the two differ by more than the half
  width of the trec_eval figure's 95% CI: there, how the documents happen to be named moves the figure
  by more than the queries' sampling does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from medbench_core.evaluation.markdown_tables import markdown_table
from medbench_core.evaluation.mlflow_names import mlflow_name

SCHEMA = {
    "model": pl.Utf8,
    "task": pl.Utf8,
    "metric": pl.Utf8,
    "trec_eval": pl.Float64,
    "ci_half_width": pl.Float64,
    "tie_aware": pl.Float64,
    "tie_difference": pl.Float64,
    "tie_flag": pl.Boolean,
    "queries_tied": pl.Int64,
    "queries_tie_continued": pl.Int64,
    "chance": pl.Float64,
    "chance_corrected": pl.Float64,
    "chance_corrected_low": pl.Float64,
    "chance_corrected_high": pl.Float64,
}
CHANCE_ROW = "chance (random order)"
CHANCE_CORRECTED = (
    "chance-corrected = (score - chance) / (1 - chance): 0 for a model no better than a uniformly random order of each query's "
    "candidates, 1 for a perfect one, negative for a worse one (its CI: the score's CI mapped the same way)"
)


def floors_table(cells: Iterable[Any], tasks: list[str], models: list[str], metric: str = "ndcg_at_10") -> pl.DataFrame:
    """One row per evaluated cell (model x task) whose metrics.json has the floors of ``metric``, in board order."""
    order = {(m, t): (tasks.index(t), models.index(m)) for m in models for t in tasks}
    rows = []
    for c in cells:
        if c.metrics is None or not c.applicable or (c.model, c.task) not in order:
            continue
        mean = c.metrics.get("mean", {}).get(metric)
        chance = c.metrics.get("chance", {}).get(metric)
        if mean is None or chance is None:
            continue
        ci = c.metrics.get("ci", {}).get(metric)
        half = (ci[1] - ci[0]) / 2 if ci else None
        tie = c.metrics.get("tie_aware", {}).get(metric)
        diff = None if tie is None else tie - mean
        corrected = c.metrics.get("chance_corrected", {}).get(metric)
        low = high = None
        if corrected is not None and ci and chance < 1.0:
            low, high = (ci[0] - chance) / (1 - chance), (ci[1] - chance) / (1 - chance)
        ties = c.metrics.get("ties", {})
        rows.append(
            {
                "model": c.model, "task": c.task, "metric": metric, "trec_eval": float(mean), "ci_half_width": half,
                "tie_aware": None if tie is None else float(tie), "tie_difference": diff,
                "tie_flag": bool(diff is not None and half is not None and abs(diff) > half),
                "queries_tied": ties.get("queries_tied"), "queries_tie_continued": ties.get("queries_tie_continued"),
                "chance": float(chance), "chance_corrected": None if corrected is None else float(corrected),
                "chance_corrected_low": low, "chance_corrected_high": high,
            }
        )  # fmt: skip
    rows.sort(key=lambda r: order[(r["model"], r["task"])])
    return pl.DataFrame(rows, schema=SCHEMA) if rows else pl.DataFrame(schema=SCHEMA)


def chance_by_task(floors: pl.DataFrame) -> dict[str, float]:
    """task -> its chance value (one per task: every model's cell carries the same)."""
    return {t: float(v) for t, v in floors.select("task", "chance").unique(subset="task", keep="first", maintain_order=True).iter_rows()}


def floors_markdown(floors: pl.DataFrame, label: str = "nDCG@10") -> str:
    """The section under the leaderboard: every cell's trec_eval, tie-aware, chance and chance-corrected figures."""
    if floors.height == 0:
        return ""
    head = ["model", "task", f"{label} (trec_eval)", "tie-aware", "queries tied", "chance", "chance-corrected [95% CI]"]
    lines = [
        f"Floors and ties: {label} beside its chance value, its expectation over tied orders and, on candidate-set tasks, the chance-corrected figure",
        "",
    ]
    rows = []
    for r in floors.iter_rows(named=True):
        tie = "-" if r["tie_aware"] is None else f"{r['tie_aware']:.4f}" + (" ⚑" if r["tie_flag"] else "")
        tied = "-" if r["queries_tied"] is None else str(r["queries_tied"])
        corrected = "-"
        if r["chance_corrected"] is not None:
            corrected = f"{r['chance_corrected']:.4f}" + (
                f" [{r['chance_corrected_low']:.2f}, {r['chance_corrected_high']:.2f}]" if r["chance_corrected_low"] is not None else ""
            )
        rows.append([r["model"], r["task"], f"{r['trec_eval']:.4f}", tie, tied, f"{r['chance']:.4f}", corrected])
    lines += markdown_table(head, rows)
    flagged = floors.filter(pl.col("tie_flag"))
    lines += [
        "",
        "chance: the expected value of a uniformly random order of each query's candidates (else the corpus). "
        "tie-aware: the expected value over every order of the model's tied scores (McSherry & Najork 2008, exact); trec_eval orders "
        "ties by doc id. ⚑: the two differ by more than the half width of the trec_eval figure's 95% CI "
        + ("(" + ", ".join(f"{r['model']} x {r['task']}" for r in flagged.iter_rows(named=True)) + ")." if flagged.height else "(no cell)."),
        "queries tied: queries with a tie inside the cutoff; a tie reaching the run's last row is taken to continue over the "
        "documents it left out, so a query sharing no token with any document scores its chance value.",
    ]
    if floors["chance_corrected"].is_not_null().any():
        lines.append(CHANCE_CORRECTED + ".")
    return "\n".join(lines) + "\n"


def floors_csv_columns(board: pl.DataFrame, floors: pl.DataFrame, tasks: list[str]) -> pl.DataFrame:
    """``board`` with per task ``chance.<task>``, ``tie_aware.<task>``, ``tie_flag.<task>`` and, where it exists,
    ``chance_corrected.<task>`` columns (one row per model)."""
    for t in tasks:
        part = floors.filter(pl.col("task") == t)
        if part.height == 0:
            continue
        cols = [pl.col("chance").alias(f"chance.{t}"), pl.col("tie_aware").round(6).alias(f"tie_aware.{t}"), pl.col("tie_flag").alias(f"tie_flag.{t}")]
        if part["chance_corrected"].is_not_null().any():
            cols.append(pl.col("chance_corrected").round(6).alias(f"chance_corrected.{t}"))
        board = board.join(part.select("model", *cols), on="model", how="left", maintain_order="left")
    return board


def floors_mlflow_metrics(floors: pl.DataFrame) -> dict[str, float]:
    """``<task>/chance.<metric>`` once per task; ``<task>/<model>/tie_aware``, ``tie_flag`` and ``chance_corrected``."""

    out: dict[str, float] = {}
    for r in floors.iter_rows(named=True):
        out[mlflow_name(f"{r['task']}/chance.{r['metric']}")] = r["chance"]
        prefix = mlflow_name(f"{r['task']}/{r['model']}")
        if r["tie_aware"] is not None:
            out[f"{prefix}/tie_aware"] = r["tie_aware"]
            out[f"{prefix}/tie_flag"] = 1.0 if r["tie_flag"] else 0.0
        if r["chance_corrected"] is not None:
            out[f"{prefix}/chance_corrected"] = r["chance_corrected"]
    return out


def chance_row(floors: pl.DataFrame, tasks: list[str]) -> Mapping[str, float]:
    """The chance value of each task that has one, for the leaderboard's last row."""
    by = chance_by_task(floors)
    return {t: by[t] for t in tasks if t in by}
