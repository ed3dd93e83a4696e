"""RELIABILITY.md tests 11, 12 and 13 on MLflow, and one partition logged to a real tracking server.

11. The SQLite store is created once (MLflowResource.ensure_store) before the fan-out; then 16
    writer processes started at the same instant log 150 metrics each: every row is there and
    no writer saw a lock error.
12. A run whose process is killed (SIGKILL, SIGTERM), exits (exit(1)) or raises while logging is
    never FINISHED; runs left RUNNING are marked KILLED by reconcile_stale_runs.
13. The same partition retried (after a failure, forced, or attempted twice at once) leaves one
    active run and one value per metric key.
"""

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from runtime.partitions import MODEL_PARTITIONS_NAME, partition_key
from runtime.resources import ArtifactStoreResource, ComputeResource, MLflowResource, RegistryResource, dagster_run_alive
from tests import processes
from tests.assets.project import corpus_embeddings, corpus_index, curated_task, retrieval_run, task_checks, task_metrics

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One SQLite tracking store, created once before any test fans out."""
    root = tmp_path_factory.mktemp("mlflow")
    resource = MLflowResource(tracking_uri=f"sqlite:///{root / 'mlflow.db'}", artifact_root=str(root / "artifacts"))
    resource.ensure_store()
    return resource


def runs_with_key(client: MlflowClient, experiment: str, key: str, view=ViewType.ACTIVE_ONLY):
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], filter_string=f"tags.`medbench.run_key` = '{key}'", run_view_type=view)


# --- starting processes together -------------------------------------------------------------
# Each concurrent attempt is a fresh interpreter that imports what it needs, says "ready" and waits
# for a line on stdin; all are released at once. Not forks of one process that imported MLflow: a
# fork copies the locks of every thread of the parent as they were (MLflow starts telemetry and
# config threads on import paths and first use), and a child that needs one of those locks waits
# forever. Fresh processes cost a few seconds of imports and remove that whole class of hang.

READY_THEN_GO = 'print("ready", flush=True)\nsys.stdin.readline()  # released together with the others\n'


def start_together(code: str, argvs: list[list[str]], work: Path, timeout: float = 300) -> list[subprocess.Popen]:
    """One ``python -c code *argv`` per argv; returns once every process is ready and has been released."""
    procs = []
    for n, argv in enumerate(argvs):
        err = open(work / f"stderr.{n}", "w")
        procs.append(processes.start([sys.executable, "-c", code, *argv], env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True))
        err.close()
    try:
        end = time.monotonic() + timeout
        for n, proc in enumerate(procs):
            line = proc.stdout.readline().strip()
            assert line == "ready", f"process {n} exited ({proc.poll()}) before it was ready: {(work / f'stderr.{n}').read_text()[-3000:]}"
            assert time.monotonic() < end, "processes took too long to import"
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
    except BaseException:
        for proc in procs:
            proc.kill()
        raise
    return procs


def finish(procs: list[subprocess.Popen], work: Path, timeout: float = 300) -> tuple[list[int], str]:
    """Exit codes of ``procs`` (killed after ``timeout``) and their stderr, concatenated."""
    end = time.monotonic() + timeout
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(1.0, end - time.monotonic())))
        except subprocess.TimeoutExpired:
            running = {p.args[-2]: sorted(processes.ignored_signals(p.pid)) for p in procs if p.poll() is None}
            for p in procs:
                p.kill()
            raise AssertionError(f"still running after {timeout} s (mode: signals it ignores): {running}") from None
    return codes, "".join((work / f"stderr.{n}").read_text() for n in range(len(procs)))


# --- 11: sixteen concurrent writers ---------------------------------------------------------

WRITER = (
    textwrap.dedent(
        """
    import sys, time
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    uri, experiment, i, n_metrics = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    """
    )
    + READY_THEN_GO
    + textwrap.dedent(
        """
    client = MlflowClient(tracking_uri=uri)  # its own client, engine and connections
    exp = client.get_experiment_by_name(experiment).experiment_id
    run = client.create_run(exp, tags={"writer": str(i)})
    now = int(time.time() * 1000)
    for k0 in range(0, n_metrics, 10):  # 15 transactions of 10 metrics, as log_run batches them
        client.log_batch(run.info.run_id, metrics=[Metric(f"m{k}", i * 1000.0 + k, now, 0) for k in range(k0, k0 + 10)])
    client.set_terminated(run.info.run_id)
    """
    )
)


def test_sixteen_concurrent_writers_lose_nothing(store, tmp_path):
    store.experiment_id("fan-out")  # created before the fan-out, like the store itself
    writers = start_together(WRITER, [[store.tracking_uri, "fan-out", str(i), "150"] for i in range(16)], tmp_path, timeout=600)
    codes, err = finish(writers, tmp_path, timeout=600)
    assert codes == [0] * 16, err[-3000:]
    assert "locked" not in err.lower() and "Traceback" not in err
    client = store.client()
    exp = client.get_experiment_by_name("fan-out")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    assert sorted(int(r.data.tags["writer"]) for r in runs) == list(range(16))
    for r in runs:
        i = int(r.data.tags["writer"])
        assert r.info.status == "FINISHED"
        assert r.data.metrics == {f"m{k}": i * 1000.0 + k for k in range(150)}
    with sqlite3.connect(store.tracking_uri[len("sqlite:///") :]) as db:
        rows = db.execute(
            "SELECT COUNT(*), COUNT(DISTINCT run_uuid || key) FROM metrics WHERE run_uuid IN (SELECT run_uuid FROM runs WHERE experiment_id = ?)",
            (int(exp.experiment_id),),
        ).fetchone()
    assert rows == (16 * 150, 16 * 150)


# --- 12: killed runs are never FINISHED; stale ones are reconciled --------------------------

LOG_RUN = (
    textwrap.dedent(
        """
    import os, sys, time
    from pathlib import Path
    from mlflow.tracking import MlflowClient
    from runtime.resources import MLflowResource

    uri, artifacts, experiment, artifact, work, mode, key = sys.argv[1:8]
    upload = MlflowClient.log_artifact

    def log_artifact(self, run_id, local_path, artifact_path=None):
        # The slow part of a real log_run: the process dies, exits or fails here, mid-run.
        Path(work, mode).write_text(run_id)
        if mode in ("sigkill", "sigterm"):
            time.sleep(300)
        if mode == "exit1":
            sys.exit(1)
        if mode == "exception":
            raise RuntimeError("artifact upload failed")
        time.sleep(1.0)  # "slow": a big artifact, so concurrent attempts overlap
        return upload(self, run_id, local_path, artifact_path)

    MlflowClient.log_artifact = log_artifact
    """
    )
    + READY_THEN_GO
    + textwrap.dedent(
        """
    run_id, reused = MLflowResource(tracking_uri=uri, artifact_root=artifacts).log_run(
        experiment, key, "bm25/liveqa_medquad", {"model": "bm25"}, {"ndcg_at_10": 0.5},
        {"medbench.dagster_run_id": "dagster-" + mode}, [Path(artifact)],
    )
    Path(work, f"result.{os.getpid()}").write_text(f"{run_id} {reused}")
    """
    )
)


def start_log_runs(store: MLflowResource, experiment: str, work: Path, jobs: list[str]) -> list[subprocess.Popen]:
    """One fresh process per ``mode:run_key`` job, each attempting one log_run, released together."""
    artifact = work / "run.trec"
    artifact.write_text("1 Q0 d1 1 1.0 x\n")
    common = [store.tracking_uri, store.artifact_root, experiment, str(artifact), str(work)]
    return start_together(LOG_RUN, [[*common, *job.split(":")] for job in jobs], work)


def wait_for_file(path: Path, proc: subprocess.Popen, stderr: Path, timeout: float = 120) -> None:
    """Wait until ``proc`` writes ``path``; fail at once, with its stderr, if it exits first."""
    end = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"exited with {proc.returncode} before writing {path.name}: {stderr.read_text()[-3000:]}"
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


def test_killed_runs_are_never_finished_and_stale_runs_are_reconciled(store, tmp_path):
    experiment = "killed"
    store.experiment_id(experiment)
    modes = ("sigkill", "sigterm", "exit1", "exception")
    procs = start_log_runs(store, experiment, tmp_path, [f"{m}:key-{m}" for m in modes])
    for mode, sig in (("sigkill", signal.SIGKILL), ("sigterm", signal.SIGTERM)):
        n = modes.index(mode)
        wait_for_file(tmp_path / mode, procs[n], tmp_path / f"stderr.{n}")
        procs[n].send_signal(sig)
    codes, err = finish(procs, tmp_path, timeout=120)
    assert dict(zip(modes, codes)) == {"sigkill": -signal.SIGKILL, "sigterm": -signal.SIGTERM, "exit1": 1, "exception": 1}, err[-3000:]
    assert "artifact upload failed" in err

    client = store.client()
    status = {m: runs_with_key(client, experiment, f"key-{m}")[0].info for m in modes}
    assert {m: i.status for m, i in status.items()} == {"sigkill": "RUNNING", "sigterm": "RUNNING", "exit1": "FAILED", "exception": "FAILED"}
    assert status["sigkill"].end_time is None and status["exit1"].end_time is not None

    # Beside them: a run whose Dagster run is still going, and RUNNING runs with no Dagster run,
    # one started two hours ago and one just now.
    exp_id = store.experiment_id(experiment)
    alive = client.create_run(exp_id, tags={"medbench.dagster_run_id": "dagster-alive"}).info.run_id
    old = client.create_run(exp_id, start_time=int((time.time() - 7200) * 1000)).info.run_id
    young = client.create_run(exp_id).info.run_id

    stale = store.reconcile_stale_runs(experiment, older_than_seconds=3600, is_alive=lambda rid: rid == "dagster-alive")
    assert sorted(stale) == sorted([status["sigkill"].run_id, status["sigterm"].run_id, old])
    after = {rid: client.get_run(rid).info for rid in (status["sigkill"].run_id, status["sigterm"].run_id, old, alive, young)}
    assert [after[r].status for r in (status["sigkill"].run_id, status["sigterm"].run_id, old)] == ["KILLED"] * 3
    assert all(after[r].end_time is not None for r in stale)
    assert after[alive].status == after[young].status == "RUNNING"
    assert store.reconcile_stale_runs(experiment, older_than_seconds=3600, is_alive=lambda rid: rid == "dagster-alive") == []

    # The killed partition retried: one FINISHED run for its key, the killed one gone.
    run_id, reused = store.log_run(experiment, "key-sigkill", "bm25/liveqa_medquad", {"model": "bm25"}, {"ndcg_at_10": 0.5}, {}, [tmp_path / "run.trec"])
    assert not reused
    assert [(r.info.run_id, r.info.status) for r in runs_with_key(client, experiment, "key-sigkill")] == [(run_id, "FINISHED")]


def test_dagster_run_liveness():
    from dagster._core.storage.dagster_run import DagsterRunStatus
    from dagster._core.test_utils import create_run_for_test

    with dg.instance_for_test() as instance:
        started = create_run_for_test(instance, status=DagsterRunStatus.STARTED).run_id
        failed = create_run_for_test(instance, status=DagsterRunStatus.FAILURE).run_id
        alive = dagster_run_alive(instance)
        assert alive(started) and not alive(failed)
        assert alive("not-a-run-of-this-instance")  # unknown: left to the age threshold


# --- 13: a retried partition leaves one run --------------------------------------------------


class FlakyClient(MlflowClient):
    """Fails the first artifact upload (after the run and its metrics exist), then works."""

    def __init__(self, marker: str, **kwargs):
        super().__init__(**kwargs)
        self.marker = Path(marker)

    def log_artifact(self, run_id, local_path, artifact_path=None):
        if not self.marker.exists():
            self.marker.write_text(run_id)
            raise ConnectionError("artifact store unreachable (injected)")
        return super().log_artifact(run_id, local_path, artifact_path)


class FlakyMLflowResource(MLflowResource):
    fail_marker: str

    def client(self):
        return FlakyClient(self.fail_marker, tracking_uri=self.tracking_uri)


def tiny_world(tmp: Path, mlflow: MLflowResource) -> dict:
    """liveqa_medquad (a real partition key) backed by four medical sentences."""
    src = tmp / "shared" / "lq"
    (src / "qrels").mkdir(parents=True)
    docs = {
        "a1": "Gout is arthritis caused by uric acid crystals.",
        "a2": "Shingles is a painful rash.",
        "a3": "Migraine is treated with triptans.",
        "a4": "Anaemia causes tiredness.",
    }
    queries = {"1": "what causes gout", "2": "how to treat a migraine"}
    (src / "corpus.jsonl").write_text("".join(f'{{"_id": "{d}", "title": "", "text": "{t}"}}\n' for d, t in docs.items()))
    (src / "queries.jsonl").write_text("".join(f'{{"_id": "{q}", "text": "{t}"}}\n' for q, t in queries.items()))
    (src / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\ta1\t2\n2\ta3\t1\n2\ta4\t0\n")
    (tmp / "tasks.yaml").write_text(
        "benchmark: medbench-test\nlicence_allowlist: [CC-BY-4.0]\ntasks:\n"
        "  - {name: liveqa_medquad, reader: beir, path: lq, split: test, query_licence: CC-BY-4.0, doc_licence: CC-BY-4.0}\n"
    )
    return {
        "store": ArtifactStoreResource(root=str(tmp / "data"), shared_data=str(src.parent), scratch=str(tmp / "scratch")),
        "registry": RegistryResource(models_file=str(ROOT / "models.yaml"), tasks_file=str(tmp / "tasks.yaml")),
        "compute": ComputeResource(device="cpu", faiss_gpu="never"),
        "mlflow": mlflow,
    }


@contextmanager
def curated_tiny_world(tmp: Path, mlflow: MLflowResource):
    """The tiny world's task curated and gated on a test instance with the bm25 partition; yields (resources, instance)."""
    resources = tiny_world(tmp, mlflow)
    (tmp / "dh").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp / "dh")) as instance:
        instance.add_dynamic_partitions(MODEL_PARTITIONS_NAME, ["bm25"])
        assert dg.materialize([curated_task, *task_checks], partition_key="liveqa_medquad", resources=resources, instance=instance).success
        yield resources, instance


