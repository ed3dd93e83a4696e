"""Reports people open: the leaderboard with averages, CIs and significance markers, breakdown
tables (tier, language, discipline), each cell's floors (chance, chance-corrected, tie-aware:
:mod:`medbench_core.evaluation.floors`), the multilingual tables with the one cross-lingual gap
(:mod:`medbench_core.evaluation.multilingual`), a model x task heatmap, per-query
difference plots against the baseline (drawn by :mod:`medbench_core.evaluation.plots`); the exports (MTEB
results JSON, TREC runs) are :mod:`medbench_core.evaluation.exports`.

Everything here reads what the stages already wrote (``metrics.json``, ``per_query.parquet``,
``run.trec``) through :class:`Cell`; nothing recomputes a run. Plots use matplotlib's Agg backend
with fixed sizes and no timestamp in the PNG, so the same numbers give the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.evaluation import reuse
from medbench_core.evaluation.multilingual import multilingual_json
from medbench_core.evaluation.plots import METRIC_LABELS, diff_plot_png, file_name, heatmap_png
from medbench_core.evaluation.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, compare, format_cell

STALE_KEY = "stale"  # leaderboard.json: {"model/task": why its value is not current}
# How the reason of a value whose partition's last evaluation failed (or has not ended) begins.
UNCONFIRMED = "the last evaluation of"


@dataclass(frozen=True)
class Cell:
    """What the stages wrote for one model x task: the input of every report here.

    ``metrics`` is the content of ``metrics.json`` (None: not evaluated, or its task's gate
    failed); ``applicable`` False means the model cannot read the task (shown ``n/a``). ``stale``
    says why the value is not current (its task's or model's inputs changed since it was computed,
    and it was not recomputed); empty when it is. A stale value is shown marked, with the reason.
    """

    model: str
    task: str
    metrics: dict[str, Any] | None = None
    applicable: bool = True
    research_only: bool = False
    per_query: pl.DataFrame | None = None
    run_dir: Path | None = None
    model_revision: str = ""
    task_revision: str = ""
    languages: tuple[str, ...] = ()
    split: str = "test"
    seconds: float | None = None
    main_metric: str = "ndcg_at_10"
    provenance: dict[str, Any] = field(default_factory=dict)
    dataset: str = ""  # the source dataset (a hub id, or a local folder's catalogue path)
    subset: str = ""
    mteb_task: str = ""  # MTEB's name of the task, when it was read as one
    stale: str = ""
    # The same run scored on the human + LLM qrels layer (medbench_core/evaluation/judging/layers.py):
    # mean, per_query, judgements key, circularity; None without judgements on the task.
    filled: dict[str, Any] | None = None

    def value(self, metric: str | None = None) -> float | None:
        if self.metrics is None or not self.applicable:
            return None
        v = self.metrics.get("mean", {}).get(metric or self.main_metric)
        return None if v is None else float(v)


def load_cell(
    model: str,
    task: Any,
    *,
    metrics_dir: str | Path,
    run_dir: str | Path | None = None,
    model_revision: str = "",
    split: str = "test",
    stage_dirs: Iterable[str | Path] = (),
    provenance: Mapping[str, Any] | None = None,
) -> Cell:
    """A :class:`Cell` from a metrics folder (``metrics.json``, ``per_query.parquet``) and its run folder.

    ``task`` is the curated :class:`~medbench_core.taskdata.task.Task`; the evaluation time is the sum of
    the ``seconds`` in the ``info.json`` of ``run_dir`` and of ``stage_dirs`` (embeddings, index).
    The caller verifies the folders' manifests first.
    """
    metrics_dir = Path(metrics_dir)
    path = metrics_dir / "metrics.json"
    if not path.exists():
        raise DataError(f"{path}: not found; materialise task_metrics for {model} x {task.name} first")
    metrics = json.loads(path.read_text())
    pq = metrics_dir / "per_query.parquet"
    seconds = 0.0
    found = False
    for d in [*([run_dir] if run_dir else []), *stage_dirs]:
        info = Path(d) / "info.json"
        if info.exists():
            seconds += float(json.loads(info.read_text()).get("seconds", 0.0))
            found = True
    return Cell(
        model=model,
        task=task.name,
        metrics=metrics,
        research_only=bool(task.meta.research_only),
        per_query=pl.read_parquet(pq) if pq.exists() else None,
        run_dir=Path(run_dir) if run_dir else None,
        model_revision=model_revision,
        task_revision=task.meta.source_revision or task.content_hash(),
        languages=tuple(task.meta.languages),
        split=split,
        seconds=round(seconds, 3) if found else None,
        main_metric=task.meta.main_metric,
        provenance=dict(provenance or {}),
        dataset=task.meta.dataset,
        subset=task.meta.subset,
        mteb_task=task.meta.mteb_task,
    )


# --- tables -------------------------------------------------------------------------------


def leaderboard(cells: Iterable[Cell], models: list[str], tasks: list[str], metric: str = "ndcg_at_10") -> pl.DataFrame:
    """Model x task means (4 places), an ``average`` over the tasks each model can read, and which.

    ``average`` is the plain mean over the model's applicable tasks, listed in ``averaged_over``;
    it is null when one of them has no value yet (an average over fewer tasks would not compare).
    """
    by = {(c.model, c.task): c for c in cells}
    rows = []
    for m in models:
        row: dict[str, Any] = {"model": m}
        vals, over, complete = [], [], True
        for t in tasks:
            c = by.get((m, t))
            v = c.value(metric) if c else None
            row[t] = None if v is None else round(v, 4)
            if c is not None and not c.applicable:
                continue
            over.append(t)
            if v is None:
                complete = False
            else:
                vals.append(v)
        row["average"] = round(sum(vals) / len(vals), 4) if vals and complete else None
        row["averaged_over"] = ", ".join(over)
        rows.append(row)
    schema = {"model": pl.Utf8, **{t: pl.Float64 for t in tasks}, "average": pl.Float64, "averaged_over": pl.Utf8}
    return pl.DataFrame(rows, schema=schema)


def significance(
    cells: Iterable[Cell],
    baseline: str,
    tasks: list[str] | None = None,
    metric: str = "ndcg_at_10",
    *,
    test: str = "permutation",
    alpha: float = 0.05,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> pl.DataFrame:
    """:func:`medbench_core.evaluation.stats.compare` on every task where the baseline has per-query values.

    Models without per-query values on a task (not evaluated, not applicable) are left out of that
    task's comparisons; a task whose baseline has none gives no rows.
    """
    by_task: dict[str, dict[str, pl.DataFrame]] = {}
    for c in cells:
        if c.applicable and c.per_query is not None and (tasks is None or c.task in tasks):
            by_task.setdefault(c.task, {})[c.model] = c.per_query
    frames = []
    for task in tasks if tasks is not None else sorted(by_task):
        pq = by_task.get(task, {})
        if baseline not in pq:
            continue
        frames.append(compare(pq, baseline, task=task, metric=metric, test=test, alpha=alpha, n_resamples=n_resamples, n_boot=n_resamples, seed=seed))
    from medbench_core.evaluation.stats import STATS_SCHEMA

    return pl.concat(frames) if frames else pl.DataFrame(schema=STATS_SCHEMA)


def leaderboard_markdown(
    board: pl.DataFrame,
    stats: pl.DataFrame | None = None,
    *,
    metric: str = "ndcg_at_10",
    research_only: Iterable[str] = (),
    not_applicable: Iterable[tuple[str, str]] = (),
    baseline: str | None = None,
    test: str = "permutation",
    alpha: float = 0.05,
    n_resamples: int | None = None,
    seed: int | None = None,
    stale: Mapping[tuple[str, str], str] | None = None,
    suffix: Mapping[tuple[str, str], str] | None = None,
    chance: Mapping[str, float] | None = None,
) -> str:
    """The leaderboard as Markdown: ``0.6602 [0.63, 0.69] *`` cells where ``stats`` has the cell.

    ``suffix``: (model, task) -> a mark appended to the cell (``†``: its Judged@10 is low,
    :func:`medbench_core.evaluation.trust.cell_suffix`); given (even empty), the legend points to the
    trust table, where what every cell rests on is. ``chance``: task -> the metric's value under a
    uniformly random order (:mod:`medbench_core.evaluation.floors`), printed as a last row under the models.

    '-' is not evaluated, 'n/a' a model that cannot read the task; a ``stale`` cell (model, task) ->
    reason reads ``0.6602 [0.63, 0.69] (stale)``, as does an average over one, and a note lists why. The notes under the table say
    what the brackets, the star and the average are: the test (``test`` as in
    :func:`medbench_core.evaluation.stats.compare`), ``alpha``, the correction, and, when given, the resamples
    and seed of the randomisation test and the bootstrap.
    """
    tasks = [c for c in board.columns if c not in ("model", "average", "averaged_over")]
    research_only, not_applicable = set(research_only), set(not_applicable)
    stale_cells = dict(stale or {})
    st = {}
    if stats is not None:
        for r in stats.filter(pl.col("metric") == metric).iter_rows(named=True):
            st[(r["model"], r["task"])] = r
    head = ["model", *[f"{t} (research-only)" if t in research_only else t for t in tasks], "average"]
    lines = [f"{METRIC_LABELS.get(metric, metric)} by model and task", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in board.iter_rows(named=True):
        cells = [row["model"]]
        for t in tasks:
            if (row["model"], t) in not_applicable:
                cells.append("n/a")
            elif (row["model"], t) in st:
                r = st[(row["model"], t)]
                cells.append(format_cell(r["mean"], r["ci_low"], r["ci_high"], r["significant"]))
            else:
                cells.append(format_cell(row[t]))
            if (row["model"], t) in stale_cells and cells[-1] != "n/a":
                cells[-1] += " (stale)"
            if suffix and (row["model"], t) in suffix and cells[-1] not in ("n/a", "-"):
                cells[-1] += " " + suffix[(row["model"], t)]
        cells.append(average_cell(row, stale_cells))
        lines.append("| " + " | ".join(cells) + " |")
    if chance:
        from medbench_core.evaluation.floors import CHANCE_ROW

        lines.append("| " + " | ".join([f"*{CHANCE_ROW}*", *[f"*{chance[t]:.4f}*" if t in chance else "-" for t in tasks], "-"]) + " |")
    notes = [""]
    if stale_cells:
        if any(UNCONFIRMED in why for why in stale_cells.values()):  # a partition that failed (assets/reports.py)
            notes.append(
                "(stale): not a current value: its inputs changed since it was computed and it could not be recomputed (the value from before), "
                "or the last evaluation of its partition failed or has not finished (the value its stored metrics hold, not confirmed):"
            )
        else:
            notes.append("(stale): the inputs of this value changed since it was computed, and it could not be recomputed; it is the value from before:")
        notes += [f"- {m} x {t}: {why}" for (m, t), why in sorted(stale_cells.items())]
        notes.append("")
    if st:
        any_row = next(iter(st.values()))
        name = "paired randomisation test" if test == "permutation" else "paired t-test"
        draws = f", {n_resamples} resamples, seed {seed}" if n_resamples is not None else ""
        flips = f", {n_resamples} sign-flip resamples, seed {seed}" if test == "permutation" and n_resamples is not None else ""
        notes.append(
            f"[low, high]: 95% bootstrap CI of the mean over queries (percentile{draws}). *: differs from {baseline or any_row['baseline']} "
            f"({name}, Holm-Bonferroni across the task's models, p < {alpha:g}; two-sided{flips})."
        )
    if suffix is not None:  # the trust table exists: the legend points there, marked cells or not
        from medbench_core.evaluation.trust import MARK

        notes.append(
            f"{MARK}: the cell's Judged@10 (the share of its top 10 ever judged) is below the leaderboard's threshold (0.5 unless set): "
            f"its figure counts many unjudged documents as non-relevant. Every cell's Judged@10, the bounds on its "
            f"{METRIC_LABELS.get(metric, metric)} and its value on the human + LLM layer are in the table 'What each cell rests on' below."
        )
    if chance:
        notes.append(
            f"{CHANCE_ROW}: each task's expected value when every query's candidates (else the corpus) are ordered uniformly at random "
            "(exact; the section 'Floors and ties' sets it beside every cell)."
        )
    notes.append(
        "average: mean over the tasks each model can read: "
        + "; ".join(f"{r['model']}: {r['averaged_over'] or 'none'}" for r in board.iter_rows(named=True))
        + "."
    )
    return "\n".join(lines + notes) + "\n"


SITE_LINE = (
    "The same as pages: site/index.html beside this file (sort, filter, a page per task and per model, plots; "
    "`medbench ui` serves them, `medbench export --site DIR` writes them anywhere)."
)


def average_cell(row: Mapping[str, Any], stale: Iterable[tuple[str, str]]) -> str:
    """A board row's average as a table shows it: an average over a stale value is stale too."""
    marked = row["average"] is not None and any(m == row["model"] for m, _ in stale)
    return format_cell(row["average"]) + (" (stale)" if marked else "")


