"""The qrels layers of a task, and a stored run scored on the filled one.

- **human**: the task's own qrels, never changed;
- **LLM**: the parsed grades of a judgement artifact, on the task's scale (``qrels.llm.trec``);
- **filled**: human + LLM: every human judgment as it is, plus the LLM's grade of each pair the
  humans did not judge (fill pairs). Calibration pairs keep their human grade.

A run is scored on the filled layer with the very evaluator and measures of the metrics stage
(:func:`medbench_core.evaluation.metrics.evaluate_frame`, holes counted against the filled
judgments), over the same queries as the human layer (the pool is drawn from judged queries
only). The result is stored beside the cell's metrics, keyed by the cell's metrics key and the
judgement artifact's key (``Layout.filled_dir``): ``metrics.json`` (means, their 95% bootstrap
CIs, the keys) and ``per_query.parquet``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError

FILES = ("metrics.json", "per_query.parquet")


def filled_qrels(human: pl.DataFrame, judgements: pl.DataFrame) -> pl.DataFrame:
    """Human qrels plus the LLM grades of the pairs they leave unjudged (query_id, doc_id, relevance)."""
    h = human.select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.col("relevance").cast(pl.Int64))
    llm = judgements.filter((pl.col("role") == "fill") & pl.col("grade").is_not_null()).select("query_id", "doc_id", pl.col("grade").cast(pl.Int64).alias("relevance"))
    llm = llm.join(h, on=["query_id", "doc_id"], how="anti")
    return pl.concat([h, llm])


def filled_key(metrics_key: str, judgement_key: str, code: str | None = None) -> str:
    """Key of a cell's filled-layer metrics: its human metrics key (run, task, measures) and the judgements'."""
    from medbench_core.provenance import artifact_key, stage_version

    return artifact_key(stage="filled_metrics", metrics=metrics_key, judgements=judgement_key, code=code or stage_version("filled_metrics"))


def score_filled(task, run: pl.DataFrame, judgements: pl.DataFrame, out: str | Path | None = None) -> dict[str, Any]:
    """Score ``run`` on the filled layer of ``task`` (module docstring); with ``out``, write its files there."""
    import json

    from medbench_core.evaluation.holes import unjudged_in_universe
    from medbench_core.evaluation.metrics import DEFAULT_METRICS, evaluate_frame
    from medbench_core.evaluation.stats import bootstrap_cis

    qrels = filled_qrels(task.qrels, judgements)
    ev = evaluate_frame(qrels, run, DEFAULT_METRICS, unjudged=unjudged_in_universe(task, qrels))
    per_query = ev.per_query_frame()
    result: dict[str, Any] = {"mean": ev.mean, "n_queries": len(ev.per_query), "n_llm_judgments": qrels.height - task.qrels.height}
    if per_query.height:
        names = [m for m in ev.mean if m in per_query.columns]
        result["ci"] = {m: list(ci) for m, ci in zip(names, bootstrap_cis([per_query[m].cast(pl.Float64).to_numpy() for m in names]))}
    if out is not None:
        out = Path(out)
        per_query.write_parquet(out / "per_query.parquet", statistics=False)
        (out / "metrics.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    result["per_query"] = per_query
    return result


def load_or_score_filled(folder: str | Path, task, run_file: str | Path, judgements: pl.DataFrame, provenance: dict[str, Any]) -> dict[str, Any]:
    """The cell's filled-layer metrics stored in ``folder`` (verified), else scored now and stored atomically."""
    import json

    from medbench_core.storage import MANIFEST, is_complete, replace_dir_atomic, verify_manifest, write_manifest

    folder = Path(folder)
    if not is_complete(folder):
        run = pl.read_parquet(run_file)

        def build(tmp: Path) -> None:
            score_filled(task, run, judgements, tmp)
            write_manifest(tmp, list(FILES), {"provenance": provenance})

        replace_dir_atomic(folder, build)
    if not (folder / MANIFEST).exists():
        raise DataError(f"{folder}: filled-layer metrics were not written")
    verify_manifest(folder)
    result = json.loads((folder / "metrics.json").read_text())
    result["per_query"] = pl.read_parquet(folder / "per_query.parquet")
    return result
