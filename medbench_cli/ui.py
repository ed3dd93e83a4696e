"""``medbench ui``: the Dagster UI (with its daemon: schedules, the registry sensor) and the MLflow UI, on 127.0.0.1.

Neither server has authentication, so both listen on loopback only (RELIABILITY.md) and answer
only the Host headers of that address (127.0.0.1 or localhost, and the port), against DNS
rebinding (medbench_cli/webserver.py for Dagster's). Ctrl-C (or SIGTERM) stops both; when one of them exits, the other is stopped too. With a remote MLflow
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
    """The server commands, by name: ``dagster dev`` (webserver and daemon; medbench_cli.webserver checks the
    webserver's Host headers) and, for a local store, ``mlflow ui``; each answers only :func:`allowed_hosts`."""
    dagster = [sys.executable, "-m", "medbench_cli.webserver", "dev", "--allowed-hosts", allowed_hosts(port)]
    cmds = {"dagster": [*dagster, "-h", HOST, "-p", str(port), "-m", "orchestration.definitions"]}
    if not tracking_uri.startswith(("http://", "https://")):
        cmds["mlflow"] = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri, "--host", HOST, "--port", str(mlflow_port),
                          "--allowed-hosts", allowed_hosts(mlflow_port)]  # fmt: skip
    return cmds


def _stop(procs: dict[str, subprocess.Popen]) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs.values():
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main(args: argparse.Namespace) -> int:
    from medbench_cli.common import prepare_environment

    prepare_environment()
    tracking_uri = settings.default_tracking_uri()
    if tracking_uri.startswith("sqlite:///"):
        from runtime.mlflow_store import MLflowResource

        MLflowResource(tracking_uri=tracking_uri).ensure_store()  # created once, the way the runs expect it
    procs: dict[str, subprocess.Popen] = {}

    def terminate(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    try:
        for name, cmd in commands(args.port, args.mlflow_port, tracking_uri).items():
            # Own process groups: stopping one stops its children (dagster dev's webserver and daemon).
            procs[name] = subprocess.Popen(cmd, cwd=settings.ROOT, start_new_session=True)
        print(f"Dagster UI: http://{HOST}:{args.port}", flush=True)
        print(f"MLflow UI:  {f'http://{HOST}:{args.mlflow_port}' if 'mlflow' in procs else tracking_uri}", flush=True)
        print("Ctrl-C stops both.", flush=True)
        while True:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    print(f"{name} exited (code {proc.returncode}); stopping the other server", file=sys.stderr)
                    return proc.returncode or 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0
    finally:
        _stop(procs)
