"""Crash recovery on the Dagster instance: runs whose process is gone, and the pool slots they hold.

A ``medbench`` command executes its jobs in its own process (``execute_in_process``). Killed there
(SIGKILL, the OOM killer, a closed terminal), it leaves its run STARTED and the ``encode`` slot its
step had claimed. Dagster frees nothing of it: run monitoring asks the run launcher about the
workers of *launched* runs only, and frees the slots of runs that have *ended*; and an in-process
step that finds the pool full waits for it in a loop that never gives up. So every later step of
pool ``encode`` waited forever (issue 29).

What this module decides, so that the next command can reclaim what a dead one left:

- every in-process run of medbench carries its process in tags (:func:`owner_tags`: host, pid and
  the process's start time, so that a reused pid is not taken for it); a run whose process is
  gone is dead;
- a run without those tags (launched from the UI, or written by an older medbench) is judged by
  the processes its events came from (Dagster records the pid of every event), on an instance
  stored in this machine's SQLite, and only once it has written nothing for a while: dead when
  none of them is alive;
- a dead run is marked failed and its slots (claimed or queued) freed; the slots of a run that
  ended are freed as run monitoring would free them (``free_slots_after_run_end_seconds``), at
  once when its process is known to be gone.

Nothing here waits or prints: the command decides (:mod:`medbench_cli.inprocess`).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

HOST_TAG = "medbench/host"
PID_TAG = "medbench/pid"
PROCESS_STARTED_TAG = "medbench/process_started"  # the process's start time, seconds since the epoch
# A pid names the same process when that process started no later than this after the time recorded
# for it (start times are derived from clock ticks since boot: they agree to within a second).
_SAME_PROCESS_SECONDS = 2.0
_DEFAULT_GRACE_SECONDS = 30.0


def owner_tags() -> dict[str, str]:
    """Tags naming this process (host, pid, start time), for the runs it executes in process."""
    started = _process_started(os.getpid())
    return {
        HOST_TAG: socket.gethostname(),
        PID_TAG: str(os.getpid()),
        PROCESS_STARTED_TAG: f"{started:.2f}" if started else "",
    }


@dataclass(frozen=True)
class Verdict:
    """Whether a run's process lives: True, False, or None when it cannot be told from here; ``who`` says which process.

    ``quiet_since``: for a run judged by its events' pids, when it last wrote one (it is reclaimed
    only a grace period later: the code server that launched it may be marking it failed itself).
    """

    alive: bool | None
    who: str
    quiet_since: float | None = None


@dataclass(frozen=True)
class Reclaimed:
    """A run of a dead process that was marked failed, or whose slots were freed."""

    run_id: str
    label: str  # job and partition
    why: str
    marked_failed: bool
    pools: list[str] = field(default_factory=list)

    def line(self) -> str:
        done = ["marked failed"] if self.marked_failed else []
        if self.pools:
            done.append(f"freed its slot(s) in pool {', '.join(sorted(set(self.pools)))}")
        return f"Dagster run {self.run_id[:8]} ({self.label}): {self.why}: {' and '.join(done) or 'nothing to do'}"


@dataclass(frozen=True)
class Holder:
    """A run holding a pool slot, as a waiting command names it."""

    pool: str
    run_id: str
    step: str
    label: str
    verdict: Verdict

    def line(self) -> str:
        state = {True: "alive", False: "gone", None: "not checkable from here"}[self.verdict.alive]
        return f"Dagster run {self.run_id[:8]} ({self.label}, step {self.step}; {self.verdict.who}, {state})"


def run_label(run: dg.DagsterRun | None) -> str:
    """``job partition``, as a message names a run."""
    if run is None:
        return "a run this instance does not know"
    partition = run.tags.get("dagster/partition")
    return f"{run.job_name} {partition}" if partition else run.job_name


def judge(instance: dg.DagsterInstance, record: Any) -> Verdict:
    """Whether the process executing the run of ``record`` (a RunRecord) is alive."""
    run = record.dagster_run
    tags = run.tags
    if PID_TAG in tags:
        host, pid = tags.get(HOST_TAG, ""), int(tags[PID_TAG])
        who = f"medbench process {pid} on {host}"
        if host != socket.gethostname():
            return Verdict(None, who)
        started = float(tags[PROCESS_STARTED_TAG]) if tags.get(PROCESS_STARTED_TAG) else None
        return Verdict(_same_process(pid, started, exact=True), who)
    if not _local_storage(instance):
        return Verdict(None, "processes on other hosts, maybe")
    if run.status not in (dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING):
        return Verdict(None, "no worker yet" if not run.is_finished else "ended")  # starting: run monitoring's start timeout decides
    first_seen: dict[int, float] = {}
    last = record.create_timestamp.timestamp()
    for entry in instance.all_logs(run.run_id):
        last = max(last, entry.timestamp)
        pid = entry.dagster_event.pid if entry.dagster_event is not None else None
        if pid is not None and pid not in first_seen:
            first_seen[pid] = entry.timestamp
    if not first_seen:
        return Verdict(None, "no process recorded")
    who = f"process{'es' if len(first_seen) > 1 else ''} {', '.join(map(str, sorted(first_seen)))}"
    if any(_same_process(pid, seen, exact=False) for pid, seen in first_seen.items()):
        return Verdict(True, who)
    return Verdict(False, who, quiet_since=last)


def reclaim(instance: dg.DagsterInstance, now: float | None = None) -> list[Reclaimed]:
    """Mark failed every run whose process is gone, and free the pool slots of runs that can no longer use them."""
    now = now or time.time()
    out: list[Reclaimed] = []
    judged: dict[str, Verdict] = {}
    active = [
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED,
        dg.DagsterRunStatus.CANCELING,
        dg.DagsterRunStatus.NOT_STARTED,
    ]
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=active)):
        run = record.dagster_run
        if run.status == dg.DagsterRunStatus.NOT_STARTED and PID_TAG not in run.tags:
            continue  # created for a launch that has not happened: the run queue's business
        verdict = judge(instance, record)
        judged[run.run_id] = verdict
        if verdict.alive is False and now - (verdict.quiet_since or 0) >= _grace(instance):
            why = f"its {verdict.who} {'are' if verdict.who.startswith('processes') else 'is'} gone"
            instance.report_run_failed(
                run,
                message=f"Marked failed by medbench: the run's {verdict.who} is gone (killed or crashed); nothing will finish it.",
            )
            out.append(Reclaimed(run.run_id, run_label(run), why, True, _free(instance, run.run_id)))
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return out
    for run_id in storage.get_concurrency_run_ids() - {r.run_id for r in out}:
        record = instance.get_run_record_by_id(run_id)
        if record is None:
            out.append(Reclaimed(run_id, run_label(None), "the run was deleted", False, _free(instance, run_id)))
            continue
        run = record.dagster_run
        if not run.is_finished:
            continue  # alive, or judged above as not checkable
        verdict = judged.get(run_id) or judge(instance, record)
        ended = record.end_time or record.update_timestamp.timestamp()
        if (verdict.alive is False and verdict.quiet_since is None) or now - ended > _grace(instance):
            out.append(Reclaimed(run_id, run_label(run), f"it ended {run.status.value}", False, _free(instance, run_id)))
    return out


def abandon(instance: dg.DagsterInstance, run_id: str, message: str) -> None:
    """Mark the run failed (unless it ended) and free its slots: what a process about to exit says of the run it leaves."""
    run = instance.get_run_by_id(run_id)
    if run is not None and not run.is_finished:
        instance.report_run_failed(run, message=message)
    if instance.event_log_storage.supports_global_concurrency_limits:
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)


def job_pools(job: dg.JobDefinition) -> list[str]:
    """The pools the job's ops claim slots in (``pool=`` on an asset or op)."""
    return sorted({pool for node in job.nodes_in_topological_order if (pool := getattr(node.definition, "pool", None))})


