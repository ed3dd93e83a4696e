"""A small saved leaderboard for the site's tests: written by the real report writer from hand-made per-query
values, with the stored provenance beside it (task.json, MANIFEST.json, GATE.json, contract outcomes, metrics
artifacts with their manifests), as the stages leave them.

Per-query nDCG@10 (four queries a task; image: two):

    t1  (en)          bm25  1, 0.5, 0, 1  -> 0.625     dense 1, 1, 1, 0.5  -> 0.875
    t2  (en + ja)     bm25  1, 0, 1, 0    -> 0.5       dense 0.5, 1, 1, 1  -> 0.875
    img (text->image) bm25  n/a (cannot read it)       dense 0.4, 0.6      -> 0.5

Every model reads t1 and t2: the overview's average starts over those two, bm25 (0.625 + 0.5) / 2 = 0.5625 and
dense (0.875 + 0.875) / 2 = 0.875. Names are parameters, so the same world carries hostile ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

VALUES = {
    ("bm25", "t1"): [1.0, 0.5, 0.0, 1.0],
    ("dense", "t1"): [1.0, 1.0, 1.0, 0.5],
    ("bm25", "t2"): [1.0, 0.0, 1.0, 0.0],
    ("dense", "t2"): [0.5, 1.0, 1.0, 1.0],
    ("dense", "img"): [0.4, 0.6],
}
META = {
    "t1": {"languages": ["en"], "query_modality": "text", "doc_modality": "text", "licences": ["CC-BY-4.0"], "research_only": False},
    "t2": {"languages": ["en", "ja"], "query_modality": "text", "doc_modality": "text", "licences": ["unknown"], "research_only": True,
           "licence_lineage": ["README: CC-BY-SA-4.0", "wheel: GPL-3.0-or-later"]},
    "img": {"languages": ["en"], "query_modality": "text", "doc_modality": "image", "licences": ["CC-BY-4.0"], "research_only": False},
}  # fmt: skip


@dataclass
class SiteWorld:
    root: Path
    models: dict[str, str]  # role (bm25, dense) -> name
    tasks: dict[str, str]  # role (t1, t2, img) -> name
    extra_stats: dict = field(default_factory=dict)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def board(self) -> Path:
        return self.data / "reports" / "leaderboard.json"

    def value(self, model_role: str, task_role: str) -> float | None:
        v = VALUES.get((model_role, task_role))
        return None if v is None else sum(v) / len(v)


def build_world(
    root: Path, models: dict[str, str] | None = None, tasks: dict[str, str] | None = None, extra_json: dict | None = None,
    floors: dict[tuple[str, str], dict] | None = None,
) -> SiteWorld:  # fmt: skip
    """Write the world under ``root`` (data/tasks, data/artifacts, data/reports/leaderboard.*) and return it.

    ``floors``: (model role, task role) -> fields the metrics stage adds to a cell's metrics.json for nDCG@10
    (``{"chance": 0.25, "tie_aware": 0.6}``), which the report writer turns into leaderboard.json's floors."""
    from medbench_core.evaluation.reports import Cell, Significance, build_tables, write_leaderboard
    from medbench_core.storage import write_manifest

    models = models or {"bm25": "bm25", "dense": "dense"}
    tasks = tasks or {"t1": "t1", "t2": "t2", "img": "img"}
    world = SiteWorld(root, models, tasks)
    cells, provenance = [], {}
    for t_role, t in tasks.items():
        folder = world.data / "tasks" / t
        folder.mkdir(parents=True)
        meta = {"name": t, "source": f"hand-made {t_role}", "description": f"the {t_role} task", "main_metric": "ndcg_at_10", **META[t_role]}
        (folder / "task.json").write_text(json.dumps({"content_hash": f"hash-{t_role}", "meta": meta}))
        write_manifest(folder, ["task.json"], {"content_hash": f"hash-{t_role}", "inputs": {"entry": "e" * 16, "files": "f" * 64}, "task": t})
        outcomes = [{"rule": "queries.parquet has at least one row", "file": "queries.parquet", "aspect": "integrity", "blocking": True, "success": True,
                     "observed": "4"}]  # fmt: skip
        (folder / "gate").mkdir()
        (folder / "gate" / "contract.json").write_text(json.dumps({"outcomes": outcomes}))
        (folder / "GATE.json").write_text(json.dumps({"passed": True, "message": f"task {t}: gate passed (1 expectations)", "licences": {"CC-BY-4.0": 4}}))
        for m_role, m in models.items():
            values = VALUES.get((m_role, t_role))
            if values is None:
                cells.append(Cell(m, t, applicable=False, research_only=META[t_role]["research_only"]))
                continue
            qids = [f"q{i}" for i in range(len(values))]
            per_query = pl.DataFrame({"query_id": qids, "ndcg_at_10": values, "recall_at_10": [1.0 if v > 0 else 0.0 for v in values]})
            mean = {"ndcg_at_10": sum(values) / len(values), "recall_at_10": float(per_query["recall_at_10"].mean())}
            metrics = {"mean": mean, "breakdowns": {"language": {"en": mean}} if t_role != "t2" else {"language": {
                "en": {"ndcg_at_10": sum(values[:2]) / 2}, "ja": {"ndcg_at_10": sum(values[2:]) / 2}}}}  # fmt: skip
            for field_name, v in (floors or {}).get((m_role, t_role), {}).items():
                metrics[field_name] = {"ndcg_at_10": v}
            key = f"key-{m_role}-{t_role}"
            art = world.data / "artifacts" / m / t / "metrics" / key
            art.mkdir(parents=True)
            (art / "metrics.json").write_text(json.dumps(metrics))
            per_query.write_parquet(art / "per_query.parquet")
            write_manifest(art, ["metrics.json", "per_query.parquet"])
            provenance[f"{m}/{t}"] = {"metrics_key": key, "run_key": f"run-{m_role}-{t_role}", "model_revision": f"rev-{m_role}",
                                      "task_content_hash": f"hash-{t_role}"}  # fmt: skip
            cells.append(Cell(m, t, metrics=metrics, per_query=per_query, research_only=META[t_role]["research_only"], provenance=provenance[f"{m}/{t}"]))
    out = world.data / "reports"
    tables = build_tables(
        cells, list(models.values()), list(tasks.values()), Significance(models["bm25"], n_resamples=1000),
        research_only=[tasks[r] for r in tasks if META[r]["research_only"]],
    )  # fmt: skip
    write_leaderboard(tables, out, extra_json={"benchmark": "mini", "cells": provenance, **(extra_json or {})})
    return world


def add_to_stats(world: SiteWorld, fields: dict[tuple[str, str], dict]) -> None:
    """Add fields to the saved stats rows, as a later stage might (a chance floor, a tie-aware figure, a mark)."""
    doc = json.loads(world.board.read_text())
    for r in doc["stats"]:
        r.update(fields.get((r["model"], r["task"]), {}))
    world.board.write_text(json.dumps(doc, indent=2, sort_keys=True))
