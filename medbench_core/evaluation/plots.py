"""The leaderboard's plots: a model x task heatmap and per-query difference plots against the baseline.

matplotlib's Agg backend, fixed sizes and no timestamp in the PNG: the same numbers give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.errors import DataError

METRIC_LABELS = {"ndcg_at_10": "nDCG@10", "recall_at_10": "Recall@10", "recall_at_100": "Recall@100", "mrr_at_10": "MRR@10", "map_at_100": "MAP@100"}


def file_name(name: str) -> str:
    """A model or task name as a file or folder name of the reports and exports."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name.replace("/", "__"))


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    from medbench_core.storage import write_with

    # No Software/date metadata: the same figure gives the same bytes.
    write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100, metadata={"Software": None}))
    _pyplot().close(fig)
    return path


def heatmap_size(n_models: int, n_tasks: int) -> tuple[int, int]:
    """Pixel size (width, height) of :func:`heatmap_png` for a table of that shape."""
    return 260 + 120 * n_tasks, 140 + 40 * n_models


def heatmap_png(
    board: pl.DataFrame,
    path: str | Path,
    *,
    metric: str = "ndcg_at_10",
    not_applicable: Iterable[tuple[str, str]] = (),
    labels: Mapping[str, str] | None = None,
) -> Path:
    """Model x task heatmap of ``board`` (from :func:`leaderboard`), values written in the cells.

    Colour scale 0-1 (viridis); '-' not evaluated, 'n/a' not applicable. ``labels``: model -> its
    row label (the leaderboard passes ``model  #rank [low, high] group`` of the average).
    """
    plt = _pyplot()
    tasks = [c for c in board.columns if c not in ("model", "average", "averaged_over")]
    models = board["model"].to_list()
    na = set(not_applicable)
    vals = np.array([[np.nan if board[t][i] is None else float(board[t][i]) for t in tasks] for i in range(len(models))], dtype=float).reshape(
        len(models), len(tasks)
    )
    w, h = heatmap_size(len(models), len(tasks))
    fig, ax = plt.subplots(figsize=(w / 100, h / 100), dpi=100)
    im = ax.imshow(np.ma.masked_invalid(vals), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(tasks)), labels=tasks, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(models)), labels=[(labels or {}).get(m, m) for m in models], fontsize=8)
    for i, m in enumerate(models):
        for j, t in enumerate(tasks):
            v = vals[i, j]
            text = "n/a" if (m, t) in na else "-" if math.isnan(v) else f"{v:.3f}"
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if not math.isnan(v) and v < 0.6 else "black")
    ax.set_title(f"{METRIC_LABELS.get(metric, metric)} by model and task", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.04)
    fig.subplots_adjust(left=0.3, right=min(0.95, 1 - 70 / w), bottom=0.3, top=0.85)  # room for the colour bar's labels
    return _save(fig, Path(path))


def diff_plot_size(n_models: int) -> tuple[int, int]:
    """Pixel size (width, height) of :func:`diff_plot_png` for that many compared models."""
    return 800, 80 + 220 * max(n_models, 1)


def diff_plot_png(per_query: Mapping[str, pl.DataFrame], baseline: str, path: str | Path, *, task: str, metric: str = "ndcg_at_10") -> Path:
    """Per-query ``metric`` of each model minus the baseline's, sorted, one panel per model.

    Each panel states the wins, losses and ties over the task's queries (aligned by query id).
    """
    from medbench_core.evaluation.stats import align

    plt = _pyplot()
    if baseline not in per_query:
        raise DataError(f"task {task}: baseline {baseline!r} has no per-query metrics to plot against")
    _, values = align(per_query, metric, task=task)
    others = [m for m in per_query if m != baseline]
    w, h = diff_plot_size(len(others))
    fig, axes = plt.subplots(max(len(others), 1), 1, figsize=(w / 100, h / 100), dpi=100, squeeze=False)
    label = METRIC_LABELS.get(metric, metric)
    for ax, m in zip(axes[:, 0], others or [None]):
        if m is None:
            ax.text(0.5, 0.5, f"only {baseline} on {task}", ha="center", va="center")
            ax.set_axis_off()
            continue
        d = np.sort(values[m] - values[baseline])[::-1]
        # d is sorted: wins, then ties, then losses. One filled step outline per block, not one bar per
        # query (a bar per query took minutes at 164K queries).
        edges = np.arange(len(d) + 1) - 0.5
        for colour, block in (("#1b9e77", d > 0), ("#999999", d == 0), ("#d95f02", d < 0)):
            where = np.flatnonzero(block)
            if where.size:
                ax.stairs(d[where], edges[where[0] : where[-1] + 2], fill=True, color=colour, baseline=0.0)
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_xlim(-0.5, max(len(d), 1) - 0.5)
        ax.set_ylim(-1.05, 1.05)
        ax.set_ylabel(f"{label} diff", fontsize=8)
        wins, losses = int((d > 0).sum()), int((d < 0).sum())
        ax.set_title(f"{task}: {m} - {baseline} per query ({wins} better, {losses} worse, {len(d) - wins - losses} equal; mean {d.mean():+.4f})", fontsize=9)
        ax.tick_params(labelsize=7)
    axes[-1, 0].set_xlabel("queries, sorted by difference", fontsize=8)
    fig.subplots_adjust(left=0.1, right=0.97, bottom=60 / h, top=1 - 40 / h, hspace=0.5)
    return _save(fig, Path(path))


# --- exports ------------------------------------------------------------------------------
