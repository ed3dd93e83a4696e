"""What each leaderboard cell rests on (issue 33, issue 46): its holes, the exact bounds on its
score, and its score on the human + LLM ("filled") qrels layer when the task has judgements.

Reads what the metrics stage stored (``metrics.json``'s means of the hole-aware measures of
:mod:`medbench_core.evaluation.holes` and its ``holes`` summary) and, for the filled layer, what
the judgement stage scored (:attr:`medbench_core.evaluation.reports.Cell.filled`); computes nothing
from a run. Its own sections of the leaderboard (a table, CSV columns, JSON key ``trust``, MLflow
keys and ``trust/<model>.png``); the main table keeps one interval per cell, its CI, and gains
only the mark ``†`` pointing here.

**The metric.** Every label and bound follows the leaderboard's metric (``TrustSettings.metric``,
``LeaderboardConfig.metric``). Bounds are shown for a metric medbench bounds (:data:`BOUNDED`:
nDCG@k, exact over every completion of the judgments) when the metrics stage stored them; for
any other the trust sections say there are none and draw none, rather than put another metric's
bounds beside it.

**The mark.** A cell whose mean Judged@10 is below :data:`JUDGED_THRESHOLD` (0.5) is marked ``†``:
fewer than half of the documents it shows in its top 10 were ever judged, so its score counts
more unjudged documents as non-relevant than judged ones, and its bounds are wide. 0.5 is where
the holes outnumber the judged documents; TREC-style pools aim at Judged@10 near 1, and BEIR's
sparse qrels measure 0.1-0.5 for neural models (Thakur et al., SIGIR 2024, on Touché 2020). The
threshold is a setting of the leaderboard (``LeaderboardConfig.judged_threshold``).

**bpref and condensed nDCG@10** compare relevant documents with judged non-relevant ones; on a
query whose qrels hold none they are 1.0 whenever a relevant document is retrieved at all. They
are shown as the mean over the queries that have one (``metrics.json`` ``holes.judged_nonrelevant``),
marked ``‡`` with how many when some queries have none, and left out when none has.

**Circular cells** (:mod:`medbench_core.evaluation.judging.circularity`) are left out of the filled
column and of every ranking comparison between the layers unless ``keep_circular`` keeps them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.evaluation.markdown_tables import markdown_table
from medbench_core.evaluation.mlflow_names import mlflow_name

JUDGED_THRESHOLD = 0.5
MARK = "†"
UNINFORMATIVE = "‡"
KEY = "trust"  # leaderboard.json's section
# Metric families whose bounds over every completion medbench computes (medbench_core/evaluation/holes.py): base -> (lower, upper).
BOUNDED = {"ndcg": ("ndcg_lower", "ndcg_upper")}
BASE_LABELS = {"ndcg": "nDCG", "recall": "Recall", "mrr": "MRR", "map": "MAP", "hit_rate": "Hit rate", "judged": "Judged", "bpref": "bpref"}
TRUST_SCHEMA: dict[str, pl.DataType] = {
    "task": pl.Utf8, "model": pl.Utf8, "metric": pl.Utf8, "label": pl.Utf8, "value": pl.Float64, "judged_at_10": pl.Float64,
    "holes_at_10": pl.Int64, "lower": pl.Float64, "upper": pl.Float64, "lower_metric": pl.Utf8, "upper_metric": pl.Utf8, "no_bounds": pl.Utf8,
    "bpref_at_100": pl.Float64, "ndcg_condensed_at_10": pl.Float64, "queries_with_judged_nonrelevant": pl.Int64, "n_queries": pl.Int64,
    "low_judged": pl.Boolean, "filled": pl.Float64, "filled_judged_at_10": pl.Float64, "filled_lower": pl.Float64, "filled_upper": pl.Float64,
    "judgements": pl.Utf8, "circular": pl.Utf8, "circular_left_out": pl.Boolean, "filled_circular": pl.Float64, "families": pl.Utf8,
}  # fmt: skip


def metric_label(metric: str) -> str:
    """``ndcg_at_10`` -> ``nDCG@10``, ``recall_at_100`` -> ``Recall@100``; other names as they are."""
    from medbench_core.evaluation.plots import METRIC_LABELS

    if metric in METRIC_LABELS:
        return METRIC_LABELS[metric]
    base, sep, k = metric.rpartition("_at_")
    return f"{BASE_LABELS.get(base, base)}@{k}" if sep and k.isdigit() else metric


def bound_metrics(metric: str) -> tuple[str, str] | None:
    """The names of ``metric``'s lower and upper bounds (``ndcg_lower_at_10``, ``ndcg_upper_at_10``), or None: medbench does not bound it."""
    base, sep, k = metric.rpartition("_at_")
    if not sep or base not in BOUNDED:
        return None
    lower, upper = BOUNDED[base]
    return f"{lower}_at_{k}", f"{upper}_at_{k}"


