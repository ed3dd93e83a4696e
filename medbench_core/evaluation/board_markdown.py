"""The leaderboard's two Markdown tables: the short head of leaderboard.md (each cell's figure and CI) and the
full table with its legend (stale cells, the test, the trust mark, the chance row, the averages), both read
from one :class:`BoardView`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from medbench_core.evaluation.board import Significance
from medbench_core.evaluation.cell import UNCONFIRMED
from medbench_core.evaluation.markdown_tables import markdown_table
from medbench_core.evaluation.plots import METRIC_LABELS
from medbench_core.evaluation.stats import format_cell

SITE_LINE = (
    "The same as pages: site/index.html beside this file (sort, filter, a page per task and per model, plots; "
    "`medbench ui` serves them, `medbench export --site DIR` writes them anywhere)."
)


@dataclass(frozen=True)
class BoardView:
    """What the leaderboard's tables show: ``board`` (:func:`medbench_core.evaluation.board.leaderboard`), the CIs and
    tests of ``stats`` (:func:`~medbench_core.evaluation.board.significance`) as ``sig`` computed them (None: the
    legend names no resamples or seed, and the baseline is the one ``stats`` names), which tasks are research-only,
    which cells are n/a (a model that cannot read the task) and which are stale ((model, task) -> why)."""

    board: pl.DataFrame
    stats: pl.DataFrame | None = None
    sig: Significance | None = None
    research_only: frozenset[str] = frozenset()
    not_applicable: frozenset[tuple[str, str]] = frozenset()
    stale: Mapping[tuple[str, str], str] = field(default_factory=dict)

    @property
    def metric(self) -> str:
        return self.sig.metric if self.sig else "ndcg_at_10"

    @property
    def tasks(self) -> list[str]:
        return [c for c in self.board.columns if c not in ("model", "average", "averaged_over")]

    def tested(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(model, task) -> the cell's row of ``stats`` on the metric."""
        if self.stats is None:
            return {}
        return {(r["model"], r["task"]): r for r in self.stats.filter(pl.col("metric") == self.metric).iter_rows(named=True)}

    def head(self) -> list[str]:
        return ["model", *[f"{t} (research-only)" if t in self.research_only else t for t in self.tasks], "average"]

    def figure(self, row: Mapping[str, Any], task: str, tested: Mapping[tuple[str, str], Mapping[str, Any]]) -> str:
        """A cell as the tables show it: ``n/a``, ``0.6602 [0.63, 0.69] *`` where tested, else the mean; ``(stale)`` marked."""
        key = (row["model"], task)
        if key in self.not_applicable:
            return "n/a"
        r = tested.get(key)
        text = format_cell(r["mean"], r["ci_low"], r["ci_high"], r["significant"]) if r else format_cell(row[task])
        return text + (" (stale)" if key in self.stale else "")


def average_cell(row: Mapping[str, Any], stale: Iterable[tuple[str, str]]) -> str:
    """A board row's average as a table shows it: an average over a stale value is stale too."""
    marked = row["average"] is not None and any(m == row["model"] for m, _ in stale)
    return format_cell(row["average"]) + (" (stale)" if marked else "")


def leaderboard_markdown(view: BoardView, *, suffix: Mapping[tuple[str, str], str] | None = None, chance: Mapping[str, float] | None = None) -> str:
    """The leaderboard as Markdown: ``0.6602 [0.63, 0.69] *`` cells where ``view.stats`` has the cell.

    ``suffix``: (model, task) -> a mark appended to the cell (``†``: its Judged@10 is low,
    :func:`medbench_core.evaluation.trust.cell_suffix`); given (even empty), the legend points to the
    trust table, where what every cell rests on is. ``chance``: task -> the metric's value under a
    uniformly random order (:mod:`medbench_core.evaluation.floors`), printed as a last row under the models.

    '-' is not evaluated, 'n/a' a model that cannot read the task; a stale cell reads ``0.6602 [0.63, 0.69] (stale)``,
    as does an average over one, and a note lists why. The notes under the table say what the brackets, the star and
    the average are: the test (as in :func:`medbench_core.evaluation.stats.compare`), alpha, the correction, and, when
    ``view.sig`` is given, the resamples and seed of the randomisation test and the bootstrap.
    """
    tasks, metric, st = view.tasks, view.metric, view.tested()
    rows = []
    for row in view.board.iter_rows(named=True):
        cells = [row["model"]]
        for t in tasks:
            cells.append(view.figure(row, t, st))
            if suffix and (row["model"], t) in suffix and cells[-1] not in ("n/a", "-"):
                cells[-1] += " " + suffix[(row["model"], t)]
        rows.append([*cells, average_cell(row, view.stale)])
    if chance:
        from medbench_core.evaluation.floors import CHANCE_ROW

        rows.append([f"*{CHANCE_ROW}*", *[f"*{chance[t]:.4f}*" if t in chance else "-" for t in tasks], "-"])
    lines = [f"{METRIC_LABELS.get(metric, metric)} by model and task", "", *markdown_table(view.head(), rows)]
    return "\n".join(lines + _notes(view, st, suffix is not None, bool(chance))) + "\n"


