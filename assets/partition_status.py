"""What Dagster knows of each model x task partition the leaderboard shows: whether its last evaluation failed or has not
ended (:func:`unconfirmed_cells`), judged by the runs of this state when one instance holds runs of several (issue 44.7)."""

import re

import dagster as dg

from assets.stage import ASSET_OF_STAGE
from medbench_core.evaluation.cell import Cell
from medbench_core.evaluation.stale import unconfirmed_reason
from runtime.partitions import Partitions, partition_key
from runtime.world import foreign


def unconfirmed_cells(instance: dg.DagsterInstance, tasks: list[str], cells: list[Cell], ours: dict[str, str] | None = None) -> dict[tuple[str, str], str]:
    """(model, task) -> why, for each cell with a value whose task_metrics partition Dagster shows as FAILED or
    IN_PROGRESS (its status in the UI: the last run that planned it failed, or has not ended, after its
    last materialisation): that value is not a result the pipeline stood behind, whatever its artifact holds.

    ``ours`` (:func:`runtime.world.world_tags`): the state this leaderboard belongs to. When the instance also
    holds runs of another state (one DAGSTER_HOME for two), the partition's status in the instance is that of
    whichever ran it last, so each partition is judged by the last run of this state that planned it instead
    (:func:`own_partition_status`; issue 44.7)."""
    filled = {str(partition_key(c.model, c.task)): (c.model, c.task) for c in cells if c.value() is not None}
    if not filled:
        return {}
    asset = dg.AssetKey(ASSET_OF_STAGE["metrics"])
    if ours and shared_with_another_state(instance, ours):
        status, planned_runs = own_partition_status(instance, asset, list(filled), ours)
    else:
        status = instance.get_status_by_partition(asset, list(filled), Partitions(tasks).model_task) or {}
        planned_runs = {}
    out = {}
    for key, (model, task) in filled.items():
        if status.get(key) not in (dg.AssetPartitionStatus.FAILED, dg.AssetPartitionStatus.IN_PROGRESS):
            continue
        if key in planned_runs:
            run = planned_runs[key]
        else:
            planned = instance.get_latest_planned_materialization_info(asset, key)
            run = instance.get_run_by_id(planned.run_id) if planned else None
        failed = status[key] == dg.AssetPartitionStatus.FAILED
        error = run_error(instance, run.run_id) if failed and run else ""
        out[(model, task)] = unconfirmed_reason(model, task, failed, run.run_id if run else None, run.status.value if run else None, error)
    return out


def shared_with_another_state(instance: dg.DagsterInstance, ours: dict[str, str]) -> bool:
    """Whether a run of this instance names another data root or MLflow store than ``ours``."""
    for key, values in instance.get_run_tags(tag_keys=list(ours)):
        if values - {ours[key]}:
            return True
    return False


_ENDED_BADLY = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


def own_partition_status(
    instance: dg.DagsterInstance, asset: dg.AssetKey, keys: list[str], ours: dict[str, str], look_back: int = 100
) -> tuple[dict[str, dg.AssetPartitionStatus], dict[str, object]]:
    """Each partition's status as the runs of this state (``ours``) leave it, and the run that decided it: the last
    of them that planned ``asset[key]`` (runs of another state skipped) failed or was cancelled without
    materialising it (FAILED), has not ended (IN_PROGRESS), or else materialised it (MATERIALIZED). A partition no
    run of this state planned among its last ``look_back`` plans has no status here."""
    status: dict[str, dg.AssetPartitionStatus] = {}
    deciding: dict[str, object] = {}
    for key in keys:
        plans = instance.fetch_planned_materializations(dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[key]), limit=look_back).records
        for plan in plans:  # newest first
            run = instance.get_run_by_id(plan.run_id)
            if run is None or foreign(run.tags, ours):
                continue
            if run.status == dg.DagsterRunStatus.SUCCESS:
                status[key] = dg.AssetPartitionStatus.MATERIALIZED
            elif run.status in _ENDED_BADLY:
                made = instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[key], after_storage_id=plan.storage_id), limit=look_back
                ).records
                materialised = any(r.run_id == run.run_id for r in made)
                status[key] = dg.AssetPartitionStatus.MATERIALIZED if materialised else dg.AssetPartitionStatus.FAILED
            else:
                status[key] = dg.AssetPartitionStatus.IN_PROGRESS
            deciding[key] = run
            break
    return status, deciding


def run_error(instance: dg.DagsterInstance, run_id: str) -> str:
    """The first line of the error that failed ``run_id``'s first failed step, as ``step: Error: message`` ("" when none)."""
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        data = entry.dagster_event.step_failure_data if entry.dagster_event else None
        err = data.error if data else None
        # Dagster's wrappers (step execution, retries): the cause is what failed.
        while err is not None and err.cause is not None and ((err.cls_name or "").startswith("Dagster") or err.cls_name == "RetryRequestedFromPolicy"):
            err = err.cause
        if err is not None:
            text = (err.message or "").strip().splitlines()
            first = re.sub(r"^(?:\w+\.)+(\w+): ", r"\1: ", text[0]) if text else ""  # "medbench_core.errors.DiskFull: ..." -> "DiskFull: ..."
            return f"{entry.step_key}: {first[:300]}" if first else str(entry.step_key)
    return ""