def no_bounds_reason(metric: str) -> str:
    """Why a cell of ``metric`` shows no bounds."""
    label = metric_label(metric)
    if bound_metrics(metric) is None:
        bounded = ", ".join(f"{BASE_LABELS.get(b, b)}@k" for b in BOUNDED)
        return f"no bounds for {label}: medbench bounds {bounded} over the completions of the judgments, not {label}"
    return f"no bounds stored for {label}: the metrics stage stores them for nDCG@10 (ndcg_lower_at_10, ndcg_upper_at_10)"


@dataclass(frozen=True)
class TrustSettings:
    """How the trust sections read: the Judged@10 below which a cell is marked, the metric they show
    (labels and bounds), and whether circular cells stay in the filled layer's rankings."""

    judged_threshold: float = JUDGED_THRESHOLD
    metric: str = "ndcg_at_10"
    keep_circular: bool = False

    def describe(self) -> dict[str, Any]:
        label = metric_label(self.metric)
        names = bound_metrics(self.metric)
        return {
            "judged_threshold": self.judged_threshold,
            "mark": f"{MARK}: mean Judged@10 below {self.judged_threshold:g}",
            "metric": self.metric,
            "bounds": (
                f"{label}'s exact lowest and highest values over every completion of the judgments (each unjudged document at any grade "
                f"0..top grade; each bound reached by a completion): {names[0]}, {names[1]}"
                if names
                else no_bounds_reason(self.metric)
            ),
            "judged_nonrelevant": (
                f"{UNINFORMATIVE}: bpref and condensed nDCG@10 over the queries whose qrels hold a judged non-relevant document; left out where none does"
            ),
            "filled": "the same run scored on the human qrels plus the LLM judgements of pairs the humans did not judge, on the humans' queries",
            "keep_circular": self.keep_circular,
        }


def trust_table(cells: Iterable[Any], settings: TrustSettings = TrustSettings()) -> pl.DataFrame:
    """One row per evaluated cell: its value of the settings' metric, Judged@10, hole count, its bounds
    (or why there are none), bpref and condensed nDCG@10 over the queries with a judged non-relevant
    document, whether it is marked, and its filled-layer values (null without judgements; the filled
    value of a circular cell left out is in ``filled_circular``)."""
    names = bound_metrics(settings.metric)
    label = metric_label(settings.metric)
    rows = []
    for c in cells:
        if c.metrics is None or not c.applicable:
            continue
        mean = c.metrics.get("mean", {})
        holes = c.metrics.get("holes") or {}
        judged = mean.get("judged_at_10")
        bounded = names is not None and names[0] in mean and names[1] in mean
        nonrel = holes.get("judged_nonrelevant") or {}
        filled = getattr(c, "filled", None) or {}
        fmean = filled.get("mean") or {}
        circ = filled.get("circular") or None
        left_out = bool(circ) and not settings.keep_circular
        fvalue = _f(fmean.get(settings.metric))
        row = {
            "task": c.task, "model": c.model, "metric": settings.metric, "label": label, "value": _f(mean.get(settings.metric)),
            "judged_at_10": _f(judged), "holes_at_10": holes.get("holes_at_10"),
            "lower": _f(mean[names[0]]) if bounded else None, "upper": _f(mean[names[1]]) if bounded else None,
            "lower_metric": names[0] if bounded else None, "upper_metric": names[1] if bounded else None,
            "no_bounds": None if bounded else no_bounds_reason(settings.metric),
            **{m: _f((nonrel.get("mean") or {}).get(m)) for m in ("bpref_at_100", "ndcg_condensed_at_10")},
            "queries_with_judged_nonrelevant": nonrel.get("queries_with"), "n_queries": c.metrics.get("n_queries"),
            "low_judged": None if judged is None else bool(judged < settings.judged_threshold),
            "filled": None if left_out else fvalue, "filled_judged_at_10": _f(fmean.get("judged_at_10")),
            "filled_lower": _f(fmean.get(names[0])) if bounded else None, "filled_upper": _f(fmean.get(names[1])) if bounded else None,
            "judgements": filled.get("judgements"), "circular": circ, "circular_left_out": left_out if filled else None,
            "filled_circular": fvalue if left_out else None, "families": filled.get("families"),
        }  # fmt: skip
        rows.append(row)
    return pl.DataFrame(rows, schema=TRUST_SCHEMA, orient="row") if rows else pl.DataFrame(schema=TRUST_SCHEMA)


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def _fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def cell_suffix(row: Mapping[str, Any]) -> str:
    """What the main table adds to a cell's figure and CI: ``†`` when its Judged@10 is below the
    threshold (its Judged@10, bounds and filled value are in the trust table, which the legend names)."""
    return MARK if row.get("low_judged") else ""


