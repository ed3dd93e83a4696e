"""RELIABILITY.md test 16: a run killed while holding a concurrency slot; the next queued run still starts.

A real daemon (queued run coordinator, run monitoring, run retries) on a tmp instance configured
by the project's dagster.yaml, with only the polling intervals shortened. Run 1 takes the single
slot of pool ``encode`` and is SIGKILLed with its step process mid-step, so nothing releases the
slot in-process. The code server marks the run failed; run monitoring
(``free_slots_after_run_end_seconds``) frees its slot; the automatic retry of run 1 (a crashed
worker is retried, run_retries) and run 2, queued behind the full pool, both start and succeed.
Without that setting both would wait forever.

The same for a run a ``medbench`` command executes in its own process (issue 29): Dagster's run
monitoring never looks at such a run, so nothing ended it or freed its slot, and the next step of
the pool waited forever. The command that comes next (:func:`medbench_cli.inprocess.execute`) names
a live holder and gives up after MEDBENCH_POOL_WAIT, and reclaims a dead one: marked failed, its
slot freed, whether the run names its process in tags or, left by an older medbench, only in the
pids of its events.
"""

import os
import signal
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from tests import processes
from tests.orchestration.operating_env import ROOT

pytestmark = [pytest.mark.server, pytest.mark.slow]

DEFS = """
import os, time
from pathlib import Path
import dagster as dg

@dg.asset(pool="encode")
def hold_slot():
    marker = Path(os.environ["SLOT_MARKER"])
    if not marker.exists():  # the first attempt hangs holding the slot; its retry finishes
        marker.write_text(str(os.getpid()))
        time.sleep(600)

@dg.asset(pool="encode")
def next_encode():
    return 1

defs = dg.Definitions(
    assets=[hold_slot, next_encode],
    jobs=[dg.define_asset_job("hold", [hold_slot]), dg.define_asset_job("after", [next_encode])],
)
"""


# A run executed in process, as a medbench command executes its runs (tagged) or as an older one did.
IN_PROCESS = """
import sys
import dagster as dg
from orchestration.recovery import owner_tags
sys.path.insert(0, sys.argv[2])
from slot_defs import defs
with dg.DagsterInstance.get() as instance:
    defs.resolve_job_def("hold").execute_in_process(instance=instance, tags=owner_tags() if sys.argv[1] == "tagged" else {})
"""


