"""RELIABILITY.md tests 1, 2 and 3: kills and a failed backfill partition lose nothing.

One deployment for the module (kill_env.KillBed): a code server and a daemon on a tmp
DAGSTER_HOME with the project's dagster.yaml (run retries on, not for asset failures; run
monitoring on), runs executed by the project's multiprocess executor, one process per step.
The world has two tiny tasks and four BM25 variants; bm25 x both tasks is evaluated first and
is the "other partitions" whose artifacts and MLflow runs must never change.

1. A step SIGKILLed while corpus_embeddings is writing its vectors: the asset's RetryPolicy runs
   it again within the same run; the partition ends with the uninterrupted result, one FINISHED
   MLflow run, every artifact verifying, and only the killed attempt's temporary folder (no
   manifest, ignored by .dvcignore and verify_tree) left beside it.
2. The whole run worker SIGKILLed (with its step) during corpus_index: the run is marked failed
   (by the code server that launched it: the default run launcher offers run monitoring no
   worker health check), the daemon retries it from failure (run_retries), and the retry runs
   only the steps that had not finished; the embeddings keep their one materialisation and bytes.
3. A backfill of three partitions while one task's curated corpus file is missing: one partition
   fails (and is not retried by the daemon: it would fail again); with the file back, re-execution
   from failure reruns only it, and the other partitions keep their artifacts and MLflow runs.
"""

import os
import shutil
import signal

import dagster as dg
import pytest

from runtime.partitions import partition_key
from medbench_release.release import verify_tree
from tests.orchestration.kill_env import (
    BM25_K09,
    BM25_K20,
    WORLD_ENV,
    child_runs,
    debris,
    evaluate_partition_job,
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
from tests.orchestration.operating_env import BM25, BM25_K12, curate, evaluate, new_world

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
    wait_for(f"run {run_id} to finish (logs in {bed.world.root.parent})", lambda: instance.get_run_by_id(run_id).is_finished, RUN_TIMEOUT, progress=lambda: last_event(instance))
    return instance.get_run_by_id(run_id)


def failure_messages(instance: dg.DagsterInstance, run_id: str) -> str:
    return "\n".join(
        str(e.dagster_event.event_specific_data.error.to_string())
        for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    )


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

    # Every artifact verifies; the only debris is the killed attempt's folder, which no reader takes for an artifact.
    after = manifest_hashes(bed.data)
    verify_tree(bed.data)
    assert {k: after[k] for k in hashes} == hashes
    new = set(after) - set(hashes)
    assert sorted(new) == sorted(partition_artifacts(bed, model, task)) and len(new) == 4
    assert [p for p in debris(bed.data) if p not in left_before] == [partial] and not (partial / "MANIFEST.json").exists()
    assert {k: v for k, v in mlflow_ids(bed).items() if k != (model, task)} == ids


def test_a_killed_run_worker_fails_the_run_and_its_retry_recomputes_nothing_that_finished(bed):
    model, task = "bm25-k12", "liveqa_medquad"
    left_before = set(debris(bed.data))  # before the held step opens its temporary folder
    pid_file = bed.hold("index", model, task)
    run_id = bed.launch(model, task)
    step = bed.held_pid(pid_file)
    worker = parent(step)
    with bed.instance() as instance:
        engine = [e.message for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)]
        assert f"Started process for run (pid: {worker})." in engine  # the run worker, not only the step
        (embedded,) = materializations(instance, "corpus_embeddings", model, task)  # finished before the kill
        embeddings = partition_artifacts(bed, model, task)
        assert [k.split("/")[3] for k in embeddings] == ["embeddings"]
        hashes, ids = manifest_hashes(bed.data), mlflow_ids(bed)

        killed = kill_tree(worker)
        assert step in killed
        failed = finished(instance, run_id, bed)
        assert failed.status == dg.DagsterRunStatus.FAILURE

        # The daemon retries a crashed run (run_retries), from failure.
        (retry,) = wait_for("the daemon's retry of the killed run", lambda: child_runs(instance, run_id), RUN_TIMEOUT, progress=lambda: last_event(instance))
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
    index_debris = [p for p in debris(bed.data) if p not in left_before]
    assert [(p.parent.parent.parent.name, p.parent.parent.name, p.parent.name) for p in index_debris] == [(model, task, "index")]
    assert len(index_debris) == 1 and not (index_debris[0] / "MANIFEST.json").exists()
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
                return "; ".join(f"{r.tags.get('dagster/partition')}: {r.status.value}, steps {steps_started(instance, r.run_id)}" for r in runs) or "no run yet"

            found = wait_for(f"the backfill's runs to finish (logs in {bed.world.root.parent})", backfill_runs, RUN_TIMEOUT, state=where, progress=lambda: last_event(instance))
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
