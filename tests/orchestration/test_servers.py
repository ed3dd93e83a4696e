"""RELIABILITY.md test 18: the servers bind to loopback by default; both refuse a Host header outside their allowlist.

The Dagster webserver has no authentication and MLflow's tracking API writes: neither may listen
on a routable interface unless someone asks for it. Host-header checking stops DNS rebinding (a
web page resolving its own name to 127.0.0.1 to reach the server from the user's browser): the
servers `medbench ui` starts answer only 127.0.0.1 or localhost with their port (issue 24.5),
not a foreign name and not a private address.
"""

import asyncio
import re
import socket
import sys
import urllib.error
import urllib.request

import pytest

from medbench_cli.ui import commands
from medbench_cli.webserver import HostCheck
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


def get(url: str, host: str, data: bytes | None = None) -> int:
    request = urllib.request.Request(url, headers={"Host": host, "Content-Type": "application/json"}, data=data)
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


FOREIGN = ["evil.example.com", "evil.example.com:{port}", "10.0.0.5", "10.0.0.5:{port}", "192.168.1.7:{port}", "127.0.0.1:1"]


def test_the_dagster_ui_of_medbench_ui_answers_only_its_own_address(tmp_path):
    (tmp_path / "defs.py").write_text("import dagster as dg\n\ndefs = dg.Definitions()\n")
    (tmp_path / "home").mkdir()
    port = free_port()
    cmd = commands(port, free_port(), "sqlite:///x.db")["dagster"]  # `dagster dev` (webserver and daemon) as `medbench ui` runs it
    at = cmd.index("-m", 3)
    cmd = [*cmd[:at], "-f", str(tmp_path / "defs.py"), *cmd[at + 2 :]]
    base = f"http://127.0.0.1:{port}"
    with server(cmd, f"{base}/server_info", env={"DAGSTER_HOME": str(tmp_path / "home")}, log=tmp_path / "dev.log"):
        assert listening_addresses(port) == {"127.0.0.1"}
        graphql = b'{"query": "{ version }"}'  # what a rebinding page would post (launchRun is a mutation here)
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
            assert get(f"{base}/server_info", host) == 200 and get(f"{base}/graphql", host, graphql) == 200, host
        for host in [h.format(port=port) for h in FOREIGN]:
            assert get(f"{base}/server_info", host) == 403 and get(f"{base}/graphql", host, graphql) == 403, host
            assert get(f"{base}/", host) == 403, host


def test_the_mlflow_ui_of_medbench_ui_answers_only_its_own_address(tmp_path):
    port = free_port()
    cmd = commands(3000, port, f"sqlite:///{tmp_path / 'mlflow.db'}")["mlflow"]
    api = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=1"
    with server([*cmd, "--workers", "1"], f"http://127.0.0.1:{port}/health", log=tmp_path / "mlflow.log"):
        assert listening_addresses(port) == {"127.0.0.1"}
        assert get(api, f"127.0.0.1:{port}") == 200 and get(api, f"localhost:{port}") == 200
        for host in [h.format(port=port) for h in FOREIGN]:
            assert get(api, host) == 403, host  # MLflow's default list admits private addresses; ours does not


def test_the_host_check_refuses_a_websocket_with_a_foreign_host_before_accepting_it():
    seen: list[dict] = []

    async def app(scope, receive, send):
        seen.append({"type": "app", "scope": scope["type"]})

    async def send(message):
        seen.append(message)

    check = HostCheck(app, ["127.0.0.1:3000", "localhost:3000"])
    asyncio.run(check({"type": "websocket", "path": "/graphql", "headers": [(b"host", b"10.0.0.5:3000")]}, None, send))
    assert seen == [{"type": "websocket.close", "code": 1008}]
    seen.clear()
    asyncio.run(check({"type": "websocket", "path": "/graphql", "headers": [(b"host", b"localhost:3000")]}, None, send))
    asyncio.run(check({"type": "lifespan"}, None, send))  # startup and shutdown pass
    assert seen == [{"type": "app", "scope": "websocket"}, {"type": "app", "scope": "lifespan"}]
    seen.clear()
    asyncio.run(check({"type": "http", "path": "/", "headers": []}, None, send))  # no Host at all
    assert seen[0]["status"] == 403 and b"127.0.0.1:3000, localhost:3000" in seen[1]["body"]


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
