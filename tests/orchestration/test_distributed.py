"""The production profile on a real distributed executor: steps on two celery workers, and a worker killed mid-step.

One deployment for the module (distributed_env.CeleryBed): PostgreSQL and Redis started here,
deploy/production/dagster.yaml (dagster-postgres, queued runs), MEDBENCH_EXECUTOR=celery with
deploy/production/celery.yaml, a code server, a daemon and workers w1 and w2 (one pool process
each). The world: two tiny tasks, four BM25 variants, curated first.

1. A backfill of four model x task partitions: every step runs exactly once, on w1 or w2 as the
   event log says (dagster-celery's "Executing steps ... in celery worker" with the worker's
   hostname), both workers run steps, and every partition ends with its four artifacts verifying
   and one FINISHED MLflow run.
2. A whole worker SIGKILLed (launcher, celery, pool process) while its step holds a RUNNING MLflow
   run: the step's message was not acknowledged (task_acks_late), so Redis hands it to the other
   worker after the visibility timeout and the same run finishes: the step ran twice (killed
   worker, then survivor), every other step once, each asset materialised once, one active
   MLflow run (FINISHED), the killed attempt's run KILLED and deleted, no run left RUNNING, every
   manifest verifies.
3. Only the pool process SIGKILLed mid-write of the embeddings (as the OOM killer would): the
   surviving celery parent sends the step again at once (task_retry_on_worker_lost), the run
   finishes, and the killed attempt's temporary folder is gone (the next attempt of that artifact
   removes a dead writer's temporary; medbench_core.storage).

Dagster's RetryPolicy is not what retries in 2 and 3: a step process that dies reports no
failure, and dagster-celery turns a lost task into a run error, never a step retry; celery's
redelivery does it within the run. (The RetryPolicy still retries steps that raise.)
"""

import os
import signal
import time

import dagster as dg
import pytest

from medbench_release.release import verify_tree
from tests.orchestration.distributed_env import (
    VISIBILITY_TIMEOUT,
    celery_steps,
    postgres_server,
    profile_env,
    redis_server,
    start_celery_bed,
    write_profile,
)
from tests.orchestration.kill_env import (
    BM25_K09,
    BM25_K20,
    EXPANSION_STEPS,
    child_runs,
    debris,
    manifest_hashes,
    materializations,
    mlflow_runs,
    pkey,
    wait_for,
)
from tests.orchestration.operating_env import BM25, BM25_K12, curate, new_world

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.timeout(1800)]

TASKS = ["scifact", "liveqa_medquad"]
STEPS = ["corpus_embeddings", "corpus_index", "retrieval_run", "task_metrics"]
RUN_TIMEOUT = 480  # a cold step imports Dagster and the definitions in its worker: slow on a busy 2-core machine


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    from orchestration.registry_sync import sync_model_partitions

    root = tmp_path_factory.mktemp("distributed")
    with postgres_server() as pg, redis_server(root / "redis") as redis_url:
        world = new_world(root / "world", [BM25, BM25_K12, BM25_K09, BM25_K20])
        celery_yaml = write_profile(world)
        env = profile_env(world, pg, redis_url, celery_yaml)
        with pytest.MonkeyPatch.context() as mp:
            for k in ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "MEDBENCH_COMPUTE_LOGS"):
                mp.setenv(k, env[k])
            defs = world.defs()
            with world.instance() as instance:
                assert type(instance.run_storage).__name__ == "PostgresRunStorage"
                assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
                sync_model_partitions(instance, world.resources()["registry"])
                curate(world, instance, defs, TASKS)  # in process: the tasks exist before any celery run
            bed = start_celery_bed(world, root, env, celery_yaml)
            try:
                yield bed
            finally:
                bed.stop()


@pytest.fixture
def instance(bed):
    bed.ensure_workers()  # a test that killed one leaves it to be restarted here
    with pytest.MonkeyPatch.context() as mp:
        for k in ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "MEDBENCH_COMPUTE_LOGS"):
            mp.setenv(k, bed.env[k])
        with bed.instance() as inst:
            yield inst


