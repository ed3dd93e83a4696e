"""RELIABILITY.md test 18: the servers bind to loopback by default; MLflow refuses a Host header outside its allowlist.

The Dagster webserver has no authentication and MLflow's tracking API writes: neither may listen
on a routable interface unless someone asks for it. Host-header checking stops DNS rebinding (a
web page resolving its own name to 127.0.0.1 to reach the server from the user's browser).
"""

import re
import socket
import sys
import urllib.error
import urllib.request

import pytest

from medbench_cli.ui import commands
from tests.orchestration.operating_env import ROOT, free_port, listening_addresses, server

pytestmark = [pytest.mark.server, pytest.mark.slow]


def routable_address() -> str | None:
    """This host's address on its default route (no packet is sent), or None without a network."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def other_address() -> str:
    """An address of this host other than 127.0.0.1: its routable one, or 127.0.0.2 without a network.

    A server bound to 127.0.0.1 refuses connections to either; one bound to every interface
    (0.0.0.0) accepts both, so the check means something with or without a network.
    """
    return routable_address() or "127.0.0.2"


def refused_on(addr: str, port: int) -> bool:
    try:
        socket.create_connection((addr, port), timeout=2).close()
    except OSError:
        return True
    return False


def get(url: str, host: str) -> int:
    request = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_dagster_webserver_listens_on_loopback_only_by_default(tmp_path):
    (tmp_path / "defs.py").write_text("import dagster as dg\n\ndefs = dg.Definitions()\n")
    (tmp_path / "home").mkdir()
    port = free_port()
    cmd = [sys.executable, "-m", "dagster_webserver", "-p", str(port), "-f", str(tmp_path / "defs.py")]  # no -h: the default
    with server(cmd, f"http://127.0.0.1:{port}/server_info", env={"DAGSTER_HOME": str(tmp_path / "home")}, log=tmp_path / "web.log"):
        assert listening_addresses(port) == {"127.0.0.1"}
        assert refused_on(other_address(), port)
    # and our own launcher (`medbench ui`, which scripts/dev runs) asks for loopback explicitly
    assert re.search(r"^exec medbench ui ", (ROOT / "scripts" / "dev").read_text(), re.M)
    cmds = commands(3000, 5000, "sqlite:///x.db")
    assert cmds["dagster"][cmds["dagster"].index("-h") + 1] == "127.0.0.1"
    assert cmds["mlflow"][cmds["mlflow"].index("--host") + 1] == "127.0.0.1"


def test_the_mlflow_server_listens_on_loopback_and_refuses_foreign_host_headers(tmp_path):
    port = free_port()
    api = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=1"
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--port", str(port), "--workers", "1",
           "--allowed-hosts", f"mlflow.medbench.internal:{port},localhost:{port},127.0.0.1:{port}"]  # fmt: skip
    with server(cmd, f"http://127.0.0.1:{port}/health", log=tmp_path / "mlflow.log"):
        assert listening_addresses(port) == {"127.0.0.1"}  # no --host: the default
        assert refused_on(other_address(), port)
        assert get(api, f"127.0.0.1:{port}") == 200
        assert get(api, f"mlflow.medbench.internal:{port}") == 200
        assert get(api, "evil.example.com") == 403
        assert get(api, f"evil.example.com:{port}") == 403
        assert get(api, f"10.0.0.5:{port}") == 403  # a private address is not in this allowlist


def test_the_other_address_reaches_a_server_listening_on_every_interface():
    """The check above would notice a server bound to 0.0.0.0, network or not."""
    with socket.socket() as wildcard:
        wildcard.bind(("0.0.0.0", 0))
        wildcard.listen()
        assert not refused_on(other_address(), wildcard.getsockname()[1])
    with socket.socket() as loopback:
        loopback.bind(("127.0.0.1", 0))
        loopback.listen()
        assert refused_on(other_address(), loopback.getsockname()[1])