def headline_markdown(
    board: pl.DataFrame,
    stats: pl.DataFrame | None,
    below: Iterable[str],
    *,
    metric: str = "ndcg_at_10",
    baseline: str | None = None,
    research_only: Iterable[str] = (),
    not_applicable: Iterable[tuple[str, str]] = (),
    stale: Mapping[tuple[str, str], str] | None = None,
) -> str:
    """The short head of leaderboard.md: each cell's figure and CI only (``0.6602 [0.63, 0.69] *``), then a line pointing
    to the site and naming the sections ``below`` (the full table with what each cell rests on, and the rest)."""
    tasks = [c for c in board.columns if c not in ("model", "average", "averaged_over")]
    na, stale, research_only = set(not_applicable), dict(stale or {}), set(research_only)
    st = {(r["model"], r["task"]): r for r in stats.filter(pl.col("metric") == metric).iter_rows(named=True)} if stats is not None else {}
    star = f"; * differs from {baseline}" if baseline else ""
    head = ["model", *[f"{t} (research-only)" if t in research_only else t for t in tasks], "average"]
    lines = [f"{METRIC_LABELS.get(metric, metric)} at a glance (mean [95% CI]{star})", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in board.iter_rows(named=True):
        cells = [row["model"]]
        for t in tasks:
            r = st.get((row["model"], t))
            text = "n/a" if (row["model"], t) in na else format_cell(r["mean"], r["ci_low"], r["ci_high"], r["significant"]) if r else format_cell(row[t])
            cells.append(text + (" (stale)" if (row["model"], t) in stale and text != "n/a" else ""))
        cells.append(average_cell(row, stale))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\n{SITE_LINE} Below, for terminals and diffs: {'; '.join(below)}.\n"


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


def frame_markdown(df: pl.DataFrame, title: str = "", digits: int = 4) -> str:
    """A frame as a Markdown table; floats to ``digits`` places, nulls as '-'."""

    def fmt(v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        return f"{v:.{digits}f}" if isinstance(v, float) else str(v)

    lines = [title, ""] if title else []
    lines += ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.iter_rows()]
    return "\n".join(lines) + "\n"


# --- plots --------------------------------------------------------------------------------


BREAKDOWNS = ("tier", "language", "discipline")


@dataclass(frozen=True)
class Significance:
    """How cells are compared with the baseline (see :func:`medbench_core.evaluation.stats.compare`)."""

    baseline: str
    metric: str = "ndcg_at_10"
    test: str = "permutation"
    alpha: float = 0.05
    n_resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED

    def describe(self) -> dict[str, Any]:
        """What the leaderboard's legend, its JSON and the MLflow run state about the tests."""
        return {
            "baseline": self.baseline,
            "metric": self.metric,
            "test": "paired randomisation test (sign flips), two-sided" if self.test == "permutation" else "paired t-test, two-sided",
            "also_reported": "paired t-test (p_ttest)" if self.test == "permutation" else "paired randomisation test (p_perm)",
            "alpha": self.alpha,
            "correction": "Holm-Bonferroni across the comparisons of one task",
            "ci": "95% percentile bootstrap of the mean over queries",
            "ranks": "95% interval of each model's rank over paired bootstrap resamples of the queries (within each task for the average); "
            "groups: every pair tested, Holm-Bonferroni across a task's pairs",
            "resamples": self.n_resamples,
            "seed": self.seed,
        }


def expanded_beside(
    cells: Iterable[Cell], board: pl.DataFrame, specs: list[Any], sig: Significance, copies: Mapping[tuple[str, str], int] | None = None
) -> pl.DataFrame:
    """Every expanded model beside its plain retriever, task by task (:func:`medbench_core.retrieval.expansion.report.beside_retriever`),
    with the paired test of the expanded model against its retriever on the same queries.

    Per task, the expanded models of one retriever are one family for Holm's correction.
    ``copies``: (model, task) -> expansions flagged as copying a relevant passage (EXPANSION_GATE.json).
    """
    from medbench_core.retrieval.expansion.report import beside_retriever

    tasks = [c for c in board.columns if c not in ("model", "average", "averaged_over")]
    rows = beside_retriever(board.select("model", *tasks), specs, dict(copies or {}))
    if rows.height == 0:
        return rows.with_columns(
            pl.lit(None, pl.Float64).alias("p_perm"),
            pl.lit(None, pl.Float64).alias("p_ttest"),
            pl.lit(None, pl.Float64).alias("p_holm"),
            pl.lit(None, pl.Boolean).alias("significant"),
        )
    pq = {(c.model, c.task): c.per_query for c in cells if c.applicable and c.per_query is not None}
    tested: dict[tuple[str, str], dict[str, Any]] = {}
    for (retriever, task), group in rows.group_by(["retriever", "task"], maintain_order=True):
        have = {m: pq[(m, task)] for m in [retriever, *group["model"].to_list()] if (m, task) in pq}
        if retriever not in have or len(have) < 2:
            continue
        res = compare(
            have, retriever, task=task, metric=sig.metric, test=sig.test, alpha=sig.alpha, n_resamples=sig.n_resamples, n_boot=sig.n_resamples, seed=sig.seed
        )
        for r in res.filter(pl.col("model") != retriever).iter_rows(named=True):
            tested[(r["model"], task)] = r
    cols = {k: [tested.get((m, t), {}).get(k) for m, t in zip(rows["model"], rows["task"])] for k in ("p_perm", "p_ttest", "p_holm", "significant")}
    return rows.with_columns(
        *[pl.Series(k, v, dtype=pl.Float64) for k, v in cols.items() if k != "significant"],
        pl.Series("significant", cols["significant"], dtype=pl.Boolean),
    )


def expanded_markdown(rows: pl.DataFrame, sig: Significance) -> str:
    """Markdown of :func:`expanded_beside`: ``0.5734 (bm25 0.1919, +0.3815) *``, a warning on copied passages."""
    label = METRIC_LABELS.get(sig.metric, sig.metric)
    lines = [
        f"{label} of expanded models beside their retrievers",
        "",
        "| model | task | expanded | retriever | difference | p (Holm) |",
        "|---|---|---|---|---|---|",
    ]

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.4f}"

    for r in rows.iter_rows(named=True):
        delta = "-" if r["delta"] is None else f"{r['delta']:+.4f}" + (" *" if r["significant"] else "")
        warn = f" (warning: {r['copies']} expansion(s) copy a relevant passage)" if r["copies"] else ""
        lines.append(f"| {r['model']} | {r['task']} | {fmt(r['value'])}{warn} | {r['retriever']} {fmt(r['retriever_value'])} | {delta} | {fmt(r['p_holm'])} |")
    lines.append("")
    lines.append(
        f"*: the expanded model differs from its retriever ({sig.describe()['test']}, "
        f"Holm-Bonferroni across the expanded models of one retriever on a task, p < {sig.alpha:g})."
    )
    return "\n".join(lines) + "\n"