def _notes(view: BoardView, st: Mapping[tuple[str, str], Mapping[str, Any]], trust: bool, chance: bool) -> list[str]:
    """The legend under the full table: stale cells and why, the CI and the test, the trust mark, the chance row, the averages."""
    metric, sig = view.metric, view.sig
    notes = [""]
    if view.stale:
        if any(UNCONFIRMED in why for why in view.stale.values()):  # a partition that failed (assets/reports.py)
            notes.append(
                "(stale): not a current value: its inputs changed since it was computed and it could not be recomputed (the value from before), "
                "or the last evaluation of its partition failed or has not finished (the value its stored metrics hold, not confirmed):"
            )
        else:
            notes.append("(stale): the inputs of this value changed since it was computed, and it could not be recomputed; it is the value from before:")
        notes += [f"- {m} x {t}: {why}" for (m, t), why in sorted(view.stale.items())]
        notes.append("")
    if st:
        any_row = next(iter(st.values()))
        test = sig.test if sig else "permutation"
        name = "paired randomisation test" if test == "permutation" else "paired t-test"
        draws = f", {sig.n_resamples} resamples, seed {sig.seed}" if sig else ""
        flips = f", {sig.n_resamples} sign-flip resamples, seed {sig.seed}" if sig and test == "permutation" else ""
        notes.append(
            f"[low, high]: 95% bootstrap CI of the mean over queries (percentile{draws}). *: differs from {(sig and sig.baseline) or any_row['baseline']} "
            f"({name}, Holm-Bonferroni across the task's models, p < {(sig.alpha if sig else 0.05):g}; two-sided{flips})."
        )
    if trust:  # the trust table exists: the legend points there, marked cells or not
        from medbench_core.evaluation.trust import MARK

        notes.append(
            f"{MARK}: the cell's Judged@10 (the share of its top 10 ever judged) is below the leaderboard's threshold (0.5 unless set): "
            f"its figure counts many unjudged documents as non-relevant. Every cell's Judged@10, the bounds on its "
            f"{METRIC_LABELS.get(metric, metric)} and its value on the human + LLM layer are in the table 'What each cell rests on' below."
        )
    if chance:
        from medbench_core.evaluation.floors import CHANCE_ROW

        notes.append(
            f"{CHANCE_ROW}: each task's expected value when every query's candidates (else the corpus) are ordered uniformly at random "
            "(exact; the section 'Floors and ties' sets it beside every cell)."
        )
    notes.append(
        "average: mean over the tasks each model can read: "
        + "; ".join(f"{r['model']}: {r['averaged_over'] or 'none'}" for r in view.board.iter_rows(named=True))
        + "."
    )
    return notes


def headline_markdown(view: BoardView, below: Iterable[str]) -> str:
    """The short head of leaderboard.md: each cell's figure and CI only (``0.6602 [0.63, 0.69] *``), then a line pointing
    to the site and naming the sections ``below`` (the full table with what each cell rests on, and the rest)."""
    st = view.tested()
    baseline = view.sig.baseline if view.sig else None
    star = f"; * differs from {baseline}" if baseline else ""
    rows = [[row["model"], *[view.figure(row, t, st) for t in view.tasks], average_cell(row, view.stale)] for row in view.board.iter_rows(named=True)]
    lines = [f"{METRIC_LABELS.get(view.metric, view.metric)} at a glance (mean [95% CI]{star})", "", *markdown_table(view.head(), rows)]
    return "\n".join(lines) + f"\n\n{SITE_LINE} Below, for terminals and diffs: {'; '.join(below)}.\n"