def suffixes(table: pl.DataFrame) -> dict[tuple[str, str], str]:
    """(model, task) -> :func:`cell_suffix`, for the main table (marked cells only)."""
    return {(r["model"], r["task"]): s for r in table.iter_rows(named=True) if (s := cell_suffix(r))}


def _needs_nonrelevant(value: float | None, with_: int | None, n: int | None) -> str:
    """bpref or condensed nDCG@10 over the queries with a judged non-relevant document: the value, marked when some have none."""
    if with_ is None or n is None:
        return _fmt(value, 4)
    if with_ == 0:
        return f"- {UNINFORMATIVE}"
    return _fmt(value, 4) + (f" {UNINFORMATIVE} ({with_} of {n} queries)" if with_ < n else "")


def trust_markdown(table: pl.DataFrame, models: list[str], tasks: list[str], settings: TrustSettings = TrustSettings()) -> str:
    """The trust section: per cell, the metric's value beside its bounds (or why there are none), Judged@10,
    the hole count, bpref and condensed nDCG@10; with judgements, the human and filled values side by
    side with each cell's families; and their legends."""
    if not table.height:
        return ""
    label = metric_label(settings.metric)
    by = {(r["model"], r["task"]): r for r in table.iter_rows(named=True)}
    shown = [t for t in tasks if any((m, t) in by for m in models)]
    names = bound_metrics(settings.metric)
    lines = [
        f"What each cell rests on: {label} beside its bounds (the lowest and highest {label} any grades of the unjudged documents could "
        "give: exact, each reached by a completion of the judgments); J@10 = Judged@10; holes = unjudged documents in the top 10 "
        "(all queries); bpref and nDCG@10 on the condensed list (unjudged removed), over the queries with a judged non-relevant document",
        "",
    ]
    body = []
    marked_nonrel = False
    unbounded = None
    for m in models:
        for t in shown:
            r = by.get((m, t))
            if r is None or r["judged_at_10"] is None:
                continue
            mark = f" {MARK}" if r["low_judged"] else ""
            bounds = f"[{_fmt(r['lower'], 4)}, {_fmt(r['upper'], 4)}]" if r["lower"] is not None else "none"
            unbounded = unbounded or r["no_bounds"]
            with_, n = r["queries_with_judged_nonrelevant"], r["n_queries"]
            marked_nonrel |= with_ is not None and n is not None and with_ < n
            holes = str(r["holes_at_10"]) if r["holes_at_10"] is not None else "-"
            body.append([m, t, _fmt(r["value"], 4), bounds, f"{_fmt(r['judged_at_10'])}{mark}", holes, _needs_nonrelevant(r["bpref_at_100"], with_, n),
                         _needs_nonrelevant(r["ndcg_condensed_at_10"], with_, n)])  # fmt: skip
    lines += markdown_table(["model", "task", label, "bounds", "J@10", "holes", "bpref", "condensed nDCG@10"], body)
    lines += [
        "",
        f"{MARK}: Judged@10 below {settings.judged_threshold:g}: less than {settings.judged_threshold:.0%} of the cell's top 10 was ever "
        "judged, and trec_eval counts every unjudged document as non-relevant.",
        (
            f"bounds: {label} over every completion of the judgments (any grade, 0 to the task's top grade, for each unjudged "
            f"document); no completion scores outside them and one reaches each ({names[0]}, {names[1]}; docs/trust.md)."
            if names and unbounded is None
            else f"bounds: {unbounded or no_bounds_reason(settings.metric)}."
        ),
    ]
    if marked_nonrel:
        lines.append(
            f"{UNINFORMATIVE}: bpref and condensed nDCG@10 rank relevant documents against judged non-relevant ones. A query whose qrels "
            "hold no judged non-relevant document gives them 1.0 whenever it retrieves a relevant document at all (one at rank 90: "
            "nDCG@10 0, bpref 1.0): such queries are left out, the figure is the mean over the queries with one (how many in brackets), "
            "'-' when none has."
        )
    rows = [by[(m, t)] for m in models for t in shown if (m, t) in by and by[(m, t)]["judgements"]]
    if rows:
        keep = settings.keep_circular
        lines += ["", f"{label} on the human qrels and on the filled layer (human + LLM judgements of the pairs the humans did not judge, "
                  "on the humans' queries)", ""]  # fmt: skip
        body = []
        for r in rows:
            if r["circular_left_out"]:
                filled, diff = f"left out: circular ({r['circular']})", "-"
            else:
                circ = f" (circular, kept: {r['circular']})" if r["circular"] else ""
                filled = f"{_fmt(r['filled'], 4)}{circ}"
                diff = "-" if r["value"] is None or r["filled"] is None else f"{r['filled'] - r['value']:+.4f}"
            body.append([r["model"], r["task"], _fmt(r["value"], 4), filled, diff, _fmt(r["judged_at_10"]), _fmt(r["filled_judged_at_10"]),
                         str(r["judgements"]), str(r["families"] or "-")])  # fmt: skip
        head = ["model", "task", "human", "filled", "difference", "J@10 human", "J@10 filled", "judgements", "families"]
        lines += markdown_table(head, body)
        lines += [
            "",
            f"Circular cells (built with a model of the judge's family) are {'kept in' if keep else 'left out of'} the filled column, "
            f"Kendall's tau, RBO and the moved rank intervals (setting keep_circular: {str(keep).lower()}). families: each model that "
            "built the cell, its families and where each was read: config (its config.json), card (its model card's base model), "
            "recorded card (a card medbench records for a name with no config), name (from the name alone, when nothing else says).",
        ]
    return "\n".join(lines) + "\n"


