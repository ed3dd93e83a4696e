"""Where a project's artifacts live under its data root, the stages of one model x task, and the gate rule.

One place for the folder layout, so that code without Dagster (the main job's planning, DVC
versioning) and the Dagster resources agree on it:

    <root>/tasks/<task>/                       curated task, MANIFEST.json, GATE.json, gate/ (GX reports)
    <root>/tasks/OVERLAP_GATE.json, _overlap/  the cross-task verdict and its reports
    <root>/artifacts/<model>/<task>/<stage>/<key>/
    <root>/artifacts/<model>/<task>/filled/<key>/   a cell scored on the human + LLM qrels layer
    <root>/judgements/<judgement>/<task>/<key>/  LLM relevance judgements (and _cache/: judged pairs)
    <root>/audits/<task>/<key>/                a task's contamination audit (near-duplicate texts and images)
    <root>/audit_pieces/<task>/<key>/          its pairs against one source (a task, a manifest, itself): what audits reuse
    <root>/reports/                            leaderboard.{md,csv,json}, canary/
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from medbench_core.errors import ContractError, DataError
from medbench_core.storage import MANIFEST, file_stat, known_sha256, read_manifest, verify_manifest
from medbench_core.taskdata.task import Task, load_task

STAGES = ("embeddings", "index", "run", "metrics")
ENCODING_STAGES = ("embeddings", "run")  # the stages that load a dense or CLIP model's encoder


@dataclass(frozen=True)
class Layout:
    root: Path

    def tasks_root(self) -> Path:
        return self.root / "tasks"

    def task_dir(self, task: str) -> Path:
        return self.tasks_root() / task

    def artifact_dir(self, model: str, task: str, stage: str, key: str) -> Path:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        return self.root / "artifacts" / model / task / stage / key

    def expansion_dir(self, expansion: str, task: str, key: str) -> Path:
        """Where one expansion x task artifact lives: ``expansions/<expansion>/<task>/<key>``."""
        return self.root / "expansions" / expansion / task / key

    def judgement_dir(self, judgement: str, task: str, key: str) -> Path:
        """Where one judgement x task artifact lives: ``judgements/<judgement>/<task>/<key>``."""
        return self.root / "judgements" / judgement / task / key

    def judgement_cache_dir(self, judgement: str) -> Path:
        """The pair cache of a judgement entry's judges: ``judgements/<judgement>/_cache`` (no task is named ``_cache``)."""
        return self.root / "judgements" / judgement / "_cache"

    def filled_dir(self, model: str, task: str, key: str) -> Path:
        """A cell's metrics on the filled (human + LLM) qrels layer: ``artifacts/<model>/<task>/filled/<key>``."""
        return self.root / "artifacts" / model / task / "filled" / key

    def audit_dir(self, task: str, key: str) -> Path:
        """Where a task's contamination audit lives: ``audits/<task>/<key>``."""
        return self.root / "audits" / task / key

    def audit_piece_dir(self, task: str, key: str) -> Path:
        """Where one piece of a task's audit (its pairs against one source) lives: ``audit_pieces/<task>/<key>``."""
        return self.root / "audit_pieces" / task / key

    def reports_dir(self) -> Path:
        return self.root / "reports"

    def leaderboard_file(self, suffix: str = "md") -> Path:
        return self.reports_dir() / f"leaderboard.{suffix}"

    def canary_baseline(self, model: str, task: str) -> Path:
        return self.reports_dir() / "canary" / f"{model}__{task}.baseline.json"

    def gate_file(self, task: str) -> Path:
        """The recorded verdict of the task's own data contract."""
        from medbench_core.taskdata.contracts import gate_status_path

        return gate_status_path(self.task_dir(task))

    def gate_reports_dir(self, task: str) -> Path:
        """GX results, our verdict and data docs of the task's contract."""
        return self.task_dir(task) / "gate"

    def overlap_gate_file(self) -> Path:
        """The recorded verdict of the cross-task overlap check."""
        from medbench_core.taskdata.contracts import overlap_gate_path

        return overlap_gate_path(self.tasks_root())

    def overlap_reports_dir(self) -> Path:
        return self.tasks_root() / "_overlap"  # no task name starts with "_"

    def gate_refusal(self, task: str, content_hash: str) -> str | None:
        """Why the recorded gates (the task's own and the cross-task one) refuse ``task`` at ``content_hash``; None when they pass it.

        The one gate rule (:func:`medbench_core.taskdata.contracts.gate_refusal`) at this project's paths;
        every step that builds on a task asks it.
        """
        from medbench_core.taskdata.contracts import gate_refusal

        return gate_refusal(self.task_dir(task), content_hash, overlap_gate=self.overlap_gate_file())

    def require_gate(self, task: str, content_hash: str) -> None:
        """Raise :class:`ContractError` with the reason from :meth:`gate_refusal`, if any."""
        reason = self.gate_refusal(task, content_hash)
        if reason:
            raise ContractError(reason)

    def task_refusal(self, task: str) -> str | None:
        """Why models may not be evaluated on ``task`` as stored now (not curated, or refused by its gates); None when they may.

        Judged on the content hash its manifest records, without loading the task.
        """
        folder = self.task_dir(task)
        if not (folder / MANIFEST).exists():
            return f"task {task}: not curated yet; materialise curated_task[{task}]"
        return self.gate_refusal(task, read_manifest(folder).get("content_hash", ""))

    def load_task(self, task: str) -> Task:
        """The curated task, after verifying its manifest."""
        folder = self.task_dir(task)
        if not (folder / MANIFEST).exists():
            raise DataError(f"task {task}: no curated task at {folder}; materialise curated_task[{task}] first")
        manifest = verify_manifest(folder)
        return _load_verified_task(folder, manifest)


# The curated task each folder held when this process last read it, under the stat of its manifest
# and files: the steps of one process (medbench run --serial, a Dagster run in process) read the
# Parquet once rather than once per step. Only files whose sha256 is noted as the manifest's at
# that very stat count (medbench_core/storage/hashes.py): the copy returned shares the immutable frames.
_LOADED: dict[Path, tuple[tuple, Task]] = {}


def _verified_stats(folder: Path, manifest: dict) -> tuple | None:
    """The stat of the manifest and of every file it lists, when each file's noted sha256 is the manifest's; else None."""
    try:
        stats = [file_stat(folder / MANIFEST)]
        for name, entry in sorted(manifest.get("files", {}).items()):
            st = file_stat(folder / name)
            if known_sha256(folder / name, st) != entry.get("sha256"):
                return None
            stats.append(st)
    except OSError:
        return None
    return tuple(stats)


def _load_verified_task(folder: Path, manifest: dict) -> Task:
    key = _verified_stats(folder, manifest)
    hit = _LOADED.get(folder)
    if key is not None and hit is not None and hit[0] == key:
        return dataclasses.replace(hit[1])
    task = load_task(folder)
    if key is not None and _verified_stats(folder, manifest) == key:  # nothing changed while it was read
        _LOADED[folder] = (key, task)
    else:
        _LOADED.pop(folder, None)
    return dataclasses.replace(task)