@dataclass(frozen=True)
class PoolState:
    """One pool as a step about to claim it sees it: whether a slot is free, and who holds the others."""

    pool: str
    limit: int | None
    free: bool
    holders: list[Holder]


def pool_state(instance: dg.DagsterInstance, pool: str) -> PoolState:
    """Whether a step could claim a slot of ``pool`` now, and which runs hold its slots."""
    storage = instance.event_log_storage
    granularity = getattr(storage.get_pool_config().pool_granularity, "value", None)
    if not storage.supports_global_concurrency_limits or granularity == "run":
        return PoolState(pool, None, True, [])  # steps claim nothing (run granularity: the run queue counts)
    info = storage.get_concurrency_info(pool)
    assigned = [p for p in info.pending_steps if p.assigned_timestamp is not None]
    used = max(len(info.claimed_slots), len(assigned))
    holders = []
    for slot in info.claimed_slots:
        record = instance.get_run_record_by_id(slot.run_id)
        verdict = judge(instance, record) if record is not None else Verdict(False, "no run")
        holders.append(Holder(pool, slot.run_id, slot.step_key, run_label(record.dagster_run if record else None), verdict))
    return PoolState(pool, info.limit, info.limit is None or used < info.limit, holders)


def waiting_steps(instance: dg.DagsterInstance, run_id: str, pools: list[str]) -> list[tuple[str, str]]:
    """(pool, step) of every step of ``run_id`` queued for a slot it has not been given."""
    storage = instance.event_log_storage
    if not pools or not storage.supports_global_concurrency_limits:
        return []
    return [
        (pool, p.step_key)
        for pool, info in storage.get_concurrency_infos(pools).items()
        for p in info.pending_steps
        if p.run_id == run_id and p.assigned_timestamp is None
    ]


# --- processes ------------------------------------------------------------------------------------


def _process_started(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def _same_process(pid: int, started: float | None, exact: bool) -> bool:
    """Whether process ``pid`` runs and is the one recorded: started at ``started`` (``exact``) or by then."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:  # killed, not yet reaped by its parent
            return False
        created = proc.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # another user's: it exists, and cannot be told apart
        return True
    if started is None:
        return True
    if exact:
        return abs(created - started) <= _SAME_PROCESS_SECONDS
    return created <= started + _SAME_PROCESS_SECONDS


def _local_storage(instance: dg.DagsterInstance) -> bool:
    """Whether the runs are stored in SQLite files of this machine (by class name: the class is not public)."""
    return any(cls.__name__ == "SqliteRunStorage" for cls in type(instance.run_storage).__mro__)


def _grace(instance: dg.DagsterInstance) -> float:
    return float(instance.run_monitoring_settings.get("free_slots_after_run_end_seconds") or _DEFAULT_GRACE_SECONDS)


def _free(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """Free every slot ``run_id`` claimed or queued for; returns the pools it held slots in."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    pools = [key for key in storage.get_concurrency_keys() if any(s.run_id == run_id for s in storage.get_concurrency_info(key).claimed_slots)]
    storage.free_concurrency_slots_for_run(run_id)
    return pools
