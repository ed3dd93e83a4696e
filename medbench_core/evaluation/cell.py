"""One model x task of the leaderboard as the stages wrote it (``metrics.json``, ``per_query.parquet``,
the run's ``info.json``): :class:`Cell`, the input of every report (:mod:`medbench_core.evaluation.reports`).
Nothing here recomputes a run."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError

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
