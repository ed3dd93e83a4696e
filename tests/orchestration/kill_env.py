"""A real Dagster deployment over a tmp medbench world, with hold points where a test can kill a step.

``KillBed`` is the operating_env world (two tiny BEIR tasks, BM25 models) served the way
`dagster dev` serves it: one code server (it launches run workers, which start one process per
step, the project's multiprocess executor) and one daemon (queued runs, run retries, run
monitoring), on a tmp DAGSTER_HOME with the project's dagster.yaml, polling intervals shortened.

Hold points make a kill land where the test wants it, whatever the machine's speed. A test asks
for one with ``bed.hold(stage, model, task)`` (or :func:`hold` on a world); the first attempt that
reaches it writes its stage's real output into the artifact's temporary folder (``metrics``: has
created the partition's MLflow run, RUNNING, and is about to log into it), records its pid and
sleeps; the test kills it there. The next attempt finds the request taken and runs through. This
file is also the code location (attribute ``defs``) that the code server, the run workers and the
step processes load, which is how the hooks get into those processes; ``medbench`` commands get
them from :data:`HOOKS` (run before the command, in its process: see :func:`command_env`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import yaml

from tests.orchestration.operating_env import BM25, ROOT, World

BM25_K09 = {**BM25, "name": "bm25-k09", "settings": {**BM25["settings"], "k1": 0.9}}
BM25_K20 = {**BM25, "name": "bm25-k20", "settings": {**BM25["settings"], "k1": 2.0}}
WORLD_ENV = "MEDBENCH_KILL_WORLD"
HELD_SECONDS = 600


# --- hold points (run inside the step processes) ----------------------------------------------


def _holds(root: Path) -> Path:
    return root / "holds"


def _hold_if_asked(stage: str, model: str, task: str) -> None:
    request = _holds(Path(os.environ[WORLD_ENV])) / f"{stage}.{model}.{task}"
    try:
        os.rename(request, request.with_name(request.name + ".taken"))  # one attempt only
    except FileNotFoundError:
        return
    pid_file = request.with_name(request.name + ".pid")
    tmp = pid_file.with_name(pid_file.name + ".tmp")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, pid_file)
    time.sleep(HELD_SECONDS)


def _install_hold_points() -> None:
    from mlflow.tracking import MlflowClient

    import assets.embeddings
    import assets.indices

    if getattr(assets.embeddings, "_kill_env_hooked", False):
        return
    real_embed, real_index, real_log_batch = assets.embeddings.embed_corpus, assets.indices.build_corpus_index, MlflowClient.log_batch

    def embed_corpus(spec, task, out, **kwargs):
        info = real_embed(spec, task, out, **kwargs)  # the vectors are in the temporary folder, no manifest yet
        _hold_if_asked("embeddings", spec.name, task.name)
        return info

    def build_corpus_index(spec, emb_dir, out, **kwargs):
        info = real_index(spec, emb_dir, out, **kwargs)
        _hold_if_asked("index", spec.name, Path(emb_dir).parents[1].name)  # .../<task>/embeddings/<key>
        return info

    def log_batch(self, run_id, metrics=(), params=(), tags=(), *args, **kwargs):
        named = {t.key: t.value for t in tags}
        if "medbench.model" in named:  # a partition's run (medbench.evaluation.run_record), created and still RUNNING
            _hold_if_asked("metrics", named["medbench.model"], named["medbench.task"])
        return real_log_batch(self, run_id, metrics, params, tags, *args, **kwargs)

    assets.embeddings.embed_corpus, assets.indices.build_corpus_index = embed_corpus, build_corpus_index
    MlflowClient.log_batch = log_batch
    assets.embeddings._kill_env_hooked = True


HOOKS = "from tests.orchestration import kill_env; kill_env._install_hold_points()"


def hold(root: Path, stage: str, model: str, task: str) -> Path:
    """Ask the first attempt of ``stage`` of model x task in the world at ``root`` to stop there; returns its pid file."""
    holds = _holds(root)
    holds.mkdir(exist_ok=True)
    (holds / f"{stage}.{model}.{task}").touch()
    return holds / f"{stage}.{model}.{task}.pid"


@dg.definitions
def defs() -> dg.Definitions:
    """The code location: the project's definitions on the world named by $MEDBENCH_KILL_WORLD, hooks installed,
    without the schedules (:func:`no_schedules`)."""
    _install_hold_points()
    return no_schedules(World(Path(os.environ[WORLD_ENV])).defs())


def no_schedules(d: dg.Definitions, executor=None) -> dg.Definitions:
    """``d`` without its schedules: the daemon would launch the nightly runs in any test that spans 02:00 UTC
    (seen: a backfill test found 12 runs where it queued 4, and waited for 4 until its timeout); nor the sensor that
    builds the leaderboard once evaluations settle (a run of its own a minute or two after the test's)."""
    from orchestration.sensors import LEADERBOARD_SENSOR

    sensors = [s for s in d.sensors or [] if s.name != LEADERBOARD_SENSOR]
    return dg.Definitions(assets=d.assets, asset_checks=d.asset_checks, jobs=d.jobs, sensors=sensors, resources=d.resources, executor=executor or d.executor)


def evaluate_partition_job() -> dg.JobDefinition:
    """evaluate_partition on the world named by $MEDBENCH_KILL_WORLD, for ``dg.reconstructable`` (no hooks)."""
    return World(Path(os.environ[WORLD_ENV])).defs().resolve_job_def("evaluate_partition")


# --- the deployment (driven from the test process) --------------------------------------------


def pkey(model: str, task: str) -> str:
    """The partition key string Dagster stores in run tags (dimensions in name order: model, task)."""
    return f"{model}|{task}"


def wait_for(what: str, predicate, timeout: float = 120, every: float = 0.3, state=None, progress=None):
    """``predicate()``'s first true value. Gives up after ``timeout`` s without it or, given ``progress``,
    after ``timeout`` s in which ``progress()`` did not change (and after 4 x ``timeout`` in all): a
    busy machine is slow but its runs keep writing events, a hung run writes none. On giving up,
    ``state()`` says where things stood."""
    start = last_change = time.monotonic()
    seen = progress() if progress else None
    while True:
        value = predicate()
        if value:
            return value
        now = time.monotonic()
        if progress and (current := progress()) != seen:
            seen, last_change = current, now
        if now - last_change > timeout or now - start > 4 * timeout:
            why = f"nothing happened for {timeout}s" if now - last_change > timeout else f"still not done after {4 * timeout}s"
            raise AssertionError(f"{why} waiting for {what}" + (f"; {state()}" if state else ""))
        time.sleep(every)


def last_event(instance: dg.DagsterInstance) -> int | None:
    """The newest event's id on ``instance``: any step, retry or run-monitoring event moves it."""
    return instance.event_log_storage.get_maximum_record_id()


def children(pid: int) -> list[int]:
    """Direct child processes of ``pid`` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def kill_tree(pid: int) -> list[int]:
    """SIGSTOP ``pid`` and its descendants (nothing can react), then SIGKILL them all; returns the pids."""
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        os.kill(p, signal.SIGSTOP)
        tree.append(p)
        todo.extend(children(p))
    for p in tree:
        os.kill(p, signal.SIGKILL)
    return tree


def manifest_hashes(data: Path) -> dict[str, str]:
    """sha256 of every artifact's MANIFEST.json (it holds the sha256 of each file), by artifact folder."""
    from medbench_core.storage import sha256_file

    return {str(m.parent.relative_to(data)): sha256_file(m) for m in sorted((data / "artifacts").glob("*/*/*/*/MANIFEST.json"))}


def debris(data: Path) -> list[Path]:
    """Temporary folders and files of interrupted atomic writes under ``data``."""
    return sorted(p for pattern in (".*.tmp", ".*.old") for p in data.rglob(pattern))


def world_process_env(world: World) -> dict[str, str]:
    """The environment of every process of a test world (code server, daemon, workers): its instance,
    data, state and MLflow store, this checkout's code, offline models."""
    return {
        **os.environ,
        "DAGSTER_HOME": str(world.dagster_home),
        WORLD_ENV: str(world.root),
        "MEDBENCH_DATA": str(world.root / "data"),
        "MEDBENCH_STATE": str(world.root / "state"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{world.root / 'mlflow.db'}",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "DAGSTER_EVENT_LOG_CONSUMER_DAEMON_INTERVAL_SECONDS": "1",  # the run-retry daemon's poll
    }


def command_env(world: World) -> dict[str, str]:
    """The environment of a ``medbench`` command on ``world`` (its data, state, instance, MLflow store, registry
    and catalogue), with the hold points' world named; run it with :data:`HOOKS` first to have them."""
    shared_root = world.root / "shared_root"  # MEDBENCH_SHARED holds data/
    if not (shared_root / "data").exists():
        shared_root.mkdir(exist_ok=True)
        (shared_root / "data").symlink_to(world.shared)
    return {
        "PYTHONPATH": str(ROOT), "DAGSTER_HOME": str(world.dagster_home), WORLD_ENV: str(world.root),
        "MEDBENCH_SHARED": str(shared_root), "MEDBENCH_DATA": str(world.root / "data"), "MEDBENCH_STATE": str(world.root / "state"),
        "MEDBENCH_MODELS": str(world.models_file), "MEDBENCH_TASKS": str(world.root / "tasks.yaml"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{world.root / 'mlflow.db'}",
    }  # fmt: skip


@dataclass
class KillBed:
    world: World
    env: dict
    workspace: Path
    processes: list[subprocess.Popen] = field(default_factory=list)
    log_dir: Path | None = None

    @property
    def data(self) -> Path:
        return self.world.root / "data"

    def instance(self) -> dg.DagsterInstance:
        return self.world.instance()

    def retries_armed(self, instance: dg.DagsterInstance, timeout: float = 240) -> None:
        """Wait for the daemon's first pass over run failures: Dagster's run-retry daemon starts its cursor at
        the newest event on that pass and never retries a run that failed before it."""
        key = f"EVENT_LOG_CONSUMER_CURSOR-{dg.DagsterEventType.RUN_FAILURE.value}"  # dagster/_daemon/auto_run_reexecution/event_log_consumer.py
        wait_for("the daemon's run-retry cursor", lambda: instance.daemon_cursor_storage.get_cursor_values({key}).get(key), timeout, state=self.daemon_log)

    def daemon_log(self) -> str:
        """The daemon's log, its last lines: where a test gave up waiting for the daemon, what it did."""
        log = self.log_dir / "daemon.log" if self.log_dir else None
        return "daemon log:\n" + log.read_text(errors="replace")[-3000:] if log and log.exists() else "no daemon log"

    def hold(self, stage: str, model: str, task: str) -> Path:
        """Ask the first attempt of ``stage`` of model x task to stop there; returns the file its pid will be in."""
        return hold(self.world.root, stage, model, task)

    def held_pid(self, pid_file: Path, timeout: float = 120) -> int:
        return int(wait_for(f"a step to stop at {pid_file.name[:-4]}", lambda: pid_file.exists() and pid_file.read_text(), timeout))

    def dagster(self, *args: str, timeout: float = 120) -> str:
        cmd = [sys.executable, "-m", "dagster", *args, "-w", str(self.workspace)]
        proc = subprocess.run(cmd, env=self.env, cwd=self.world.root, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, f"dagster {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout

    def launch(self, model: str, task: str) -> str:
        """Queue one evaluate_partition run of model x task (the daemon starts it); returns its run id."""
        run_id = str(uuid.uuid4())
        tags = {"dagster/partition": pkey(model, task), "dagster/partition/model": model, "dagster/partition/task": task}
        self.dagster("job", "launch", "-j", "evaluate_partition", "--tags", json.dumps(tags), "--run-id", run_id)
        return run_id

    def backfill(self, keys: list[tuple[str, str]]) -> None:
        """Queue a backfill of evaluate_partition over the model x task ``keys`` (one run each)."""
        self.dagster("job", "backfill", "-j", "evaluate_partition", "--partitions", ",".join(pkey(m, t) for m, t in keys), "--noprompt")

    def stop(self) -> None:
        """Stop every process group started here (the daemon first, then the code server with its run workers)."""
        from tests import processes

        for proc in reversed(self.processes):
            processes.stop(proc, grace=30)


def start_bed(world: World, log_dir: Path) -> KillBed:
    """Serve ``world``: shorten the instance's polling intervals, start a code server and a daemon."""
    from tests import processes
    from tests.orchestration.operating_env import free_port

    config = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    config["run_monitoring"].update(poll_interval_seconds=1, free_slots_after_run_end_seconds=1)
    config["run_coordinator"] = {
        "module": "dagster.core.run_coordinator",
        "class": "QueuedRunCoordinator",
        "config": {"dequeue_interval_seconds": 1},
    }
    (world.dagster_home / "dagster.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    workspace = world.root / "workspace.yaml"
    server = {"host": "127.0.0.1", "port": port, "location_name": "medbench"}
    workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": server}]}))
    bed = KillBed(world, world_process_env(world), workspace, log_dir=log_dir)
    code_server = [sys.executable, "-m", "dagster", "api", "grpc", "--host", "127.0.0.1", "--port", str(port)]
    code_server += ["--python-file", str(Path(__file__)), "--attribute", "defs", "--working-directory", str(ROOT)]
    code_server += ["--location-name", "medbench"]
    daemon = [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(workspace)]
    try:
        for name, cmd in (("code_server", code_server), ("daemon", daemon)):
            log = open(log_dir / f"{name}.log", "wb")
            proc = processes.start(cmd, env=bed.env, cwd=world.root, stdout=log, stderr=subprocess.STDOUT)
            bed.processes.append(proc)
            log.close()
            if name == "code_server":
                _wait_for_port(port, bed.processes[-1], log_dir / f"{name}.log")
    except BaseException:
        bed.stop()
        raise
    return bed


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"code server did not listen on {port} (exit code {proc.poll()}):\n{log.read_text()[-3000:]}") from None
            time.sleep(0.3)


# --- what a test reads back -------------------------------------------------------------------


def step_events(instance: dg.DagsterInstance, run_id: str) -> list[tuple[str, str]]:
    """(event type, step key) of every step event of a run, in order."""
    return [(e.dagster_event.event_type_value, e.step_key) for e in instance.all_logs(run_id) if e.is_dagster_event and e.step_key]


# A retriever's query_expansion and its check answer at once ("reads the task's own queries");
# whether they start before or after corpus_embeddings is the executor's choice.
EXPANSION_STEPS = ["query_expansion", "query_expansion_expansion_contract"]


def steps_started(instance: dg.DagsterInstance, run_id: str, stages_only: bool = True) -> list[str]:
    """Step keys of every attempt that began executing in a run (first attempts and retries); with
    ``stages_only`` without the expansion steps (:data:`EXPANSION_STEPS`)."""
    steps = [step for kind, step in step_events(instance, run_id) if kind in ("STEP_START", "STEP_RESTARTED")]
    return [s for s in steps if s not in EXPANSION_STEPS] if stages_only else steps


def child_runs(instance: dg.DagsterInstance, run_id: str) -> list[dg.DagsterRun]:
    """Runs re-executing ``run_id`` (the daemon's automatic retries and manual re-executions)."""
    return [r for r in instance.get_runs() if r.parent_run_id == run_id]


def materializations(instance: dg.DagsterInstance, asset: str, model: str, task: str) -> list[int]:
    """Storage ids of every materialisation of ``asset`` for model x task, oldest first."""
    f = dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[pkey(model, task)])
    return sorted(r.storage_id for r in instance.fetch_materializations(f, limit=100).records)


def mlflow_runs(world: World) -> dict[tuple[str, str], list]:
    """Active MLflow runs of the world's benchmark by (model, task) (deleted runs are not counted)."""
    client = world.resources()["mlflow"].client()
    exp = client.get_experiment_by_name(world.resources()["registry"].catalog().benchmark)
    out: dict[tuple[str, str], list] = {}
    for r in client.search_runs([exp.experiment_id], max_results=1000) if exp else []:
        if "medbench.model" in r.data.tags:  # not the leaderboard's run
            out.setdefault((r.data.tags["medbench.model"], r.data.tags["medbench.task"]), []).append(r)
    return out


def reference_result(world: World, model: str, task: str, out: Path) -> tuple[str, dict]:
    """run.trec and mean metrics of model x task computed straight through medbench_core, never interrupted."""
    from medbench_core.evaluation.scoring import score
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve

    res = world.resources()
    spec, t = res["registry"].model(model), res["store"].load_task(task)
    emb, idx, run_dir, met = (out / s for s in ("emb", "idx", "run", "met"))
    for d in (emb, idx, run_dir, met):
        d.mkdir(parents=True)
    embed_corpus(spec, t, emb)
    build_corpus_index(spec, emb, idx)
    run, _ = retrieve(spec, t, emb, idx, run_dir, k=100)
    return (run_dir / "run.trec").read_text(), score(t, run, met)["mean"]
