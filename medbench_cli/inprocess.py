"""The Dagster runs a ``medbench`` command executes in its own process: owned, never stuck on a pool, stopped when told.

:func:`execute` runs a job as ``execute_in_process`` does, and

- tags the run with this process (:func:`orchestration.recovery.owner_tags`), so that the next
  command can tell the run was left by a dead process;
- before it starts, reclaims what dead runs hold and waits for a free slot of each pool the job
  claims, in this thread, where SIGINT and SIGTERM stop it at once; a slot a *live* run holds is
  named (its run, step and process) and waited for at most ``MEDBENCH_POOL_WAIT`` seconds;
- while it runs, watches it from a second thread: a step that ends up waiting for a slot after
  all (another process took it first) gets the same reclaiming, naming and bound; after a stop
  signal, every step Dagster starts is interrupted at once (Dagster raises the signal in the
  running step, but its RetryPolicy then starts that step again: an interrupted encoding began
  anew); and a stop signal that Dagster sits on (its wait for a slot checks for none; or a step
  that does not return to Python within :data:`GRACE_SECONDS`) ends the command there, the run
  marked failed and its slots freed (:func:`orchestration.recovery.abandon`);
- after it ran, stops the command if a signal came meanwhile (:func:`medbench_cli.stopping.check`).

:func:`recover` is what a command does first: runs of dead processes marked failed, their slots
freed, their MLflow runs ended, the temporaries of their interrupted writes removed.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from medbench_cli import failures, stopping
from runtime import settings

GRACE_SECONDS = 20.0  # how long a step has to give way to a stop signal before the command stops without it
SAY_EVERY_SECONDS = 300.0  # how often a wait says again what it waits for (Dagster's own interval)
RECLAIM_EVERY_SECONDS = 5.0
# How often the guard asks the instance whether a step of its run waits for a pool slot: each ask is
# an SQLite query (7 ms of CPU), and a run spends most of its time inside steps that already hold
# their slot or need none, so the interval doubles while nothing waits (0.5 s after a wait or a stop signal).
GUARD_POLL_SECONDS = (0.5, 4.0)


def say(line: str) -> None:
    print(line, flush=True)


def recover(instance, data_root: Path, mlflow=None, experiment: str | None = None, tell: Callable[[str], None] = say) -> list[str]:
    """Reclaim what killed commands left: Dagster runs of dead processes (marked failed, slots freed), their
    RUNNING MLflow runs (marked KILLED) and the temporaries of their interrupted writes under ``data_root``."""
    from medbench_core.storage import remove_abandoned_temporaries
    from orchestration.recovery import reclaim

    lines = [f"[recover] {r.line()}" for r in reclaim(instance)]
    if lines and mlflow is not None and experiment:
        from runtime.mlflow_store import dagster_run_alive

        killed = mlflow.reconcile_stale_runs(experiment, is_alive=dagster_run_alive(instance))
        if killed:
            lines.append(f"[recover] MLflow: {len(killed)} run(s) left RUNNING by them marked KILLED: {', '.join(k[:8] for k in killed)}")
    removed = remove_abandoned_temporaries(data_root, recursive=True)
    if removed:
        shown = ", ".join(str(p.relative_to(data_root)) for p in removed[:4]) + (", ..." if len(removed) > 4 else "")
        lines.append(f"[recover] removed {len(removed)} partial write(s) of killed runs under {data_root}: {shown}")
    for line in lines:
        tell(line)
    return lines


def execute(job, instance, *, what: str, tags: dict[str, str] | None = None, tell: Callable[[str], None] = say, **kwargs: Any):
    """``job.execute_in_process(instance=instance, **kwargs)`` as the module docstring says; ``what`` names it in messages."""
    from orchestration.recovery import job_pools, owner_tags
    from runtime.world import world_tags

    pools = job_pools(job)
    if pools:
        _wait_for_pools(instance, pools, what, tell)
    run_id = str(uuid.uuid4())  # chosen here, so that the guard knows which run to watch
    guard = _Guard(instance, run_id, pools, what, tell)
    guard.start()
    try:
        # The run names its process (for recovery) and the state it writes into (runtime/world.py: the stale rule reads only this state's runs).
        where = world_tags(settings.DATA, settings.default_tracking_uri())
        result = job.execute_in_process(instance=instance, run_id=run_id, tags={**owner_tags(), **where, **(tags or {})}, **kwargs)
    finally:
        guard.finish()
    if pools and instance.event_log_storage.supports_global_concurrency_limits:
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)  # a step it never reached may still be queued
    stopping.check()
    return result


def _wait_for_pools(instance, pools: list[str], what: str, tell: Callable[[str], None]) -> None:
    """Return once every pool of ``pools`` has a free slot; reclaims dead holders, says who the live ones are, gives up after MEDBENCH_POOL_WAIT s."""
    from orchestration.recovery import pool_state, reclaim

    start = time.monotonic()
    told = last_reclaim = None
    while True:
        now = time.monotonic()
        if last_reclaim is None or now - last_reclaim >= RECLAIM_EVERY_SECONDS:
            for r in reclaim(instance):
                tell(f"[recover] {r.line()}")
            last_reclaim = now
        busy = [s for s in (pool_state(instance, p) for p in pools) if not s.free]
        if not busy:
            return
        for state in busy:
            if state.limit == 0:
                raise failures.Refusal(
                    f"pool {state.pool} has a limit of 0 slots in the Dagster instance ({os.environ.get('DAGSTER_HOME', '')}): "
                    f"no step of it can ever run ({what})",
                    kept="nothing was run",
                    todo=f"give it a slot: dagster instance concurrency set {state.pool} 1",
                )
        held = "; ".join(
            f"pool {s.pool} ({s.limit} slot(s)) is held by " + ", ".join(h.line() for h in s.holders) if s.holders else f"pool {s.pool} is full" for s in busy
        )
        waited = now - start
        if waited > settings.POOL_WAIT_SECONDS:
            raise failures.Refusal(
                f"{what}: still waiting for a pool slot after {waited:.0f} s: {held}",
                kept="nothing of it was run; every artifact as it was",
                todo="let that run finish or stop it, then run this again (MEDBENCH_POOL_WAIT sets how many seconds to wait)",
            )  # fmt: skip
        if told is None or now - told >= SAY_EVERY_SECONDS:
            limit = f"{settings.POOL_WAIT_SECONDS / 60:.0f} min" if settings.POOL_WAIT_SECONDS >= 120 else f"{settings.POOL_WAIT_SECONDS:.0f} s"
            tell(f"[wait] {what}: {held}; waiting for it (at most {limit}: MEDBENCH_POOL_WAIT; Ctrl-C stops)")
            told = now
        time.sleep(1.0)


def _interrupt_next_steps() -> None:
    """Have Dagster raise an interrupt as the next step (or retry of a step) of this process's run begins.

    Dagster's own record of a signal that came outside a step (dagster._utils.interrupts, checked
    as each step begins); kept set while a stop is asked for, since each check clears it.
    """
    try:
        # Private: Dagster has no public way to ask a run executing in this process to stop (its
        # termination goes through a run launcher, which in-process runs do not have).
        from dagster._utils import interrupts

        interrupts._received_interrupt["received"] = True
    except (ImportError, AttributeError, TypeError):  # another Dagster: the grace period still ends the command
        pass


class _Guard(threading.Thread):
    """Watches one in-process run from beside it: a wait for a pool slot that Dagster's loop would sit through, and stop signals."""

    def __init__(self, instance, run_id: str, pools: list[str], what: str, tell: Callable[[str], None]) -> None:
        super().__init__(name=f"medbench-guard-{run_id[:8]}", daemon=True)
        self.instance, self.run_id, self.pools, self.what, self.tell = instance, run_id, pools, what, tell
        self._over = threading.Event()

    def finish(self) -> None:
        self._over.set()
        self.join(timeout=10)

    def run(self) -> None:
        from orchestration.recovery import pool_state, reclaim, waiting_steps

        signalled_at = blocked_since = told = last_reclaim = None
        shortest, longest = GUARD_POLL_SECONDS
        interval, asked = shortest, -float("inf")
        while not self._over.wait(shortest):
            now = time.monotonic()
            signum = stopping.requested()
            if signum is not None:
                signalled_at = signalled_at or now
                _interrupt_next_steps()
            if signalled_at is None and blocked_since is None and now - asked < interval:
                continue
            asked = now
            try:
                waiting = waiting_steps(self.instance, self.run_id, self.pools)
            except Exception:  # noqa: BLE001 (the instance busy or closing: look again in a second)
                waiting = []
            if not waiting:
                blocked_since = None
                interval = min(2 * interval, longest)
            else:
                interval = shortest
                pool, step = waiting[0]
                blocked_since = blocked_since or now
                where = f"while step {step} waited for a slot of pool {pool}"
                if signum is not None:
                    self._end_command(stopping.Stopped(signum).name, 128 + signum, where)
                if last_reclaim is None or now - last_reclaim >= RECLAIM_EVERY_SECONDS:
                    for r in reclaim(self.instance):
                        self.tell(f"[recover] {r.line()}")
                    last_reclaim = now
                if now - blocked_since >= 2 and (told is None or now - told >= SAY_EVERY_SECONDS):
                    holders = ", ".join(h.line() for h in pool_state(self.instance, pool).holders) or "a run that just took it"
                    self.tell(
                        f"[wait] {self.what}: step {step} waits for pool {pool}, held by {holders} (at most {settings.POOL_WAIT_SECONDS:.0f} s; Ctrl-C stops)"
                    )
                    told = now
                if now - blocked_since > settings.POOL_WAIT_SECONDS:
                    self._end_command(
                        None,
                        failures.FAILED,
                        f"{where}: still waiting after {now - blocked_since:.0f} s (MEDBENCH_POOL_WAIT)",
                    )
            if signalled_at is not None and now - signalled_at > GRACE_SECONDS:
                self._end_command(stopping.Stopped(signum).name, 128 + signum, f"which did not give way within {GRACE_SECONDS:.0f} s")

    def _end_command(self, signame: str | None, code: int, where: str) -> None:
        """End the command now (the main thread is inside Dagster): the run marked failed, its slots freed, one last line."""
        from orchestration.recovery import abandon

        cause = f"stopped by {signame}" if signame else "gave up"
        try:
            abandon(self.instance, self.run_id, f"medbench {cause} {where}; its process exited.")
        except Exception as exc:  # noqa: BLE001 (the last line still comes; the next command reclaims the run)
            failures.log().exception(exc)
        sys.stdout.flush()
        failures.say(
            failures.log().command, f"{cause} during {self.what} {where}",
            kept=f"kept: every complete artifact; Dagster run {self.run_id[:8]} is marked failed and its pool slots freed",
            todo="run the command again to finish",
        )  # fmt: skip
        sys.stderr.flush()
        os._exit(code)
