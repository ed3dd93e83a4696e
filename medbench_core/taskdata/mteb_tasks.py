"""MTEB's own task metadata, read from the ``mteb`` package (pinned in requirements.lock), never copied.

mteb is imported inside the functions (``import mteb`` takes seconds and loads datasets, pandas
and scikit-learn, though not torch), so importing this module costs nothing. Facts used here, as
read in mteb 2.26.24: ``mteb.get_task(name)`` returns a task instance and raises ``KeyError`` for an
unknown name (mteb/get_tasks.py); ``mteb.get_benchmark(name)`` accepts aliases such as
``MTEB(Medical)`` and raises ``KeyError`` (mteb/benchmarks/get_benchmark.py); a task's
``metadata`` (mteb/abstasks/task_metadata.py) holds ``dataset = {path, revision, ...}``,
``eval_splits``, ``eval_langs`` (a list, or a mapping hf_subset -> languages),
``hf_subsets_to_langscripts``, ``main_score``, ``domains``, ``license`` and ``type``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from medbench_core.errors import DataError


@dataclass(frozen=True)
class MtebMatch:
    """What :func:`match_dataset` found for one source dataset: MTEB's task name, or why none."""

    task: str | None
    reason: str = ""


@functools.lru_cache(maxsize=1)
def _by_dataset() -> dict[tuple[str, str], tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]]:
    """(dataset path, revision) -> every MTEB retrieval task on it: (name, eval splits, hf subsets)."""
    import mteb

    out: dict[tuple[str, str], list[tuple[str, tuple[str, ...], tuple[str, ...]]]] = {}
    for t in mteb.get_tasks(task_types=["Retrieval"], exclude_superseded=False):
        md = t.metadata
        out.setdefault((str(md.dataset.get("path")), str(md.revision)), []).append((md.name, tuple(md.eval_splits), tuple(md.hf_subsets)))
    return {k: tuple(v) for k, v in out.items()}


def match_dataset(dataset: str, revision: str, split: str, hf_subset: str = "default") -> MtebMatch:
    """The MTEB retrieval task that reads ``dataset`` at ``revision`` with ``split`` in its eval splits.

    Only a unique match counts: several MTEB tasks on one dataset repository (BRIGHT's, for
    instance) are told apart by their configs, which a medbench task read by files does not
    record, so such a task keeps medbench's name (name the task with ``reader: mteb, task:``).
    """
    if not dataset or not revision:
        return MtebMatch(None, "no hub dataset and revision recorded")
    found = [name for name, splits, subsets in _by_dataset().get((dataset, revision), ()) if split in splits and hf_subset in subsets]
    if len(found) == 1:
        return MtebMatch(found[0])
    if not found:
        return MtebMatch(None, f"no MTEB retrieval task reads {dataset}@{revision[:12]} with split {split!r}")
    return MtebMatch(None, f"{dataset}@{revision[:12]} is read by several MTEB tasks ({', '.join(sorted(found))}); name one with reader: mteb, task:")


def task_metadata(name: str):
    """mteb's ``TaskMetadata`` of the task ``name``; DataError naming the closest names when unknown."""
    import mteb

    try:
        return mteb.get_task(name).metadata
    except KeyError as exc:
        raise DataError(f"MTEB has no task {name!r} (mteb {mteb.__version__}): {exc.args[0] if exc.args else exc}") from None
