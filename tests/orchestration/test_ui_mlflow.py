"""The MLflow UI as a person uses it: the latest leaderboard run's heatmap, and medbench's runs, in headless Chromium.

The small operated world (bm25 and bm25-k12 on two tiny tasks, leaderboard built once), then a
third model is registered and the leaderboard rebuilt: a second leaderboard run, whose heatmap has
three rows. ``mlflow ui`` (the command `medbench ui` starts, on 127.0.0.1) must show that run's
heatmap.png in its artifact view, decoded at the size the leaderboard drew it. In a browser that
never opened MLflow, medbench's experiment opens as a classic experiment's runs table whose columns
are the metrics, nDCG@10 first and sorted by it, not MLflow 3's GenAI overview (issue 29.7). A page
of another origin cannot create an experiment through it (issue 29.1). Screenshots in the test's tmp dir.
"""

import json
import sys

import dagster as dg
import pytest

from medbench_cli.ui import commands
from medbench_core.evaluation.plots import heatmap_size
from runtime.mlflow_ui import CLASSIC_ML, EXPERIMENT_KIND_TAG, VIEW_TAG
from tests.assets.project import leaderboard
from tests.orchestration.operating_env import BM25, BM25_K12, free_port, operated_world, server, write_models
from tests.orchestration.test_ui import CHROMIUM, CHROMIUM_ARGS, foreign_page

pytestmark = [pytest.mark.ui, pytest.mark.server, pytest.mark.slow]


def test_the_mlflow_ui_shows_the_latest_leaderboards_heatmap(tmp_path_factory, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    write_models(world.models_file, [BM25, BM25_K12, {**BM25, "name": "bm25-b05", "settings": {**BM25["settings"], "b": 0.5}}])
    resources = world.resources()
    with world.instance() as instance:
        assert dg.materialize([leaderboard], resources=resources, instance=instance).success
    client = resources["mlflow"].client()
    exp = client.get_experiment_by_name("medbench-test-leaderboard")
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`medbench.kind` = 'leaderboard'", order_by=["attributes.start_time DESC"])
    assert len(runs) == 2  # the world's own (two models) and this one (three)
    latest = runs[0]
    width, height = heatmap_size(3, 2)

    port = free_port()
    cmd = commands(3000, port, resources["mlflow"].tracking_uri)["mlflow"]
    base = f"http://127.0.0.1:{port}"
    with server([sys.executable, *cmd[1:], "--workers", "1"], f"{base}/health", log=tmp_path / "mlflow.log"), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{base}/#/experiments/{exp.experiment_id}/runs/{latest.info.run_id}/artifacts/heatmap.png")
            expect(page.get_by_text("leaderboard", exact=True).first).to_be_visible(timeout=90_000)  # the run's name
            expect(page.get_by_text("heatmap.png").first).to_be_visible(timeout=60_000)
            # The preview: an image fetched from the run's artifacts, decoded at the heatmap's own size.
            shown = f"Array.from(document.images).some(i => i.complete && i.naturalWidth === {width} && i.naturalHeight === {height} && i.getBoundingClientRect().width > 0)"
            page.wait_for_function(shown, timeout=60_000)
            page.screenshot(path=tmp_path / "mlflow_heatmap.png")

            # Issue 29.7: medbench's experiment, in a browser with nothing stored yet (a new context).
            bench = client.get_experiment_by_name("medbench-test")
            assert bench.tags[EXPERIMENT_KIND_TAG] == CLASSIC_ML and exp.tags[EXPERIMENT_KIND_TAG] == CLASSIC_ML
            assert json.loads(json.loads(bench.tags[VIEW_TAG])["state"])["selectedColumns"][:3] == [
                "metrics.`ndcg_at_10`",
                "metrics.`ci_low.ndcg_at_10`",
                "metrics.`ci_high.ndcg_at_10`",
            ]
            fresh = browser.new_context(viewport={"width": 1600, "height": 1000})
            runs_page = fresh.new_page()
            runs_page.goto(f"{base}/#/experiments/{bench.experiment_id}")
            expect(runs_page.get_by_text("bm25-k12/liveqa_medquad", exact=True)).to_be_visible(timeout=90_000)  # a run of the table
            for column in ("ndcg_at_10", "recall_at_100", "mrr_at_10", "map_at_100", "judged_at_10"):
                expect(runs_page.get_by_text(column, exact=True).first).to_be_visible(timeout=30_000)
            expect(runs_page.get_by_text("Sort: ndcg_at_10")).to_be_visible()
            assert "/runs" in runs_page.url and "workflowType=machine_learning" in runs_page.url, runs_page.url
            assert runs_page.get_by_text("No data available for the selected time range").count() == 0  # the GenAI overview's
            assert runs_page.get_by_text("Ask questions about your experiments, traces, evaluations, and more.").count() == 0  # no assistant panel
            runs_page.screenshot(path=tmp_path / "mlflow_runs.png")
            fresh.close()

            # Issue 29.1: a page of another origin cannot create an experiment (MLflow's own check trusts every localhost origin).
            evil = browser.new_page()
            body = json.dumps({"name": "from-another-page"})
            # A JSON POST needs a CORS preflight, which MLflow's own middleware grants to any localhost origin.
            script = "".join(
                f"fetch({json.dumps(base + path)}, {{method: 'POST', mode: {json.dumps(mode)}, headers: {{'Content-Type': {json.dumps(kind)}}}, body: {json.dumps(body)}}});"
                for path in ("/ajax-api/2.0/mlflow/experiments/create", "/api/2.0/mlflow/experiments/create")
                for mode, kind in (("cors", "application/json"), ("no-cors", "text/plain"))
            )
            with foreign_page(f"<script>{script}</script>") as url:
                evil.goto(url)
                evil.wait_for_timeout(3_000)
            assert client.get_experiment_by_name("from-another-page") is None
        finally:
            browser.close()
    print(f"screenshot: {tmp_path / 'mlflow_heatmap.png'}")
    assert (tmp_path / "mlflow_heatmap.png").stat().st_size > 10_000