def csv_columns(board: pl.DataFrame, table: pl.DataFrame, tasks: list[str]) -> pl.DataFrame:
    """``board`` with, per task, ``judged_at_10.<task>``, the bounds (``ndcg_lower_at_10.<task>``,
    ``ndcg_upper_at_10.<task>``: the names of the metric's bounds, for a metric medbench bounds), ``low_judged.<task>``
    and (with judgements) ``filled.<task>`` (null for a circular cell left out)."""
    for t in tasks:
        per = table.filter(pl.col("task") == t)
        if not per.height:
            continue
        cols = [pl.col("judged_at_10").alias(f"judged_at_10.{t}")]
        names = bound_metrics(per["metric"][0])
        if names:  # a metric medbench bounds: its columns, null where a cell's bounds were not stored
            cols += [pl.col("lower").alias(f"{names[0]}.{t}"), pl.col("upper").alias(f"{names[1]}.{t}")]
        cols.append(pl.col("low_judged").alias(f"low_judged.{t}"))
        if per["judgements"].is_not_null().any():
            cols.append(pl.col("filled").alias(f"filled.{t}"))
        board = board.join(per.select("model", *cols), on="model", how="left", maintain_order="left")
    return board


def trust_mlflow_metrics(table: pl.DataFrame) -> dict[str, float]:
    """The leaderboard run's keys: ``<task>/<model>/judged_at_10``, ``.../holes_at_10``, the bounds under their
    metric names (``.../ndcg_lower_at_10``, ``.../ndcg_upper_at_10``), bpref and condensed nDCG@10 where some
    query has a judged non-relevant document, ``.../low_judged`` (1/0), ``.../filled`` (not for a circular cell
    left out), ``.../filled_judged_at_10``, ``.../circular`` (1/0)."""
    out: dict[str, float] = {}
    for r in table.iter_rows(named=True):
        prefix = mlflow_name(f"{r['task']}/{r['model']}")
        for col in ("judged_at_10", "holes_at_10", "bpref_at_100", "ndcg_condensed_at_10", "filled", "filled_judged_at_10"):
            if r[col] is not None:
                out[f"{prefix}/{col}"] = float(r[col])
        if r["lower"] is not None:
            out[f"{prefix}/{r['lower_metric']}"] = float(r["lower"])
            out[f"{prefix}/{r['upper_metric']}"] = float(r["upper"])
        if r["low_judged"] is not None:
            out[f"{prefix}/low_judged"] = 1.0 if r["low_judged"] else 0.0
        if r["judgements"] is not None:
            out[f"{prefix}/circular"] = 1.0 if r["circular"] else 0.0
    return out


