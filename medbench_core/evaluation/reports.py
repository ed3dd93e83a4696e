"""Every report of the leaderboard, written into one folder (:func:`write_leaderboard`): the tables of one
leaderboard computed once (:func:`build_tables`, a :class:`Tables`), then leaderboard.md
(:func:`leaderboard_document`), the CSVs and leaderboard.json (:func:`write_files`) and the plots (:func:`draw_plots`).

What each part is lives in its own module: the cells (:mod:`~medbench_core.evaluation.cell`), the board and its tests
(:mod:`~medbench_core.evaluation.board`), its Markdown (:mod:`~medbench_core.evaluation.board_markdown`), ranks
(:mod:`~medbench_core.evaluation.ranks`), breakdowns (:mod:`~medbench_core.evaluation.breakdowns`), expanded models
(:mod:`~medbench_core.evaluation.expanded`), the layers' agreement (:mod:`~medbench_core.evaluation.layer_agreement`),
floors (:mod:`~medbench_core.evaluation.floors`), trust (:mod:`~medbench_core.evaluation.trust`), multilingual tables
(:mod:`~medbench_core.evaluation.multilingual`), published scores (:mod:`~medbench_core.evaluation.published`); the
plots are drawn by :mod:`medbench_core.evaluation.plots`, the exports (MTEB results JSON, TREC runs) are
:mod:`medbench_core.evaluation.exports`. Names that callers import from here are re-exported below.

Everything reads what the stages already wrote (``metrics.json``, ``per_query.parquet``, ``run.trec``) through
:class:`Cell`; nothing recomputes a run. Plots use matplotlib's Agg backend with fixed sizes and no timestamp in
the PNG, so the same numbers give the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.evaluation import reuse
from medbench_core.evaluation.board import Significance, ci_only, leaderboard, significance
from medbench_core.evaluation.board_markdown import BoardView, headline_markdown, leaderboard_markdown
from medbench_core.evaluation.breakdowns import BREAKDOWNS, breakdown_table, wide
from medbench_core.evaluation.cell import STALE_KEY, UNCONFIRMED, Cell, load_cell
from medbench_core.evaluation.expanded import expanded_beside, expanded_markdown
from medbench_core.evaluation.layer_agreement import layer_agreement
from medbench_core.evaluation.markdown_tables import frame_markdown, markdown_sections
from medbench_core.evaluation.multilingual import multilingual_json
from medbench_core.evaluation.plots import METRIC_LABELS, diff_plot_png, file_name, heatmap_png
from medbench_core.evaluation.ranks import AVERAGE, format_rank, rank_table, ranks_markdown

# The import path callers use (tests, bench, golden outputs) for what now lives in the modules above.
__all__ = [
    "AVERAGE", "REPORT_NAMES", "STALE_KEY", "UNCONFIRMED", "Cell", "Significance", "Tables", "breakdown_table", "build_tables", "leaderboard",
    "leaderboard_markdown", "load_cell", "rank_table", "significance", "wide", "write_leaderboard",
]  # fmt: skip

# Everything write_leaderboard writes into its folder (the folders replaced whole; multilingual.csv only when a task is
# multilingual): what replaces the saved reports once they are written aside (assets/reports.py).
REPORT_NAMES = ("leaderboard.md", "leaderboard.csv", "leaderboard.json", "stats.csv", "heatmap.png", "multilingual.csv", "diff", "trust")


@dataclass(frozen=True)
class Tables:
    """Everything one leaderboard shows, computed once from its cells (:func:`build_tables`); each file is written from it.

    ``view`` holds the board and ``stats`` (one row per tested or CI-only cell, with its rank, published and trust
    columns); ``board_csv`` the board with the average's rank and the published, trust, contamination and floors
    columns; ``breakdowns`` maps tier, language and discipline to their long tables; ``multilingual`` is empty when
    no task is multilingual."""

    cells: list[Cell]
    models: list[str]
    tasks: list[str]
    view: BoardView
    ranks: pl.DataFrame
    sources: list[Any]
    versus: pl.DataFrame
    trust: Any
    trusted: pl.DataFrame
    qrels_holes: Mapping[str, Mapping[str, Any]]
    floors: pl.DataFrame
    layers: dict[str, Any]
    contamination: Mapping[tuple[str, str], Mapping[str, Any]]
    breakdowns: dict[str, pl.DataFrame]
    beside: pl.DataFrame
    multilingual: dict[str, Any]
    board_csv: pl.DataFrame

    @property
    def sig(self) -> Significance:
        assert self.view.sig is not None
        return self.view.sig

    @property
    def stats(self) -> pl.DataFrame:
        assert self.view.stats is not None
        return self.view.stats

    @property
    def label(self) -> str:
        return METRIC_LABELS.get(self.sig.metric, self.sig.metric)


def write_leaderboard(
    tables: Tables, out_dir: str | Path, *, footer: str = "", extra_json: Mapping[str, Any] | None = None, previous_dir: str | Path | None = None
) -> dict[str, Any]:
    """Every report of the leaderboard ``tables`` (:func:`build_tables`: what the leaderboard is made from), written into
    ``out_dir``; returns what was written.

    ``footer`` is the last line of leaderboard.md, ``extra_json`` is merged into leaderboard.json and ``previous_dir``
    (default ``out_dir``) is where the last leaderboard's files are, when ``out_dir`` is a staging folder; inside
    :func:`medbench_core.evaluation.reuse.reusing`, a plot whose inputs are those of its copy there is copied.

    ``leaderboard.md`` (:func:`leaderboard_document`), ``leaderboard.csv`` (means, average, which tasks it is over,
    the average's rank interval and group, the published value, difference and whether it lies in our CI per task,
    trust, contamination and floors columns, and a last ``stale`` column when a cell is stale), ``stats.csv`` (one
    row per model x task compared with the baseline, with its rank, published and trust columns),
    ``leaderboard.json`` (all of it, plus ``extra_json``), ``multilingual.csv`` (when a task is multilingual),
    ``heatmap.png`` (rows labelled with the average's rank), ``diff/<task>/<model>.png`` (the model's per-query
    differences from the baseline on the task, for each model but the baseline) and ``trust/<model>.png``. Files are
    written atomically; ``diff/`` and ``trust/`` are replaced whole (a model no longer on the board leaves no plot).
    """
    out = Path(out_dir)
    md = leaderboard_document(tables, footer)
    plots = draw_plots(tables, out, Path(previous_dir) if previous_dir is not None else out)
    files = write_files(tables, md, plots, out, extra_json)
    return {"markdown": md, "board": tables.view.board, "stats": tables.stats, "ranks": tables.ranks, "published": tables.versus,
            "expanded": tables.beside, "files": files, "stale": dict(tables.view.stale), "trust": tables.trusted, "layers": tables.layers,
            "multilingual": tables.multilingual, "floors": tables.floors}  # fmt: skip


def build_tables(
    cells: list[Cell],
    models: list[str],
    tasks: list[str],
    sig: Significance,
    *,
    research_only: Iterable[str] = (),
    specs: list[Any] | None = None,
    copies: Mapping[tuple[str, str], int] | None = None,
    published: Iterable[Any] = (),
    model_names: Mapping[str, str] | None = None,
    mteb_tasks: Mapping[str, str] | None = None,
    trust: Any = None,
    qrels_holes: Mapping[str, Mapping[str, Any]] | None = None,
    judgements: Mapping[str, Mapping[str, Any]] | None = None,
    query_groups: Mapping[str, pl.DataFrame] | None = None,
    pivots: Mapping[str, str] | None = None,
    contamination: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> Tables:
    """The tables of a leaderboard of ``models`` x ``tasks`` from ``cells``, compared with the baseline as ``sig`` says.

    ``specs`` and ``copies`` ((model, task) -> expansions flagged as copying a relevant passage): the expanded
    models beside their retrievers (:func:`~medbench_core.evaluation.expanded.expanded_beside`). ``published``
    sources: :func:`medbench_core.evaluation.published.compare_published` (``model_names``: medbench model -> its MTEB
    name; ``mteb_tasks``: task -> its MTEB name). ``trust`` (:class:`medbench_core.evaluation.trust.TrustSettings`,
    default its defaults): what each cell rests on; ``qrels_holes``: task -> the holes its contract counted in its
    qrels (``GATE.json``'s ``holes``); ``judgements``: task -> its filled layer's judgements
    (:func:`medbench_core.evaluation.judging.layers.attach_filled`), whose cells carry :attr:`Cell.filled`
    (:func:`~medbench_core.evaluation.layer_agreement.layer_agreement`). ``query_groups`` (task ->
    :func:`medbench_core.evaluation.multilingual.query_groups`, ``pivots``: task -> its pivot language, default
    English): the multilingual tables of the tasks whose queries are in two or more languages. ``contamination``:
    (model, task) -> the cell's mark, evidence and decontaminated score
    (:func:`medbench_core.evaluation.contamination.cells.cell_contamination`). A stale cell (:attr:`Cell.stale`)
    is marked wherever it is shown.
    """
    from medbench_core.evaluation.contamination.cells import csv_columns as contamination_columns
    from medbench_core.evaluation.floors import floors_csv_columns, floors_table
    from medbench_core.evaluation.multilingual import multilingual_tables
    from medbench_core.evaluation.published import PUBLISHED_SCHEMA, compare_published
    from medbench_core.evaluation.trust import TrustSettings, trust_table

    metric = sig.metric
    board = leaderboard(cells, models, tasks, metric)
    stats = significance(cells, sig.baseline, tasks, metric, test=sig.test, alpha=sig.alpha, n_resamples=sig.n_resamples, seed=sig.seed)
    stats = pl.concat([stats, ci_only(cells, stats, tasks, sig)])
    trust = trust or TrustSettings(metric=metric)
    trusted = trust_table(cells, trust)
    floors = floors_table(cells, tasks, models, metric)
    ranks = rank_table(cells, board, tasks, sig)
    rank_cols = ["rank", "rank_low", "rank_high", "group"]
    stats = stats.join(ranks.select("task", "model", *rank_cols), on=["task", "model"], how="left", maintain_order="left")
    average_ranks = ranks.filter(pl.col("task") == AVERAGE).select("model", *rank_cols)
    board_csv = board.join(average_ranks, on="model", how="left", maintain_order="left")
    sources = list(published)
    versus = (
        compare_published(cells, stats, sources, metric=metric, model_names=model_names, mteb_tasks=mteb_tasks)
        if sources
        else pl.DataFrame(schema=PUBLISHED_SCHEMA)
    )
    if versus.height:
        stats, board_csv = _with_published(versus, stats, board_csv, tasks)
    stats, board_csv = _with_trust(trusted, stats, board_csv, tasks)
    if contamination:
        board_csv = contamination_columns(board_csv, contamination, tasks)
    if floors.height:
        board_csv = floors_csv_columns(board_csv, floors, tasks)
    layers = layer_agreement(cells, board, tasks, sig, ranks, judgements or {}, keep_circular=trust.keep_circular) if judgements else {}
    breakdowns = {by: breakdown_table(cells, by, metric) for by in BREAKDOWNS}
    beside = expanded_beside(cells, board, specs or [], sig, copies)
    multilingual = multilingual_tables(cells, query_groups or {}, models, metric=metric, n_resamples=sig.n_resamples, seed=sig.seed, pivots=pivots)
    stale = {(c.model, c.task): c.stale for c in cells if c.stale and c.value(metric) is not None}
    view = BoardView(board, stats, sig, frozenset(research_only), frozenset((c.model, c.task) for c in cells if not c.applicable), stale)
    return Tables(
        cells, models, tasks, view, ranks, sources, versus, trust, trusted, dict(qrels_holes or {}), floors, layers, dict(contamination or {}),
        breakdowns, beside, multilingual if multilingual["languages"].height else {}, board_csv,
    )  # fmt: skip


def _with_published(versus: pl.DataFrame, stats: pl.DataFrame, board_csv: pl.DataFrame, tasks: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """stats.csv with each cell's published value, difference and whether it lies in our CI; the board with them per task."""
    pub = versus.select("task", "model", pl.col("published"), pl.col("diff").alias("published_diff"), pl.col("in_ci").alias("published_in_ci"),
                        pl.col("status").alias("published_status"))  # fmt: skip
    stats = stats.join(pub, on=["task", "model"], how="left", maintain_order="left")
    for t in [t for t in tasks if t in set(versus["task"])]:
        per = versus.filter(pl.col("task") == t).select(
            "model", pl.col("published").alias(f"published.{t}"), pl.col("diff").alias(f"published_diff.{t}"), pl.col("in_ci").alias(f"published_in_ci.{t}")
        )
        board_csv = board_csv.join(per, on="model", how="left", maintain_order="left")
    return stats, board_csv


def _with_trust(trusted: pl.DataFrame, stats: pl.DataFrame, board_csv: pl.DataFrame, tasks: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What each cell rests on (:mod:`medbench_core.evaluation.trust`): the board with ``judged_at_10.<task>``, bounds,
    ``low_judged.<task>`` (and ``filled.<task>``) columns; stats.csv with the cell's hole measures and the bounds on its
    metric (``bound_lower``, ``bound_upper``)."""
    from medbench_core.evaluation.trust import csv_columns

    board_csv = csv_columns(board_csv, trusted, tasks)
    cols = ["judged_at_10", "holes_at_10", "bpref_at_100", "ndcg_condensed_at_10", "low_judged", "filled", "circular"]
    bounds = [pl.col("lower").alias("bound_lower"), pl.col("upper").alias("bound_upper")]
    stats = stats.join(trusted.select("task", "model", *bounds, *cols), on=["task", "model"], how="left", maintain_order="left")
    return stats, board_csv


def leaderboard_document(t: Tables, footer: str = "") -> str:
    """leaderboard.md: the short head (:func:`~medbench_core.evaluation.board_markdown.headline_markdown`), then the full
    table with CIs and markers and its legend, the rank table, published scores, what each cell rests on (trust, qrels
    holes), contamination, the floors of every cell, the layers' agreement, breakdowns by tier, language and discipline
    (the tasks with more than one group), expanded models beside their retrievers, the multilingual tables; ``footer`` last."""
    from medbench_core.evaluation.floors import chance_row, floors_markdown
    from medbench_core.evaluation.trust import suffixes

    sig, tasks, board = t.sig, t.tasks, t.view.board
    suffix = suffixes(t.trusted) if t.trusted["judged_at_10"].is_not_null().any() else None
    md = leaderboard_markdown(t.view, suffix=suffix, chance=chance_row(t.floors, tasks))
    untested = sorted(set(t.stats.filter(pl.col("baseline").is_null())["task"].to_list()), key=tasks.index)
    if untested:
        md += f"No test on {', '.join(untested)}: {sig.baseline} has no result there (CIs only).\n"
    if t.ranks.height:
        md += "\n" + ranks_markdown(t.ranks, t.models, tasks, sig)
    if t.versus.height:
        from medbench_core.evaluation.published import published_markdown

        md += "\n" + published_markdown(t.versus, t.label)
    md += _trust_markdown(t)
    if t.contamination:
        from medbench_core.evaluation.contamination.cells import contamination_markdown

        md += "\n" + contamination_markdown(t.contamination, t.models, tasks, dict(zip(board["model"], board["average"])))
    if t.floors.height:
        md += "\n" + floors_markdown(t.floors, t.label)
    if t.layers:
        from medbench_core.evaluation.trust import agreement_markdown

        md += "\n" + agreement_markdown(t.layers, tasks, t.trust)
    for by, long in t.breakdowns.items():
        # A task with one group (one language, one discipline) repeats its column of the main table.
        several = long.group_by("task").agg(pl.col(by).n_unique().alias("n")).filter(pl.col("n") > 1)["task"].to_list()
        table = wide(long.filter(pl.col("task").is_in(several)), by, sig.metric, t.models)
        if table.width > 1:
            md += "\n" + frame_markdown(table, f"{t.label} by {by} (task/{by}; tasks with more than one {by})")
    if t.beside.height:
        md += "\n" + expanded_markdown(t.beside, sig)
    if t.multilingual:
        from medbench_core.evaluation.multilingual import multilingual_markdown

        md += "\n" + multilingual_markdown(t.multilingual, label=t.label, n_resamples=sig.n_resamples, seed=sig.seed)
    return headline_markdown(t.view, markdown_sections(md)) + "\n" + md + (f"\n{footer}\n" if footer else "")


def _trust_markdown(t: Tables) -> str:
    """The trust sections (:mod:`medbench_core.evaluation.trust`): every cell's Judged@10 and bounds, each task's qrels holes."""
    from medbench_core.evaluation.trust import qrels_holes_markdown, trust_markdown

    md = trust_markdown(t.trusted, t.models, t.tasks, t.trust)
    if t.qrels_holes:
        md += ("\n" if md else "") + qrels_holes_markdown(t.qrels_holes, t.tasks)
    return "\n" + md if md else ""


def draw_plots(t: Tables, out: Path, before: Path) -> dict[str, Any]:
    """``trust/<model>.png``, ``diff/<task>/<model>.png`` (each folder replaced whole) and ``heatmap.png`` in ``out``; each plot
    whose inputs are those of its copy in ``before`` (the last leaderboard) is copied inside
    :func:`medbench_core.evaluation.reuse.reusing`. A difference plot is one model against the baseline on one task, keyed by
    the two models' per-query scores, their names, the task, the metric and the plots' code: adding a model draws its own
    plots only, a changed baseline (or its scores on a task) draws that task's again. Returns leaderboard.json's ``plots``."""
    from medbench_core.evaluation.trust import trust_plot_png
    from medbench_core.storage import replace_dir_atomic

    sig, metric, board = t.sig, t.sig.metric, t.view.board
    trusted, settings = t.trusted, t.trust
    drawn = [m for m in t.models if trusted.filter((pl.col("model") == m) & pl.col("judged_at_10").is_not_null()).height]

    def draw_trust(tmp: Path) -> None:
        for m in drawn:
            name, rows = f"{file_name(m)}.png", trusted.filter(pl.col("model") == m)
            reuse.drawn(  # the last leaderboard's plot when the model's rows are these (issue 53)
                lambda: reuse.digest("trust_plot", _plots_code(), rows, m, t.tasks, settings.describe()),
                before / "trust" / name, tmp / name, lambda path: trust_plot_png(rows, m, t.tasks, path, settings),
            )  # fmt: skip

    replace_dir_atomic(out / "trust", draw_trust)
    diffs = diff_plots(t)

    def draw_diffs(tmp: Path) -> None:
        scores: dict[tuple[str, str], str] = {}  # (task, model) -> the digest of its per-query scores, each hashed once

        def scores_key(task: str, m: str) -> str:
            if (task, m) not in scores:
                scores[(task, m)] = reuse.digest("per_query_scores", "", _scores(diffs[task][m], metric))
            return scores[(task, m)]

        for task, frames in diffs.items():
            (tmp / file_name(task)).mkdir(exist_ok=True)
            for m in frames:
                if m == sig.baseline:
                    continue
                name = Path(file_name(task)) / f"{file_name(m)}.png"
                pair = {sig.baseline: frames[sig.baseline], m: frames[m]}
                reuse.drawn(  # the last leaderboard's plot when the two models' scores are these (issue 53): a new model draws its own only
                    lambda: reuse.digest("diff_plot", _plots_code(), scores_key(task, sig.baseline), scores_key(task, m), sig.baseline, m, task, metric),
                    before / "diff" / name, tmp / name, lambda path: diff_plot_png(pair, sig.baseline, path, task=task, metric=metric),
                )  # fmt: skip

    replace_dir_atomic(out / "diff", draw_diffs)
    average_ranks = t.ranks.filter(pl.col("task") == AVERAGE)
    labels = {
        r["model"]: f"{r['model']}  rank {format_rank(r['rank'], r['rank_low'], r['rank_high'], r['group'])}" for r in average_ranks.iter_rows(named=True)
    }
    na = set(t.view.not_applicable)
    reuse.drawn(
        lambda: reuse.digest("heatmap", _plots_code(), board, metric, sorted(na), labels), before / "heatmap.png", out / "heatmap.png",
        lambda path: heatmap_png(board, path, metric=metric, not_applicable=na, labels=labels),
    )  # fmt: skip
    files = [f"diff/{file_name(task)}/{file_name(m)}.png" for task, frames in diffs.items() for m in frames if m != sig.baseline]
    return {"heatmap": "heatmap.png", "diff": files, "trust": [f"trust/{file_name(m)}.png" for m in drawn]}


def diff_plots(t: Tables) -> dict[str, dict[str, pl.DataFrame]]:
    """The difference plots of the board: task -> model -> its per-query metrics, in the board's order, for each task where the
    baseline and another model have them (``diff/<task>/<model>.png`` for each model but the baseline)."""
    baseline = t.sig.baseline
    by_task: dict[str, dict[str, pl.DataFrame]] = {}
    for c in t.cells:
        if c.applicable and c.per_query is not None:
            by_task.setdefault(c.task, {})[c.model] = c.per_query
    return {
        task: {m: by_task[task][m] for m in t.models if m in by_task[task]} for task in t.tasks if baseline in by_task.get(task, {}) and len(by_task[task]) > 1
    }


def _scores(per_query: pl.DataFrame, metric: str) -> pl.DataFrame:
    """What a difference plot reads of a model's per-query metrics: the query ids and ``metric`` (the whole frame when either is
    missing: the plot then says so)."""
    return per_query.select("query_id", metric) if {"query_id", metric} <= set(per_query.columns) else per_query


def write_files(t: Tables, md: str, plots: Mapping[str, Any], out: Path, extra_json: Mapping[str, Any] | None = None) -> list[str]:
    """leaderboard.md, leaderboard.csv (with a last ``stale`` column when a cell is stale), stats.csv, leaderboard.json and
    multilingual.csv (removed when no task is multilingual) in ``out``, atomically; returns every file of the leaderboard."""
    from medbench_core.evaluation.multilingual import multilingual_csv
    from medbench_core.storage import write_json_atomic, write_text_atomic

    stale = t.view.stale
    if t.multilingual:
        write_text_atomic(out / "multilingual.csv", multilingual_csv(t.multilingual))
    else:
        (out / "multilingual.csv").unlink(missing_ok=True)
    write_text_atomic(out / "leaderboard.md", md)
    write_text_atomic(out / "leaderboard.csv", (with_stale_column(t.board_csv, stale) if stale else t.board_csv).write_csv())
    write_text_atomic(out / "stats.csv", t.stats.write_csv())
    write_json_atomic(out / "leaderboard.json", leaderboard_json(t, plots, extra_json))
    multilingual = ["multilingual.csv"] if t.multilingual else []
    return ["leaderboard.md", "leaderboard.csv", "leaderboard.json", "stats.csv", "heatmap.png", *multilingual, *plots["diff"], *plots["trust"]]


def leaderboard_json(t: Tables, plots: Mapping[str, Any], extra_json: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """leaderboard.json: ``extra_json``, then the board, stats, ranks, published comparison, breakdowns, floors, expanded
    models, multilingual tables, plots, stale cells, contamination and trust."""
    from medbench_core.evaluation.floors import chance_by_task
    from medbench_core.evaluation.published import summary

    sig, metric = t.sig, t.sig.metric
    return {
        **dict(extra_json or {}),
        "metric": metric,
        "significance": sig.describe(),
        "table": t.view.board.to_dicts(),
        "stats": t.stats.to_dicts(),
        "ranks": t.ranks.to_dicts(),
        **({"published": {"sources": [str(src.path) for src in t.sources], "summary": summary(t.versus), "cells": t.versus.to_dicts()}} if t.sources else {}),
        "breakdowns": {by: long.to_dicts() for by, long in t.breakdowns.items()},
        "floors": {"metric": metric, "chance": chance_by_task(t.floors), "cells": t.floors.to_dicts()},
        "expanded": t.beside.to_dicts(),
        **({"multilingual": multilingual_json(t.multilingual)} if t.multilingual else {}),
        "plots": dict(plots),
        STALE_KEY: {f"{m}/{task}": why for (m, task), why in sorted(t.view.stale.items())},
        **({"contamination": contamination_json(t.contamination, t.models)} if t.contamination else {}),
        "trust": {
            "settings": t.trust.describe(),
            "cells": t.trusted.to_dicts(),
            "qrels_holes": {task: dict(v) for task, v in t.qrels_holes.items()},
            "layers": t.layers,
        },
    }


def contamination_json(marks: Mapping[tuple[str, str], Mapping[str, Any]], models: list[str]) -> dict[str, Any]:
    """``leaderboard.json``'s ``contamination``: each model's zero-shot share and each cell's mark, evidence and scores (``model/task``)."""
    from medbench_core.evaluation.contamination.cells import zero_shot_shares

    return {"zero_shot": zero_shot_shares(marks, models), "cells": {f"{m}/{t}": dict(v) for (m, t), v in sorted(marks.items())}}


def _plots_code() -> str:
    """What draws the plots (:mod:`medbench_core.evaluation.reuse`): plots.py, trust.py and the libraries they call."""
    return reuse.code_digest(("plots.py", "trust.py", "stats.py"), ("matplotlib", "numpy", "polars"))


def with_stale_column(board: pl.DataFrame, stale: Mapping[tuple[str, str], str]) -> pl.DataFrame:
    """``board`` with a last column ``stale``: per model, ``task: reason`` of each stale cell (null when none)."""
    col = ["; ".join(f"{t}: {why}" for (m, t), why in sorted(stale.items()) if m == model) or None for model in board["model"]]
    return board.with_columns(pl.Series("stale", col, dtype=pl.Utf8))
