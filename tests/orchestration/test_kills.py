"""RELIABILITY.md tests 1, 2 and 3: kills and a failed backfill partition lose nothing.

One deployment for the module (kill_env.KillBed): a code server and a daemon on a tmp
DAGSTER_HOME with the project's dagster.yaml (run retries on, not for asset failures; run
monitoring on), runs executed by the project's multiprocess executor, one process per step.
The world has two tiny tasks and four BM25 variants; bm25 x both tasks is evaluated first and
is the "other partitions" whose artifacts and MLflow runs must never change.

1. A step SIGKILLed while corpus_embeddings is writing its vectors: the asset's RetryPolicy runs
   it again within the same run; the partition ends with the uninterrupted result, one FINISHED
   MLflow run, every artifact verifying, and the killed attempt's temporary folder removed by the
   next attempt (its writer's lock died with it: medbench_core.storage).
2. The whole run worker SIGKILLed (with its step) during corpus_index: the run is marked failed
   (by the code server that launched it: the default run launcher offers run monitoring no
   worker health check), the daemon retries it from failure (run_retries), and the retry runs
   only the steps that had not finished; the embeddings keep their one materialisation and bytes.
3. A backfill of three partitions while one task's curated corpus file is missing: one partition
   fails (and is not retried by the daemon: it would fail again); with the file back, re-execution
   from failure reruns only it, and the other partitions keep their artifacts and MLflow runs.

And issue 29 (RELIABILITY.md 16 for the runs a `medbench` command executes in its own process):
`medbench run` SIGKILLed while encoding (holding the encode slot), while writing an index and
while logging metrics; a command waiting for a slot that a live run holds says which and stops on
SIGTERM, the holder on SIGINT; the next command reclaims everything and completes.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import psutil
import pytest

from medbench_release.release import verify_tree
from runtime.partitions import partition_key
from tests import processes
from tests.cli.command import Forked
from tests.orchestration.kill_env import (
    BM25_K09,
    BM25_K20,
    HOOKS,
    WORLD_ENV,
    child_runs,
    command_env,
    debris,
    evaluate_partition_job,
    hold,
    kill_tree,
    last_event,
    manifest_hashes,
    materializations,
    mlflow_runs,
    parent,
    pkey,
    reference_result,
    start_bed,
    steps_started,
    wait_for,
)
from tests.orchestration.operating_env import BM25, BM25_K12, ROOT, curate, evaluate, new_world

pytestmark = [pytest.mark.slow, pytest.mark.server]

TASKS = ["scifact", "liveqa_medquad"]
ALL_STEPS = ["corpus_embeddings", "corpus_index", "retrieval_run", "task_metrics"]
RUN_TIMEOUT = 240


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    from orchestration.registry_sync import sync_model_partitions

    root = tmp_path_factory.mktemp("kills")
    world = new_world(root / "world", [BM25, BM25_K12, BM25_K09, BM25_K20])
    defs = world.defs()
    with world.instance() as instance:
        sync_model_partitions(instance, world.resources()["registry"])
        curate(world, instance, defs, TASKS)
        for task in TASKS:
            evaluate(instance, defs, partition_key("bm25", task))
    bed = start_bed(world, root)
    try:
        yield bed
    finally:
        bed.stop()


def mlflow_ids(bed) -> dict[tuple[str, str], list[str]]:
    return {k: sorted(r.info.run_id for r in v) for k, v in mlflow_runs(bed.world).items()}


def finished(instance: dg.DagsterInstance, run_id: str, bed) -> dg.DagsterRun:
    wait_for(
        f"run {run_id} to finish (logs in {bed.world.root.parent})",
        lambda: instance.get_run_by_id(run_id).is_finished,
        RUN_TIMEOUT,
        progress=lambda: last_event(instance),
    )
    return instance.get_run_by_id(run_id)


def failure_messages(instance: dg.DagsterInstance, run_id: str) -> str:
    return "\n".join(str(e.dagster_event.event_specific_data.error.to_string()) for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE))


def partition_artifacts(bed, model: str, task: str) -> dict[str, str]:
    return {k: v for k, v in manifest_hashes(bed.data).items() if k.startswith(f"artifacts/{model}/{task}/")}


def assert_one_finished_mlflow_run(bed, instance, model: str, task: str) -> str:
    """Exactly one active MLflow run for the partition: FINISHED, keyed by its metrics artifact, named by its materialisation."""
    runs = mlflow_runs(bed.world)[(model, task)]
    assert [r.info.status for r in runs] == ["FINISHED"]
    (metrics_dir,) = (bed.data / "artifacts" / model / task / "metrics").glob("[!.]*")
    assert runs[0].data.tags["medbench.run_key"] == metrics_dir.name
    latest = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("task_metrics"), asset_partitions=[pkey(model, task)]), limit=1
    ).records[0]
    assert latest.asset_materialization.metadata["mlflow_run_id"].value == runs[0].info.run_id
    return runs[0].info.run_id


def test_a_step_killed_mid_encode_is_retried_in_its_run_and_loses_nothing(bed, tmp_path):
    model, task = "bm25-k12", "scifact"
    hashes, ids = manifest_hashes(bed.data), mlflow_ids(bed)
    left_before = set(debris(bed.data))  # the module's world: other kill tests may have left theirs
    pid_file = bed.hold("embeddings", model, task)
    run_id = bed.launch(model, task)
    step = bed.held_pid(pid_file)
    # The step process was forked from the run worker's forkserver (orchestration/definitions.py), not spawned.
    forkserver = psutil.Process(step).parent()
    assert "from multiprocessing.forkserver import main" in " ".join(forkserver.cmdline()), forkserver.cmdline()

    # The kill lands mid-write: the vectors are in the temporary folder, which has no manifest yet.
    (partial,) = (bed.data / "artifacts" / model / task / "embeddings").iterdir()
    assert partial.name.startswith(".") and partial.name.endswith(".tmp")
    assert {"doc_ids.json", "info.json"} <= {p.name for p in partial.iterdir()} and not (partial / "MANIFEST.json").exists()
    with bed.instance() as instance:
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED
        os.kill(step, signal.SIGKILL)
        run = finished(instance, run_id, bed)

        assert run.status == dg.DagsterRunStatus.SUCCESS, failure_messages(instance, run_id)
        assert steps_started(instance, run_id) == ["corpus_embeddings", *ALL_STEPS]  # the RetryPolicy's second attempt
        assert child_runs(instance, run_id) == []
        mlflow_id = assert_one_finished_mlflow_run(bed, instance, model, task)

    # The result is the one an uninterrupted computation gives.
    trec, mean = reference_result(bed.world, model, task, tmp_path)
    (run_dir,) = (bed.data / "artifacts" / model / task / "run").glob("[!.]*")
    assert (run_dir / "run.trec").read_text() == trec
    (mlflow_run,) = mlflow_runs(bed.world)[(model, task)]
    assert mlflow_run.data.metrics["ndcg_at_10"] == mean["ndcg_at_10"] == 1.0  # each claim's one relevant abstract first
    assert mlflow_run.info.run_id == mlflow_id

    # Every artifact verifies; the killed attempt's folder was removed by the attempt after it.
    after = manifest_hashes(bed.data)
    verify_tree(bed.data)
    assert {k: after[k] for k in hashes} == hashes
    new = set(after) - set(hashes)
    assert sorted(new) == sorted(partition_artifacts(bed, model, task)) and len(new) == 4
    assert [p for p in debris(bed.data) if p not in left_before] == [] and not partial.exists()
    assert {k: v for k, v in mlflow_ids(bed).items() if k != (model, task)} == ids


def test_a_killed_run_worker_fails_the_run_and_its_retry_recomputes_nothing_that_finished(bed):
    model, task = "bm25-k12", "liveqa_medquad"
    left_before = set(debris(bed.data))  # before the held step opens its temporary folder
    pid_file = bed.hold("index", model, task)
    run_id = bed.launch(model, task)
    step = bed.held_pid(pid_file)
    worker = parent(parent(step))  # the step's parent is the run worker's forkserver (orchestration/definitions.py)
    (partial,) = [p for p in debris(bed.data) if p not in left_before]  # the index being written
    assert partial.parent == bed.data / "artifacts" / model / task / "index" and not (partial / "MANIFEST.json").exists()
    with bed.instance() as instance:
        engine = [e.message for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)]
        assert f"Started process for run (pid: {worker})." in engine  # the run worker, not only the step
        (embedded,) = materializations(instance, "corpus_embeddings", model, task)  # finished before the kill
        embeddings = partition_artifacts(bed, model, task)
        assert [k.split("/")[3] for k in embeddings] == ["embeddings"]
        hashes, ids = manifest_hashes(bed.data), mlflow_ids(bed)

        bed.retries_armed(instance)
        killed = kill_tree(worker)
        assert step in killed
        failed = finished(instance, run_id, bed)
        assert failed.status == dg.DagsterRunStatus.FAILURE

        # The daemon retries a crashed run (run_retries), from failure.
        retried = lambda: child_runs(instance, run_id)  # noqa: E731
        (retry,) = wait_for("the daemon's retry of the killed run", retried, RUN_TIMEOUT, state=bed.daemon_log, progress=lambda: last_event(instance))
        retry = finished(instance, retry.run_id, bed)
        assert retry.status == dg.DagsterRunStatus.SUCCESS, failure_messages(instance, retry.run_id)
        assert retry.tags["dagster/retry_number"] == "1"  # an automatic retry (default strategy FROM_FAILURE)
        assert instance.get_run_by_id(run_id).tags["dagster/auto_retry_run_id"] == retry.run_id
        assert steps_started(instance, retry.run_id) == ["corpus_index", "retrieval_run", "task_metrics"]
        assert materializations(instance, "corpus_embeddings", model, task) == [embedded]
        assert_one_finished_mlflow_run(bed, instance, model, task)

    after = manifest_hashes(bed.data)
    verify_tree(bed.data)
    assert {k: after[k] for k in hashes} == hashes  # the embeddings and every other partition untouched
    assert sorted(partition_artifacts(bed, model, task)) == sorted([*embeddings, *(set(after) - set(hashes))])
    assert len(partition_artifacts(bed, model, task)) == 4
    assert [p for p in debris(bed.data) if p not in left_before] == [] and not partial.exists()  # the retry removed the killed index's folder
    assert {k: v for k, v in mlflow_ids(bed).items() if k != (model, task)} == ids


def test_one_failed_partition_of_a_backfill_reruns_alone_and_the_others_keep_their_results(bed, tmp_path, monkeypatch):
    keys = [("bm25-k09", "scifact"), ("bm25-k09", "liveqa_medquad"), ("bm25-k20", "scifact")]
    broken = ("bm25-k09", "liveqa_medquad")
    corpus = bed.data / "tasks" / "liveqa_medquad" / "corpus.parquet"
    with bed.instance() as instance:
        known = {r.run_id for r in instance.get_runs()}
        shutil.move(corpus, tmp_path / "corpus.parquet")  # as if a pull had not brought it back
        try:
            bed.backfill(keys)

            def backfill_runs():
                runs = [r for r in instance.get_runs() if r.run_id not in known]
                return len(runs) == len(keys) and all(r.is_finished for r in runs) and runs

            def where() -> str:  # a slow machine or a stuck run: which runs and steps got how far
                runs = [r for r in instance.get_runs() if r.run_id not in known]
                return (
                    "; ".join(f"{r.tags.get('dagster/partition')}: {r.status.value}, steps {steps_started(instance, r.run_id)}" for r in runs) or "no run yet"
                )

            found = wait_for(
                f"the backfill's runs to finish (logs in {bed.world.root.parent})",
                backfill_runs,
                RUN_TIMEOUT,
                state=where,
                progress=lambda: last_event(instance),
            )
            runs = {r.tags["dagster/partition"]: r for r in found}
        finally:
            shutil.move(tmp_path / "corpus.parquet", corpus)
        assert all("dagster/backfill" in r.tags for r in runs.values())
        statuses = {k: r.status for k, r in runs.items()}
        assert statuses == {pkey(*k): dg.DagsterRunStatus.FAILURE if k == broken else dg.DagsterRunStatus.SUCCESS for k in keys}
        failed = runs[pkey(*broken)]
        assert f"{corpus}: missing" in failure_messages(instance, failed.run_id)
        assert steps_started(instance, failed.run_id) == ["corpus_embeddings"] * 3  # first attempt and two RetryPolicy retries

        hashes, ids = manifest_hashes(bed.data), mlflow_ids(bed)
        done = [("bm25", t) for t in TASKS] + [("bm25-k12", t) for t in TASKS] + [k for k in keys if k != broken]
        stored = {(a, k): materializations(instance, a, *k) for a in ALL_STEPS for k in done}

        # The fix is in; re-execute the failed run from failure, as `Re-execute from failure` does.
        monkeypatch.setenv(WORLD_ENV, str(bed.world.root))
        options = dg.ReexecutionOptions.from_failure(failed.run_id, instance)
        tags = {k: v for k, v in failed.tags.items() if k.startswith("dagster/partition")}  # what the UI carries over
        job = dg.reconstructable(evaluate_partition_job)
        with dg.execute_job(job, instance, reexecution_options=options, tags=tags) as result:
            assert result.success
            rerun_id = result.run_id

        # Only that partition ran again, all of it; the daemon had not retried a failure that would repeat.
        assert {r.run_id for r in instance.get_runs()} - known - {r.run_id for r in runs.values()} == {rerun_id}
        assert [r.run_id for r in child_runs(instance, failed.run_id)] == [rerun_id]
        assert steps_started(instance, rerun_id) == ALL_STEPS
        assert {(a, k): materializations(instance, a, *k) for a in ALL_STEPS for k in done} == stored
        assert_one_finished_mlflow_run(bed, instance, *broken)

    after = manifest_hashes(bed.data)
    verify_tree(bed.data)
    assert {k: after[k] for k in hashes} == hashes
    new = set(after) - set(hashes)
    assert sorted(new) == sorted(partition_artifacts(bed, *broken)) and len(new) == 4
    assert {k: v for k, v in mlflow_ids(bed).items() if k != broken} == ids
    runs = mlflow_runs(bed.world)
    # One FINISHED run for each evaluated partition: nothing left RUNNING, no duplicate.
    assert len(runs) == len(ids) + 1 and all([r.info.status for r in v] == ["FINISHED"] for v in runs.values())


COMMAND_TIMEOUT = 240  # a `medbench run` on the tiny world takes ~15 s; one that hangs is failed after this


def test_medbench_run_killed_at_any_point_leaves_nothing_that_blocks_or_poisons_the_next(tmp_path):
    from orchestration.registry_sync import sync_model_partitions

    world = new_world(tmp_path / "world", [BM25, BM25_K12, BM25_K09, BM25_K20])
    data, host = world.root / "data", socket.gethostname()
    defs = world.defs()
    with world.instance() as instance:
        sync_model_partitions(instance, world.resources()["registry"])
        curate(world, instance, defs, TASKS)
        for task in TASKS:
            evaluate(instance, defs, partition_key("bm25", task))
    hashes, ids = manifest_hashes(data), {k: sorted(r.info.run_id for r in v) for k, v in mlflow_runs(world).items()}
    env = command_env(world)
    forked = Forked(tmp_path, prelude=HOOKS)  # `medbench` commands with the hold points, forked from one import
    started: list[Path] = []
    owners: dict[str, tuple[int, dict]] = {}  # run id -> (pid of the command, the run's tags)

    def stop_at(stage: str, model: str, task: str) -> tuple[int, str]:
        """Start `medbench run --models MODEL --tasks TASK`, held at ``stage``: (its pid, its Dagster run id)."""
        pid_file = hold(world.root, stage, model, task)
        started.append(pid_file)
        out = forked.submit("run", "--models", model, "--tasks", task, env=env)

        def said() -> str:
            return out.read_text(errors="replace")[-3000:]

        pid = int(
            wait_for(
                f"medbench run --models {model} --tasks {task} to stop at {stage}",
                lambda: pid_file.exists() and pid_file.read_text(),
                COMMAND_TIMEOUT,
                state=said,
            )
        )
        with world.instance() as instance:
            (run,) = instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED], tags={"dagster/partition": pkey(model, task)}))
        owners[run.run_id] = (pid, run.tags)
        return pid, run.run_id

    def encode_slots() -> tuple[list, list]:
        with world.instance() as instance:
            info = instance.event_log_storage.get_concurrency_info("encode")
        return [(s.run_id, s.step_key) for s in info.claimed_slots], [(p.run_id, p.step_key) for p in info.pending_steps]

    try:
        # 1-3. SIGKILL while encoding (the encode slot held, the vectors in a temporary folder), while writing
        # the index, and while logging metrics (the partition's MLflow run created, RUNNING). Each next command
        # starts although the one before died holding what it held.
        killed: dict[str, tuple[int, str]] = {}
        previous = None
        for stage, model in (("embeddings", "bm25-k12"), ("index", "bm25-k09"), ("metrics", "bm25-k20")):
            pid, run_id = killed[stage] = stop_at(stage, model, "scifact")
            if stage == "embeddings":
                assert encode_slots() == ([(run_id, "corpus_embeddings")], [(run_id, "corpus_embeddings")])
            if stage == "metrics":
                (running,) = mlflow_runs(world)[(model, "scifact")]
                assert running.info.status == "RUNNING"
            left = debris(data)  # what it is writing, and nothing of the commands killed before it
            assert [p.parent for p in left] == [data / "artifacts" / model / "scifact" / stage] * (stage != "metrics")
            os.kill(pid, signal.SIGKILL)
            rc, said = forked.result(timeout=60)
            assert rc == -signal.SIGKILL, said[-3000:]
            if previous is not None:  # this command found the one before dead, and reclaimed its run, slot and folder
                (before_stage, before_model, before_left), (before_pid, before_run) = previous, killed[previous[0]]
                slot = " and freed its slot(s) in pool encode" if before_stage == "embeddings" else ""
                assert (
                    f"[recover] Dagster run {before_run[:8]} (evaluate_partition {before_model}|scifact): its medbench process {before_pid} on {host} "
                    f"is gone: marked failed{slot}\n"
                ) in said
                assert f"[recover] removed 1 partial write(s) of killed runs under {data}: {before_left[0].relative_to(data)}" in said
            previous = (stage, model, left)
        with world.instance() as instance:
            statuses = [instance.get_run_by_id(killed[s][1]).status for s in ("embeddings", "index", "metrics")]
        assert statuses == [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.STARTED]
        assert encode_slots() == ([], [])  # the metrics step claims no slot

        # 4. A slot held by a LIVE run: the next command says whose it is and waits; SIGTERM stops it at once.
        holder, holder_run = stop_at("embeddings", "bm25-k12", "liveqa_medquad")
        log = tmp_path / "waiter.out"
        base = {k: v for k, v in os.environ.items() if not k.startswith("MEDBENCH_") and k not in ("DAGSTER_HOME", "MLFLOW_TRACKING_URI")}
        with open(log, "wb") as out:
            waiter = processes.start(
                [sys.executable, "-m", "medbench_cli", "run", "--models", "bm25-k20", "--tasks", "liveqa_medquad"],
                env={**base, "HF_HUB_OFFLINE": "1", **env}, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

        def said() -> str:
            return log.read_text(errors="replace")

        wait_for("the waiting command to say what it waits for", lambda: "[wait]" in said(), COMMAND_TIMEOUT, state=lambda: said()[-3000:])
        (waiting,) = [line for line in said().splitlines() if line.startswith("[wait]")]
        assert waiting.startswith(
            "[wait] evaluate bm25-k20 x liveqa_medquad: pool encode (1 slot(s)) is held by "
            f"Dagster run {holder_run[:8]} (evaluate_partition bm25-k12|liveqa_medquad, step corpus_embeddings; medbench process {holder} on {host}, alive); "
            "waiting for it (at most 60 min: MEDBENCH_POOL_WAIT; Ctrl-C stops)"
        ), waiting
        t = time.monotonic()
        waiter.send_signal(signal.SIGTERM)
        assert waiter.wait(timeout=30) == 128 + signal.SIGTERM, said()[-3000:]
        assert time.monotonic() - t < 15
        assert said().rstrip().splitlines()[-1].startswith("medbench run: error: stopped by SIGTERM; kept: every complete artifact")
        assert encode_slots() == ([(holder_run, "corpus_embeddings")], [(holder_run, "corpus_embeddings")])  # the waiter left nothing queued
        # ... and SIGINT stops the holder, mid-step: its run failed, its slot and temporary folder gone with it.
        os.kill(holder, signal.SIGINT)
        rc, said_holder = forked.result(timeout=60)
        assert rc == 128 + signal.SIGINT, said_holder[-3000:]
        assert said_holder.rstrip().splitlines()[-1].startswith("medbench run: error: stopped by SIGINT")
        assert "[evaluate]" not in said_holder  # it stopped, rather than going on to its next partition
        pid, run_id = killed["metrics"]  # ... and when it began, it had reclaimed the run killed logging metrics
        assert (
            f"[recover] Dagster run {run_id[:8]} (evaluate_partition bm25-k20|scifact): its medbench process {pid} on {host} is gone: marked failed\n"
            in said_holder
        )
        assert f"[recover] MLflow: 1 run(s) left RUNNING by them marked KILLED: {running.info.run_id[:8]}\n" in said_holder
        with world.instance() as instance:
            assert instance.get_run_by_id(holder_run).status == dg.DagsterRunStatus.FAILURE
        assert encode_slots() == ([], [])
        assert not list((data / "artifacts" / "bm25-k12" / "liveqa_medquad").rglob("*.tmp"))

        # 5. One run of everything completes, without a hang, and cleans up what the kills left.
        forked.submit("run", env=env)
        rc, said = forked.result(timeout=4 * COMMAND_TIMEOUT)
        assert rc == 0, said[-3000:]
        assert "[recover]" not in said  # the holder's command had reclaimed the last killed one
    finally:
        for pid_file in started:  # a command still held, or hung: SIGKILL it (the forking process waits for it)
            if pid_file.exists() and psutil.pid_exists(int(pid_file.read_text())):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
        forked.stop()

    assert debris(data) == []
    verify_tree(data)
    assert {run_id: (tags["medbench/pid"], tags["medbench/host"]) for run_id, (_, tags) in owners.items()} == {
        run_id: (str(pid), host) for run_id, (pid, _) in owners.items()
    }  # each run named the process that ran it
    with world.instance() as instance:
        assert [r.run_id for r in instance.get_runs() if not r.is_finished] == []
        assert {instance.get_run_by_id(run_id).status for _, run_id in killed.values()} == {dg.DagsterRunStatus.FAILURE}
    assert encode_slots() == ([], [])
    runs = mlflow_runs(world)  # one FINISHED run for each partition, nothing RUNNING, no duplicate
    assert {k: [r.info.status for r in v] for k, v in runs.items()} == {
        (m["name"], t): ["FINISHED"] for m in (BM25, BM25_K12, BM25_K09, BM25_K20) for t in TASKS
    }
    client = world.resources()["mlflow"].client()
    assert client.search_runs([client.get_experiment_by_name("medbench-test").experiment_id], "attributes.status = 'RUNNING'") == []
    after = manifest_hashes(data)
    assert {k: after[k] for k in hashes} == hashes and {k: [r.info.run_id for r in runs[k]] for k in ids} == ids  # bm25's untouched
    trec, mean = reference_result(world, "bm25-k09", "scifact", tmp_path / "reference")  # killed writing its index
    (run_dir,) = (data / "artifacts" / "bm25-k09" / "scifact" / "run").glob("[!.]*")
    assert (run_dir / "run.trec").read_text() == trec and runs[("bm25-k09", "scifact")][0].data.metrics["ndcg_at_10"] == mean["ndcg_at_10"]
