"""``medbench ui`` with a port another process holds (issue 44.8): it exits 2 at once, in one line naming the port,
who holds it and the option that changes it, and starts nothing (no server, no daemon, no instance folder).
Before, it printed the Dagster URL (answered by the other process), logged ``[Errno 98]`` and never exited.

Each case binds a real socket in this process and runs the command as a process of its own."""

import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from tests import processes
from tests.orchestration.operating_env import ROOT, free_port


def ui(tmp_path, *args: str, timeout: float = 60) -> tuple[int, str, list]:
    """Run ``medbench ui ARGS``; its exit code, its stderr, and the processes it started that outlived it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDBENCH_") and k not in ("DAGSTER_HOME", "MLFLOW_TRACKING_URI")}
    env |= {"PYTHONPATH": str(ROOT), "MEDBENCH_DATA": str(tmp_path / "data"), "MEDBENCH_STATE": str(tmp_path / "state")}
    err = open(tmp_path / "ui.err", "w+")
    proc = processes.start([sys.executable, "-m", "medbench_cli", "ui", *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        started = time.monotonic()
        children: set[psutil.Process] = set()
        while proc.poll() is None and time.monotonic() - started < timeout:
            try:
                children |= set(psutil.Process(proc.pid).children(recursive=True))
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        code = proc.poll()
        assert code is not None, f"medbench ui still runs after {timeout:.0f} s with its port taken: {(tmp_path / 'ui.err').read_text()[-2000:]}"
        return code, (tmp_path / "ui.err").read_text(), [p for p in children if p.is_running()]
    finally:
        if proc.poll() is None:
            processes.stop(proc)
        err.close()


def held(address: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((address, port))
    s.listen(1)
    return s


@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0"])
@pytest.mark.parametrize("which", ["dagster", "mlflow", "site"])
def test_a_taken_port_stops_ui_before_anything_starts(tmp_path, which, address):
    ports = {"dagster": free_port(), "mlflow": free_port(), "site": free_port()}
    taken = ports[which]
    with held(address, taken):
        code, err, left = ui(tmp_path, "--port", str(ports["dagster"]), "--mlflow-port", str(ports["mlflow"]), "--site-port", str(ports["site"]))
    assert code == 2, err
    (line,) = err.strip().splitlines()
    option = {"dagster": "--port PORT (or MEDBENCH_UI_PORT)", "mlflow": "--mlflow-port PORT", "site": "--site-port PORT"}[which]
    server = {"dagster": "the Dagster UI", "mlflow": "the MLflow UI", "site": "the leaderboard's site"}[which]
    assert line.startswith(f"medbench ui: error: port {taken} on 127.0.0.1 is already in use (by pid {os.getpid()}: "), line
    assert line.endswith(f", so {server} cannot start there; nothing was started; choose a free port with {option}"), line
    assert left == []
    assert not (tmp_path / "state").exists()  # not even the instance's folder


def test_one_port_for_two_servers_is_refused(tmp_path):
    port = free_port()
    code, err, left = ui(tmp_path, "--port", str(port), "--mlflow-port", str(port))
    assert code == 2 and left == []
    assert err.strip() == f"medbench ui: error: --port and --mlflow-port are both {port}; nothing was started; give each server a port of its own"
    code, err, left = ui(tmp_path, "--port", str(free_port()), "--mlflow-port", str(port), "--site-port", str(port))
    assert code == 2 and left == []
    assert err.strip() == f"medbench ui: error: --mlflow-port and --site-port are both {port}; nothing was started; give each server a port of its own"


@pytest.mark.parametrize("value", ["0", "65536", "http"])
def test_a_port_out_of_range_is_a_usage_error(tmp_path, value):
    code, err, left = ui(tmp_path, "--mlflow-port", value)
    assert code == 2 and left == []
    assert err.strip().splitlines()[-1] == (
        f"medbench ui: error: argument --mlflow-port: {value!r} is not a TCP port (a whole number from 1 to 65535); nothing was run or changed"
    )