def materialise_bm25(resources: dict, instance: dg.DagsterInstance, force: bool = False):
    config = {"ops": {"task_metrics": {"config": {"force": True}}}} if force else None
    res = dg.materialize(
        [corpus_embeddings, corpus_index, retrieval_run, task_metrics],
        partition_key=partition_key("bm25", "liveqa_medquad"),
        resources=resources,
        instance=instance,
        run_config=config,
    )
    assert res.success
    return {k: v.value for k, v in res.asset_materializations_for_node("task_metrics")[0].metadata.items()}


def active_metric_rows(db: Path, model: str, task: str) -> list[tuple[str, int]]:
    """(metric key, number of rows) over the active runs of one model x task."""
    with sqlite3.connect(db) as con:
        return con.execute(
            """SELECT m.key, COUNT(*) FROM metrics m JOIN runs r ON r.run_uuid = m.run_uuid
               WHERE r.lifecycle_stage = 'active'
                 AND r.run_uuid IN (SELECT run_uuid FROM tags WHERE key = 'medbench.model' AND value = ?)
                 AND r.run_uuid IN (SELECT run_uuid FROM tags WHERE key = 'medbench.task' AND value = ?)
               GROUP BY m.key ORDER BY m.key""",
            (model, task),
        ).fetchall()


