"""The leaderboard: nDCG@10 of every registered model on every task, printed and saved."""

import json

import dagster as dg

from assets.stage import ASSET_OF_STAGE, CODE_VERSION
from medbench_core.encoders import cached_revision
from medbench_core.errors import MedbenchError
from medbench_core.leaderboard import Entry, table, to_markdown
from medbench_core.pipeline import applicability, partition_keys
from medbench_core.storage import is_complete, write_json_atomic, write_text_atomic
from runtime.resources import ArtifactStoreResource, RegistryResource


@dg.asset(
    deps=[ASSET_OF_STAGE["metrics"]],
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
                provenance[f"{m.name}/{t.name}"] = {"metrics_key": keys["metrics"], "task_content_hash": task.content_hash(), "model_revision": cached_revision(m)}
            entries.append(Entry(m.name, t.name, value, t.name in research_only, applicable))
    df = table(entries, [m.name for m in models], catalog.names)
    md = to_markdown(df, research_only, not_applicable={(e.model, e.task) for e in entries if not e.applicable})
    md += f"\ncode version {CODE_VERSION}, git {registry.git_sha()}; per-cell provenance in leaderboard.json\n"
    layout = store.layout
    write_text_atomic(layout.leaderboard_file("md"), md)
    write_text_atomic(layout.leaderboard_file("csv"), df.write_csv())
    write_json_atomic(layout.leaderboard_file("json"), {"benchmark": catalog.benchmark, "metric": "ndcg_at_10", "cells": provenance, "table": df.to_dicts()})
    context.log.info("\n" + md)
    return dg.MaterializeResult(
        metadata={"leaderboard": dg.MetadataValue.md(md), "path": dg.MetadataValue.path(str(layout.leaderboard_file("md"))), "cells_filled": len(provenance)},
    )