def wait_for(what: str, predicate, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_the_project_instance_frees_slots_of_runs_that_died_holding_them():
    config = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    assert config["run_monitoring"]["enabled"] is True
    assert config["run_monitoring"]["free_slots_after_run_end_seconds"] > 0
    assert config["concurrency"]["pools"]["default_limit"] == 1  # the encode pool


def test_a_run_killed_holding_the_encode_slot_does_not_block_the_next_run(tmp_path):
    import subprocess

    home = tmp_path / "home"
    home.mkdir()
    config = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    config["run_monitoring"].update(poll_interval_seconds=1, free_slots_after_run_end_seconds=1)
    config["run_coordinator"] = {"module": "dagster.core.run_coordinator", "class": "QueuedRunCoordinator", "config": {"dequeue_interval_seconds": 1}}
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "slot_defs.py").write_text(DEFS)
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(f"load_from:\n  - python_file:\n      relative_path: {tmp_path / 'slot_defs.py'}\n      location_name: slots\n")
    marker = tmp_path / "step.pid"
    env = {**os.environ, "DAGSTER_HOME": str(home), "SLOT_MARKER": str(marker)}
    dagster = [sys.executable, "-m", "dagster"]

    def launch(job: str) -> None:
        subprocess.run([*dagster, "job", "launch", "-w", str(workspace), "-j", job], env=env, cwd=tmp_path, check=True, capture_output=True, timeout=120)

    # The instance's SQLite storage is created here, once, before the daemon and the launcher open it:
    # three processes creating it at once can leave two alembic heads ("more than one head present").
    dg.DagsterInstance.from_config(str(home)).dispose()
    log = open(tmp_path / "daemon.log", "wb")
    daemon_cli = str(Path(sys.executable).parent / "dagster-daemon")
    daemon = processes.start([daemon_cli, "run", "-w", str(workspace)], env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            launch("hold")
            step_pid = int(wait_for("the first run's step to take the slot", lambda: marker.exists() and marker.read_text()))
            info = instance.event_log_storage.get_concurrency_info("encode")
            assert (info.slot_count, len(info.claimed_slots)) == (1, 1)
            (first,) = instance.get_runs()

            worker_pid = int(Path(f"/proc/{step_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])  # the step's parent
            for pid in (worker_pid, step_pid):
                os.kill(pid, signal.SIGKILL)
            wait_for("the killed run to be marked failed", lambda: instance.get_run_by_id(first.run_id).status == dg.DagsterRunStatus.FAILURE)

            launch("after")
            done = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
            runs = wait_for(
                "the retry and the next run to finish",
                lambda: (rs := [r for r in instance.get_runs() if r.run_id != first.run_id]) and len(rs) == 2 and all(r.status in done for r in rs) and rs,
            )
            retry = next(r for r in runs if r.job_name == "hold")
            after = next(r for r in runs if r.job_name == "after")
            assert retry.tags["dagster/parent_run_id"] == first.run_id
            assert (retry.status, after.status) == (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.SUCCESS)
            assert instance.get_latest_materialization_event(dg.AssetKey("next_encode")) is not None
            assert instance.event_log_storage.get_concurrency_info("encode").claimed_slots == []
    finally:
        processes.stop(daemon, grace=30)  # the daemon's group: its code server and the run workers it launched
        log.close()


def _in_process_world(tmp_path: Path) -> tuple[Path, dict, dg.JobDefinition]:
    """The project's instance settings (intervals shortened) in a tmp DAGSTER_HOME, the slot jobs, and the environment of a run there."""
    import runpy

    home = tmp_path / "home"
    home.mkdir()
    config = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    config["run_monitoring"].update(poll_interval_seconds=1, free_slots_after_run_end_seconds=1)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "slot_defs.py").write_text(DEFS)
    dg.DagsterInstance.from_config(str(home)).dispose()  # its storage created once, before two processes open it
    env = {**os.environ, "DAGSTER_HOME": str(home), "SLOT_MARKER": str(tmp_path / "step.pid"), "PYTHONPATH": str(ROOT)}
    after = runpy.run_path(str(tmp_path / "slot_defs.py"))["defs"].resolve_job_def("after")
    return home, env, after


def _start_holder(tmp_path: Path, env: dict, how: str):
    import subprocess

    proc = processes.start([sys.executable, "-c", IN_PROCESS, how, str(tmp_path)], env=env, cwd=ROOT, stderr=subprocess.PIPE)
    pid = int(wait_for("the in-process run to take the slot", lambda: (tmp_path / "step.pid").exists() and (tmp_path / "step.pid").read_text()))
    assert pid == proc.pid  # the step runs in the process that executes the run
    return proc


def test_an_in_process_run_holding_the_slot_is_named_while_alive_and_reclaimed_once_killed(tmp_path, monkeypatch):
    import socket

    from medbench_cli import failures, inprocess
    from runtime import settings

    home, env, after = _in_process_world(tmp_path)
    holder = _start_holder(tmp_path, env, "tagged")
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            (held,) = instance.get_runs()
            assert (held.tags["medbench/pid"], held.tags["medbench/host"]) == (str(holder.pid), socket.gethostname())
            who = f"medbench process {holder.pid} on {socket.gethostname()}"

            # Alive: the next run says whose slot it waits for, and gives up after MEDBENCH_POOL_WAIT, having run nothing.
            monkeypatch.setattr(settings, "POOL_WAIT_SECONDS", 3.0)
            said: list[str] = []
            with pytest.raises(failures.Refusal) as refused:
                inprocess.execute(after, instance, what="evaluate after", tell=said.append, raise_on_error=False)
            holding = f"pool encode (1 slot(s)) is held by Dagster run {held.run_id[:8]} (hold, step hold_slot; {who}, alive)"
            assert said == [f"[wait] evaluate after: {holding}; waiting for it (at most 3 s: MEDBENCH_POOL_WAIT; Ctrl-C stops)"]
            assert refused.value.what.startswith("evaluate after: still waiting for a pool slot after ") and refused.value.what.endswith(f" s: {holding}")
            assert [r.run_id for r in instance.get_runs()] == [held.run_id]

            # Killed: Dagster leaves the run STARTED with its slot; the next run reclaims both and runs.
            holder.kill()
            holder.wait(timeout=30)
            assert instance.get_run_by_id(held.run_id).status == dg.DagsterRunStatus.STARTED
            assert [(s.run_id, s.step_key) for s in instance.event_log_storage.get_concurrency_info("encode").claimed_slots] == [(held.run_id, "hold_slot")]
            said.clear()
            result = inprocess.execute(after, instance, what="evaluate after", tell=said.append, raise_on_error=False)
            assert result.success
            assert said == [f"[recover] Dagster run {held.run_id[:8]} (hold): its {who} is gone: marked failed and freed its slot(s) in pool encode"]
            assert instance.get_run_by_id(held.run_id).status == dg.DagsterRunStatus.FAILURE
            assert instance.get_run_by_id(result.run_id).tags["medbench/pid"] == str(os.getpid())
            info = instance.event_log_storage.get_concurrency_info("encode")
            assert (info.claimed_slots, info.pending_steps) == ([], [])
    finally:
        processes.stop(holder, grace=5)


def test_an_untagged_in_process_run_killed_holding_the_slot_is_judged_by_its_events_pids(tmp_path):
    from medbench_cli import inprocess

    home, env, after = _in_process_world(tmp_path)
    holder = _start_holder(tmp_path, env, "untagged")  # as medbench executed its runs before issue 29
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            (held,) = instance.get_runs()
            assert "medbench/pid" not in held.tags
            holder.kill()
            holder.wait(timeout=30)
            said: list[str] = []
            result = inprocess.execute(after, instance, what="evaluate after", tell=said.append, raise_on_error=False)
            assert result.success
            # Reclaimed once it had written nothing for free_slots_after_run_end_seconds (1 s here; meanwhile named as gone).
            assert (
                said[-1]
                == f"[recover] Dagster run {held.run_id[:8]} (hold): its process {holder.pid} is gone: marked failed and freed its slot(s) in pool encode"
            )
            assert all(f"(hold, step hold_slot; process {holder.pid}, gone)" in line for line in said[:-1])
            assert instance.get_run_by_id(held.run_id).status == dg.DagsterRunStatus.FAILURE
            assert instance.event_log_storage.get_concurrency_info("encode").claimed_slots == []
    finally:
        processes.stop(holder, grace=5)
