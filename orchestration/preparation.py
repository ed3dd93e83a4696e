"""The prepare phase of ``medbench run``: model partitions, the tasks curated (each with its blocking data contract)
and judged together (overlap gate), then each task's gate.

In this process (:func:`prepare`) or in a child started first (:class:`Preparation`) while this one imports Dagster
and loads the model the evaluation will ask for first (:func:`model_to_warm`, :func:`warm_up`). A task current as
stored, and shown so by Dagster, is not curated again (:func:`reusable_tasks`), nor the cross-task gate judged again
when every task is as it judged them (:func:`overlap_judged`). The steps after it are :mod:`orchestration.run_steps`'s.

The command owns how a job is executed and how a failure is said: ``execute`` (``job, instance, *, what,
**execute_in_process kwargs`` -> result, as :func:`medbench_cli.inprocess.execute`), ``failed_run`` (``title,
result, quiet=False`` -> why, printed under the step's line) and the jobs' ``run_config``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from medbench_core.retrieval.kinds.derived_base import is_derived

Execute = Callable[..., Any]
SayFailure = Callable[..., str]


def model_to_warm(specs: list, layout, tasks: list[str], force: bool = False) -> str | None:
    """The first model in evaluation order that loads weights and has a partition to compute.

    Judged on the tasks as curated now (a task not curated yet counts as work) by the one answer
    to "is it done?" (:mod:`medbench_core.status`: every stage that loads the model holds a
    complete artifact at its current key), without Dagster, so that the decision comes before
    its import. A wrong guess costs a model load, never a result: the evaluation decides again.
    """
    from medbench_core.errors import MedbenchError
    from medbench_core.layout import ENCODING_STAGES
    from medbench_core.status import DUE, partition_statuses

    loaders = [s for s in specs if s.plugin.loads_weights and not is_derived(s)]  # built from upstreams: loaded after them
    if not loaders:
        return None
    if force:
        return loaders[0].name
    from runtime import verified

    curated = []
    for task in tasks:
        verified.recall(layout.task_dir(task))  # its files' sha256 by their notes: read again only where the stat moved
        try:
            stored = layout.load_task(task)
        except MedbenchError:
            return loaders[0].name
        if not layout.gate_refusal(task, stored.content_hash()):
            curated.append(stored)
    for status in partition_statuses(layout, specs, curated, [s.name for s in loaders], stages=ENCODING_STAGES, complete=verified.complete):
        if status.state == DUE:
            return status.model
    return None


def warm_up(defs, model: str, progress: bool = False) -> float:
    """Load ``model``'s encoder into this process's cache, as the evaluation assets will ask for it (same ``progress``)."""
    t = time.perf_counter()
    defs.resources["compute"].encoder(defs.resources["registry"].model(model), progress)
    return time.perf_counter() - t


class Preparation:
    """The prepare phase in a child process, started before this process imports Dagster.

    ``command(report)``: the command line of the child, which writes :func:`prepare`'s result to ``report``;
    ``grace_seconds``: how long a step has to give way to a stop signal (the child's own bound)."""

    def __init__(self, command: Callable[[Path], list[str]], grace_seconds: float) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="medbench-prepare-")
        self.report = Path(self._tmp.name) / "report.json"
        self._grace = grace_seconds
        self.process = subprocess.Popen(command(self.report), env=os.environ.copy())

    def result(self) -> dict | None:
        """The child's report once it ended; None when it wrote none (its error is on the console; its exit code is ``process.returncode``)."""
        self.process.wait()
        if not self.report.exists():
            return None
        return json.loads(self.report.read_text())

    def close(self) -> None:
        if self.process.poll() is None:  # this command is stopping: the child stops too, finishing what it writes
            self.process.terminate()
            try:
                self.process.wait(timeout=self._grace + 10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._tmp.cleanup()


def prepare(defs, instance, tasks: list[str], *, execute: Execute, failed_run: SayFailure, run_config: dict, recheck: bool = False) -> dict:
    """Model partitions, curated tasks and both gates. Returns usable, gated and failed tasks, and why each failed.

    A task current as stored (:func:`reusable_tasks`) is not curated again, and the cross-task gate not judged
    again when every task is as it judged them; ``recheck`` curates and judges every task anyway.
    ``execute`` runs each job (the command's :func:`medbench_cli.inprocess.execute`), ``failed_run`` says why one
    failed, ``run_config`` is each job's."""
    from orchestration.jobs import CURATE_JOB, OVERLAP_JOB
    from orchestration.registry_sync import sync_model_partitions

    resources = defs.resources
    sync_model_partitions(instance, resources["registry"])
    curate = defs.resolve_job_def(CURATE_JOB)
    failed: list[str] = []
    reasons: dict[str, str] = {}
    curated: list[str] = []
    kept: dict[str, str] = {}
    t = time.perf_counter()
    reused = {} if recheck else reusable_tasks(instance, resources["store"], resources["registry"], tasks)
    if reused:
        shown = ", ".join(reused) if len(reused) <= 8 else f"{', '.join(list(reused)[:8])}, ... ({len(reused)})"
        print(
            f"[curate] not curated again: {shown}: source files, tasks.yaml entry and code as curated, gates judged ({time.perf_counter() - t:.2f}s)",
            flush=True,
        )
    ran = []
    for task in tasks:
        if task in reused:
            curated.append(task)
            continue
        t = time.perf_counter()
        before = content_hash(resources["store"].layout, task)
        res = execute(curate, instance, what=f"curate {task}", partition_key=task, run_config=copy.deepcopy(run_config), raise_on_error=False)
        print(f"[curate] {task:<22} {'ok' if res.success else 'FAILED'} ({time.perf_counter() - t:.1f}s)", flush=True)
        ran.append(task)
        if res.success:
            curated.append(task)
        else:
            label = f"curated_task[{task}]"
            failed.append(label)
            reasons[label] = failed_run(f"curate {task}", res)
            kept[label] = kept_after_failed_curation(resources["store"].layout, task, before)
    t = time.perf_counter()
    if curated and (ran or recheck or not overlap_judged(resources["store"], resources["registry"])):
        res = execute(defs.resolve_job_def(OVERLAP_JOB), instance, what="overlap", run_config=copy.deepcopy(run_config), raise_on_error=False)
        print(f"[overlap] {len(curated)} tasks judged together ({time.perf_counter() - t:.1f}s)", flush=True)
        if not res.success:
            failed_run("overlap", res, quiet=True)  # its verdict is each task's gate, below
    elif curated:
        print("[overlap] not judged again: every task is as the cross-task check judged it", flush=True)
    else:  # the curated tasks are those of before: their recorded verdict stands
        print("[overlap] not judged again: no task was curated in this run", flush=True)
    usable: list[str] = []
    gated: dict[str, str] = {}
    store = resources["store"]
    for task in curated:
        reason = store.layout.gate_refusal(task, reused.get(task) or store.load_task(task).content_hash())
        if reason:
            gated[task] = reason.splitlines()[0][:300]
            print(f"[gate] {task}: refused: {gated[task]}", flush=True)
        else:
            usable.append(task)
    return {"usable": usable, "gated": gated, "failures": failed, "reasons": reasons, "kept": kept, "curated": curated, "reused": list(reused)}


def reusable_tasks(instance, store, registry, tasks: list[str]) -> dict[str, str]:
    """task -> content hash, for each of ``tasks`` that is current as stored (:func:`assets.tasks.current_curation`) and
    that Dagster shows as the UI does: its latest ``curated_task`` materialisation of that content, by the current code,
    and no attempt failed or under way since. Curating such a task again would change nothing."""
    import dagster as dg
    from dagster import DagsterEventType
    from dagster._core.definitions.data_version import CODE_VERSION_TAG, DATA_VERSION_TAG  # private: the tags Dagster reads

    from assets.tasks import CURATED_TASK, CURATED_TASK_VERSION, current_curation, data_version_of
    from runtime.partitions import Partitions

    current = {}
    for task in tasks:
        content, _ = current_curation(store, registry, task)
        if content:
            current[task] = content
    if not current:
        return {}
    ids = instance.event_log_storage.get_latest_storage_id_by_partition(CURATED_TASK, DagsterEventType.ASSET_MATERIALIZATION)
    wanted = [ids[t] for t in current if t in ids]
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=CURATED_TASK, storage_ids=wanted), limit=max(1, len(wanted))).records
    tags = {r.storage_id: r.event_log_entry.tags or {} for r in records}
    status = instance.get_status_by_partition(CURATED_TASK, list(current), Partitions(registry.catalog().names).tasks) or {}
    out = {}
    for task, content in current.items():
        seen = tags.get(ids.get(task, -1), {})
        if (
            status.get(task) == dg.AssetPartitionStatus.MATERIALIZED
            and seen.get(DATA_VERSION_TAG) == data_version_of(content)
            and seen.get(CODE_VERSION_TAG) == CURATED_TASK_VERSION
        ):
            out[task] = content
    return out


