"""Each cell's contamination mark, its evidence and its decontaminated score, and how the leaderboard shows them.

Three marks (docs/contamination.md):

- ``trained-on-task``: the model (or an upstream) declares the task or its source dataset by a
  name of the task's identity, or the audit found a test query of the task near-duplicated in
  the model's training data (a declared manifest, or a task of the benchmark it declares);
- ``unknown``: neither, and the model (or an upstream) declares nothing: never zero-shot by default;
- ``zero-shot``: every model of its lineage declares its training data, no declared name is the
  task's and no test query is near-duplicated in it.

The *share* is the test queries (of those scored) with a near-duplicate (text, or the query's
image) in the model's training data; the *decontaminated score* is the metric's mean over the
other queries, with its 95% percentile bootstrap CI (the leaderboard's resamples and seed) and n.
Near-duplicated documents are counted as evidence; they change no score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from medbench_core.evaluation.contamination.declared import Declared
from medbench_core.evaluation.markdown_tables import markdown_table
from medbench_core.evaluation.mlflow_names import mlflow_name

TRAINED, ZERO_SHOT, UNKNOWN = "trained-on-task", "zero-shot", "unknown"
MARKS = (TRAINED, ZERO_SHOT, UNKNOWN)


def training_sources(declared: Declared, identities: Mapping[str, Any], task: str) -> dict[str, str]:
    """Audit sources that are this model's training data: its manifests, and every *other* task whose identity it declares -> why."""
    out = dict(declared.manifests)
    for name, ident in identities.items():
        if name != task and ident.matches(declared.names):
            out[f"task:{name}"] = "declares " + ", ".join(n for _, n in ident.matches(declared.names))
    return out


