"""The Dagster UI as a person uses it: the asset graph and a stale partition, in headless Chromium.

A tiny world (two tasks x two BM25 models, leaderboard built) where one task's data then changed:
its curated task and bm25's partition of it were rematerialised, bm25-k12's was not. The
webserver (started here on 127.0.0.1 with a tmp DAGSTER_HOME) must show every medbench asset, the
leaderboard as Unsynced (a task_metrics partition has a new data version) and the bm25-k12 x
liveqa_medquad partition of corpus_embeddings as Unsynced. Screenshots go to the test's tmp dir.
"""

import json
import sys

import pytest

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
    cmd = [sys.executable, "-m", "dagster_webserver", "-h", "127.0.0.1", "-p", str(port), "-m", "orchestration.definitions"]
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
        finally:
            browser.close()
    print(f"screenshots: {tmp_path / 'asset_graph.png'}, {tmp_path / 'stale_partition.png'}")
    assert (tmp_path / "asset_graph.png").stat().st_size > 10_000