def finished(instance, run_id, bed, timeout=RUN_TIMEOUT) -> dg.DagsterRun:
    logs = bed.world.root.parent
    wait_for(f"run {run_id} to finish (logs: {logs}/*.log)", lambda: instance.get_run_by_id(run_id).is_finished, timeout, every=1)
    return instance.get_run_by_id(run_id)


def failures(instance, run_id) -> str:
    return "\n".join(str(e.message) for e in instance.all_logs(run_id) if e.is_dagster_event and "FAILURE" in e.dagster_event.event_type_value)


def assert_partition_complete(bed, instance, model, task) -> str:
    """Four verifying artifacts, one materialisation per asset, exactly one active MLflow run (FINISHED); returns its id."""
    arts = {k for k in manifest_hashes(bed.data) if k.startswith(f"artifacts/{model}/{task}/")}
    assert sorted(a.split("/")[3] for a in arts) == ["embeddings", "index", "metrics", "run"]
    for asset in STEPS:
        assert len(materializations(instance, asset, model, task)) == 1, f"{asset} {model}|{task}"
    (run,) = mlflow_runs(bed.world)[(model, task)]
    assert run.info.status == "FINISHED"
    (metrics_dir,) = (bed.data / "artifacts" / model / task / "metrics").glob("[!.]*")
    assert run.data.tags["medbench.run_key"] == metrics_dir.name
    return run.info.run_id


def test_a_backfill_runs_its_steps_on_both_celery_workers(bed, instance):
    keys = [("bm25", "scifact"), ("bm25", "liveqa_medquad"), ("bm25-k12", "scifact"), ("bm25-k12", "liveqa_medquad")]
    known = {r.run_id for r in instance.get_runs()}
    left_before = set(debris(bed.data))  # the module's world: a kill test may have run first (random order)
    bed.backfill(keys)

    def backfill_runs():
        runs = [r for r in instance.get_runs() if r.run_id not in known]
        return len(runs) == len(keys) and all(r.is_finished for r in runs) and runs

    runs = wait_for(f"the backfill's {len(keys)} runs to finish (logs: {bed.world.root.parent})", backfill_runs, 2 * RUN_TIMEOUT, every=2)
    hosts = {bed.hostname("w1"), bed.hostname("w2")}
    ran_on: dict[str, str] = {}
    for run in runs:
        assert run.status == dg.DagsterRunStatus.SUCCESS, failures(instance, run.run_id)
        steps = celery_steps(instance, run.run_id)
        assert sorted(s for s, _ in steps) == sorted(STEPS), steps  # each step once, each on a celery worker
        assert {w for _, w in steps} <= hosts, steps
        every = celery_steps(instance, run.run_id, stages_only=False)
        assert sorted(s for s, _ in every if s not in STEPS) == EXPANSION_STEPS and {w for _, w in every} <= hosts, every
        submitted = [
            e.message for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT) if e.message.startswith("Submitting celery task")
        ]
        assert len(submitted) == len(STEPS) + len(EXPANSION_STEPS) and all('to queue "dagster"' in m for m in submitted)
        ran_on.update({f"{run.tags['dagster/partition']}:{s}": w for s, w in steps})
    assert set(ran_on.values()) == hosts, f"every step ran on one worker: {ran_on}"  # both workers took steps
    assert sorted(r.tags["dagster/partition"] for r in runs) == sorted(pkey(m, t) for m, t in keys)

    verify_tree(bed.data)
    for m, t in keys:
        assert_partition_complete(bed, instance, m, t)
    assert [p for p in debris(bed.data) if p not in left_before] == []


