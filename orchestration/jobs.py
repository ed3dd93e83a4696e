"""Jobs: curate tasks (with their gates), evaluate model x task partitions, build the leaderboard, re-score the canary.

Each job's partitions are those of the assets it selects (Dagster infers them), so nothing here
depends on the catalogue.
"""

from __future__ import annotations

import dagster as dg

from assets.checks import OVERLAP_CHECK, TASK_CHECK
from assets.stage import PARTITION_KEYS
from assets.tasks import CURATED_TASK

CURATE_JOB = "curate_tasks"
OVERLAP_JOB = "check_overlap"
EVALUATE_JOB = "evaluate_partition"
LEADERBOARD_JOB = "build_leaderboard"
JUDGE_JOB = "judge_tasks"
AUDIT_JOB = "audit_contamination"
CANARY_JOB = "rescore_canary"

# Per task: curate and run its own contract. The cross-task overlap check runs once after all
# tasks are curated (check_overlap); materialising curated_task from the UI runs both.
curate_tasks_job = dg.define_asset_job(
    CURATE_JOB,
    selection=dg.AssetSelection.assets(CURATED_TASK).without_checks() | dg.AssetSelection.checks(dg.AssetCheckKey(CURATED_TASK, TASK_CHECK)),
)
check_overlap_job = dg.define_asset_job(OVERLAP_JOB, selection=dg.AssetSelection.checks(dg.AssetCheckKey(CURATED_TASK, OVERLAP_CHECK)))
# Every asset of a model x task partition, with the expansion's blocking contract.
evaluate_partition_job = dg.define_asset_job(EVALUATE_JOB, selection=dg.AssetSelection.assets(*PARTITION_KEYS))
leaderboard_job = dg.define_asset_job(LEADERBOARD_JOB, selection=dg.AssetSelection.assets("leaderboard"))
# Per task, after its model x task runs: the LLM judgements of the registry's judgements: entries (the second qrels layer).
judge_tasks_job = dg.define_asset_job(JUDGE_JOB, selection=dg.AssetSelection.assets("relevance_judgements"))
# Per task, after every task is curated: near-duplicates in other tasks and declared training manifests (issue 49).
audit_contamination_job = dg.define_asset_job(AUDIT_JOB, selection=dg.AssetSelection.assets("contamination_audit"))
drift_canary_job = dg.define_asset_job(
    CANARY_JOB,
    selection=dg.AssetSelection.assets("drift_canary"),
    description="Re-score the pinned reference model from scratch and compare with its recorded baseline.",
)

ALL_JOBS = [curate_tasks_job, check_overlap_job, evaluate_partition_job, judge_tasks_job, audit_contamination_job, leaderboard_job, drift_canary_job]