RANKS_SCHEMA: dict[str, pl.DataType] = {
    "task": pl.Utf8, "model": pl.Utf8, "rank": pl.Int64, "rank_low": pl.Int64, "rank_high": pl.Int64, "group": pl.Utf8, "n_models": pl.Int64,
}  # fmt: skip
AVERAGE = "average"  # the task name of the average's rows in the rank table


def rank_table(cells: Iterable[Cell], board: pl.DataFrame, tasks: list[str], sig: Significance) -> pl.DataFrame:
    """Each model's rank, its 95% bootstrap interval and its group, per task and for the average.

    Per task: the models with per-query values there (:func:`medbench_core.evaluation.stats.rank_intervals`
    with ``sig``'s resamples and seed; groups from every pair's paired test, ``sig.test``,
    Holm-Bonferroni across the task's pairs, ``sig.alpha``: :func:`~medbench_core.evaluation.stats.inseparable_groups`).
    The average (rows with task ``average``): the models whose leaderboard average is over the same
    tasks as the most models' (an average over other tasks does not compare), queries resampled
    within each task, groups from the stratified randomisation test. Rows follow the board's model order.
    """
    from medbench_core.evaluation.stats import align, inseparable_groups, pairwise_holm, rank_intervals

    metric = sig.metric
    models = board["model"].to_list()
    pq: dict[str, dict[str, pl.DataFrame]] = {}
    for c in cells:
        if c.applicable and c.per_query is not None and c.task in tasks and metric in c.per_query.columns and c.per_query.height:
            pq.setdefault(c.task, {})[c.model] = c.per_query
    aligned: dict[str, dict[str, Any]] = {}
    for t in tasks:
        if t in pq:
            _, values = align({m: pq[t][m] for m in models if m in pq[t]}, metric, task=t)
            aligned[t] = values
    rows = []

    def rank_rows(name: str, per_task: dict[str, dict[str, Any]]) -> None:
        got = rank_intervals(per_task, n_resamples=sig.n_resamples, seed=sig.seed)
        p = pairwise_holm(per_task, test=sig.test, n_resamples=sig.n_resamples, seed=sig.seed)
        means = {m: float(sum(float(per_task[t][m].mean()) for t in per_task) / len(per_task)) for m in got}
        groups = inseparable_groups(means, p, sig.alpha)
        for m, (r, lo, hi) in got.items():
            rows.append({"task": name, "model": m, "rank": r, "rank_low": lo, "rank_high": hi, "group": groups[m], "n_models": len(got)})

    for t, values in aligned.items():
        rank_rows(t, {t: values})
    over: dict[str, list[str]] = {}
    for r in board.iter_rows(named=True):
        if r["average"] is not None:
            over.setdefault(r["averaged_over"], []).append(r["model"])
    if over:
        # The most models; on a tie, the set of the board's first such model.
        common = max(over, key=lambda k: (len(over[k]), -min(models.index(m) for m in over[k])))
        over_tasks = [t for t in common.split(", ") if t]
        ranked = [m for m in over[common] if all(m in aligned.get(t, {}) for t in over_tasks)]
        if ranked and over_tasks:
            rank_rows(AVERAGE, {t: {m: aligned[t][m] for m in ranked} for t in over_tasks})
    order = {m: i for i, m in enumerate(models)}
    rows.sort(key=lambda r: ([*tasks, AVERAGE].index(r["task"]), order[r["model"]]))
    return pl.DataFrame(rows, schema=RANKS_SCHEMA) if rows else pl.DataFrame(schema=RANKS_SCHEMA)