def trust_plot_png(table: pl.DataFrame, model: str, tasks: list[str], path: str | Path, settings: TrustSettings = TrustSettings()) -> Path:
    """One model's cells: the metric's value (dot) inside its bounds (bar; none for a metric without bounds),
    the filled value (diamond) when judged by an LLM (not for a circular cell left out), and Judged@10
    under each task's name; marked tasks' names carry ``†``. Fixed size, no timestamp."""
    from medbench_core.evaluation.plots import _pyplot, _save

    plt = _pyplot()
    label = metric_label(settings.metric)
    rows = {r["task"]: r for r in table.filter(pl.col("model") == model).iter_rows(named=True)}
    shown = [t for t in tasks if t in rows and rows[t]["judged_at_10"] is not None]
    w, h = 200 + 110 * max(len(shown), 1), 420
    fig, ax = plt.subplots(figsize=(w / 100, h / 100), dpi=100)
    bounded = False
    for i, t in enumerate(shown):
        r = rows[t]
        colour = "#d95f02" if r["low_judged"] else "#1b9e77"
        if r["lower"] is not None:
            bounded = True
            ax.plot([i, i], [r["lower"], r["upper"]], color=colour, linewidth=6, alpha=0.35, solid_capstyle="butt")
        if r["value"] is not None:
            ax.plot([i], [r["value"]], "o", color=colour, markersize=6)
        if r["filled"] is not None:
            ax.plot([i], [r["filled"]], "D", color="#7570b3", markersize=5)
    ax.set_xticks(range(len(shown)), labels=[f"{t}{' ' + MARK if rows[t]['low_judged'] else ''}\nJ@10 {_fmt(rows[t]['judged_at_10'])}" for t in shown],
                  rotation=20, ha="right", fontsize=7)  # fmt: skip
    ax.set_xlim(-0.6, max(len(shown), 1) - 0.4)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel(label, fontsize=8)
    ax.tick_params(labelsize=7)
    filled = any(rows[t]["filled"] is not None for t in shown)
    within = "within its exact bounds (bar)" if bounded else f"(no bounds for {label})"
    ax.set_title(f"{model}: {label} (dot) {within}{', filled layer (diamond)' if filled else ''}; "
                 f"{MARK} Judged@10 < {settings.judged_threshold:g}", fontsize=8)  # fmt: skip
    fig.subplots_adjust(left=80 / w, right=1 - 20 / w, bottom=0.3, top=0.9)
    return _save(fig, Path(path))


