"""The leaderboard in MLflow: one run holding its reports and tests (:func:`log_leaderboard`, reused while its inputs are
unchanged), and what each cell's own run (one per model x task) gets beside its metrics: published values, contamination
tags, its score on the filled layer."""

from pathlib import Path

from medbench_core.evaluation.board import Significance
from medbench_core.evaluation.cell import Cell
from medbench_core.evaluation.contamination.cells import mlflow_metrics as contamination_mlflow_metrics
from medbench_core.evaluation.floors import floors_mlflow_metrics
from medbench_core.evaluation.mlflow_names import mlflow_name
from medbench_core.evaluation.multilingual import multilingual_mlflow_metrics
from medbench_core.evaluation.run_record import DAGSTER_RUN_TAG
from medbench_core.evaluation.trust import TrustSettings
from medbench_core.provenance import artifact_key, stage_version
from runtime.resources import MLflowResource

REPORTS_VERSION = stage_version("reports")  # the declared output version of the reports (logged and keyed as code_version)
KIND_TAG = "medbench.kind"
STALE_TAG = "medbench.stale"


def leaderboard_experiment(benchmark: str) -> str:
    """The MLflow experiment of the leaderboard runs: beside the benchmark's, whose runs are one per model x task (a release lists them)."""
    return f"{benchmark}-leaderboard"


def log_leaderboard(
    context,
    mlflow: MLflowResource,
    experiment: str,
    sig: Significance,
    provenance: dict,
    copies: dict,
    written: dict,
    out: Path,
    trust: TrustSettings | None = None,
) -> tuple[str, bool]:
    """One MLflow run holding the reports and the significance table; the same inputs reuse it."""
    from medbench_core.evaluation.trust import trust_mlflow_metrics

    stats = written["stats"]
    published = written["published"]
    marked = {k: v["contamination"] for k, v in provenance.items() if "contamination" in v}
    trusted = written.get("trust")
    filled = {f"{r['model']}/{r['task']}": r["judgements"] for r in trusted.iter_rows(named=True) if r["judgements"]} if trusted is not None else {}
    run_key = artifact_key(
        **({"trust": (trust or TrustSettings()).describe(), "filled": filled} if trusted is not None and trusted.height else {}),
        kind="leaderboard", code=REPORTS_VERSION, significance=sig.describe(), cells={k: v["metrics_key"] for k, v in provenance.items()},
        table=written["board"].columns + written["board"]["model"].to_list(), copies={f"{m}/{t}": n for (m, t), n in copies.items()},
        **({"published": published.select("model", "task", "published", "status", "file").to_dicts()} if published.height else {}),
        **({"stale": {f"{m}/{t}": why for (m, t), why in written["stale"].items()}} if written["stale"] else {}),
        **({"contamination": {k: [v["mark"], v.get("share"), v.get("decontaminated")] for k, v in marked.items()}} if marked else {}),
    )  # fmt: skip
    params = {**{f"significance.{k}": v for k, v in sig.describe().items()}, "cells": len(provenance), "code_version": REPORTS_VERSION}
    metrics: dict[str, float] = {}
    for r in stats.iter_rows(named=True):
        prefix = mlflow_name(f"{r['task']}/{r['model']}")
        for col in ("mean", "ci_low", "ci_high", "diff", "p_ttest", "p_perm", "p_holm"):
            if r[col] is not None:
                metrics[f"{prefix}/{col}"] = float(r[col])
        if r["p_holm"] is not None:
            metrics[f"{prefix}/significant"] = 1.0 if r["significant"] else 0.0
        if (r["model"], r["task"]) in written["stale"]:
            metrics[f"{prefix}/stale"] = 1.0
    groups: dict[str, list[str]] = {}
    for r in written["ranks"].iter_rows(named=True):  # per task and for the average (task "average")
        prefix = mlflow_name(f"{r['task']}/{r['model']}")
        for col in ("rank", "rank_low", "rank_high"):
            metrics[f"{prefix}/{col}"] = float(r[col])
        groups.setdefault(r["task"], []).append(f"{r['model']}: {r['group']}")
    params |= {f"groups.{task}": "; ".join(g) for task, g in groups.items()}  # the letters of the groups no test separates
    for r in published.iter_rows(named=True):
        prefix = mlflow_name(f"{r['task']}/{r['model']}")
        metrics[f"{prefix}/published"] = float(r["published"])
        if r["diff"] is not None:
            metrics[f"{prefix}/published_diff"] = float(r["diff"])
            metrics[f"{prefix}/published_in_ci"] = 1.0 if r["in_ci"] else 0.0
    if written.get("multilingual"):  # per language and script, paired gaps, balanced aggregate, language variance
        metrics |= multilingual_mlflow_metrics(written["multilingual"])
    if written.get("floors") is not None and written["floors"].height:  # chance per task; tie-aware, its flag, chance-corrected per cell
        metrics |= floors_mlflow_metrics(written["floors"])
    if marked:  # near-duplicate share, decontaminated score and its CI, zero-shot (1/0) per cell
        metrics |= contamination_mlflow_metrics({tuple(k.split("/", 1)): v for k, v in marked.items()})
    if published.height:
        from medbench_core.evaluation.published import summary

        params["published"] = summary(published)
    if trusted is not None and trusted.height:
        metrics |= trust_mlflow_metrics(trusted)
        params["trust.judged_threshold"] = (trust or TrustSettings()).judged_threshold
        params["trust.keep_circular"] = (trust or TrustSettings()).keep_circular
        params["trust.low_judged_cells"] = int(trusted["low_judged"].fill_null(False).sum())
    files = [out / f for f in written["files"] if not f.startswith(("diff/", "trust/"))]
    for folder in ("diff", "trust"):
        if (out / folder).is_dir() and any((out / folder).iterdir()):
            files.append(out / folder)  # logged as the folder diff/ (diff/<task>/<model>.png) and trust/ (trust/<model>.png)
    tags = {KIND_TAG: "leaderboard", DAGSTER_RUN_TAG: context.run_id}
    if written["stale"]:  # the values marked stale in the saved reports, and why
        tags[STALE_TAG] = "; ".join(f"{m}/{t}: {why}" for (m, t), why in sorted(written["stale"].items()))[:5000]
    return mlflow.log_run(experiment, run_key, "leaderboard", params, metrics, tags, files)


