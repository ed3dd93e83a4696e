"""Which leaderboard cell is stale, and why: the policy behind "it never shows a number it cannot stand behind".

Every function reads the artifact tree through a :class:`medbench_core.layout.Layout` and plain data
(the registry's specs, a curated task, the saved leaderboard's ``model/task`` -> provenance); the
leaderboard asset (assets/reports.py) only gathers those and what Dagster knows of each partition.

- A cell at its current provenance keys, with a complete metrics artifact, shows its value
  (:func:`task_cells`); marked stale with why when its curated task is not current (:func:`task_stale`).
- A model with no result at its current keys keeps its value on the previous leaderboard, marked
  stale with why, while that artifact verifies; otherwise '-' (:func:`earlier_cell`).
- A cell whose partition the orchestrator shows as failed or unfinished is marked with that run and its
  error (:func:`unconfirmed_reason`, :func:`with_stale`).
- A cell of the saved leaderboard whose metrics artifact now fails its manifest is never dropped
  quietly: :func:`lost_to_corrupt_artifacts` names it, and the leaderboard is not replaced.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from medbench_core.errors import IntegrityError, MedbenchError
from medbench_core.evaluation.reports import UNCONFIRMED, Cell, load_cell
from medbench_core.layout import Layout
from medbench_core.retrieval.derived import applicability, registry_partition_keys
from medbench_core.retrieval.expansion.contract import GATE_FILE
from medbench_core.retrieval.kinds.base import cached_revision
from medbench_core.retrieval.kinds.capabilities import expansion_name
from medbench_core.retrieval.kinds.derived_base import is_derived
from medbench_core.retrieval.model_registry import ModelSpec
from medbench_core.retrieval.stages import run_params
from medbench_core.storage import is_complete, read_manifest, verify_manifest
from medbench_core.taskdata.catalog import TaskEntry, changed_inputs
from medbench_core.taskdata.task import Task


def expansion_copies(layout: Layout, spec: ModelSpec, task: str, keys: dict[str, str]) -> int:
    """How many of an expanded model's expansions copy a relevant passage, from its expansion's EXPANSION_GATE.json (0 when none recorded)."""
    expansion = expansion_name(spec)
    if not expansion or "expansion" not in keys:
        return 0
    gate = layout.expansion_dir(expansion, task, keys["expansion"]) / GATE_FILE
    try:
        doc = json.loads(gate.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return 0
    return int((doc.get("leakage") or {}).get("n_copies") or 0) if doc.get("key") == keys["expansion"] else 0


def task_stale(layout: Layout, entry: TaskEntry, data_root: str | Path) -> str:
    """Why the curated copy of ``entry``'s task is not current (its source files or tasks.yaml entry changed
    since it was curated, and it was not curated again), said for its cells; '' when it is current."""
    changed = changed_inputs(read_manifest(layout.task_dir(entry.name)).get("inputs"), entry, data_root)
    return f"task {entry.name}: {changed}, and it has not been curated again (`medbench run --tasks {entry.name}`)" if changed else ""


def task_cells(
    layout: Layout,
    specs: list[ModelSpec],
    task: Task,
    expansions: list,
    *,
    split: str = "test",
    online: bool = False,
    stale: str = "",
    previous: dict | None = None,
) -> tuple[list[Cell], dict[tuple[str, str], int]]:
    """The cell of every model on ``task`` at its current keys, and the expanded models' copied passages.

    A model that cannot read the task is ``n/a``; a derived model (fusion, reranker, expanded) is
    judged by its upstream models, not by its own embeddings or index, which it does not have.
    ``stale``: why the curated task is not current (its cells are marked with it). A model with no
    result at its current keys keeps the cell of the ``previous`` leaderboard (``model/task`` ->
    provenance), marked stale, while that artifact verifies.
    """
    by_name = {s.name: s for s in specs}
    cells, copies = [], {}
    for spec in specs:
        if applicability(spec, task, by_name):
            cells.append(Cell(spec.name, task.name, applicable=False, research_only=task.meta.research_only))
            continue
        try:
            keys = registry_partition_keys(specs, task, names=[spec.name], expansions=expansions, online=online)[spec.name]
        except MedbenchError:  # e.g. its model folder or expansion file is gone: no result for the current entry
            keys = None
        metrics = layout.artifact_dir(spec.name, task.name, "metrics", keys["metrics"]) if keys else None
        if metrics is None or not is_complete(metrics):  # verifies every file against the manifest
            cells.append(earlier_cell(layout, spec, task, (previous or {}).get(f"{spec.name}/{task.name}"), split, stale))
            continue
        run = layout.artifact_dir(spec.name, task.name, "run", keys["run"])
        own = [] if is_derived(spec) else [layout.artifact_dir(spec.name, task.name, s, keys[s]) for s in ("embeddings", "index")]
        revision = cached_revision(spec)
        provenance = {
            "metrics_key": keys["metrics"],
            "run_key": keys["run"],
            "task_content_hash": task.content_hash(),
            "model_revision": revision,
            "dataset_revision": task.meta.source_revision or None,
            "split": split,
            **run_params(spec, task),
        }
        if is_derived(spec):
            provenance["upstream"] = list(spec.upstream)
        else:
            provenance |= {"embeddings_key": keys["embeddings"], "index_key": keys["index"]}
        if "expansion" in keys:
            provenance["expansion_key"] = keys["expansion"]
        cell = load_cell(
            spec.name, task, metrics_dir=metrics, run_dir=run if (run / "info.json").exists() else None, model_revision=revision,
            split=split, stage_dirs=[d for d in own if d.is_dir()], provenance=provenance,
        )  # fmt: skip
        cells.append(dataclasses.replace(cell, stale=stale) if stale else cell)
        copies[(spec.name, task.name)] = expansion_copies(layout, spec, task.name, keys)
    return cells, copies


def earlier_cell(layout: Layout, spec: ModelSpec, task: Task, prov: dict | None, split: str, stale: str = "") -> Cell:
    """The cell a model has no current result for: its value on the previous leaderboard (``prov``), marked
    stale, while that metrics artifact verifies; else empty ('-')."""
    empty = Cell(spec.name, task.name, research_only=task.meta.research_only)
    if not prov or "metrics_key" not in prov:
        return empty
    metrics = layout.artifact_dir(spec.name, task.name, "metrics", prov["metrics_key"])
    if not is_complete(metrics):
        return empty
    run = layout.artifact_dir(spec.name, task.name, "run", prov.get("run_key", ""))
    if prov.get("task_content_hash") != task.content_hash():
        why = f"computed on an earlier curated copy of {task.name}, and not recomputed on this one"
    else:
        why = f"{spec.name}'s inputs (its models.yaml entry, weights, upstreams or code) changed since it was computed, and it was not recomputed"
    why += f" (`medbench run --models {spec.name} --tasks {task.name}`)"
    provenance = {k: v for k, v in prov.items() if k != "stale"}
    cell = load_cell(
        spec.name, task, metrics_dir=metrics, run_dir=run if prov.get("run_key") and (run / "info.json").exists() else None,
        model_revision=str(prov.get("model_revision") or ""), split=split, provenance=provenance,
    )  # fmt: skip
    return dataclasses.replace(cell, stale="; ".join(w for w in (stale, why) if w))


def saved_cells(layout: Layout) -> dict:
    """``model/task`` -> provenance of every cell of the saved leaderboard.json ({} when there is none or it does not parse)."""
    try:
        return json.loads(layout.leaderboard_file("json").read_text()).get("cells") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def unconfirmed_reason(model: str, task: str, failed: bool, run_id: str | None = None, run_state: str | None = None, error: str = "") -> str:
    """Why a cell's value is not confirmed: its partition's last run ``failed`` (with ``error``, its first line),
    or has not finished (``run_state``: that run's status as the orchestrator names it); ``run_id`` None: no run found."""
    what = f"Dagster run {run_id[:8]}" if run_id else "its Dagster run"
    if failed:
        said = f"failed ({what}{': ' + error if error else ''})"
    else:
        said = f"has not finished ({what}, {run_state.lower() if run_state else 'unknown'}: still running, or its process died)"
    return f"{UNCONFIRMED} {model} x {task} {said}: the value its stored metrics hold is not confirmed (`medbench run --models {model} --tasks {task}`)"


def with_stale(cells: list[Cell], why: dict[tuple[str, str], str]) -> list[Cell]:
    """The cells with ``why[(model, task)]`` added to what already marks each stale (joined by '; ')."""
    return [dataclasses.replace(c, stale="; ".join(w for w in (c.stale, why.get((c.model, c.task), "")) if w)) for c in cells]


def lost_to_corrupt_artifacts(layout: Layout, previous: dict, cells: list[Cell]) -> list[str]:
    """Cells of the saved leaderboard this one would lose because their metrics artifact fails its manifest:
    one line each, naming the artifact and the partition to rematerialise."""
    filled = {(c.model, c.task) for c in cells if c.metrics is not None}
    shown = {(c.model, c.task) for c in cells}
    lost = []
    for name, prov in sorted(previous.items()):
        model, _, task = name.partition("/")
        if (model, task) in filled or (model, task) not in shown or "metrics_key" not in prov:
            continue  # kept, or no longer on the board (model or task removed, task not curated)
        folder = layout.artifact_dir(model, task, "metrics", prov["metrics_key"])
        if not folder.is_dir():
            continue  # removed on purpose (a pruned release), not corrupted
        try:
            verify_manifest(folder)
        except IntegrityError as exc:
            lost.append(f"{model} x {task}: {exc}: rematerialise task_metrics[{model}|{task}] (`medbench run --models {model} --tasks {task}`)")
    return lost
