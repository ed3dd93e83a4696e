"""Multilingual reports as MMed-Bench-IR reads them, for every task whose queries are in two or more languages.

From what the stages wrote (each cell's ``per_query.parquet``) and each task's queries (language,
concept, relevant documents: :func:`query_groups`):

- **per language**: the metric's mean over the language's queries, with its 95% percentile
  bootstrap CI (:func:`medbench_core.evaluation.stats.bootstrap_ci`), its tie-aware mean and, per
  task, its chance value (:mod:`medbench_core.evaluation.ties`: the expectation over tied orders and
  under a uniformly random order);
- **the cross-lingual gap, pivot minus L** (the pivot: English, or the language the task declares,
  ``TaskMeta.pivot_language``): over the concepts that have a query in both the pivot and L (a paired
  difference, concept by concept), the mean difference, its bootstrap CI, the two-sided p of the paired
  randomisation test (:func:`~medbench_core.evaluation.stats.paired_permutation`) and that p corrected
  by Holm over the task's languages (:func:`~medbench_core.evaluation.stats.holm`); beside it the same
  mean difference of the tie-aware values. It is the only gap the leaderboard reports: the unpaired
  "best language minus each" table is gone;
- **language-balanced aggregate**: the mean of the per-language means (each language weighted
  equally) beside the plain mean over queries, per task and over all these tasks' queries pooled
  (``all``), each with the models' ranks by either, and the **rank inversions** between them (a pair
  of models one ordering puts one way and the other the other way);
- **language variance**: for each concept with queries in two or more languages, the population
  variance across languages of the metric's per-query value; the mean over concepts. It replaces the
  variance of the relevant document's rank, whose scale depended on the run's depth (a document not
  retrieved counted as rank k + 1): the metric is on [0, 1] at the same cutoff for every run;
- **per script**: the mean and CI over the queries of each writing system (:data:`SCRIPTS`).

All resampling uses the leaderboard's resamples and seed, so the tables are the same bytes each time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from medbench_core.evaluation.mlflow_names import mlflow_name

# ISO 639-1 -> writing system (the per-script view). CJK: Han, kana and Hangul.
SCRIPTS: dict[str, str] = {
    **{lang: "Latin" for lang in "en fr de es it pt nl vi ca ro pl cs sv da no nb fi tr id ms hu et lt lv eu ga eo".split()},
    **{lang: "CJK" for lang in ("ja", "zh", "ko")},
    "el": "Greek",
    **{lang: "Cyrillic" for lang in ("ru", "uk", "bg", "be", "mk", "sr")},
    **{lang: "Arabic" for lang in ("ar", "fa", "ur")},
    "he": "Hebrew", "yi": "Hebrew", "hi": "Devanagari", "ne": "Devanagari", "th": "Thai", "hy": "Armenian", "ta": "Tamil",
}  # fmt: skip
ENGLISH = "en"
ALL = "all"  # the task name of the aggregate over every multilingual task's queries pooled

LANGUAGE_SCHEMA = {
    "model": pl.Utf8,
    "task": pl.Utf8,
    "language": pl.Utf8,
    "script": pl.Utf8,
    "n_queries": pl.Int64,
    "mean": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "tie_aware": pl.Float64,
    "tie_flag": pl.Boolean,
    "chance": pl.Float64,
}
GAP_SCHEMA = {
    "model": pl.Utf8, "task": pl.Utf8, "pivot": pl.Utf8, "language": pl.Utf8, "n_concepts": pl.Int64, "pivot_mean": pl.Float64,
    "other": pl.Float64, "gap": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64, "p_perm": pl.Float64, "p_holm": pl.Float64,
    "gap_tie_aware": pl.Float64,
}  # fmt: skip
SCRIPT_SCHEMA = {
    "model": pl.Utf8,
    "task": pl.Utf8,
    "script": pl.Utf8,
    "languages": pl.Utf8,
    "n_queries": pl.Int64,
    "mean": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
}
AGGREGATE_SCHEMA = {
    "model": pl.Utf8,
    "task": pl.Utf8,
    "n_languages": pl.Int64,
    "plain": pl.Float64,
    "balanced": pl.Float64,
    "rank_plain": pl.Int64,
    "rank_balanced": pl.Int64,
}
INVERSION_SCHEMA = {
    "task": pl.Utf8,
    "above_by_plain": pl.Utf8,
    "below_by_plain": pl.Utf8,
    "plain_diff": pl.Float64,
    "balanced_diff": pl.Float64,
}
VARIANCE_SCHEMA = {
    "model": pl.Utf8,
    "task": pl.Utf8,
    "n_concepts": pl.Int64,
    "n_languages": pl.Float64,
    "mean_language_variance": pl.Float64,
}


def script_of(language: str | None) -> str:
    """The writing system of a language code (``pt_BR`` -> Latin); ``other`` when unknown."""
    return SCRIPTS.get((language or "").replace("-", "_").split("_")[0].lower(), "other")


def query_groups(queries: pl.DataFrame, qrels: pl.DataFrame) -> pl.DataFrame:
    """(query_id, language, concept, relevant) of a task: its first concept id (else the query id) and its relevant documents."""
    rel = qrels.filter(pl.col("relevance") > 0).group_by("query_id").agg(pl.col("doc_id").alias("relevant"))
    out = queries.select(
        "query_id", "language",
        pl.when(pl.col("concept_ids").list.len() > 0).then(pl.col("concept_ids").list.first()).otherwise(pl.col("query_id")).alias("concept"),
    )  # fmt: skip
    return out.join(rel, on="query_id", how="left", maintain_order="left")


def is_multilingual(groups: pl.DataFrame) -> bool:
    """Whether a task's queries are in two or more languages (the tasks these reports cover)."""
    return groups["language"].drop_nulls().n_unique() >= 2


