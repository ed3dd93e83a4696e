"""The multilingual reports: the tables of :mod:`medbench_core.evaluation.language_tables` as the leaderboard shows them.

Markdown under the leaderboard's own (:func:`multilingual_markdown`), ``multilingual.csv`` (:func:`multilingual_csv`),
the MLflow metrics of the leaderboard's run (:func:`multilingual_mlflow_metrics`) and the ``multilingual`` part of
``leaderboard.json`` (:func:`multilingual_json`). The tables themselves (per language, the paired gap to the pivot,
the language-balanced aggregate and its rank inversions, language variance, per script) and what they are computed
from are language_tables.py's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import polars as pl

from medbench_core.evaluation.language_tables import (  # noqa: F401  (is_multilingual, multilingual_tables, query_groups: re-exported for the callers of the reports)
    ALL,
    ENGLISH,
    is_multilingual,
    multilingual_tables,
    query_groups,
    script_of,
)
from medbench_core.evaluation.markdown_tables import markdown_table
from medbench_core.evaluation.mlflow_names import mlflow_name


def _ci(mean: float | None, lo: float | None, hi: float | None) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    return f"{mean:.4f} [{lo:.2f}, {hi:.2f}]" if lo is not None else f"{mean:.4f}"


def _wide(df: pl.DataFrame, column: str, cell) -> tuple[list[str], list[list[str]]]:
    keys = sorted({r[column] for r in df.iter_rows(named=True)}, key=lambda v: (v != ENGLISH, str(v)))
    by: dict[tuple[str, str], dict[str, str]] = {}
    for r in df.iter_rows(named=True):
        by.setdefault((r["model"], r["task"]), {})[r[column]] = cell(r)
    return keys, [[m, t, *[vals.get(k, "-") for k in keys]] for (m, t), vals in by.items()]


def multilingual_markdown(tables: Mapping[str, pl.DataFrame], *, label: str = "nDCG@10", n_resamples: int = 10_000, seed: int = 0) -> str:
    """The tables as the leaderboard prints them under its own ('' when no task is multilingual)."""
    langs = tables["languages"]
    if langs.height == 0:
        return ""
    out = ["## Multilingual (tasks whose queries are in two or more languages)", ""]

    def language_cell(r: Mapping[str, Any]) -> str:
        text = _ci(r["mean"], r["ci_low"], r["ci_high"])
        if r.get("tie_aware") is not None and round(r["tie_aware"], 4) != round(r["mean"], 4):
            text += f" · tie-aware {r['tie_aware']:.4f}" + (" ⚑" if r.get("tie_flag") else "")
        return text

    keys, body = _wide(langs, "language", language_cell)
    chance = langs.filter(pl.col("chance").is_not_null()).unique(subset=["task", "language"], keep="first", maintain_order=True)
    for t in dict.fromkeys(chance["task"].to_list()):
        by = {r["language"]: f"*{r['chance']:.4f}*" for r in chance.filter(pl.col("task") == t).iter_rows(named=True)}
        body.append(["*chance*", t, *[by.get(k, "-") for k in keys]])
    out += [
        f"{label} by language ([low, high]: 95% bootstrap CI over the language's queries, {n_resamples} resamples, seed {seed}; "
        "tie-aware: the expectation over the model's tied orders where it differs, ⚑ by more than the CI's half width; "
        "chance: a uniformly random order of each query's candidates, else the corpus)",
        "",
    ]
    out += markdown_table(["model", "task", *[f"{k} ({script_of(k)})" for k in keys]], body) + [""]
    gaps = tables["gaps"]
    if gaps.height:
        keys, body = _wide(
            gaps,
            "language",
            lambda r: (
                f"{r['gap']:+.4f} [{r['ci_low']:+.2f}, {r['ci_high']:+.2f}] p={r['p_perm']:.4f} p_Holm={r['p_holm']:.4f} (n={r['n_concepts']})"
                + (f" tie-aware {r['gap_tie_aware']:+.4f}" if r["gap_tie_aware"] is not None else "")
                if r["p_perm"] is not None
                else f"{r['gap']:+.4f} (n=1)"
            ),
        )
        pivots = sorted(set(gaps["pivot"].to_list()))
        title = (
            f"Cross-lingual gap: {' / '.join(pivots)} (the task's pivot) minus each language, {label} paired over the concepts queried in both "
            "(95% bootstrap CI of the mean difference; p: paired randomisation test, sign flips, two-sided; p_Holm: Holm over the task's "
            "languages; tie-aware: the same difference of the tie-aware values)"
        )
        out += [title, ""]
        out += markdown_table(["model", "task", *keys], body) + [""]
    scripts = tables["scripts"]
    keys, body = _wide(scripts, "script", lambda r: _ci(r["mean"], r["ci_low"], r["ci_high"]))
    out += [f"{label} by script (95% bootstrap CI over the script's queries)", ""] + markdown_table(["model", "task", *keys], body) + [""]
    agg = tables["aggregate"]
    if agg.height:
        out += [
            "Language-balanced aggregate: the mean of the per-language means beside the plain mean over queries "
            f"({ALL}: every multilingual task's queries pooled)",
            "",
        ]
        body = [
            [
                r["model"],
                r["task"],
                str(r["n_languages"]),
                f"{r['plain']:.4f} (rank {r['rank_plain']})",
                f"{r['balanced']:.4f} (rank {r['rank_balanced']})",
            ]
            for r in agg.iter_rows(named=True)
        ]
        out += markdown_table(["model", "task", "languages", "plain mean", "language-balanced"], body) + [""]
        inv = tables["inversions"]
        if inv.height:
            out += [
                "Rank inversions (plain mean vs language-balanced): "
                + "; ".join(
                    f"{r['task']}: {r['above_by_plain']} above {r['below_by_plain']} by the plain mean (+{r['plain_diff']:.4f}), "
                    f"below by the balanced ({r['balanced_diff']:+.4f})"
                    for r in inv.iter_rows(named=True)
                )
                + "",
                "",
            ]
        else:
            out += ["Rank inversions (plain mean vs language-balanced): none", ""]
    var = tables["variance"]
    if var.height:
        body = [
            [r["model"], r["task"], str(r["n_concepts"]), f"{r['n_languages']:.2f}", f"{r['mean_language_variance']:.4f}"] for r in var.iter_rows(named=True)
        ]
        out += [
            f"Language variance: per concept, the variance across its languages of the per-query {label} (on [0, 1] whatever the run's "
            "depth; it replaces the variance of the relevant document's rank, which counted a document not retrieved as k + 1); mean over concepts",
            "",
        ]
        out += markdown_table(["model", "task", "concepts", "languages per concept", "mean language variance"], body) + [""]
    return "\n".join(out)


def multilingual_csv(tables: Mapping[str, pl.DataFrame]) -> str:
    """One long CSV: table, model, task, group (language / script / language pair), measure, value."""
    rows: list[tuple[str, str, str, str, str, float | None]] = []
    for name, group_col, measures in (
        ("languages", "language", ("n_queries", "mean", "ci_low", "ci_high", "tie_aware", "tie_flag", "chance")),
        ("scripts", "script", ("n_queries", "mean", "ci_low", "ci_high")),
        ("gaps", "language", ("n_concepts", "pivot_mean", "other", "gap", "ci_low", "ci_high", "p_perm", "p_holm", "gap_tie_aware")),
        ("aggregate", None, ("n_languages", "plain", "balanced", "rank_plain", "rank_balanced")),
        ("variance", None, ("n_concepts", "n_languages", "mean_language_variance")),
    ):
        for r in tables[name].iter_rows(named=True):
            for m in measures:
                rows.append(
                    (
                        name,
                        r["model"],
                        r["task"],
                        r[group_col] if group_col else "",
                        m,
                        None if r[m] is None else float(r[m]),
                    )
                )
    for r in tables["inversions"].iter_rows(named=True):
        rows.append(("inversions", f"{r['above_by_plain']}>{r['below_by_plain']}", r["task"], "", "plain_diff", r["plain_diff"]))
    schema = {
        "table": pl.Utf8,
        "model": pl.Utf8,
        "task": pl.Utf8,
        "group": pl.Utf8,
        "measure": pl.Utf8,
        "value": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row").write_csv()


def multilingual_mlflow_metrics(tables: Mapping[str, pl.DataFrame]) -> dict[str, float]:
    """MLflow keys: ``multilingual/<task>/<model>/language.ja.mean`` (``.tie_aware``, ``.chance``), ``.../gap.ja``,
    ``.../gap.ja.p_perm``, ``.../gap.ja.p_holm``, ``.../gap.ja.tie_aware``, ``.../script.CJK.mean``, ``.../balanced``, ``.../plain``,
    ``.../mean_language_variance`` (CIs as ``.ci_low``/``.ci_high``)."""

    def key(task: str, model: str, name: str) -> str:
        return mlflow_name(f"multilingual/{task}/{model}/{name}")

    out: dict[str, float] = {}
    for r in tables["languages"].iter_rows(named=True):
        for m in ("mean", "ci_low", "ci_high", "tie_aware", "chance"):
            if r[m] is not None:
                out[key(r["task"], r["model"], f"language.{r['language']}.{m}")] = float(r[m])
    for r in tables["scripts"].iter_rows(named=True):
        for m in ("mean", "ci_low", "ci_high"):
            out[key(r["task"], r["model"], f"script.{r['script']}.{m}")] = float(r[m])
    for r in tables["gaps"].iter_rows(named=True):
        out[key(r["task"], r["model"], f"gap.{r['language']}")] = float(r["gap"])
        for m, name in (("ci_low", "ci_low"), ("ci_high", "ci_high"), ("p_perm", "p_perm"), ("p_holm", "p_holm"), ("gap_tie_aware", "tie_aware")):
            if r[m] is not None:
                out[key(r["task"], r["model"], f"gap.{r['language']}.{name}")] = float(r[m])
    for r in tables["aggregate"].iter_rows(named=True):
        for m in ("plain", "balanced", "rank_plain", "rank_balanced"):
            out[key(r["task"], r["model"], m)] = float(r[m])
    for r in tables["variance"].iter_rows(named=True):
        out[key(r["task"], r["model"], "mean_language_variance")] = float(r["mean_language_variance"])
    return out


def multilingual_json(tables: Mapping[str, pl.DataFrame]) -> dict[str, Any]:
    """The tables as lists of rows (leaderboard.json's ``multilingual``)."""
    return {name: df.to_dicts() for name, df in tables.items()}
