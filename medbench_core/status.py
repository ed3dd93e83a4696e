"""One answer to "is it done?": what is stored for every model x task partition at its current keys.

A partition is done when every stage it has (its kind says which) holds a complete artifact
(verified against its manifest) at the key the current code, registry and task give it. Keys
cover everything that changes an output (declared stage and kind versions, the task's content,
the model's identity and weights' revision, upstream keys), so a partition whose inputs moved
has a key with no artifact yet: it is due. The warm path of ``medbench run``, the registry
sensor, the nightly schedule and the main job's model warm-up all ask this module; Dagster's UI
shows the same thing through the data versions the stages record (their keys).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from medbench_core.errors import MedbenchError
from medbench_core.layout import Layout
from medbench_core.retrieval.kinds.capabilities import expansion_name
from medbench_core.retrieval.kinds.derived_base import is_derived
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.storage import is_complete
from medbench_core.taskdata.task import Task

DONE, DUE, NOT_APPLICABLE, UNRESOLVED = "done", "due", "n/a", "unresolved"


@dataclass(frozen=True)
class PartitionStatus:
    """Where one model x task partition stands: ``state`` is done, due, n/a or unresolved (its keys
    cannot be computed: a missing model folder or expansion file), ``missing`` the stages with no
    complete artifact at their key, ``reason`` a line for people."""

    model: str
    task: str
    state: str
    reason: str = ""
    keys: Mapping[str, str] = field(default_factory=dict)
    missing: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        return self.state in (DONE, NOT_APPLICABLE)


def stage_folders(layout: Layout, spec: ModelSpec, task: str, keys: Mapping[str, str]) -> dict[str, Any]:
    """The artifact folder of each stage ``spec`` writes itself on ``task`` (a derived model: run and metrics;
    an expanded model also its expansion), in stage order."""
    out = {}
    expansion = expansion_name(spec)
    if expansion and "expansion" in keys:
        out["expansion"] = layout.expansion_dir(expansion, task, keys["expansion"])
    stages = ("run", "metrics") if is_derived(spec) else ("embeddings", "index", "run", "metrics")
    for stage in stages:
        out[stage] = layout.artifact_dir(spec.name, task, stage, keys[stage])
    return out


def partition_statuses(
    layout: Layout,
    specs: Sequence[ModelSpec],
    tasks: Iterable[Task],
    models: Sequence[str] | None = None,
    *,
    expansions: Sequence[Any] = (),
    k: int | None = None,
    stages: Sequence[str] | None = None,
    complete: Callable[[Any], bool] = is_complete,
) -> list[PartitionStatus]:
    """The status of ``models`` (default: every registered model) on each of ``tasks`` (curated tasks), model by model.

    ``stages`` limits the check to those stages (e.g. the ones that load a model's weights); ``complete(folder)`` says
    whether an artifact folder is complete (default: every file hashed against its manifest; runtime/verified.py's
    reads only the files whose stat moved since they were hashed).
    """
    from medbench_core.retrieval.derived import registry_partition_keys
    from medbench_core.retrieval.kinds.stage_inputs import DEFAULT_K

    by_name = {s.name: s for s in specs}
    names = list(models) if models is not None else [s.name for s in specs]
    out: list[PartitionStatus] = []
    tasks = list(tasks)
    for name in names:
        spec = by_name[name]
        for task in tasks:
            reason = spec.plugin.applicability(spec, task, by_name)
            if reason:
                out.append(PartitionStatus(name, task.name, NOT_APPLICABLE, reason))
                continue
            try:
                keys = registry_partition_keys(list(specs), task, k or DEFAULT_K, names=[name], expansions=list(expansions))[name]
            except MedbenchError as exc:
                out.append(PartitionStatus(name, task.name, UNRESOLVED, str(exc).splitlines()[0]))
                continue
            folders = stage_folders(layout, spec, task.name, keys)
            missing = tuple(s for s, folder in folders.items() if (stages is None or s in stages) and not complete(folder))
            if missing:
                out.append(PartitionStatus(name, task.name, DUE, "no complete " + ", ".join(missing) + " at the current keys", dict(keys), missing))
            else:
                out.append(PartitionStatus(name, task.name, DONE, "", dict(keys)))
    return out