def test_a_retried_partition_leaves_one_run_and_one_row_per_metric(tmp_path):
    db = tmp_path / "mlflow.db"
    marker = tmp_path / "failed_run_id"
    mlflow = FlakyMLflowResource(tracking_uri=f"sqlite:///{db}", artifact_root=str(tmp_path / "mlartifacts"), fail_marker=str(marker))
    mlflow.ensure_store()
    with curated_tiny_world(tmp_path, mlflow) as (resources, instance):
        # The first attempt of task_metrics fails mid-log (its run exists, with metrics); the
        # RetryPolicy retries it in the same Dagster run.
        md = materialise_bm25(resources, instance)
        failed_run = marker.read_text()
        client = mlflow.client()
        assert client.get_run(failed_run).info.status == "FAILED"
        assert client.get_run(failed_run).info.lifecycle_stage == "deleted"
        exp = client.get_experiment_by_name("medbench-test")
        active = client.search_runs([exp.experiment_id])
        assert [(r.info.run_id, r.info.status) for r in active] == [(md["mlflow_run_id"], "FINISHED")]
        rows = active_metric_rows(db, "bm25", "liveqa_medquad")
        assert {k for k, _ in rows} >= {"ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_100"}
        assert all(n == 1 for _, n in rows), rows

        # Retried again by hand: reused. Forced: replaced. Either way one run, one row per key.
        again = materialise_bm25(resources, instance)
        assert again["mlflow_run_id"] == md["mlflow_run_id"] and again["mlflow_run_reused"] is True
        forced = materialise_bm25(resources, instance, force=True)
        assert forced["mlflow_run_id"] != md["mlflow_run_id"] and forced["mlflow_run_reused"] is False
        assert [r.info.run_id for r in client.search_runs([exp.experiment_id])] == [forced["mlflow_run_id"]]
        assert active_metric_rows(db, "bm25", "liveqa_medquad") == rows
        assert md["ndcg_at_10"] == pytest.approx(1.0)  # both questions find their best answer first