def format_rank(rank: int | None, low: int | None = None, high: int | None = None, group: str | None = None) -> str:
    """``2 [1, 3] ab``: the rank, its 95% interval, its group letters; '-' without a rank."""
    if rank is None:
        return "-"
    return f"{rank} [{low}, {high}]" + (f" {group}" if group else "")


def ranks_markdown(ranks: pl.DataFrame, models: list[str], tasks: list[str], sig: Significance) -> str:
    """The rank table: one row per model, one column per task and the average, ``2 [1, 3] ab`` cells."""
    by = {(r["model"], r["task"]): r for r in ranks.iter_rows(named=True)}
    label = METRIC_LABELS.get(sig.metric, sig.metric)
    head = ["model", *tasks, AVERAGE]
    lines = [f"Rank by {label} (95% bootstrap interval of the rank; letters: groups no test separates)", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]  # fmt: skip
    for m in models:
        cells = [m]
        for t in [*tasks, AVERAGE]:
            r = by.get((m, t))
            cells.append(format_rank(r["rank"], r["rank_low"], r["rank_high"], r["group"]) if r else "-")
        lines.append("| " + " | ".join(cells) + " |")
    name = "paired randomisation test" if sig.test == "permutation" else "paired t-test"
    avg = ranks.filter(pl.col("task") == AVERAGE)
    note = (
        f"rank [low, high]: 1 = best, ties share the better rank; the 2.5% and 97.5% quantiles of the rank over {sig.n_resamples} "
        f"paired bootstrap resamples of the queries (seed {sig.seed}; for the average, each task's queries resampled within it). "
        f"Models sharing a letter are not separated by the {name} between them (every pair, Holm-Bonferroni across the pairs "
        f"of a task, p < {sig.alpha:g}; for the average, the randomisation test with sign flips within each task)."
    )
    if avg.height:
        note += f" The average ranks {avg.height} model(s) averaged over the same tasks."
    return "\n".join(lines + ["", note]) + "\n"


