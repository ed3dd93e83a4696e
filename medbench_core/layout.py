"""Where a project's artifacts live under its data root, and the stages of one model x task.

One place for the folder layout, so that code without Dagster (the main job's planning, DVC
versioning) and the Dagster resources agree on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from medbench_core.errors import DataError
from medbench_core.model import Task, load_task
from medbench_core.storage import verify_manifest

STAGES = ("embeddings", "index", "run", "metrics")


@dataclass(frozen=True)
class Layout:
    root: Path

    def task_dir(self, task: str) -> Path:
        return self.root / "tasks" / task

    def artifact_dir(self, model: str, task: str, stage: str, key: str) -> Path:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        return self.root / "artifacts" / model / task / stage / key

    def expansion_dir(self, expansion: str, task: str, key: str) -> Path:
        """Where one expansion x task artifact lives: ``expansions/<expansion>/<task>/<key>``."""
        return self.root / "expansions" / expansion / task / key

    def reports_dir(self) -> Path:
        return self.root / "reports"

    def gate_refusal(self, task: str, content_hash: str) -> str | None:
        """Why the recorded gates (the task's own and the cross-task one) refuse ``task`` at ``content_hash``; None when they pass it."""
        from medbench_core.contracts import gate_refusal, overlap_gate_path

        return gate_refusal(self.task_dir(task), content_hash, overlap_gate=overlap_gate_path(self.root / "tasks"))

    def load_task(self, task: str) -> Task:
        """The curated task, after verifying its manifest."""
        folder = self.task_dir(task)
        if not (folder / "MANIFEST.json").exists():
            raise DataError(f"task {task}: no curated task at {folder}; materialise curated_task[{task}] first")
        verify_manifest(folder)
        return load_task(folder)
