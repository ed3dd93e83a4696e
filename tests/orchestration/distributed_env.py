"""The production profile run for real: PostgreSQL, Redis, a code server, a daemon and two celery workers.

``CeleryBed`` is the operating_env world (two tiny BEIR tasks, BM25 variants) served the way
deploy/production/README.md serves medbench: dagster-postgres storage and the queued run
coordinator (deploy/production/dagster.yaml, polling intervals shortened), MEDBENCH_EXECUTOR=celery
with the workers' YAML (deploy/production/celery.yaml, the Redis redelivery delay shortened), and
two workers started with ``dagster-celery worker start``, one pool process each, so that each
holds one step at a time. Every server runs on 127.0.0.1, on a free port, in its own folder, and
is stopped (its whole process group) afterwards.

This file is also the code location (attribute ``defs``) that the code server, the run workers
and the celery workers load: kill_env's hold points (embeddings, index) plus one inside the
MLflow logging of task_metrics, after the MLflow run was created (RUNNING) and before it ends.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import yaml

from tests import processes
from tests.orchestration.kill_env import (
    EXPANSION_STEPS,
    WORLD_ENV,
    KillBed,
    _hold_if_asked,
    _install_hold_points,
    kill_tree,
    no_schedules,
    wait_for,
    world_process_env,
)
from tests.orchestration.operating_env import ROOT, World, free_port

PG_USER, PG_PASSWORD, PG_DB = "dagster", "medbench-test-pw", "medbench"
HOST = socket.gethostname()
# Redis hands a taken, unacknowledged message to another worker once it is this old (seconds); the
# production profile says 12 hours. Longer than any healthy step here, even a cold one on a busy machine.
VISIBILITY_TIMEOUT = 60


# --- servers ----------------------------------------------------------------------------------


def postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if not found:
        raise RuntimeError("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin; install Debian's postgresql (scripts/setup.sh --test does)")
    return found[-1].parent


@contextmanager
def postgres_server():
    """A PostgreSQL cluster on 127.0.0.1:<free port> with database ``medbench``; stopped and removed afterwards.

    initdb into a tmp folder (as the ``postgres`` user when running as root: PostgreSQL refuses to
    run as root), password authentication.
    """
    bin_dir = postgres_bin()
    base = Path(tempfile.mkdtemp(prefix="medbench-pg-"))
    as_user = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    (base / "pw").write_text(PG_PASSWORD)
    if as_user:
        shutil.chown(base / "pw", "postgres", "postgres")
    data, port = base / "data", free_port()

    def pg(*args, **kw):
        return subprocess.run([*as_user, *map(str, args)], check=True, capture_output=True, text=True, timeout=60, **kw)

    started = False
    try:
        pg(bin_dir / "initdb", "-D", data, "-U", PG_USER, f"--pwfile={base / 'pw'}", "--auth=scram-sha-256", "--no-sync")
        pg(
            bin_dir / "pg_ctl",
            "-D",
            data,
            "-l",
            base / "server.log",
            "-w",
            "-t",
            "30",
            "-o",
            f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        )
        started = True
        pg(bin_dir / "createdb", "-h", "127.0.0.1", "-p", port, "-U", PG_USER, PG_DB, env={**os.environ, "PGPASSWORD": PG_PASSWORD})
        yield {"host": "127.0.0.1", "port": port, "base": base}
    finally:
        if started:
            try:
                pg(bin_dir / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
            finally:  # pg_ctl detached the server from us: stop it by its pid file if pg_ctl could not
                _kill_postmaster(data)
        shutil.rmtree(base, ignore_errors=True)


def _kill_postmaster(data: Path) -> None:
    import psutil

    pid_file = data / "postmaster.pid"
    if pid_file.exists():
        try:
            server = psutil.Process(int(pid_file.read_text().split()[0]))
        except (ValueError, IndexError, psutil.Error):
            return
        processes.kill([server, *server.children(recursive=True)])


@contextmanager
def redis_server(folder: Path):
    """Debian's redis-server on 127.0.0.1:<free port>, no persistence, in ``folder``; yields its URL prefix."""
    import redis

    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(binary).exists():
        raise RuntimeError("redis-server not found; install Debian's redis-server (scripts/setup.sh --test does)")
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = folder / "redis.conf"
    conf.write_text(f'bind 127.0.0.1\nport {port}\ndir {folder}\nsave ""\nappendonly no\nprotected-mode yes\ndaemonize no\nlogfile {folder / "redis.log"}\n')
    proc = processes.start([binary, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
        wait_for(f"redis-server on port {port}", lambda: _pings(client) or proc.poll() is not None, 30)
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited {proc.returncode}: {(folder / 'redis.log').read_text()[-2000:]}")
        yield f"redis://127.0.0.1:{port}"
    finally:
        processes.stop(proc, grace=30)


def _pings(client) -> bool:
    import redis

    try:
        return bool(client.ping())
    except redis.exceptions.ConnectionError:
        return False


# --- the code location (runs in the code server, the run workers and the celery workers) --------


def _install_mlflow_hold() -> None:
    from runtime.mlflow_store import MLflowResource

    if getattr(MLflowResource, "_distributed_env_hooked", False):
        return
    real_log_run = MLflowResource.log_run

    def log_run(self, experiment, run_key, run_name, params, metrics, tags, artifacts, replace=False, **kwargs):
        client = type(self.client())
        if not getattr(client, "_distributed_env_hooked", False):
            real_batch = client.log_batch

            def log_batch(c, run_id, metrics=(), params=(), tags=(), *args, **kwargs):
                out = real_batch(c, run_id, metrics, params, tags, *args, **kwargs)
                named = {t.key: t.value for t in tags}
                if "medbench.model" in named:  # the run exists and is RUNNING: hold here when asked
                    _hold_if_asked("mlflow", named["medbench.model"], named["medbench.task"])
                return out

            client.log_batch, client._distributed_env_hooked = log_batch, True
        return real_log_run(self, experiment, run_key, run_name, params, metrics, tags, artifacts, replace, **kwargs)

    MLflowResource.log_run, MLflowResource._distributed_env_hooked = log_run, True


@dg.definitions
def defs() -> dg.Definitions:
    """The project's definitions on the world named by $MEDBENCH_KILL_WORLD, executor from MEDBENCH_EXECUTOR, hooks installed, no schedules."""
    from orchestration.definitions import executor

    _install_hold_points()
    _install_mlflow_hold()
    return no_schedules(World(Path(os.environ[WORLD_ENV])).defs(), executor=executor())


# --- the deployment ---------------------------------------------------------------------------


@dataclass
class CeleryBed(KillBed):
    celery_yaml: Path = Path()
    broker: str = ""
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)

    def hostname(self, name: str) -> str:
        return f"{name}@{HOST}"

    def start_worker(self, name: str) -> None:
        """``dagster-celery worker start`` as the deploy README says, one pool process; waits until it answers a ping."""
        cmd = [str(Path(sys.executable).parent / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app", "-y", str(self.celery_yaml)]
        cmd += ["-q", "dagster", "-n", name, "--", "-c", "1", "--without-gossip", "--without-mingle"]
        log = open(self.world.root.parent / f"worker-{name}.log", "ab")
        # The bed's, not the test's that asked for it: the bed stops it, whichever test started it.
        self.workers[name] = processes.start(cmd, env=self.env, test=None, cwd=self.world.root, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_for(
            f"celery worker {name} to answer (log: {log.name})", lambda: self.hostname(name) in self.alive_workers() or self._worker_died(name), 180, every=1
        )
        if self._worker_died(name):
            raise RuntimeError(f"celery worker {name} exited {self.workers[name].returncode}:\n{Path(log.name).read_text()[-3000:]}")

    def _worker_died(self, name: str) -> bool:
        return self.workers[name].poll() is not None

    def alive_workers(self) -> set[str]:
        from celery import Celery

        app = Celery("ping", broker=self.broker + "/0")
        try:
            return {host for reply in app.control.ping(timeout=1.0) or [] for host in reply}
        finally:
            app.close()

    def worker_holding(self, pid: int) -> str:
        """The name of the worker whose process tree holds ``pid`` (a pool process: pid -> celery -> dagster-celery)."""
        from tests.orchestration.kill_env import parent

        tops = {p.pid: n for n, p in self.workers.items() if p.poll() is None}
        p = pid
        while p > 1:
            if p in tops:
                return tops[p]
            p = parent(p)
        raise AssertionError(f"pid {pid} belongs to no worker started here ({tops})")

    def kill_worker(self, name: str) -> list[int]:
        """SIGKILL the worker's whole process tree (the dagster-celery launcher, celery, its pool)."""
        proc = self.workers[name]
        killed = kill_tree(proc.pid)
        proc.wait(timeout=30)
        return killed

    def ensure_workers(self, names=("w1", "w2")) -> None:
        for name in names:
            if name not in self.workers or self._worker_died(name):
                self.start_worker(name)
        want = {self.hostname(n) for n in names}
        wait_for(f"workers {sorted(want)} to answer", lambda: want <= self.alive_workers(), 120, every=1)

    def stop(self) -> None:
        for proc in self.workers.values():
            processes.stop(proc, grace=30)
        super().stop()


def profile_env(world: World, pg: dict, redis_url: str, celery_yaml: Path) -> dict:
    """Every process's environment: the production profile's variables pointing at these servers."""
    return {
        **world_process_env(world),
        "DAGSTER_PG_HOST": pg["host"],
        "DAGSTER_PG_PORT": str(pg["port"]),
        "DAGSTER_PG_DB": PG_DB,
        "DAGSTER_PG_USER": PG_USER,
        "DAGSTER_PG_PASSWORD": PG_PASSWORD,
        "MEDBENCH_COMPUTE_LOGS": str(world.root / "compute_logs"),
        "MEDBENCH_EXECUTOR": "celery",
        "MEDBENCH_CELERY_BROKER": f"{redis_url}/0",
        "MEDBENCH_CELERY_BACKEND": f"{redis_url}/1",
        "MEDBENCH_CELERY_CONFIG": str(celery_yaml),
    }


def write_profile(world: World) -> Path:
    """The production dagster.yaml into the world's DAGSTER_HOME and the workers' celery.yaml beside it, intervals shortened."""
    config = yaml.safe_load((ROOT / "deploy" / "production" / "dagster.yaml").read_text())
    config["run_coordinator"]["config"] = {"dequeue_interval_seconds": 1}
    config["run_monitoring"].update(poll_interval_seconds=1, free_slots_after_run_end_seconds=1)
    (world.dagster_home / "dagster.yaml").write_text(yaml.safe_dump(config))
    celery = yaml.safe_load((ROOT / "deploy" / "production" / "celery.yaml").read_text())
    options = celery["execution"]["config"]["config_source"]["broker_transport_options"]
    # Redelivery after VISIBILITY_TIMEOUT, swept for every 2 s (kombu: every 10 s x 10 calls by default).
    options.update(visibility_timeout=VISIBILITY_TIMEOUT, unacked_restore_interval=2, unacked_restore_throttle=1)
    path = world.root / "celery.yaml"
    path.write_text(yaml.safe_dump(celery))
    return path


def start_celery_bed(world: World, log_dir: Path, env: dict, celery_yaml: Path) -> CeleryBed:
    """Start a code server (this file's ``defs``), a daemon and workers w1 and w2."""
    from tests.orchestration.kill_env import _wait_for_port

    port = free_port()
    workspace = world.root / "workspace.yaml"
    workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": {"host": "127.0.0.1", "port": port, "location_name": "medbench"}}]}))
    bed = CeleryBed(world, env, workspace, celery_yaml=celery_yaml, broker=env["MEDBENCH_CELERY_BROKER"].rsplit("/", 1)[0])
    code_server = [sys.executable, "-m", "dagster", "api", "grpc", "--host", "127.0.0.1", "--port", str(port)]
    code_server += ["--python-file", str(Path(__file__)), "--attribute", "defs", "--working-directory", str(ROOT), "--location-name", "medbench"]
    daemon = [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(workspace)]
    try:
        for name, cmd in (("code_server", code_server), ("daemon", daemon)):
            log = open(log_dir / f"{name}.log", "wb")
            bed.processes.append(processes.start(cmd, env=env, cwd=world.root, stdout=log, stderr=subprocess.STDOUT))
            log.close()
            if name == "code_server":
                _wait_for_port(port, bed.processes[-1], log_dir / f"{name}.log")
        bed.ensure_workers()
    except BaseException:
        bed.stop()
        raise
    return bed


# --- what a test reads back -------------------------------------------------------------------


def celery_steps(instance: dg.DagsterInstance, run_id: str, with_time: bool = False, stages_only: bool = True) -> list[tuple]:
    """(step key, celery worker hostname[, wall-clock time]) of every step execution a worker reported, in order;
    with ``stages_only`` without the expansion steps (kill_env.EXPANSION_STEPS: a retriever's
    answer at once, in an order the executor chooses).

    dagster-celery's task logs "[CeleryExecutor] Executing steps <key> in celery worker" with the
    worker's hostname as metadata when it starts a step, before the step's own events.
    """
    out = []
    for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        found = re.search(r"Executing steps (\S+) in celery worker$", e.message or "")
        if found and not (stages_only and found.group(1) in EXPANSION_STEPS):
            host = e.dagster_event.event_specific_data.metadata["Celery worker"].value
            out.append((found.group(1), host, e.timestamp) if with_time else (found.group(1), host))
    return out