def _ci_only(cells: Iterable[Cell], stats: pl.DataFrame, tasks: list[str], sig: Significance) -> pl.DataFrame:
    """Rows for the cells :func:`significance` left out (their task has no baseline values, e.g. an
    image task BM25 cannot read): the mean and its bootstrap CI, no baseline and no test."""
    from medbench_core.evaluation.stats import STATS_SCHEMA, bootstrap_ci

    done = set(zip(stats["model"].to_list(), stats["task"].to_list()))
    rows = []
    for c in cells:
        if not c.applicable or c.per_query is None or c.task not in tasks or (c.model, c.task) in done or sig.metric not in c.per_query.columns:
            continue
        v = c.per_query[sig.metric].cast(pl.Float64).to_numpy()
        if len(v) == 0:
            continue
        lo, hi = bootstrap_ci(v, n_resamples=sig.n_resamples, seed=sig.seed)
        rows.append({"task": c.task, "model": c.model, "baseline": None, "metric": sig.metric, "n_queries": len(v), "mean": float(v.mean()),
                     "ci_low": lo, "ci_high": hi, "diff": None, "p_ttest": None, "p_perm": None, "p_holm": None, "significant": False})  # fmt: skip
    return pl.DataFrame(rows, schema=STATS_SCHEMA) if rows else pl.DataFrame(schema=STATS_SCHEMA)


# Everything write_leaderboard writes into its folder (the folders replaced whole; multilingual.csv only when a task is
# multilingual): what replaces the saved reports once they are written aside (assets/reports.py).
REPORT_NAMES = ("leaderboard.md", "leaderboard.csv", "leaderboard.json", "stats.csv", "heatmap.png", "multilingual.csv", "diff", "trust")