def qrels_holes_markdown(holes: Mapping[str, Mapping[str, Any]], tasks: list[str]) -> str:
    """Per task, the holes its contract counted in the qrels themselves (``GATE.json``'s ``holes``):
    rows naming absent documents, queries without any judgment (not scored), without a positive (score 0),
    and whether the task refuses or marks them (``qrels_holes`` in tasks.yaml)."""
    body = []
    for t in tasks:
        h = holes.get(t)
        if not h:
            continue
        marked = h.get("mode") == "mark" and (h.get("n_absent_doc_rows") or h.get("n_queries_without_judgment") or h.get("n_queries_without_positive"))
        body.append([f"{t}{' ' + MARK if marked else ''}", str(h.get("n_absent_doc_rows", 0)), str(h.get("n_queries_without_judgment", 0)),
                     str(h.get("n_queries_without_positive", 0)), str(h.get("mode", "refuse"))])  # fmt: skip
    head = ["task", "qrels rows naming absent documents", "queries without any judgment", "queries without a positive", "qrels_holes"]
    lines = ["Holes in the qrels themselves (each task's contract)", "", *markdown_table(head, body)]
    lines += ["", f"{MARK} on a task: it has qrels holes and its tasks.yaml entry marks them (qrels_holes: mark) instead of refusing the task; "
              "a query without any judgment is left out of every mean, one without a positive scores 0 for every model."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _ci(v: Any, ci: Any) -> str:
    if v is None:
        return "-"
    lo, hi = (ci or [None, None])[:2]
    return f"{v:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "")


def _grade_map(mapping: Any) -> str:
    """``0->0, 1->0, 2->1, 3->2``: the judge's grades onto the task's."""
    if not isinstance(mapping, Mapping) or not mapping:
        return "-"
    return ", ".join(f"{k}->{v}" for k, v in sorted(mapping.items(), key=lambda kv: int(kv[0])))


def agreement_markdown(layers: Mapping[str, Mapping[str, Any]], tasks: list[str], settings: TrustSettings = TrustSettings()) -> str:
    """Per task with an LLM layer: the judgement, its grade mapping, the pairs it graded, its agreement with
    the humans on the human-judged calibration pairs (quadratic kappa, ordinal alpha, 95% CIs: said to be
    measured there, not on the holes), and between the rankings of the two layers Kendall's tau, RBO and
    the cells whose rank interval moved, circular cells left out unless kept; tasks refused or not judged, and why."""
    label = metric_label(settings.metric)
    head = ["task", "judgements", "grade map (judge -> task)", "pairs (fill + calibration)", "unparsed", "weighted kappa", "Krippendorff alpha",
            "Kendall tau", "RBO", "rank intervals moved"]  # fmt: skip
    body: list[list[str]] = []
    notes = []
    for t in tasks:
        e = layers.get(t)
        if not e:
            continue
        if e.get("status") != "judged":
            body.append([t, str(e.get("judgement")), *["-"] * 7, str(e.get("status"))])
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
        on = f" on {a.get('n_pairs', 0)} calibration pairs" if a else ""
        fams = e.get("families")
        judge_families = f"; families {', '.join(f'{f} ({src})' for f, src in sorted(fams.items())) or 'none'}" if isinstance(fams, Mapping) else ""
        body.append([t, f"{e['judgement']} ({e.get('judge')}{judge_families})", _grade_map(e.get("grade_map")),
                     f"{e.get('n_pairs')} ({e.get('n_fill')} + {e.get('n_calibration')})", str(e.get("n_unparsed")),
                     f"{_ci(a.get('kappa_quadratic'), a.get('kappa_ci'))}{on}",
                     f"{_ci(a.get('alpha_ordinal'), a.get('alpha_ci'))}{on}", tau, rbo, moved_text])  # fmt: skip
        for model, why in sorted((e.get("circular") or {}).items()):
            fate = "kept in" if settings.keep_circular else "left out of"
            notes.append(
                f"- circular: {model} x {t} was built with a model of the judge's family: {why} (Clarke & Dietz, arXiv 2412.17156); "
                f"{fate} tau, RBO and the moved intervals (keep_circular: {str(settings.keep_circular).lower()})"
            )
        if e.get("n_llm_other_queries"):
            notes.append(f"- {t}: {e['n_llm_other_queries']} LLM grade(s) of queries the humans never judged are left out of the filled layer")
    lines = ["Agreement between the human and the LLM layers", "", *markdown_table(head, body)]
    lines += ["", "kappa: Cohen's, quadratic weights; alpha: Krippendorff's, ordinal; both on the calibration pairs: human-judged pairs drawn "
              "over the grades (the pool's calibration, 30 by default), not the holes the judge fills, so they say how the judge grades "
              "pairs the humans graded, not how right its grades of the holes are; [low, high]: 95% bootstrap over the pairs. "
              f"tau and RBO (p = 0.9) compare the system rankings by mean {label} on the two layers; a moved interval is a rank or 95% rank "
              "interval that is not the same on the filled layer. grade map: the judge's grades onto the task's (grade_map: auto "
              "maps UMBRELA's 0-3 as it is onto a 0-3 task, binarises at 2 on a 0-1 task, and takes floor(g x top / 3) otherwise: 0, 1 -> 0; "
              "2 -> 1; 3 -> 2 on a 0-2 task; docs/trust.md).", *notes]  # fmt: skip
    return "\n".join(lines) + "\n"