def overlap_judged(store, registry) -> bool:
    """Whether the recorded cross-task verdict judged exactly the curated tasks as stored (the check would reuse it)."""
    from assets.verdicts import overlap_judged_with
    from medbench_core.taskdata.contracts import read_gate

    catalog = registry.catalog()
    hashes = [(t, h) for t in catalog.names if (h := content_hash(store.layout, t)) is not None]
    gate = read_gate(store.layout.overlap_gate_file())
    return bool(gate) and gate.get("judged_with") == overlap_judged_with(hashes, catalog.test_image_duplicates)


def kept_after_failed_curation(layout, task: str, before: str | None) -> str:
    """What a failed curation of ``task`` left, said for the last line: no curated task, the one from
    ``before`` (its content hash then), or a new one, refused by its gate only where a GATE.json records
    that verdict on that content (the check may have failed before writing one: a full disk)."""
    from medbench_core.taskdata.contracts import read_gate

    after = content_hash(layout, task)
    if after is None:
        return f"no curated {task}"
    if after == before:
        return f"the curated {task} from before"
    gate = read_gate(layout.gate_file(task))
    if gate is not None and gate.get("content_hash") == after and not gate.get("passed"):
        return f"the new curated {task}, refused by its gate ({layout.gate_file(task)})"
    return f"the new curated {task}, with no gate verdict recorded (its data contract is judged again before anything builds on it)"


def content_hash(layout, task: str) -> str | None:
    """The content hash the curated task's manifest records (None: not curated)."""
    from medbench_core.errors import MedbenchError
    from medbench_core.storage import read_manifest

    try:
        return read_manifest(layout.task_dir(task)).get("content_hash")
    except MedbenchError:
        return None