def write_leaderboard(
    cells: list[Cell],
    models: list[str],
    tasks: list[str],
    sig: Significance,
    out_dir: str | Path,
    *,
    research_only: Iterable[str] = (),
    specs: list[Any] | None = None,
    copies: Mapping[tuple[str, str], int] | None = None,
    footer: str = "",
    extra_json: Mapping[str, Any] | None = None,
    published: Iterable[Any] = (),
    model_names: Mapping[str, str] | None = None,
    mteb_tasks: Mapping[str, str] | None = None,
    trust: Any = None,
    qrels_holes: Mapping[str, Mapping[str, Any]] | None = None,
    judgements: Mapping[str, Mapping[str, Any]] | None = None,
    query_groups: Mapping[str, pl.DataFrame] | None = None,
    pivots: Mapping[str, str] | None = None,
    contamination: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
    previous_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Every report of the leaderboard, written into ``out_dir``; returns what was written.

    ``contamination``: (model, task) -> the cell's mark, evidence and decontaminated score
    (:func:`medbench_core.evaluation.contamination.cells.cell_contamination`): a section with each
    model's zero-shot share beside its average, CSV columns and ``contamination`` in the JSON.

    ``previous_dir`` (default ``out_dir``): where the last leaderboard's files are, when ``out_dir`` is a staging folder;
    inside :func:`medbench_core.evaluation.reuse.reusing`, a plot whose inputs are those of its copy there is copied.

    ``trust`` (:class:`medbench_core.evaluation.trust.TrustSettings`, default its defaults): what
    each cell rests on (:func:`write_trust`): Judged@10 and the bounds beside every cell, their
    own section, CSV and stats columns, ``trust`` in the JSON and ``trust/<model>.png``;
    ``qrels_holes``: task -> the holes its contract counted in its qrels (``GATE.json``'s ``holes``).
    ``judgements``: task -> its filled layer's judgements (:func:`medbench_core.evaluation.judging.layers.attach_filled`),
    whose cells carry :attr:`Cell.filled`: the agreement between the layers (:func:`layer_agreement`) joins the trust sections.
    ``query_groups`` (task -> :func:`medbench_core.evaluation.multilingual.query_groups`) adds the
    multilingual section for the tasks whose queries are in two or more languages
    (:func:`write_multilingual`: per language and script with CIs, tie-aware and chance values, the paired
    gap pivot minus L (``pivots``: task -> its pivot language, default English) with Holm across languages,
    the language-balanced aggregate, language variance; ``multilingual.csv``).

    ``leaderboard.md`` (the table with CIs and markers, its legend, breakdowns by tier, language
    and discipline, the floors of every cell (:mod:`medbench_core.evaluation.floors`: a chance row under the
    models, tie-aware and chance-corrected figures), expanded models beside their retrievers),
    ``leaderboard.csv`` (means, average, which tasks it is over, the average's rank interval and
    group; the published value, difference and whether it lies in our CI per task, when
    ``published`` sources have some), ``leaderboard.json`` (all of it, the rank table of
    :func:`rank_table`, the published comparison of :func:`medbench_core.evaluation.published.compare_published`
    (``model_names``: medbench model -> its MTEB name; ``mteb_tasks``: task -> its MTEB name), plus
    ``extra_json``), ``stats.csv`` (one row per model x task compared with the baseline, with its
    rank, rank interval and group on the task), ``heatmap.png`` (rows labelled with the average's
    rank) and ``diff/<task>.png`` (per-query differences from the baseline). Files are
    written atomically; ``diff/`` is replaced whole. A stale cell (:attr:`Cell.stale`) is marked in
    the Markdown, listed in ``leaderboard.json`` under ``stale`` and, when there is one, in a last
    ``stale`` column of the CSV.
    """
    from medbench_core.storage import replace_dir_atomic, write_json_atomic, write_text_atomic

    out = Path(out_dir)
    before = Path(previous_dir) if previous_dir is not None else out
    metric = sig.metric
    board = leaderboard(cells, models, tasks, metric)
    stats = significance(cells, sig.baseline, tasks, metric, test=sig.test, alpha=sig.alpha, n_resamples=sig.n_resamples, seed=sig.seed)
    stats = pl.concat([stats, _ci_only(cells, stats, tasks, sig)])
    na = {(c.model, c.task) for c in cells if not c.applicable}
    stale = {(c.model, c.task): c.stale for c in cells if c.stale and c.value(metric) is not None}
    from medbench_core.evaluation.trust import TrustSettings, suffixes, trust_table

    trust = trust or TrustSettings(metric=metric)
    trusted = trust_table(cells, trust)
    from medbench_core.evaluation.floors import chance_by_task, chance_row, floors_csv_columns, floors_markdown, floors_table

    floors = floors_table(cells, tasks, models, metric)
    md = leaderboard_markdown(
        board, stats, metric=metric, research_only=research_only, not_applicable=na, baseline=sig.baseline,
        test=sig.test, alpha=sig.alpha, n_resamples=sig.n_resamples, seed=sig.seed, stale=stale,
        suffix=suffixes(trusted) if trusted["judged_at_10"].is_not_null().any() else None, chance=chance_row(floors, tasks),
    )  # fmt: skip
    untested = sorted(set(stats.filter(pl.col("baseline").is_null())["task"].to_list()), key=tasks.index)
    if untested:
        md += f"No test on {', '.join(untested)}: {sig.baseline} has no result there (CIs only).\n"
    ranks = rank_table(cells, board, tasks, sig)
    if ranks.height:
        md += "\n" + ranks_markdown(ranks, models, tasks, sig)
    rank_cols = ["rank", "rank_low", "rank_high", "group"]
    stats = stats.join(ranks.select("task", "model", *rank_cols), on=["task", "model"], how="left", maintain_order="left")
    average_ranks = ranks.filter(pl.col("task") == AVERAGE).select("model", *rank_cols)
    board_csv = board.join(average_ranks, on="model", how="left", maintain_order="left")
    from medbench_core.evaluation.published import PUBLISHED_SCHEMA, compare_published, published_markdown, summary

    sources = list(published)
    versus = (
        compare_published(cells, stats, sources, metric=metric, model_names=model_names, mteb_tasks=mteb_tasks)
        if sources
        else pl.DataFrame(schema=PUBLISHED_SCHEMA)
    )
    if versus.height:
        md += "\n" + published_markdown(versus, METRIC_LABELS.get(metric, metric))
        pub = versus.select("task", "model", pl.col("published"), pl.col("diff").alias("published_diff"), pl.col("in_ci").alias("published_in_ci"),
                            pl.col("status").alias("published_status"))  # fmt: skip
        stats = stats.join(pub, on=["task", "model"], how="left", maintain_order="left")
        for t in [t for t in tasks if t in set(versus["task"])]:
            per = versus.filter(pl.col("task") == t).select(
                "model", pl.col("published").alias(f"published.{t}"), pl.col("diff").alias(f"published_diff.{t}"), pl.col("in_ci").alias(f"published_in_ci.{t}")
            )
            board_csv = board_csv.join(per, on="model", how="left", maintain_order="left")
    trust_md, board_csv, stats, trust_plots = write_trust(trusted, board_csv, stats, models, tasks, out, trust, qrels_holes, before)
    md += trust_md
    if contamination:
        from medbench_core.evaluation.contamination import cells as contaminated

        md += "\n" + contaminated.contamination_markdown(contamination, models, tasks, dict(zip(board["model"], board["average"])))
        board_csv = contaminated.csv_columns(board_csv, contamination, tasks)
    if floors.height:
        md += "\n" + floors_markdown(floors, METRIC_LABELS.get(metric, metric))
        board_csv = floors_csv_columns(board_csv, floors, tasks)
    layers = layer_agreement(cells, board, tasks, sig, ranks, judgements or {}, keep_circular=trust.keep_circular) if judgements else {}
    if layers:
        from medbench_core.evaluation.trust import agreement_markdown

        md += "\n" + agreement_markdown(layers, tasks, trust)
    sections: dict[str, Any] = {}
    label = METRIC_LABELS.get(metric, metric)
    for by in BREAKDOWNS:
        long = breakdown_table(cells, by, metric)
        sections[by] = long.to_dicts()
        # A task with one group (one language, one discipline) repeats its column of the main table.
        several = long.group_by("task").agg(pl.col(by).n_unique().alias("n")).filter(pl.col("n") > 1)["task"].to_list()
        table = wide(long.filter(pl.col("task").is_in(several)), by, metric, models)
        if table.width > 1:
            md += "\n" + frame_markdown(table, f"{label} by {by} (task/{by}; tasks with more than one {by})")
    beside = expanded_beside(cells, board, specs or [], sig, copies)
    if beside.height:
        md += "\n" + expanded_markdown(beside, sig)
    multilingual, multilingual_md, multilingual_files = write_multilingual(cells, query_groups or {}, models, sig, out, pivots)
    md += multilingual_md
    head = headline_markdown(board, stats, markdown_sections(md), metric=metric, baseline=sig.baseline,
                              research_only=research_only, not_applicable=na, stale=stale)  # fmt: skip
    md = head + "\n" + md + (f"\n{footer}\n" if footer else "")
    plots: list[str] = []
    by_task: dict[str, dict[str, pl.DataFrame]] = {}
    for c in cells:
        if c.applicable and c.per_query is not None:
            by_task.setdefault(c.task, {})[c.model] = c.per_query
    compared = [t for t in tasks if sig.baseline in by_task.get(t, {}) and len(by_task[t]) > 1]

    def draw(tmp: Path) -> None:
        for t in compared:
            ordered = {m: by_task[t][m] for m in models if m in by_task[t]}
            name = f"{file_name(t)}.png"
            reuse.drawn(  # the last leaderboard's plot when its inputs are these (issue 53)
                lambda: reuse.digest("diff_plot", _plots_code(), ordered, sig.baseline, t, metric),
                before / "diff" / name, tmp / name, lambda path: diff_plot_png(ordered, sig.baseline, path, task=t, metric=metric),
            )  # fmt: skip

    replace_dir_atomic(out / "diff", draw)
    plots = [f"diff/{file_name(t)}.png" for t in compared]
    labels = {
        r["model"]: f"{r['model']}  rank {format_rank(r['rank'], r['rank_low'], r['rank_high'], r['group'])}" for r in average_ranks.iter_rows(named=True)
    }
    reuse.drawn(
        lambda: reuse.digest("heatmap", _plots_code(), board, metric, sorted(na), labels), before / "heatmap.png", out / "heatmap.png",
        lambda path: heatmap_png(board, path, metric=metric, not_applicable=na, labels=labels),
    )  # fmt: skip
    write_text_atomic(out / "leaderboard.md", md)
    write_text_atomic(out / "leaderboard.csv", (with_stale_column(board_csv, stale) if stale else board_csv).write_csv())
    write_text_atomic(out / "stats.csv", stats.write_csv())
    doc = {
        **dict(extra_json or {}),
        "metric": metric,
        "significance": sig.describe(),
        "table": board.to_dicts(),
        "stats": stats.to_dicts(),
        "ranks": ranks.to_dicts(),
        **({"published": {"sources": [str(src.path) for src in sources], "summary": summary(versus), "cells": versus.to_dicts()}} if sources else {}),
        "breakdowns": {k: v for k, v in sections.items() if k in BREAKDOWNS},
        "floors": {"metric": metric, "chance": chance_by_task(floors), "cells": floors.to_dicts()},
        "expanded": beside.to_dicts(),
        **({"multilingual": multilingual_json(multilingual)} if multilingual_files else {}),
        "plots": {"heatmap": "heatmap.png", "diff": plots, "trust": trust_plots},
        STALE_KEY: {f"{m}/{t}": why for (m, t), why in sorted(stale.items())},
        **({"contamination": contamination_json(contamination, models)} if contamination else {}),
        "trust": {
            "settings": trust.describe(),
            "cells": trusted.to_dicts(),
            "qrels_holes": {t: dict(v) for t, v in (qrels_holes or {}).items()},
            "layers": layers,
        },
    }
    write_json_atomic(out / "leaderboard.json", doc)
    files = ["leaderboard.md", "leaderboard.csv", "leaderboard.json", "stats.csv", "heatmap.png", *multilingual_files, *plots, *trust_plots]
    return {"markdown": md, "board": board, "stats": stats, "ranks": ranks, "published": versus, "expanded": beside, "files": files, "stale": stale,
            "trust": trusted, "layers": layers, "multilingual": multilingual, "floors": floors}  # fmt: skip


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
    import dataclasses

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


def write_trust(
    trusted: pl.DataFrame,
    board_csv: pl.DataFrame,
    stats: pl.DataFrame,
    models: list[str],
    tasks: list[str],
    out: Path,
    settings: Any,
    qrels_holes: Mapping[str, Mapping[str, Any]] | None = None,
    previous: Path | None = None,
) -> tuple[str, pl.DataFrame, pl.DataFrame, list[str]]:
    """The trust sections of the leaderboard (:mod:`medbench_core.evaluation.trust`): its Markdown,
    the CSV with ``judged_at_10.<task>``, bounds, ``low_judged.<task>`` (and ``filled.<task>``)
    columns, stats.csv with the cell's hole measures and the bounds on its metric (``bound_lower``,
    ``bound_upper``), and ``trust/<model>.png`` (the folder replaced whole; ``previous``: where the last ones are, default ``out``)."""
    from medbench_core.evaluation.trust import csv_columns, qrels_holes_markdown, trust_markdown, trust_plot_png
    from medbench_core.storage import replace_dir_atomic

    md = trust_markdown(trusted, models, tasks, settings)
    if qrels_holes:
        md += ("\n" if md else "") + qrels_holes_markdown(qrels_holes, tasks)
    board_csv = csv_columns(board_csv, trusted, tasks)
    cols = ["judged_at_10", "holes_at_10", "bpref_at_100", "ndcg_condensed_at_10", "low_judged", "filled", "circular"]
    bounds = [pl.col("lower").alias("bound_lower"), pl.col("upper").alias("bound_upper")]
    stats = stats.join(trusted.select("task", "model", *bounds, *cols), on=["task", "model"], how="left", maintain_order="left")
    drawn = [m for m in models if trusted.filter((pl.col("model") == m) & pl.col("judged_at_10").is_not_null()).height]

    def draw(tmp: Path) -> None:
        for m in drawn:
            name, rows = f"{file_name(m)}.png", trusted.filter(pl.col("model") == m)
            reuse.drawn(  # the last leaderboard's plot when the model's rows are these (issue 53)
                lambda: reuse.digest("trust_plot", _plots_code(), rows, m, tasks, settings.describe()),
                (previous or out) / "trust" / name, tmp / name, lambda path: trust_plot_png(rows, m, tasks, path, settings),
            )  # fmt: skip

    replace_dir_atomic(out / "trust", draw)
    return ("\n" + md if md else ""), board_csv, stats, [f"trust/{file_name(m)}.png" for m in drawn]


def write_multilingual(
    cells: list[Cell], groups: Mapping[str, pl.DataFrame], models: list[str], sig: Significance, out: Path, pivots: Mapping[str, str] | None = None
) -> tuple[dict, str, list[str]]:
    """The multilingual tables (:mod:`medbench_core.evaluation.multilingual`), their Markdown and ``multilingual.csv``
    in ``out``; empty, and nothing written (a previous ``multilingual.csv`` removed), when no task is multilingual."""
    from medbench_core.evaluation.multilingual import multilingual_csv, multilingual_markdown, multilingual_tables
    from medbench_core.storage import write_text_atomic

    tables = multilingual_tables(cells, groups, models, metric=sig.metric, n_resamples=sig.n_resamples, seed=sig.seed, pivots=pivots)
    if tables["languages"].height == 0:
        (Path(out) / "multilingual.csv").unlink(missing_ok=True)
        return {}, "", []
    write_text_atomic(Path(out) / "multilingual.csv", multilingual_csv(tables))
    md = multilingual_markdown(tables, label=METRIC_LABELS.get(sig.metric, sig.metric), n_resamples=sig.n_resamples, seed=sig.seed)
    return tables, "\n" + md, ["multilingual.csv"]


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
