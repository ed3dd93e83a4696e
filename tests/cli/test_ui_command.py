"""``medbench ui``: the three servers (Dagster, MLflow, the leaderboard's site) up on loopback with their URLs
printed; Ctrl-C stops the command and every process of every server within 10 s and frees every port, also
when the command was started with SIGINT ignored (a background job of a script or a CI runner: issue 20)."""

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil
import pytest

from tests import processes
from tests.orchestration.operating_env import BM25, ROOT, free_port, listening_addresses, new_world

pytestmark = [pytest.mark.server, pytest.mark.slow]


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2)
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def command(p: psutil.Process) -> tuple[str, ...]:
    try:
        return tuple(p.cmdline())
    except psutil.Error:  # exited meanwhile
        return ()


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_ui_serves_dagster_mlflow_and_the_site_on_loopback_and_ctrl_c_stops_them_all(tmp_path, sigint):
    from medbench_core.site import SiteInputs, build_site
    from tests.core.site_world import build_world

    world = new_world(tmp_path / "w", [BM25])
    site = tmp_path / "site"
    build_site(site, SiteInputs(build_world(tmp_path / "sw").board))
    port, mlflow_port, site_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDBENCH_")}
    env.update(
        PYTHONPATH=str(ROOT), DAGSTER_HOME=str(world.dagster_home), MLFLOW_TRACKING_URI=f"sqlite:///{world.root / 'mlflow.db'}",
        MEDBENCH_DATA=str(world.root / "data"), MEDBENCH_STATE=str(world.root / "state"),
        MEDBENCH_MODELS=str(world.models_file), MEDBENCH_TASKS=str(world.root / "tasks.yaml"),
    )  # fmt: skip
    cmd = [sys.executable, "-m", "medbench_cli", "ui", "--port", str(port), "--mlflow-port", str(mlflow_port)]
    cmd += ["--site-port", str(site_port), "--site", str(site)]
    if sigint == "ignored":  # what `medbench ui &` in a script or a CI runner's shell passes on
        cmd = ["bash", "-c", 'trap "" INT; exec "$@"', "bash", *cmd]
    log = open(tmp_path / "ui.log", "w+")
    proc = processes.start(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while not all(answers(u) for u in (f"http://127.0.0.1:{port}/server_info", f"http://127.0.0.1:{mlflow_port}/health", f"http://127.0.0.1:{site_port}/")):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "ui.log").read_text()[-3000:]
            time.sleep(1)
        assert listening_addresses(port) == listening_addresses(mlflow_port) == listening_addresses(site_port) == {"127.0.0.1"}
        printed = (tmp_path / "ui.log").read_text()
        assert f"Dagster UI: http://127.0.0.1:{port}" in printed and f"MLflow UI:  http://127.0.0.1:{mlflow_port}" in printed
        assert f"Leaderboard: http://127.0.0.1:{site_port}/ ({site})" in printed
        # The site's links go to this command's two UIs.
        with urllib.request.urlopen(f"http://127.0.0.1:{site_port}/ui.js", timeout=5) as r:
            assert f'"dagster": "http://127.0.0.1:{port}", "mlflow": "http://127.0.0.1:{mlflow_port}"' in r.read().decode()
        # Both servers and their workers run in sessions of their own (their own process groups).
        servers = psutil.Process(proc.pid).children(recursive=True)
        assert {command(p)[1:4] for p in servers} >= {
            ("-m", "medbench_cli.webserver", "dev"),
            ("-m", "medbench_cli.webserver", "mlflow"),
            ("-m", "medbench_cli.webserver", "serve"),
            ("-m", "medbench_cli.webserver", "site"),
        }
        assert len({os.getpgid(p.pid) for p in servers} - {proc.pid}) == 3
        # MLflow's job runner (huey consumers) is off: medbench logs nothing it would run (medbench_cli/webserver.py).
        assert not [p for p in servers if "huey" in " ".join(command(p))], [command(p) for p in servers]

        start = time.monotonic()
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the command (the servers run in their own groups)
        assert proc.wait(timeout=10) == 0
        _, running = psutil.wait_procs(servers, timeout=max(0.0, 10 - (time.monotonic() - start)))
        assert [command(p) for p in running if command(p)] == []
        assert listening_addresses(port) == listening_addresses(mlflow_port) == listening_addresses(site_port) == set()
    finally:
        if proc.poll() is None:
            processes.stop(proc)
        log.close()