def test_two_attempts_of_one_partition_at_once_leave_one_run(store, tmp_path):
    store.experiment_id("twice")
    procs = start_log_runs(store, "twice", tmp_path, ["slow:same-key"] * 3)
    codes, err = finish(procs, tmp_path, timeout=180)
    assert codes == [0, 0, 0], err[-3000:]
    results = [p.read_text().split() for p in tmp_path.glob("result.*")]
    finished = runs_with_key(store.client(), "twice", "same-key")
    assert len(finished) == 1 and finished[0].info.status == "FINISHED"
    assert {run_id for run_id, _ in results} == {finished[0].info.run_id}  # every attempt reports the survivor
    assert sorted(reused for _, reused in results) == ["False", "True", "True"]


# --- a partition logged to a real MLflow tracking server -------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.server
def test_a_partition_logs_to_an_mlflow_server_over_http(tmp_path):
    port = free_port()
    served = tmp_path / "served_artifacts"
    server = processes.start(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server.db'}",
            "--artifacts-destination",
            str(served),
        ],
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},  # its job runner's processes serve nothing here
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stderr.read().decode()[-3000:]
            try:
                if urllib.request.urlopen(f"{uri}/health", timeout=2).status == 200:
                    break
            except OSError:
                assert time.monotonic() < end, "mlflow server did not come up"
                time.sleep(0.5)

        # artifact_root as default_resources sets it: a tracking server must not use it.
        mlflow = MLflowResource(tracking_uri=uri, artifact_root=str(tmp_path / "client_artifacts"))
        mlflow.ensure_store()  # a no-op for a server
        with curated_tiny_world(tmp_path, mlflow) as (resources, instance):
            md = materialise_bm25(resources, instance)

        client = MlflowClient(tracking_uri=uri)
        run = client.get_run(md["mlflow_run_id"])
        assert run.info.status == "FINISHED" and run.data.metrics["ndcg_at_10"] == pytest.approx(1.0)
        assert run.data.params["model"] == "bm25" and run.data.params["task"] == "liveqa_medquad"
        assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"run.trec", "per_query.parquet"}
        assert run.info.artifact_uri.startswith("mlflow-artifacts:")
        assert sorted(p.name for p in served.rglob("*") if p.is_file()) >= ["metrics.json", "per_query.parquet", "run.trec"]
        assert not (tmp_path / "client_artifacts").exists()
    finally:
        processes.stop(server, grace=5)  # the mlflow CLI process can linger after its workers stop