def test_a_worker_killed_mid_step_has_its_step_redelivered_to_the_other_and_the_run_finishes(bed, instance):
    model, task = "bm25-k09", "scifact"
    before = manifest_hashes(bed.data)
    left_before = set(debris(bed.data))
    pid_file = bed.hold("mlflow", model, task)
    run_id = bed.launch(model, task)
    step_pid = bed.held_pid(pid_file, timeout=RUN_TIMEOUT)
    victim = bed.worker_holding(step_pid)
    survivor = ({"w1", "w2"} - {victim}).pop()

    # The held attempt created its MLflow run and stopped inside it: RUNNING, its metrics artifact already in place.
    (held,) = mlflow_runs(bed.world)[(model, task)]
    assert held.info.status == "RUNNING" and held.data.tags["medbench.dagster_run_id"] == run_id
    assert celery_steps(instance, run_id)[-1] == ("task_metrics", bed.hostname(victim))
    assert step_pid in bed.kill_worker(victim)

    run = finished(instance, run_id, bed)
    assert run.status == dg.DagsterRunStatus.SUCCESS, failures(instance, run_id)
    steps = celery_steps(instance, run_id)
    # Same run, no retry run: task_metrics ran twice, first on the killed worker, then on the survivor.
    assert [s for s, _ in steps] == [*STEPS, "task_metrics"], steps
    assert steps[3] == ("task_metrics", bed.hostname(victim)) and steps[4] == ("task_metrics", bed.hostname(survivor))
    # Handed out again by Redis once the unacknowledged message was VISIBILITY_TIMEOUT old (swept every 2 s).
    first, again = (t for s, _, t in celery_steps(instance, run_id, with_time=True)[3:5])
    assert VISIBILITY_TIMEOUT - 5 <= again - first <= VISIBILITY_TIMEOUT + 90, again - first
    assert child_runs(instance, run_id) == []
    started = [e.step_key for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START) if e.step_key not in EXPANSION_STEPS]
    assert started == [*STEPS, "task_metrics"]

    mlflow_id = assert_partition_complete(bed, instance, model, task)
    assert mlflow_id != held.info.run_id
    latest = materializations(instance, "task_metrics", model, task)
    assert len(latest) == 1
    # The killed attempt's RUNNING run was ended (KILLED) and deleted by the redelivered attempt before it logged its own.
    client = bed.world.resources()["mlflow"].client()
    gone = client.get_run(held.info.run_id).info
    assert (gone.lifecycle_stage, gone.status) == ("deleted", "KILLED")
    from mlflow.entities import ViewType

    everything = client.search_runs([held.info.experiment_id], run_view_type=ViewType.ALL, max_results=1000)
    assert [r.info.run_id for r in everything if r.info.status == "RUNNING"] == []

    after = manifest_hashes(bed.data)
    verify_tree(bed.data)
    assert {k: after[k] for k in before} == before  # nothing else changed
    assert len(set(after) - set(before)) == 4
    assert [p for p in debris(bed.data) if p not in left_before] == []  # killed after the metrics artifact was swapped in: nothing half-written


def test_a_killed_pool_process_mid_write_is_resent_at_once_and_leaves_no_temporary_folder(bed, instance):
    model, task = "bm25-k20", "liveqa_medquad"
    before = manifest_hashes(bed.data)
    left_before = set(debris(bed.data))
    pid_file = bed.hold("embeddings", model, task)
    run_id = bed.launch(model, task)
    step_pid = bed.held_pid(pid_file, timeout=RUN_TIMEOUT)
    worker = bed.worker_holding(step_pid)
    (partial,) = (bed.data / "artifacts" / model / task / "embeddings").iterdir()
    assert partial.name.startswith(".") and partial.name.endswith(".tmp") and not (partial / "MANIFEST.json").exists()

    killed_at = time.time()
    os.kill(step_pid, signal.SIGKILL)  # the pool process only; its celery parent survives
    run = finished(instance, run_id, bed)
    assert run.status == dg.DagsterRunStatus.SUCCESS, failures(instance, run_id)
    assert bed.workers[worker].poll() is None and bed.hostname(worker) in bed.alive_workers()

    # Resent by the surviving celery parent at once (a retry 1 s later), not by Redis' visibility timeout.
    again = celery_steps(instance, run_id, with_time=True)[1]
    assert again[0] == "corpus_embeddings" and again[2] - killed_at < VISIBILITY_TIMEOUT - 10, again[2] - killed_at
    steps = celery_steps(instance, run_id)
    assert [s for s, _ in steps] == ["corpus_embeddings", *STEPS], steps
    assert steps[0] == ("corpus_embeddings", bed.hostname(worker))
    assert child_runs(instance, run_id) == []
    assert_partition_complete(bed, instance, model, task)

    after = manifest_hashes(bed.data)
    verify_tree(bed.data)
    assert {k: after[k] for k in before} == before and len(set(after) - set(before)) == 4
    assert [p for p in debris(bed.data) if p not in left_before] == [] and not partial.exists()  # the next attempt removed the killed one's folder
