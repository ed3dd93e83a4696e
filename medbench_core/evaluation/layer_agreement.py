"""Between the human layer and the filled (human + LLM) layer of a task: do the system rankings agree?
(:func:`layer_agreement`, a section of the leaderboard's trust part; :mod:`medbench_core.evaluation.judging`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import polars as pl

from medbench_core.evaluation.board import Significance, leaderboard
from medbench_core.evaluation.cell import Cell
from medbench_core.evaluation.ranks import rank_table


def layer_agreement(
    cells: list[Cell],
    board: pl.DataFrame,
    tasks: list[str],
    sig: Significance,
    ranks: pl.DataFrame,
    judgements: Mapping[str, Mapping[str, Any]],
    *,
    keep_circular: bool = False,
) -> dict[str, Any]:
    """Per task with a filled layer: its judgements' summary (pairs, agreement with the humans), and
    between the system rankings on the two layers Kendall's tau, RBO and the cells whose rank
    interval moved (the rank table computed again on the filled per-query values, same resamples and seed).

    A circular cell (built with a model of the judge's family) takes no part in these unless
    ``keep_circular``: both layers' rankings are then those of the other cells (the human rank
    table computed again over them; ``ranks``, the leaderboard's, serves when none is left out)."""

    from medbench_core.evaluation.judging.agreement import moved_intervals, ranking_agreement

    out: dict[str, Any] = {}
    used = [c for c in cells if c.filled and (keep_circular or not c.filled["circular"])]
    filled_cells = [dataclasses.replace(c, metrics={"mean": c.filled["mean"]}, per_query=c.filled["per_query"]) for c in used]
    if filled_cells:
        filled_board = leaderboard(filled_cells, board["model"].to_list(), tasks, sig.metric)
        filled_ranks = rank_table(filled_cells, filled_board, tasks, sig)
        if len(used) < sum(1 for c in cells if c.filled):
            ranks = rank_table(used, leaderboard(used, board["model"].to_list(), tasks, sig.metric), tasks, sig)
    for t in tasks:
        info = judgements.get(t)
        if not info:
            continue
        entry: dict[str, Any] = {k: v for k, v in info.items()}
        human = {c.model: c.value(sig.metric) for c in used if c.task == t and c.value(sig.metric) is not None}
        filled = {c.model: float(c.filled["mean"][sig.metric]) for c in used if c.task == t and sig.metric in c.filled["mean"]}
        if human:
            entry["ranking"] = ranking_agreement(human, filled)
            h = [r for r in ranks.iter_rows(named=True) if r["task"] == t]
            f = [r for r in filled_ranks.iter_rows(named=True) if r["task"] == t]
            entry["moved"] = moved_intervals(h, f)
            entry["circular"] = {c.model: c.filled["circular"] for c in cells if c.task == t and c.filled and c.filled["circular"]}
        out[t] = entry
    return out