def multilingual_tables(
    cells: Iterable[Any],
    groups: Mapping[str, pl.DataFrame],
    models: list[str],
    *,
    metric: str = "ndcg_at_10",
    n_resamples: int = 10_000,
    seed: int = 0,
    pivots: Mapping[str, str] | None = None,
) -> dict[str, pl.DataFrame]:
    """Every table of the module docstring, for the cells of tasks whose ``groups`` name two or more languages.

    ``cells``: :class:`~medbench_core.evaluation.reports.Cell` objects (their ``per_query``);
    ``groups``: task -> :func:`query_groups`; ``models``: the board's order; ``pivots``: task -> the
    language its gap is taken from (default English).
    """
    from medbench_core.evaluation.stats import bootstrap_ci, holm, paired_permutation
    from medbench_core.evaluation.ties import CHANCE, TIE_AWARE

    tasks = [t for t, g in groups.items() if is_multilingual(g)]
    rows: dict[str, list[dict[str, Any]]] = {"languages": [], "gaps": [], "scripts": [], "variance": []}
    pooled: dict[str, list[pl.DataFrame]] = {}
    per_task: dict[str, dict[str, pl.DataFrame]] = {}
    tie_col, chance_col = f"{TIE_AWARE}.{metric}", f"{CHANCE}.{metric}"
    for c in cells:
        if c.task not in tasks or not c.applicable or c.per_query is None or metric not in c.per_query.columns or c.model not in models:
            continue
        extra = [pl.col(x).cast(pl.Float64) for x in (tie_col, chance_col) if x in c.per_query.columns]
        df = c.per_query.select("query_id", pl.col(metric).cast(pl.Float64), *extra).join(groups[c.task], on="query_id", how="inner")
        df = df.with_columns(pl.col("language").map_elements(script_of, return_dtype=pl.Utf8).alias("script"))
        per_task.setdefault(c.task, {})[c.model] = df.select("query_id", metric, "language", "concept", "script")
        pooled.setdefault(c.model, []).append(df.select("query_id", metric, "language", "concept", "script"))
        for lang, part in sorted(df.group_by("language"), key=lambda kv: str(kv[0][0])):
            v = part[metric].to_numpy()
            lo, hi = bootstrap_ci(v, n_resamples=n_resamples, seed=seed)
            tie = float(part[tie_col].mean()) if tie_col in part.columns else None
            rows["languages"].append(
                {
                    "model": c.model,
                    "task": c.task,
                    "language": lang[0],
                    "script": script_of(lang[0]),
                    "n_queries": len(v),
                    "mean": float(v.mean()),
                    "ci_low": lo,
                    "ci_high": hi,
                    "tie_aware": tie,
                    "tie_flag": tie is not None and abs(tie - float(v.mean())) > (hi - lo) / 2,
                    "chance": float(part[chance_col].mean()) if chance_col in part.columns else None,
                }
            )
        for script, part in sorted(df.group_by("script"), key=lambda kv: str(kv[0][0])):
            v = part[metric].to_numpy()
            lo, hi = bootstrap_ci(v, n_resamples=n_resamples, seed=seed)
            langs = ", ".join(sorted(part["language"].drop_nulls().unique().to_list()))
            rows["scripts"].append(
                {
                    "model": c.model,
                    "task": c.task,
                    "script": script[0],
                    "languages": langs,
                    "n_queries": len(v),
                    "mean": float(v.mean()),
                    "ci_low": lo,
                    "ci_high": hi,
                }
            )
        pivot = (pivots or {}).get(c.task) or ENGLISH
        both = [metric, *([tie_col] if tie_col in df.columns else [])]
        base = df.filter(pl.col("language") == pivot).select("concept", *[pl.col(x).alias(f"_pivot.{x}") for x in both])
        found = []
        if base.height:
            for lang in sorted(set(df["language"].drop_nulls()) - {pivot}):
                paired = df.filter(pl.col("language") == lang).select("concept", *both).join(base, on="concept", how="inner").sort("concept")
                if paired.height == 0:
                    continue
                a, b = paired[f"_pivot.{metric}"].to_numpy(), paired[metric].to_numpy()
                lo, hi = bootstrap_ci(a - b, n_resamples=n_resamples, seed=seed)
                p = paired_permutation(a, b, n_resamples=n_resamples, seed=seed) if paired.height > 1 else None
                tie_gap = float((paired[f"_pivot.{tie_col}"] - paired[tie_col]).mean()) if tie_col in both else None
                found.append(
                    {
                        "model": c.model, "task": c.task, "pivot": pivot, "language": lang, "n_concepts": paired.height,
                        "pivot_mean": float(a.mean()), "other": float(b.mean()), "gap": float((a - b).mean()), "ci_low": lo, "ci_high": hi,
                        "p_perm": p, "p_holm": None, "gap_tie_aware": tie_gap,
                    }
                )  # fmt: skip
        tested = [r for r in found if r["p_perm"] is not None]
        for r, adjusted in zip(tested, holm([r["p_perm"] for r in tested]) if tested else []):
            r["p_holm"] = adjusted  # Holm over the task's languages, for this model
        rows["gaps"] += found
        # The metric's variance across the languages of each concept asked in two or more of them.
        spread = (
            df.group_by("concept")
            .agg(pl.col(metric).var(ddof=0).alias("var"), pl.len().alias("n"))
            .filter(pl.col("n") >= 2)
            .sort("concept")  # group_by's order varies; the means below would in their last bit
        )
        if spread.height:
            rows["variance"].append({"model": c.model, "task": c.task, "n_concepts": spread.height, "n_languages": float(spread["n"].mean()),
                                     "mean_language_variance": float(spread["var"].mean())})  # fmt: skip
    aggregate, inversions = _aggregate(per_task, pooled, models, metric)
    order = {m: i for i, m in enumerate(models)}

    def frame(name: str, schema: dict) -> pl.DataFrame:
        data = sorted(rows[name], key=lambda r: (tasks.index(r["task"]), order[r["model"]]))
        return pl.DataFrame(data, schema=schema) if data else pl.DataFrame(schema=schema)

    return {
        "languages": frame("languages", LANGUAGE_SCHEMA), "gaps": frame("gaps", GAP_SCHEMA), "scripts": frame("scripts", SCRIPT_SCHEMA),
        "aggregate": aggregate, "inversions": inversions, "variance": frame("variance", VARIANCE_SCHEMA),
    }  # fmt: skip


