"""The plain values the site's pages are rendered from: a cell, a task, a model, the whole site (:class:`SiteData`), and the
links into Dagster's and MLflow's UIs; :mod:`medbench_core.site.gather` fills them from the saved leaderboard."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

# Keys of a stats row the overview cell itself shows (the rest are listed in its title and on the task page).
CELL_SHOWN = frozenset({"task", "model", "metric", "mean", "ci_low", "ci_high", "significant", "rank", "rank_low", "rank_high", "group"})


@dataclass(frozen=True)
class UiLinks:
    """Where the Dagster and MLflow UIs answer (``medbench ui``), for the links from a cell to its partition and run."""

    dagster: str = "http://127.0.0.1:3000"
    mlflow: str = "http://127.0.0.1:5000"
    metrics_asset: str = "task_metrics"  # the asset whose model x task partition a cell is

    def base(self, ui: str) -> str:
        return self.dagster if ui == "dagster" else self.mlflow

    def partition_path(self, model: str, task: str) -> str:
        """The cell's partition of the metrics asset in the Dagster UI (a multi-partition key, ``model|task``)."""
        return f"/assets/{quote(self.metrics_asset)}?view=partitions&partition={quote(f'{model}|{task}', safe='')}"

    @staticmethod
    def dagster_run_path(run_id: str) -> str:
        return f"/runs/{quote(run_id)}"

    @staticmethod
    def mlflow_run_path(run_id: str, experiment_id: str = "") -> str:
        """An MLflow run's page (MLflow's UI routes ``#/runs/<id>`` to the run's experiment when no experiment is known)."""
        if experiment_id:
            return f"/#/experiments/{quote(experiment_id)}/runs/{quote(run_id)}"
        return f"/#/runs/{quote(run_id)}"


def slug(name: str) -> str:
    """A page or file name for a model or task: its ASCII letters, digits, ``-``, ``_`` and ``.`` as they are; any
    name with other characters gets them as ``_`` and a short hash of the whole name, so two names never share a page."""
    clean = "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "_" for c in name).lstrip(".") or "_"
    if clean == name and not name.startswith("."):
        return name
    return f"{clean[:60]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def number(v: Any) -> float | None:
    """``v`` as a float when it is a number (not a bool), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


@dataclass
class CellView:
    """One model x task as the pages show it."""

    model: str
    task: str
    value: float | None = None  # the configured metric's mean, full precision
    applicable: bool = True
    ci_low: float | None = None
    ci_high: float | None = None
    significant: bool = False
    stats: dict[str, Any] = field(default_factory=dict)  # the row of leaderboard.json's stats, as it is
    trust: dict[str, Any] = field(default_factory=dict)  # the row of trust.cells
    rank: dict[str, Any] = field(default_factory=dict)  # rank, rank_low, rank_high, group
    provenance: dict[str, Any] = field(default_factory=dict)
    stale: str = ""
    metrics: dict[str, Any] | None = None  # metrics.json
    per_query: Any = None  # per_query.parquet (polars)
    artifact_note: str = ""  # why the stored artifact could not be read
    mlflow: dict[str, str] = field(default_factory=dict)  # run_id, experiment_id

    @property
    def evaluated(self) -> bool:
        return self.value is not None

    def extra(self) -> dict[str, Any]:
        """Every field of the cell's stats and trust rows beyond those its overview cell shows, by name."""
        out = {k: v for k, v in self.stats.items() if k not in CELL_SHOWN and v is not None}
        out |= {k: v for k, v in self.trust.items() if k not in CELL_SHOWN and k not in out and v is not None}
        return out


@dataclass
class TaskView:
    name: str
    slug: str
    meta: dict[str, Any] = field(default_factory=dict)  # task.json's meta
    content_hash: str = ""
    manifest: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)
    contract: dict[str, Any] = field(default_factory=dict)
    entry: dict[str, Any] = field(default_factory=dict)  # the tasks.yaml entry: reader, path, options
    source_files: list[dict[str, Any]] = field(default_factory=list)
    source_note: str = ""
    families: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be read
    chance: float | None = None
    chance_field: str = ""

    @property
    def languages(self) -> list[str]:
        return [str(x) for x in self.meta.get("languages") or []]

    @property
    def modality(self) -> str:
        return f"{self.meta.get('query_modality') or '?'} → {self.meta.get('doc_modality') or '?'}" if self.meta else "unknown"

    @property
    def research_only(self) -> bool:
        return bool(self.meta.get("research_only") or self.gate.get("research_only"))

    @property
    def licence_class(self) -> str:
        return "research-only" if self.research_only else ("open" if self.meta else "unknown")


@dataclass
class ModelView:
    name: str
    slug: str
    kind: str = ""
    entry: dict[str, Any] = field(default_factory=dict)  # as models.yaml would write it
    upstream: list[str] = field(default_factory=list)
    revision: str = ""
    training_data: list[str] = field(default_factory=list)
    training_source: str = ""
    registered: bool = False


@dataclass
class SiteData:
    board: dict[str, Any]
    metric: str
    label: str
    baseline: str
    models: list[ModelView]
    tasks: list[TaskView]
    cells: dict[tuple[str, str], CellView]
    averaged_over: dict[str, list[str]]  # model -> the tasks its saved average is over (those it can read)
    average_rank_tasks: list[str]
    average_ranks: dict[str, dict[str, Any]]  # model -> rank, rank_low, rank_high, group of its saved average
    build: dict[str, Any]
    links: UiLinks
    other_sections: dict[str, Any]  # top-level fields of leaderboard.json no page places
    notes: list[str] = field(default_factory=list)
    contamination: Any = None  # medbench_core.site.contamination.ContaminationView, when the leaderboard has the section

    def cell(self, model: str, task: str) -> CellView:
        return self.cells.get((model, task)) or CellView(model, task)

    def task(self, name: str) -> TaskView:
        return next(t for t in self.tasks if t.name == name)

    def model(self, name: str) -> ModelView:
        return next(m for m in self.models if m.name == name)


# --- the leaderboard's JSON ---------------------------------------------------------------------
