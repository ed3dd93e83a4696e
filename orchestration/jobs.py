"""Jobs: curate tasks (with their gates), evaluate model x task partitions, build the leaderboard."""

from __future__ import annotations

import dagster as dg

from orchestration.partitions import model_task_partitions, task_partitions

CURATED = dg.AssetKey("curated_task")
TASK_CHECK = dg.AssetCheckKey(CURATED, "task_contract")
OVERLAP_CHECK = dg.AssetCheckKey(CURATED, "tasks_do_not_overlap")

# Per task: curate and run its own contract. The cross-task overlap check runs once after all
# tasks are curated (check_overlap); materialising curated_task from the UI runs both.
curate_tasks_job = dg.define_asset_job(
    "curate_tasks",
    selection=dg.AssetSelection.assets(CURATED).without_checks() | dg.AssetSelection.checks(TASK_CHECK),
    partitions_def=task_partitions,
)
check_overlap_job = dg.define_asset_job("check_overlap", selection=dg.AssetSelection.checks(OVERLAP_CHECK))
evaluate_partition_job = dg.define_asset_job(
    "evaluate_partition",
    selection=dg.AssetSelection.assets("corpus_embeddings", "corpus_index", "retrieval_run", "task_metrics"),
    partitions_def=model_task_partitions,
)
leaderboard_job = dg.define_asset_job("build_leaderboard", selection=dg.AssetSelection.assets("leaderboard"))
