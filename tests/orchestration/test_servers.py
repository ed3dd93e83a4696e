"""RELIABILITY.md test 18: the servers bind to loopback by default; both refuse a Host header outside their
allowlist and what another web page can make the browser send (issue 29.1).

The Dagster webserver has no authentication and MLflow's tracking API writes: neither may listen
on a routable interface unless someone asks for it. Host-header checking stops DNS rebinding (a
web page resolving its own name to 127.0.0.1 to reach the server from the user's browser): the
servers `medbench ui` starts answer only 127.0.0.1 or localhost with their port (issue 24.5),
not a foreign name and not a private address.

Any page a user opens can make the browser send a GET (a link, an image) or a "simple" POST (a form,
or fetch with a text/plain body: no CORS preflight) to 127.0.0.1 with the right Host header. Dagster's
webserver executed GraphQL mutations from both (a GET ``/graphql?query=mutation{launchRun(...)}``
with ``Origin: http://evil.com`` launched a run). With real HTTP requests against the servers as
`medbench ui` starts them: every hostile form of a mutation is refused and leaves the instance (runs,
schedule state) or the MLflow store (experiments) as it was, while the same requests from the UI's own
origin, and from clients that are not browsers (no Origin, no Sec-Fetch-Site), still work.
"""

import asyncio
import base64
import json
import os
import re
import socket
import sqlite3
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest

from medbench_cli.ui import commands
from medbench_cli.webserver import CrossSiteCheck, HostCheck, origins
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
    no_jobs = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # its job runner's processes serve nothing here
    with server(cmd, f"http://127.0.0.1:{port}/health", env=no_jobs, log=tmp_path / "mlflow.log"):
        assert listening_addresses(port) == {"127.0.0.1"}  # no --host: the default
        assert refused_on(other_address(), port)
        assert get(api, f"127.0.0.1:{port}") == 200
        assert get(api, f"mlflow.medbench.internal:{port}") == 200
        assert get(api, "evil.example.com") == 403
        assert get(api, f"evil.example.com:{port}") == 403
        assert get(api, f"10.0.0.5:{port}") == 403  # a private address is not in this allowlist


DEFS = """
import dagster as dg

@dg.op
def hello():
    return 1

@dg.job
def nightly_job():
    hello()

nightly = dg.ScheduleDefinition(name="nightly", job=nightly_job, cron_schedule="0 3 * * *")
defs = dg.Definitions(jobs=[nightly_job], schedules=[nightly])
"""

SELECTOR = '{repositoryLocationName: "defs.py", repositoryName: "__repository__", scheduleName: "nightly"}'
START_SCHEDULE = "mutation { startSchedule(scheduleSelector: " + SELECTOR + ") { __typename } }"
LAUNCH_RUN = (
    'mutation { launchRun(executionParams: {selector: {repositoryLocationName: "defs.py", repositoryName: "__repository__",'
    ' jobName: "nightly_job"}, mode: "default"}) { __typename } }'
)
STATE = "{ scheduleOrError(scheduleSelector: " + SELECTOR + ") { ... on Schedule { scheduleState { status } } } runsOrError { ... on Runs { count } } }"


