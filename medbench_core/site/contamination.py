"""The contamination audit on the pages (issue 49, docs/contamination.md): each cell's mark (trained-on-task,
zero-shot, unknown) with its evidence, share and decontaminated score, each model's zero-shot share, and a task's
image pairs with the thumbnails its audit drew. Read from ``leaderboard.json``'s ``contamination`` and the task's
audit folder at the key the leaderboard used (``audit_key`` of each cell)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SYMBOL = {"trained-on-task": "T", "zero-shot": "Z", "unknown": "?"}  # the overview's short form; the title says it in words
SHOWN = ("mark", "share", "contaminated_queries", "n_queries", "decontaminated", "decontaminated_ci", "n_clean", "contaminated_docs", "evidence")


@dataclass
class TaskAudit:
    """A task's stored audit as the task page shows it: its image pairs (the first ones, with a thumbnail each)."""

    key: str
    folder: Path
    image_pairs: list[dict[str, Any]] = field(default_factory=list)
    thumbs: list[str] = field(default_factory=list)  # paths inside the site, beside the task page
    note: str = ""


@dataclass
class ContaminationView:
    zero_shot: dict[str, Any] = field(default_factory=dict)  # model -> percentage of its marked cells that are zero-shot (None: all unknown)
    cells: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    audits: dict[str, TaskAudit] = field(default_factory=dict)

    def cell(self, model: str, task: str) -> dict[str, Any]:
        return self.cells.get((model, task)) or {}

    def rows(self, task: str, models: list[str]) -> list[dict[str, Any]]:
        """One row per model marked on ``task``: the fields the page shows, in :data:`SHOWN` order."""
        out = []
        for m in models:
            c = self.cell(m, task)
            if c:
                out.append({"model": m, **{k: c[k] for k in SHOWN if k in c}, "audited": c.get("audited")})
        return out


def contamination_view(board: dict[str, Any], data_root: Path | None) -> ContaminationView | None:
    """None when the leaderboard holds no contamination section."""
    section = board.get("contamination")
    if not isinstance(section, dict):
        return None
    view = ContaminationView(zero_shot=dict(section.get("zero_shot") or {}))
    for name, c in (section.get("cells") or {}).items():
        model, _, task = str(name).partition("/")
        view.cells[(model, task)] = dict(c)
    for (_, task), c in sorted(view.cells.items()):
        key = c.get("audit_key")
        if task in view.audits or not key or data_root is None:
            continue
        view.audits[task] = task_audit(Path(data_root) / "audits" / task / str(key), str(key))
    return view


def task_audit(folder: Path, key: str) -> TaskAudit:
    """The image pairs of the audit in ``folder`` (its manifest verified) and the thumbnails it drew, in order."""
    from medbench_core.errors import MedbenchError
    from medbench_core.evaluation.contamination.audit import load_audit

    audit = TaskAudit(key, folder)
    try:
        pairs, _ = load_audit(folder)
    except (MedbenchError, OSError, ValueError) as exc:
        audit.note = f"the audit at {folder} could not be read: {' '.join(str(exc).split())[:200]}"
        return audit
    if pairs.height and "kind" in pairs.columns:
        audit.image_pairs = [r for r in pairs.filter(pairs["kind"] == "image").iter_rows(named=True) if str(r["source"]).startswith("task:")]
    audit.thumbs = sorted(p.name for p in (folder / "thumbs").glob("*.png")) if (folder / "thumbs").is_dir() else []
    return audit


def copy_thumbs(view: ContaminationView | None, task: str, slug: str, out: Path) -> list[str]:
    """Copy the thumbnails of ``task``'s audit under ``out`` (the site being built), beside its page; their site paths."""
    import shutil

    audit = view.audits.get(task) if view is not None else None
    if audit is None or not audit.thumbs:
        return []
    names = []
    for name in audit.thumbs:
        rel = f"tasks/{slug}-audit/{name}"
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(audit.folder / "thumbs" / name, out / rel)
        names.append(rel)
    return names