def cell_contamination(
    declared: Declared,
    identity: Any,
    identities: Mapping[str, Any],
    pairs: pl.DataFrame | None,
    per_query: pl.DataFrame | None,
    metric: str = "ndcg_at_10",
    *,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> dict[str, Any]:
    """One cell's mark, evidence, share and decontaminated score (module docstring). ``pairs``: the task's audit (None: not audited)."""
    from medbench_core.evaluation.stats import bootstrap_ci

    sources = training_sources(declared, identities, identity.task)
    by_name = identity.matches(declared.names)
    hits = pairs.filter(pl.col("source").is_in(list(sources))) if pairs is not None and pairs.height else None
    bad_queries = set(hits.filter(pl.col("side") == "query")["id"].to_list()) if hits is not None else set()
    bad_docs = set(hits.filter(pl.col("side") == "doc")["id"].to_list()) if hits is not None else set()
    out: dict[str, Any] = {"audited": pairs is not None, "sources": sorted(sources)}
    scored = per_query.filter(pl.col(metric).is_not_null()) if per_query is not None and metric in per_query.columns else None
    if scored is not None and scored.height:
        qids = scored["query_id"].cast(pl.Utf8)
        dirty = qids.is_in(list(bad_queries))
        clean = scored.filter(~dirty)[metric].cast(pl.Float64).to_numpy()
        n = scored.height
        out |= {"n_queries": n, "contaminated_queries": int(dirty.sum()), "share": round(float(dirty.sum()) / n, 4), "n_clean": len(clean)}
        if len(clean):
            lo, hi = bootstrap_ci(clean, n_resamples=n_resamples, seed=seed) if len(clean) > 1 else (float(clean[0]), float(clean[0]))
            out |= {"decontaminated": round(float(clean.mean()), 4), "decontaminated_ci": [round(lo, 4), round(hi, 4)]}
        else:
            out |= {"decontaminated": None, "decontaminated_ci": None}
    out["contaminated_docs"] = len(bad_docs)
    evidence: list[str] = []
    if by_name:
        mark = TRAINED
        evidence.append("declares " + ", ".join(f"{n} ({f}; {declared.names.get(_declared_as(n, declared.names), '')})" for f, n in by_name))
    if bad_queries:
        mark = TRAINED
        per_source = hits.filter(pl.col("side") == "query").group_by("source").agg(pl.col("id").n_unique()).sort("source").iter_rows()
        evidence.append(
            f"{out.get('contaminated_queries', len(bad_queries))} of {out.get('n_queries', '?')} test queries near-duplicated in its training data: "
            + "; ".join(f"{s} ({n}, {sources[s]})" for s, n in per_source)
        )
    if not evidence:
        if not declared.known:
            mark = UNKNOWN
            evidence.append(f"{', '.join(declared.silent)} declare{'s' if len(declared.silent) == 1 else ''} no training data")
        else:
            mark = ZERO_SHOT
            listed = sorted(declared.names)
            names = ", ".join(listed[:6]) + (f" and {len(listed) - 6} more" if len(listed) > 6 else "") if listed else "nothing"
            evidence.append(f"declares {names}; none is this task ({', '.join(n for _, n in identity.names)})")
            if pairs is None:
                evidence.append("not audited for near-duplicates")
            elif declared.manifests or len(sources):
                evidence.append(f"no test query near-duplicated in {len(sources)} training source(s)")
    if bad_docs:
        evidence.append(f"{len(bad_docs)} document(s) near-duplicated in its training data")
    out |= {"mark": mark, "evidence": "; ".join(evidence), "declared": sorted(declared.names)[:50], "n_declared": len(declared.names)}
    return out


def _declared_as(name: str, names: Mapping[str, str]) -> str:
    from medbench_core.taskdata.task_identity import fold

    return next((k for k in names if fold(k) == fold(name)), name)


def zero_shot_shares(marks: Mapping[tuple[str, str], Mapping[str, Any]], models: Sequence[str]) -> dict[str, int | None]:
    """Per model, as MTEB shows it beside the average: the percentage of its marked cells that are zero-shot (an
    integer, MTEB rounds down); None when every cell of it is unknown (it declares nothing)."""
    out: dict[str, int | None] = {}
    for m in models:
        got = [v["mark"] for (mm, _), v in marks.items() if mm == m]
        if not got or all(x == UNKNOWN for x in got):
            out[m] = None
        else:
            out[m] = int(100 * sum(x == ZERO_SHOT for x in got) / len(got))
    return out


def cell_text(c: Mapping[str, Any]) -> str:
    """``zero-shot`` / ``trained-on-task: 12% near-dup, clean 0.6544 [0.62, 0.69] n=712``: a cell of the contamination table."""
    text = c["mark"]
    if c.get("contaminated_queries"):
        ci = c.get("decontaminated_ci")
        clean = "-" if c.get("decontaminated") is None else f"{c['decontaminated']:.4f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        text += f": {100 * c['share']:.1f}% near-dup, clean {clean} n={c['n_clean']}"
    return text


def contamination_markdown(marks: Mapping[tuple[str, str], Mapping[str, Any]], models: Sequence[str], tasks: Sequence[str], averages: Mapping[str, Any]) -> str:
    """The leaderboard's section: per model its average and zero-shot share, per cell its mark (and the decontaminated score), the evidence below."""
    shares = zero_shot_shares(marks, models)
    head = ["model", "average", "zero-shot", *tasks]
    rows = []
    for m in models:
        avg = averages.get(m)
        row = [m, "-" if avg is None else f"{avg:.4f}", "unknown" if shares[m] is None else f"{shares[m]}%"]
        rows.append(row + [cell_text(marks[(m, t)]) if (m, t) in marks else "-" for t in tasks])
    lines = ["Contamination: could the model have seen the test? (docs/contamination.md)", "", *markdown_table(head, rows)]
    lines += [
        "",
        "zero-shot: share of the model's cells marked zero-shot (MTEB's figure; unknown when it declares nothing). near-dup: test queries "
        "with a near-duplicate in its training data; clean: the metric over the others, 95% bootstrap CI, n. Evidence:",
    ]
    lines += [f"- {m} x {t}: {marks[(m, t)]['evidence']}" for m in models for t in tasks if (m, t) in marks]
    return "\n".join(lines) + "\n"


def csv_columns(board: pl.DataFrame, marks: Mapping[tuple[str, str], Mapping[str, Any]], tasks: Sequence[str]) -> pl.DataFrame:
    """``zero_shot`` (percent) beside the average, and per task ``contamination.<task>``, ``near_dup_share.<task>``, ``decontaminated.<task>``."""
    models = board["model"].to_list()
    shares = zero_shot_shares(marks, models)
    cols = [pl.Series("zero_shot", [shares[m] for m in models], dtype=pl.Int64)]
    for t in tasks:
        cols.append(pl.Series(f"contamination.{t}", [marks.get((m, t), {}).get("mark") for m in models], dtype=pl.Utf8))
        cols.append(pl.Series(f"near_dup_share.{t}", [marks.get((m, t), {}).get("share") for m in models], dtype=pl.Float64))
        cols.append(pl.Series(f"decontaminated.{t}", [marks.get((m, t), {}).get("decontaminated") for m in models], dtype=pl.Float64))
    return board.with_columns(cols)


def mlflow_metrics(marks: Mapping[tuple[str, str], Mapping[str, Any]]) -> dict[str, float]:
    """The leaderboard run's ``<task>/<model>/near_dup_share``, ``.../decontaminated`` (and CI), ``.../zero_shot`` (1/0)."""
    out: dict[str, float] = {}
    for (m, t), c in marks.items():
        prefix = mlflow_name(f"{t}/{m}")
        out[f"{prefix}/zero_shot"] = 1.0 if c["mark"] == ZERO_SHOT else 0.0
        if c.get("share") is not None:
            out[f"{prefix}/near_dup_share"] = float(c["share"])
        if c.get("decontaminated") is not None:
            out[f"{prefix}/decontaminated"] = float(c["decontaminated"])
            out[f"{prefix}/decontaminated_ci_low"], out[f"{prefix}/decontaminated_ci_high"] = map(float, c["decontaminated_ci"])
    return out
