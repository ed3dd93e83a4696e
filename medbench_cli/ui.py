"""``medbench ui``: the Dagster UI (with its daemon: schedules, the registry sensor) and the MLflow UI, on 127.0.0.1.

Neither server has authentication, so both listen on loopback only (RELIABILITY.md), answer
only the Host headers of that address (127.0.0.1 or localhost, and the port), against DNS
rebinding, and act only on their own pages' writes, against cross-site request forgery
(medbench_cli/webserver.py). Ctrl-C (or SIGTERM) stops both; when one of them exits, the other is stopped too. With a remote MLflow
tracking server (MLFLOW_TRACKING_URI=http...), its URL is printed and no MLflow UI is started.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from medbench_cli.common import describe
from runtime import settings

HOST = "127.0.0.1"  # loopback only: no authentication on either server


def add_parser(sub) -> None:
    p = sub.add_parser("ui", help="serve the Dagster UI (and daemon) and the MLflow UI on 127.0.0.1", description=describe(__doc__))
    p.add_argument("--port", type=int, default=settings.UI_PORT, help="Dagster UI port (default: MEDBENCH_UI_PORT or 3000)")
    p.add_argument("--mlflow-port", type=int, default=5000, help="MLflow UI port (default: 5000)")
    p.set_defaults(handler=main)


def allowed_hosts(port: int) -> str:
    """The Host headers a server on ``port`` answers: its own address, by number or as localhost (no other name, no private IP)."""
    return f"{HOST}:{port},localhost:{port}"


def commands(port: int, mlflow_port: int, tracking_uri: str) -> dict[str, list[str]]:
    """The server commands, by name: ``dagster dev`` (webserver and daemon) and, for a local store, ``mlflow ui``,
    both through medbench_cli.webserver; each answers only :func:`allowed_hosts` and their pages' writes."""
    dagster = [sys.executable, "-m", "medbench_cli.webserver", "dev", "--allowed-hosts", allowed_hosts(port)]
    cmds = {"dagster": [*dagster, "-h", HOST, "-p", str(port), "-m", "orchestration.definitions"]}
    if not tracking_uri.startswith(("http://", "https://")):
        cmds["mlflow"] = [
            sys.executable,
            "-m",
            "medbench_cli.webserver",
            "mlflow",
            "--backend-store-uri",
            tracking_uri,
            "--host",
            HOST,
            "--port",
            str(mlflow_port),
            "--allowed-hosts",
            allowed_hosts(mlflow_port),
        ]
    return cmds


def _stop(procs: dict[str, subprocess.Popen], grace: float = 4.0) -> None:
    """SIGTERM to each server's process group; what is left of the groups after ``grace`` seconds gets SIGKILL.

    Every process of a server is in its group (dagster dev's webserver, daemon and code server;
    mlflow ui's uvicorn workers, job runner and huey consumers). Left alone, dagster dev waits up to
    60 s for its webserver and daemon; Ctrl-C frees both ports within seconds instead.
    """
    groups = [proc.pid for proc in procs.values()]
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)
    # Leaders are reaped only at the end: a zombie leader keeps its group id from being reused.
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_group_alive(pgid) for pgid in groups):
        time.sleep(0.1)
    for pgid in groups:
        if _group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
    for proc in procs.values():
        proc.wait()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # the whole group has exited
        pass


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is still running (zombies waiting to be reaped do not count)."""
    import psutil

    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def main(args: argparse.Namespace) -> int:
    from medbench_cli.common import prepare_environment

    prepare_environment()
    tracking_uri = settings.default_tracking_uri()
    if tracking_uri.startswith("sqlite:///"):
        from runtime.mlflow_store import MLflowResource

        MLflowResource(tracking_uri=tracking_uri).ensure_store()  # created once, the way the runs expect it
    procs: dict[str, subprocess.Popen] = {}
    stop_requested: list[int] = []

    def request_stop(signum, frame):
        stop_requested.append(signum)

    # Our own handlers whatever this process inherited (a background job starts with SIGINT
    # ignored): a signal only sets a flag, so it never lands between starting a server and
    # recording it, and the servers start with both signals at their defaults (exec resets handled
    # signals, not ignored ones; dagster dev copies an ignored SIGINT onto SIGTERM).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, request_stop)
    try:
        for name, cmd in commands(args.port, args.mlflow_port, tracking_uri).items():
            if stop_requested:
                return 0
            # Own process groups: stopping one stops its children (dagster dev's webserver and daemon).
            procs[name] = subprocess.Popen(cmd, cwd=settings.ROOT, start_new_session=True)
        print(f"Dagster UI: http://{HOST}:{args.port}", flush=True)
        print(f"MLflow UI:  {f'http://{HOST}:{args.mlflow_port}' if 'mlflow' in procs else tracking_uri}", flush=True)
        print("Ctrl-C stops both.", flush=True)
        while not stop_requested:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    print(f"{name} exited (code {proc.returncode}); stopping the other server", file=sys.stderr)
                    return proc.returncode or 1
            time.sleep(0.2)
        return 0
    finally:
        _stop(procs)