def call(url: str, method: str = "GET", headers: dict | None = None, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method, headers=headers or {}, data=body)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def hostile_mutations(base: str, port: int, mutation: str) -> list[tuple[str, str, dict, bytes | None]]:
    """Every way a page (or a page through a redirect, a sandboxed frame, a sibling port) can carry ``mutation``."""
    q = urllib.parse.urlencode({"query": mutation})
    js = json.dumps({"query": mutation}).encode()
    evil = {"Origin": "http://evil.com", "Sec-Fetch-Site": "cross-site"}
    return [
        # GET: no browser ever sends a preflight for it; a mutation over GET is refused whoever sends it
        ("GET", f"{base}/graphql?{q}", {**evil}, None),
        ("GET", f"{base}/graphql?{q}", {"Sec-Fetch-Site": "cross-site"}, None),  # an <img src=...>: no Origin
        ("GET", f"{base}/graphql?{q}", {}, None),  # even with no browser header at all
        ("GET", f"{base}/graphql?{q}", {"Origin": base, "Sec-Fetch-Site": "same-origin"}, None),
        (
            "GET",
            f"{base}/graphql?"
            + urllib.parse.urlencode({"query": "query ok { version } " + mutation.replace("mutation", "mutation m", 1), "operationName": "m"}),
            {},
            None,
        ),
        ("GET", f"{base}/graphql?" + urllib.parse.urlencode({"query": f"# a comment first\n{mutation}"}), {}, None),
        # simple POSTs (a form, or fetch with no-cors): Dagster reads the query from the URL when the body is not JSON
        ("POST", f"{base}/graphql?{q}", {**evil, "Content-Type": "text/plain"}, b""),
        ("POST", f"{base}/graphql?{q}", {**evil, "Content-Type": "application/x-www-form-urlencoded"}, b"a=b"),
        ("POST", f"{base}/graphql", {**evil, "Content-Type": "application/json"}, js),
        ("POST", f"{base}/graphql", {"Origin": "null", "Content-Type": "text/plain"}, js),  # a sandboxed frame, a file:// page
        ("POST", f"{base}/graphql", {"Origin": f"http://localhost:{port + 1}", "Content-Type": "application/json"}, js),  # another local server
        ("POST", f"{base}/graphql", {"Origin": f"https://127.0.0.1:{port}", "Content-Type": "application/json"}, js),
        ("POST", f"{base}/graphql", {"Origin": f"http://127.0.0.1:{port}.evil.com", "Content-Type": "application/json"}, js),
        ("POST", f"{base}/graphql", {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, js),  # Origin stripped
        ("POST", f"{base}/graphql", {"Sec-Fetch-Site": "same-site", "Content-Type": "application/json"}, js),  # a sibling port
        # a same-origin POST whose body a browser could send cross-site without a preflight
        ("POST", f"{base}/graphql?{q}", {"Content-Type": "text/plain"}, b""),
    ]


def websocket_status(port: int, origin: str) -> int:
    """The status line of a websocket handshake on /graphql sent with ``origin`` (101: accepted)."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET /graphql HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: graphql-ws\r\nOrigin: {origin}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request.encode())
        return int(s.recv(4096).split(b" ", 2)[1])


FOREIGN = ["evil.example.com", "evil.example.com:{port}", "10.0.0.5", "10.0.0.5:{port}", "192.168.1.7:{port}", "127.0.0.1:1"]


def test_the_dagster_ui_of_medbench_ui_answers_only_its_own_address_and_its_own_pages(tmp_path):
    (tmp_path / "defs.py").write_text(DEFS)
    (tmp_path / "home").mkdir()
    port = free_port()
    cmd = commands(port, free_port(), "sqlite:///x.db")["dagster"]  # `dagster dev` (webserver and daemon) as `medbench ui` runs it
    at = cmd.index("-m", 3)
    cmd = [*cmd[:at], "-f", str(tmp_path / "defs.py"), *cmd[at + 2 :]]
    base = f"http://127.0.0.1:{port}"
    own = {"Origin": base, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}

    def state(headers=own) -> dict:
        code, body = call(f"{base}/graphql", "POST", headers, json.dumps({"query": STATE}).encode())
        assert code == 200, body
        data = json.loads(body)["data"]
        return {"schedule": data["scheduleOrError"]["scheduleState"]["status"], "runs": data["runsOrError"]["count"]}

    with server(cmd, f"{base}/server_info", env={"DAGSTER_HOME": str(tmp_path / "home")}, log=tmp_path / "dev.log"):
        assert listening_addresses(port) == {"127.0.0.1"}
        graphql = b'{"query": "{ version }"}'  # what a rebinding page would post (launchRun is a mutation here)
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
            assert get(f"{base}/server_info", host) == 200 and get(f"{base}/graphql", host, graphql) == 200, host
        for host in [h.format(port=port) for h in FOREIGN]:
            assert get(f"{base}/server_info", host) == 403 and get(f"{base}/graphql", host, graphql) == 403, host
            assert get(f"{base}/", host) == 403, host

        # Cross-site request forgery: nothing a page of another origin makes the browser send changes anything.
        assert state() == {"schedule": "STOPPED", "runs": 0}
        for mutation in (LAUNCH_RUN, START_SCHEDULE):
            for method, url, headers, body in hostile_mutations(base, port, mutation):
                code, answer = call(url, method, headers, body)
                assert code in (403, 405, 415), (method, url, headers, code, answer[:300])
                assert state() == {"schedule": "STOPPED", "runs": 0}, (method, url, headers, code, answer[:300])
        # A foreign page's websocket (subscriptions stream run logs) is refused before the handshake.
        assert websocket_status(port, origin="http://evil.com") == 403
        assert websocket_status(port, origin=base) == 101
        # Reads over GET still work (GraphiQL, scripts), as do the UI's own mutations and a script's (no Origin).
        code, body = call(f"{base}/graphql?" + urllib.parse.urlencode({"query": "{ version }"}))
        assert code == 200 and json.loads(body)["data"]["version"]
        code, body = call(f"{base}/graphql", "POST", own, json.dumps({"query": START_SCHEDULE}).encode())
        assert code == 200 and json.loads(body)["data"]["startSchedule"]["__typename"] == "ScheduleStateResult", body
        assert state() == {"schedule": "RUNNING", "runs": 0}
        assert state({"Content-Type": "application/json"}) == {"schedule": "RUNNING", "runs": 0}  # a script: no Origin
        code, body = call(f"{base}/graphql", "POST", {**own, "Origin": f"http://localhost:{port}"}, graphql)
        assert code == 200, body  # the other name of the same address


def test_the_mlflow_ui_of_medbench_ui_answers_only_its_own_address_and_its_own_pages(tmp_path):
    port = free_port()
    db = tmp_path / "mlflow.db"
    cmd = commands(3000, port, f"sqlite:///{db}")["mlflow"]
    base = f"http://127.0.0.1:{port}"
    api = f"{base}/api/2.0/mlflow/experiments/search?max_results=1"
    create = f"{base}/ajax-api/2.0/mlflow/experiments/create"

    def experiments() -> list[str]:
        with sqlite3.connect(db) as con:
            return sorted(name for (name,) in con.execute("select name from experiments"))

    with server([*cmd, "--workers", "1"], f"{base}/health", log=tmp_path / "mlflow.log"):
        assert listening_addresses(port) == {"127.0.0.1"}
        assert get(api, f"127.0.0.1:{port}") == 200 and get(api, f"localhost:{port}") == 200
        for host in [h.format(port=port) for h in FOREIGN]:
            assert get(api, host) == 403, host  # MLflow's default list admits private addresses; ours does not

        # Cross-site request forgery. MLflow's own middleware refuses a foreign Origin on /api/ and /ajax-api/
        # but admits any localhost port and ignores Sec-Fetch-Site; medbench's check refuses those too.
        before = experiments()
        body = json.dumps({"name": "from-evil"}).encode()
        for headers in (
            {"Origin": "http://evil.com", "Content-Type": "application/json"},
            {"Origin": "http://evil.com", "Content-Type": "text/plain"},
            {"Origin": "null", "Content-Type": "text/plain"},
            {"Origin": f"http://localhost:{port + 1}", "Content-Type": "application/json"},  # another local server
            {"Origin": f"http://127.0.0.1:{port}.evil.com", "Content-Type": "application/json"},
            {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"},
            {"Sec-Fetch-Site": "same-site", "Content-Type": "application/json"},
        ):
            for url in (create, create.replace("/ajax-api/", "/api/")):
                code, answer = call(url, "POST", headers, body)
                assert code == 403, (url, headers, code, answer[:300])
        assert experiments() == before
        code, _ = call(f"{base}/graphql?" + urllib.parse.urlencode({"query": 'mutation { testMutation(inputString: "x") { output } }'}))
        assert code == 405  # MLflow's GraphQL mutations only read today; still never over GET
        # The UI's own page and a script (MLflow's client sends no Origin) still write.
        code, _ = call(create, "POST", {"Origin": base, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"},
                       json.dumps({"name": "from-the-ui"}).encode())  # fmt: skip
        assert code == 200
        code, _ = call(create.replace("/ajax-api/", "/api/"), "POST", {"Content-Type": "application/json"}, json.dumps({"name": "from-a-script"}).encode())
        assert code == 200
        assert experiments() == sorted([*before, "from-the-ui", "from-a-script"])


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


def test_the_cross_site_check_decides_on_method_origin_and_graphql_operation():
    seen: list[dict] = []

    async def app(scope, receive, send):
        seen.append({"type": "app", "scope": scope["type"]})

    async def send(message):
        seen.append(message)

    def status(kind="http", method="POST", path="/graphql", query=b"", **headers) -> int | str:
        seen.clear()
        scope = {"type": kind, "method": method, "path": path, "query_string": query,
                 "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]}  # fmt: skip
        asyncio.run(CrossSiteCheck(app, ["http://127.0.0.1:3000", "http://localhost:3000"])(scope, None, send))
        if seen[0]["type"] == "app":
            return "served"
        return seen[0].get("status") or seen[0]["code"]

    mutation = urllib.parse.urlencode({"query": "mutation { x }"}).encode()
    # GraphQL over GET: queries only; every repeated `query` counts (Starlette reads the last, Flask the first)
    assert status(method="GET", query=urllib.parse.urlencode({"query": "{ version }"}).encode()) == "served"
    assert status(method="GET", query=mutation) == 405 and (b"allow", b"POST") in seen[0]["headers"]
    assert status(method="HEAD", query=mutation) == 405
    assert status(method="GET", query=b"query=%7B+version+%7D&" + mutation) == 405
    assert status(method="GET", query=mutation + b"&query=%7B+version+%7D") == 405
    assert status(method="GET", query=urllib.parse.urlencode({"query": "subscription { s }"}).encode()) == 405
    assert status(method="GET", query=urllib.parse.urlencode({"query": "{ unclosed"}).encode()) == 405
    assert status(method="GET", path="/runs", query=mutation) == "served"  # not GraphQL
    assert status(method="GET", path="/", origin="http://evil.com", sec_fetch_site="cross-site") == "served"  # a link
    # writes: the Origin, else Sec-Fetch-Site, decides; neither means no browser page sent it
    json_body = {"content_type": "application/json; charset=utf-8"}
    assert status(origin="http://127.0.0.1:3000", **json_body) == "served"
    assert status(origin="HTTP://LOCALHOST:3000", **json_body) == "served"
    assert status(**json_body) == "served"
    assert status(sec_fetch_site="same-origin", **json_body) == "served"
    assert status(sec_fetch_site="none", **json_body) == "served"  # typed or bookmarked by the user
    for origin in ("http://evil.com", "null", "http://127.0.0.1:3001", "https://127.0.0.1:3000", "http://127.0.0.1:3000.evil.com", ""):
        assert status(origin=origin, **json_body) == 403, origin
    assert status(origin="http://127.0.0.1:3000", sec_fetch_site="cross-site", **json_body) == 403
    assert status(sec_fetch_site="same-site", **json_body) == 403  # another port of 127.0.0.1
    for method in ("PUT", "PATCH", "DELETE"):
        assert status(method=method, path="/report_asset_materialization/x", origin="http://evil.com") == 403
    # a GraphQL POST a page could send without a preflight: refused whatever its origin
    for media in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"content_type": media} if media else {}
        assert status(origin="http://127.0.0.1:3000", query=mutation, **headers) == 415, media
    assert status(path="/report_asset_materialization/x", content_type="text/plain") == "served"  # not GraphQL
    # websockets: a foreign page's handshake is refused before it is accepted
    assert status(kind="websocket", origin="http://evil.com") == 1008
    assert status(kind="websocket", sec_fetch_site="cross-site") == 1008
    assert status(kind="websocket", origin="http://localhost:3000") == "served"
    assert status(kind="lifespan") == "served"
    # The origins: those of the allowed hosts (plain http), and any given as they are (a TLS proxy's); no wildcard.
    assert origins(["127.0.0.1:3000", "localhost:3000", "*.example.org"], ["https://dagster.example.org", "*"]) == [
        "http://127.0.0.1:3000", "http://localhost:3000", "https://dagster.example.org"]  # fmt: skip


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
