"""What a compare of a rebuild with a version says: each artifact's and file's :class:`Verdict`, a file's judgement
(:class:`FileVerdict`) and the :class:`ArtifactResult` that carries them (:mod:`medbench_release.compare`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any


class Verdict(StrEnum):
    """An artifact's or a file's verdict; its value is what reports and JSON write."""

    IDENTICAL = "identical"
    WITHIN_TOLERANCE = "within_tolerance"  # other bytes, within the rule it was judged by
    DIFFERS = "differs"  # beyond the rule, or rebuilt under another key (its inputs changed)
    MISSING = "missing"  # not rebuilt
    PENDING = "pending"  # a file judged after the artifacts before it in its partition (run, per_query, metrics); never a final verdict


OK = (Verdict.IDENTICAL, Verdict.WITHIN_TOLERANCE)


class RunState(Enum):
    """What a partition's run tells the metrics after it (:mod:`medbench_release.judge_runs`)."""

    IDENTICAL = "identical"
    SCORES = "scores"  # its scores moved within the tolerance: ties may have moved, metrics judged within their tie bound
    BY_METRICS = "by_metrics"  # built from runs that moved: judged by its metrics, exactly
    DIFFERS = "differs"


@dataclass(frozen=True)
class FileVerdict:
    """One file of an artifact, judged: its verdict, the rule it was judged by, why, the largest difference it measured
    and (a run) the score tolerance it was held to. A file judged after the artifacts before it is recorded
    :attr:`Verdict.PENDING` and then replaced by its settled record; no record is changed in place."""

    verdict: Verdict
    rule: str = ""
    detail: str | None = None
    max_abs_diff: float | None = None
    tolerance: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The fields that say something: ``detail``, ``max_abs_diff`` and ``tolerance`` only where the judgement gave one."""
        fields = (("verdict", self.verdict), ("rule", self.rule), ("tolerance", self.tolerance), ("detail", self.detail), ("max_abs_diff", self.max_abs_diff))
        return {k: v for k, v in fields if v is not None}


@dataclass
class Rebuilt:
    """What the rebuild ran with: its data folder, registry and catalogue texts, code versions and source folder."""

    data_dir: Path
    models_text: str
    tasks_text: str
    code_versions: dict[str, str]
    shared_data: Path


@dataclass
class ArtifactResult:
    """One artifact of the version, judged: its verdict, each file's (``files``: name -> :class:`FileVerdict`), the rule that decided."""

    stage: str
    model: str | None
    task: str
    path: str
    key: str
    rebuilt_key: str | None
    verdict: Verdict
    notes: list[str] = field(default_factory=list)
    files: dict[str, FileVerdict] = field(default_factory=dict)
    max_abs_diff: float | None = None  # vectors: values; runs: scores; metrics: the largest metric difference
    rule: str = ""  # the rule that decided the verdict, with its tolerance
    upstream: dict[str, Any] = field(default_factory=dict)  # the version's
    rebuilt_upstream: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.stage} {self.model} x {self.task}" if self.model else f"{self.stage} {self.task}"

    @property
    def partition(self) -> str:
        return f"{self.model} x {self.task}" if self.model else f"task {self.task}"

    @property
    def moved(self) -> list[str]:
        """Upstream fields whose rebuilt value differs from the version's."""
        if not self.rebuilt_upstream:
            return []
        return [k for k, v in self.upstream.items() if k in self.rebuilt_upstream and self.rebuilt_upstream[k] != v]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["files"] = {name: f.to_json() for name, f in self.files.items()}
        out["label"], out["partition"], out["moved"] = self.label, self.partition, self.moved
        return out