def annotate_partition_runs(mlflow: MLflowResource, experiment: str, provenance: dict, published) -> None:
    """Each compared cell's own MLflow run (one per model x task) gets the published value beside its metrics:
    ``published.<metric>``, and when compared ``published_diff.<metric>`` and ``published_in_ci.<metric>`` (1/0),
    with tags ``medbench.published_status`` and ``medbench.published_source``."""
    for r in published.iter_rows(named=True):
        prov = provenance.get(f"{r['model']}/{r['task']}")
        if not prov:
            continue
        m = r["metric"]
        metrics = {f"published.{m}": float(r["published"])}
        if r["diff"] is not None:
            metrics |= {f"published_diff.{m}": float(r["diff"]), f"published_in_ci.{m}": 1.0 if r["in_ci"] else 0.0}
        status = r["status"] + (f": {r['note']}" if r["note"] else "")
        mlflow.annotate_run(experiment, prov["metrics_key"], metrics, {"medbench.published_status": status, "medbench.published_source": r["file"]})


def annotate_contamination_runs(mlflow: MLflowResource, experiment: str, provenance: dict, metric: str) -> None:
    """Each marked cell's own MLflow run gets the tags ``medbench.contamination`` (trained-on-task, zero-shot or unknown),
    ``medbench.contamination_evidence``, ``medbench.near_dup_share`` and ``medbench.decontaminated`` (``<metric> <value> [lo, hi] n=N``).
    Tags, not metrics: a cell's run holds what scoring logged, which a release records and ``medbench reproduce`` recomputes
    (an audit figure there would be "not recomputed"); the figures as metrics are on the leaderboard run (``<task>/<model>/...``)."""
    for prov in provenance.values():
        c = prov.get("contamination")
        if not c or "metrics_key" not in prov:
            continue
        tags = {"medbench.contamination": c["mark"], "medbench.contamination_evidence": c["evidence"][:5000]}
        if c.get("share") is not None:
            tags["medbench.near_dup_share"] = str(c["share"])
        if c.get("decontaminated") is not None:
            lo, hi = c["decontaminated_ci"]
            tags["medbench.decontaminated"] = f"{metric} {c['decontaminated']} [{lo}, {hi}] n={c['n_clean']}"
        mlflow.annotate_run(experiment, prov["metrics_key"], {}, tags)


def annotate_filled_runs(mlflow: MLflowResource, experiment: str, cells: list[Cell], metric: str) -> None:
    """Each cell's own MLflow run gets its score on the filled (human + LLM) layer: ``filled.<metric>``,
    ``filled.judged_at_10``, the bounds on the metric when it has some (``filled.ndcg_lower_at_10`` /
    ``filled.ndcg_upper_at_10``), and the tags ``medbench.filled_judgements`` (entry@key), ``medbench.circular``
    (the builders of the judge's family, or 'no') and ``medbench.families`` (each builder's families and where read)."""
    from medbench_core.evaluation.trust import bound_metrics

    for c in cells:
        if not c.filled or "metrics_key" not in c.provenance:
            continue
        mean = c.filled["mean"]
        metrics = {f"filled.{m}": float(mean[m]) for m in (metric, "judged_at_10", *(bound_metrics(metric) or ())) if m in mean}
        tags = {"medbench.filled_judgements": c.filled["judgements"], "medbench.circular": c.filled["circular"] or "no",
                "medbench.families": str(c.filled.get("families") or "")[:5000]}  # fmt: skip
        mlflow.annotate_run(experiment, c.provenance["metrics_key"], metrics, tags)
