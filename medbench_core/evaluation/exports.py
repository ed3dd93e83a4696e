"""Exports of stored results: MTEB's results format (one JSON per model x task) and TREC runs."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.evaluation.plots import file_name
from medbench_core.evaluation.reports import LANGUAGE_SCRIPTS, Cell


def mteb_result(cell: Cell, code_version: str = "") -> dict[str, Any]:
    """The cell in the format of MTEB's results repository (``TaskResult``), one ``default`` subset.

    ``dataset_revision`` is the source dataset's revision when the task records one (a hub commit
    sha, or ``sha256:`` of a local folder's files), else the curated task's content hash; ``mteb_version`` is null because MTEB
    did not compute these numbers (``medbench`` records what did); ``kg_co2_emissions`` is null
    (not measured). Scores carry every metric of metrics.json under MTEB's names and
    ``main_score`` = the task's main metric.
    """
    if cell.metrics is None:
        raise DataError(f"{cell.model} x {cell.task}: no metrics to export; evaluate it first")
    mean = {k: float(v) for k, v in sorted(cell.metrics.get("mean", {}).items())}
    if cell.main_metric not in mean:
        raise DataError(f"{cell.model} x {cell.task}: metrics.json has no {cell.main_metric} (the task's main metric)")
    languages = [LANGUAGE_SCRIPTS.get(lang, lang) for lang in (cell.languages or ())]
    scores = {**mean, "main_score": mean[cell.main_metric], "hf_subset": "default", "languages": languages}
    return {
        "dataset_revision": cell.task_revision,
        "task_name": cell.task,
        "mteb_version": None,
        "scores": {cell.split: [scores]},
        "evaluation_time": cell.seconds,
        "kg_co2_emissions": None,
        "medbench": {
            "model": cell.model,
            "model_revision": cell.model_revision,
            "code_version": code_version,
            "n_queries": cell.metrics.get("n_queries"),
            "research_only": cell.research_only,
            "provenance": cell.provenance,
            **({"stale": cell.stale} if cell.stale else {}),  # the value is from before its inputs changed
        },
    }


def export(cells: Iterable[Cell], out_dir: str | Path, *, code_version: str = "") -> dict[str, Any]:
    """Write MTEB results JSON and TREC runs of every evaluated cell under ``out_dir``.

    Layout (MTEB's results repository for the JSON): ``mteb/<model>/<revision>/<task>.json`` and
    ``mteb/<model>/<revision>/model_meta.json``; ``trec/<model>/<task>.trec``; and ``index.json``
    listing what was written. Cells without metrics (not evaluated, not applicable) are skipped
    and listed. Returns the index.
    """
    from medbench_core.storage import write_json_atomic, write_text_atomic

    out = Path(out_dir)
    index: dict[str, Any] = {"mteb": [], "trec": [], "skipped": []}
    metas: dict[tuple[str, str], dict[str, Any]] = {}
    for c in cells:
        if c.metrics is None or not c.applicable:
            index["skipped"].append({"model": c.model, "task": c.task, "reason": "not applicable" if not c.applicable else "not evaluated"})
            continue
        rev = file_name(c.model_revision) if c.model_revision else "no_revision_available"
        folder = out / "mteb" / file_name(c.model) / rev
        path = folder / f"{file_name(c.task)}.json"
        write_json_atomic(path, mteb_result(c, code_version))
        index["mteb"].append(str(path.relative_to(out)))
        metas[(c.model, rev)] = {"name": c.model, "revision": c.model_revision or None, "framework": ["medbench"], "loader": None}
        if c.run_dir is not None:
            trec = out / "trec" / file_name(c.model) / f"{file_name(c.task)}.trec"
            src = Path(c.run_dir) / "run.trec"
            if src.exists():
                trec.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, trec)
            elif (Path(c.run_dir) / "run.parquet").exists():
                from medbench_core.retrieval.ranking import write_trec

                write_text_atomic(trec, write_trec(pl.read_parquet(Path(c.run_dir) / "run.parquet"), f"medbench-{c.model}"))
            else:
                raise DataError(f"{c.run_dir}: neither run.trec nor run.parquet for {c.model} x {c.task}")
            index["trec"].append(str(trec.relative_to(out)))
    for (model, rev), meta in sorted(metas.items()):
        write_json_atomic(out / "mteb" / file_name(model) / rev / "model_meta.json", meta)
    write_json_atomic(out / "index.json", index)
    return index


# --- the leaderboard bundle ---------------------------------------------------------------
