"""The Dagster UI as a person uses it: the asset graph and a stale partition, in headless Chromium.

A tiny world (two tasks x two BM25 models, leaderboard built) where one task's data then changed:
its curated task and bm25's partition of it were rematerialised, bm25-k12's was not. The
webserver (started here on 127.0.0.1 with a tmp DAGSTER_HOME, behind the Host and cross-site checks
`medbench ui` puts in front of it) must show every medbench asset, the leaderboard as Unsynced (a
task_metrics partition has a new data version) and the bm25-k12 x liveqa_medquad partition of
corpus_embeddings as Unsynced. A page of another site, open in the same browser, then tries to launch
a run through it (a GET, a form-like POST, a websocket): nothing is launched (issue 29.1).
Screenshots go to the test's tmp dir.
"""

import json
import sys
import threading
import time
import urllib.parse
from contextlib import contextmanager

import pytest

from medbench_cli.ui import allowed_hosts
from runtime.partitions import partition_key
from tests.orchestration.operating_env import ROOT, curate, evaluate, free_port, operated_world, server

pytestmark = [pytest.mark.ui, pytest.mark.server, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
ASSETS = ["model_spec", "curated_task", "corpus_embeddings", "corpus_index", "retrieval_run", "task_metrics", "leaderboard"]


@pytest.fixture
def stale_world(tmp_path_factory, tmp_path):
    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    corpus = world.shared / "lq" / "corpus.jsonl"
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    rows[3]["text"] += " Iron tablets help."
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    defs = world.defs()
    with world.instance() as instance:
        curate(world, instance, defs, ["liveqa_medquad"])
        evaluate(instance, defs, partition_key("bm25", "liveqa_medquad"))
    return world


def test_the_asset_graph_shows_the_medbench_assets_and_what_is_stale(stale_world, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    w = stale_world
    port = free_port()
    env = {
        "DAGSTER_HOME": str(w.dagster_home),
        "MEDBENCH_DATA": str(w.root / "data"),
        "MEDBENCH_STATE": str(w.root / "state"),
        "MEDBENCH_MODELS": str(w.models_file),
        "MEDBENCH_TASKS": str(w.root / "tasks.yaml"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{w.root / 'mlflow.db'}",
        "PYTHONPATH": str(ROOT),
    }
    cmd = [
        sys.executable,
        "-m",
        "medbench_cli.webserver",
        "serve",
        "--allowed-hosts",
        allowed_hosts(port),
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-m",
        "orchestration.definitions",
    ]
    base = f"http://127.0.0.1:{port}"
    with server(cmd, f"{base}/server_info", env=env, log=tmp_path / "webserver.log"), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{base}/assets/leaderboard?view=lineage&lineageScope=upstream&lineageDepth=5")
            for name in ASSETS:
                expect(page.get_by_text(name, exact=True).last).to_be_visible(timeout=90_000)
            expect(page.get_by_text("Unsynced (1)")).to_be_visible(timeout=30_000)
            page.screenshot(path=tmp_path / "asset_graph.png")

            page.goto(f"{base}/assets/corpus_embeddings?view=partitions&partition=bm25-k12%7Cliveqa_medquad")
            expect(page.get_by_text("bm25-k12|liveqa_medquad", exact=True).first).to_be_visible(timeout=60_000)
            expect(page.get_by_text("Unsynced (1)")).to_be_visible(timeout=30_000)
            page.screenshot(path=tmp_path / "stale_partition.png")

            with w.instance() as instance:
                runs = instance.get_runs_count()
            attempts = cross_site_attempts(browser, base, LAUNCH_LEADERBOARD)
            time.sleep(5)  # a launched run would be recorded by now
            with w.instance() as instance:
                assert instance.get_runs_count() == runs, attempts
            assert attempts == {"websocket": "refused"}, attempts  # no-cors fetches say nothing to the page; the websocket does
        finally:
            browser.close()
    print(f"screenshots: {tmp_path / 'asset_graph.png'}, {tmp_path / 'stale_partition.png'}")
    assert (tmp_path / "asset_graph.png").stat().st_size > 10_000


LAUNCH_LEADERBOARD = (
    'mutation { launchRun(executionParams: {selector: {repositoryLocationName: "orchestration.definitions", '
    'repositoryName: "__repository__", jobName: "build_leaderboard"}, mode: "default"}) { __typename } }'
)


@contextmanager
def foreign_page(html: str):
    """``html`` served by a server of its own on this machine, at ``http://localhost:PORT/``: another origin (and
    site) than the UI's 127.0.0.1, in the browser's own address space, so no private-network rule of the browser
    stands between it and 127.0.0.1 (a page served from the internet may meet one in Chromium, not in every
    browser). MLflow's own middleware trusts every localhost origin."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def do_GET(self):
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


def cross_site_attempts(browser, base: str, mutation: str) -> dict:
    """A page of another site sends ``mutation`` to the UI at ``base`` every way a page can without
    asking (an image, a no-cors GET and text/plain POST, a form's POST) and opens a websocket to it;
    returns what the page could see (only the websocket's fate is visible to it)."""
    url = f"{base}/graphql?" + urllib.parse.urlencode({"query": mutation})
    html = f"""<html><body><img src="{url}"><form id="f" method="POST" action="{url}" enctype="text/plain" target="sink">
<input name="x" value="y"></form><iframe name="sink"></iframe><script>
window.seen = {{}};
fetch({json.dumps(url)}, {{mode: "no-cors", credentials: "include"}});
fetch({json.dumps(url)}, {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body: JSON.stringify({{query: {json.dumps(mutation)}}})}});
fetch({json.dumps(base + "/graphql")}, {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body: JSON.stringify({{query: {json.dumps(mutation)}}})}});
document.getElementById("f").submit();
const ws = new WebSocket({json.dumps(base.replace("http", "ws") + "/graphql")}, "graphql-ws");
ws.onopen = () => {{ window.seen.websocket = "open"; ws.send(JSON.stringify({{type: "connection_init"}})); }};
ws.onerror = () => {{ window.seen.websocket = window.seen.websocket || "refused"; }};
</script></body></html>"""
    context = browser.new_context()
    try:
        page = context.new_page()
        with foreign_page(html) as url:
            page.goto(url)
            page.wait_for_function("window.seen && window.seen.websocket", timeout=30_000)
            page.wait_for_timeout(2_000)
        return page.evaluate("window.seen")
    finally:
        context.close()