def _competition_ranks(values: dict[str, float]) -> dict[str, int]:
    """1 = best; equal values share the better rank."""
    return {m: 1 + sum(1 for o in values.values() if o > v) for m, v in values.items()}


def _aggregate(
    per_task: dict[str, dict[str, pl.DataFrame]], pooled: dict[str, list[pl.DataFrame]], models: list[str], metric: str
) -> tuple[pl.DataFrame, pl.DataFrame]:
    groups = dict(per_task)
    everyone = [m for m in models if m in pooled and all(m in per_task[t] for t in per_task)]
    if len(per_task) > 1 and everyone:  # pooled over the tasks every model of the group has a value on
        groups[ALL] = {m: pl.concat(pooled[m]) for m in everyone}
    rows, inversions = [], []
    for task, by_model in groups.items():
        plain = {m: float(df[metric].mean()) for m, df in by_model.items()}
        balanced = {
            # sorted: group_by's order varies between runs, and so would the last bit of the mean
            m: float(df.group_by("language").agg(pl.col(metric).mean()).sort("language")[metric].mean())
            for m, df in by_model.items()
        }
        rp, rb = _competition_ranks(plain), _competition_ranks(balanced)
        for m in [m for m in models if m in by_model]:
            rows.append(
                {
                    "model": m,
                    "task": task,
                    "n_languages": by_model[m]["language"].n_unique(),
                    "plain": plain[m],
                    "balanced": balanced[m],
                    "rank_plain": rp[m],
                    "rank_balanced": rb[m],
                }
            )
        ordered = [m for m in models if m in by_model]
        for i, a in enumerate(ordered):
            for b in ordered[i + 1 :]:
                dp, db = plain[a] - plain[b], balanced[a] - balanced[b]
                if dp * db < 0:
                    hi, lo = (a, b) if dp > 0 else (b, a)
                    inversions.append(
                        {
                            "task": task,
                            "above_by_plain": hi,
                            "below_by_plain": lo,
                            "plain_diff": abs(dp),
                            "balanced_diff": -abs(db),
                        }
                    )
    agg = pl.DataFrame(rows, schema=AGGREGATE_SCHEMA) if rows else pl.DataFrame(schema=AGGREGATE_SCHEMA)
    inv = pl.DataFrame(inversions, schema=INVERSION_SCHEMA) if inversions else pl.DataFrame(schema=INVERSION_SCHEMA)
    return agg, inv


# --- Markdown, CSV, MLflow -----------------------------------------------------------------------


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


def _table(head: list[str], body: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *["| " + " | ".join(r) + " |" for r in body]]


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
    out += _table(["model", "task", *[f"{k} ({script_of(k)})" for k in keys]], body) + [""]
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
        out += _table(["model", "task", *keys], body) + [""]
    scripts = tables["scripts"]
    keys, body = _wide(scripts, "script", lambda r: _ci(r["mean"], r["ci_low"], r["ci_high"]))
    out += [f"{label} by script (95% bootstrap CI over the script's queries)", ""] + _table(["model", "task", *keys], body) + [""]
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
        out += _table(["model", "task", "languages", "plain mean", "language-balanced"], body) + [""]
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
        out += _table(["model", "task", "concepts", "languages per concept", "mean language variance"], body) + [""]
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
