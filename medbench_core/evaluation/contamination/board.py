"""The contamination audit over a benchmark: what one task's audit reads, and every cell's mark for the leaderboard."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from medbench_core.evaluation.contamination.audit import audit_key, load_audit
from medbench_core.evaluation.contamination.cells import cell_contamination
from medbench_core.evaluation.contamination.declared import MtebLookup, declarations, manifest_sources, mteb_training_datasets
from medbench_core.storage import is_complete


def admitted(layout: Any, tasks: Mapping[str, Any], keep: Iterable[str] = ()) -> dict[str, Any]:
    """The tasks of ``tasks`` (name -> curated task) that their gates admit (:meth:`Layout.gate_refusal`), and those named in
    ``keep``. A task refused by its own or the cross-task gate is not part of the benchmark, so it is no audit's input: a
    refused input changes no other task's audit key. The leaderboard keeps the tasks it shows a figure for: a cross-task
    refusal names the existing task beside the new one, and the existing task's figures and marks stay as they were."""
    keep = set(keep)
    return {n: t for n, t in tasks.items() if n in keep or layout.gate_refusal(n, t.content_hash()) is None}


def audit_inputs(task: Any, tasks: Mapping[str, Any], specs: Sequence[Any]) -> tuple[list[Any], list[tuple[str, str]]]:
    """What task ``task``'s audit compares it with: every other curated task (by name) and every declared manifest."""
    return [t for n, t in sorted(tasks.items()) if n != task.name], manifest_sources(specs)


def task_splits(entries: Iterable[Any]) -> dict[str, str]:
    """Task -> the split its catalogue entry reads (an image without a ``<split>_`` id prefix belongs to it); default test."""
    return {e.name: str(e.options.get("split") or "test") for e in entries}


def contamination_marks(
    layout: Any,
    specs: Sequence[Any],
    entries: Sequence[Any],
    tasks: Mapping[str, Any],
    cells: Iterable[Any],
    *,
    metric: str = "ndcg_at_10",
    n_resamples: int = 10_000,
    seed: int = 0,
    mteb_lookup: MtebLookup = mteb_training_datasets,
) -> dict[tuple[str, str], dict[str, Any]]:
    """(model, task) -> :func:`~.cells.cell_contamination` for every cell with metrics that the model can read.

    A task's pairs come from its audit at the current key (:func:`~.audit.audit_key`); a task not
    audited at that key is marked from the declarations alone, its evidence saying so.
    """
    cells = list(cells)
    # Only the models with a cell to mark: a registered model that has none is not looked up in mteb.
    declared = declarations(specs, mteb_lookup, only=[c.model for c in cells if c.metrics is not None and c.applicable])
    identities = {e.name: e.identity for e in entries if e.identity is not None}
    pairs: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for name, task in tasks.items():
        others, manifests = audit_inputs(task, tasks, specs)
        keys[name] = audit_key(task, others, manifests)
        folder = layout.audit_dir(name, keys[name])
        pairs[name] = load_audit(folder)[0] if is_complete(folder) else None
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for c in cells:
        if c.metrics is None or not c.applicable or c.task not in identities or c.model not in declared:
            continue
        out[(c.model, c.task)] = cell_contamination(
            declared[c.model], identities[c.task], identities, pairs.get(c.task), c.per_query, metric, n_resamples=n_resamples, seed=seed
        )
        if pairs.get(c.task) is not None:
            out[(c.model, c.task)]["audit_key"] = keys[c.task]  # where its pairs and thumbnails are (the site shows them)
    return out
