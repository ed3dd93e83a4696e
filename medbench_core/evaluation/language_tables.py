"""The multilingual tables as MMed-Bench-IR reads them, for every task whose queries are in two or more languages.

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

All resampling uses the leaderboard's resamples and seed, so the tables are the same bytes each time. Their Markdown,
CSV, MLflow metrics and JSON are :mod:`medbench_core.evaluation.multilingual`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

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
