"""The leaderboard: nDCG@10 of every registered model on every task, printed and saved."""


import json

import dagster as dg

from assets._shared import CODE_VERSION, model_revision, partition_keys
from medbench_core.errors import MedbenchError
from medbench_core.leaderboard import Entry, table, to_markdown
from medbench_core.pipeline import applicability
from medbench_core.provenance import git_sha
from medbench_core.storage import is_complete, write_json_atomic, write_text_atomic
from orchestration import settings
from orchestration.resources import ArtifactStoreResource, RegistryResource


@dg.asset(
    deps=["task_metrics"],
    code_version=CODE_VERSION,
    group_name="reports",
    kinds={"markdown"},
    description="Model x task table of nDCG@10 for the current registry and catalogue, saved under data/reports.",
)
def leaderboard(context: dg.AssetExecutionContext, store: ArtifactStoreResource, registry: RegistryResource) -> dg.MaterializeResult:
    models = registry.models()
    catalog = registry.catalog()
    entries: list[Entry] = []
    provenance: dict[str, dict] = {}
    research_only = {t.name for t in catalog.tasks if t.research_only}
    for t in catalog.tasks:
        try:
            task = store.load_task(t.name)
        except MedbenchError:
            continue
        for m in models:
            try:
                keys = partition_keys(m, task)
            except MedbenchError:  # e.g. its model folder is gone: no result for the current entry
                entries.append(Entry(m.name, t.name, None, t.name in research_only, True))
                continue
            folder = store.artifact_dir(m.name, t.name, "metrics", keys["metrics"])
            value = None
            applicable = applicability(m, task) is None
            if applicable and is_complete(folder):
                value = json.loads((folder / "metrics.json").read_text())["mean"]["ndcg_at_10"]
                provenance[f"{m.name}/{t.name}"] = {"metrics_key": keys["metrics"], "task_content_hash": task.content_hash(), "model_revision": model_revision(m)}
            entries.append(Entry(m.name, t.name, value, t.name in research_only, applicable))
    df = table(entries, [m.name for m in models], catalog.names)
    md = to_markdown(df, research_only, not_applicable={(e.model, e.task) for e in entries if not e.applicable})
    md += f"\ncode version {CODE_VERSION}, git {git_sha(settings.ROOT)}; per-cell provenance in leaderboard.json\n"
    out = store.reports_dir()
    write_text_atomic(out / "leaderboard.md", md)
    write_text_atomic(out / "leaderboard.csv", df.write_csv())
    write_json_atomic(out / "leaderboard.json", {"benchmark": catalog.benchmark, "metric": "ndcg_at_10", "cells": provenance, "table": df.to_dicts()})
    context.log.info("\n" + md)
    return dg.MaterializeResult(
        metadata={"leaderboard": dg.MetadataValue.md(md), "path": dg.MetadataValue.path(str(out / "leaderboard.md")), "cells_filled": len(provenance)},
    )
