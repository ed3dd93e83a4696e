"""Where a project's artifacts live under its data root, the stages of one model x task, and the gate rule.

One place for the folder layout, so that code without Dagster (the main job's planning, DVC
versioning) and the Dagster resources agree on it:

    <root>/tasks/<task>/                       curated task, MANIFEST.json, GATE.json, gate/ (GX reports)
    <root>/tasks/OVERLAP_GATE.json, _overlap/  the cross-task verdict and its reports
    <root>/artifacts/<model>/<task>/<stage>/<key>/
    <root>/artifacts/<model>/<task>/filled/<key>/   a cell scored on the human + LLM qrels layer
    <root>/judgements/<judgement>/<task>/<key>/  LLM relevance judgements (and _cache/: judged pairs)
    <root>/reports/                            leaderboard.{md,csv,json}, canary/
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from medbench_core.errors import ContractError, DataError
from medbench_core.taskdata.task import Task, load_task
from medbench_core.storage import MANIFEST, read_manifest, verify_manifest

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
        verify_manifest(folder)
        return load_task(folder)
