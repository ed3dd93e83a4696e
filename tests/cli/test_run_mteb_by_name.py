"""An MTEB task named in tasks.yaml and nothing else (``reader: mteb, task: R2MEDBiologyRetrieval``), its data in
the local hub cache at MTEB's pin, through ``medbench run`` (with a published score beside ours and the
one-line summary) and ``medbench export``, whose folder the locked mteb loads under MTEB's task name."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.cli.test_run import _main_env
from tests.core.hf_layouts import hub_cache, write_r2med_hub
from tests.orchestration.operating_env import BM25, ROOT, new_world

pytestmark = pytest.mark.slow

BIOLOGY = "8b9fec2db9eda4b5742d03732213fbaee8169556"  # mteb 2.26.24's pin of R2MEDBiologyRetrieval


def test_an_mteb_task_by_name_runs_offline_from_the_hub_cache_and_exports_under_its_mteb_name(tmp_path):
    world = new_world(tmp_path / "w", [BM25])
    cache, _ = hub_cache(tmp_path / "hub", "R2MED/Biology", write_r2med_hub, sha=BIOLOGY)
    with open(world.root / "tasks.yaml", "a") as f:
        f.write("  - {reader: mteb, task: R2MEDBiologyRetrieval}\n")
        f.write("published_results: {path: published, models: {bm25: bm25}}\n")
    env = {**_main_env(world, tmp_path), "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    # A first run without a published score, to learn ours; then R2MED's layout holding exactly it.
    published = world.shared / "published" / "results" / "base retriever" / "bm25"
    published.mkdir(parents=True)
    out = subprocess.run(
        [sys.executable, "-m", "medbench_cli", "run", "--tasks", "r2med_biology"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "[evaluate] bm25                     x r2med_biology          ok" in out.stdout

    saved = json.loads((world.root / "data" / "reports" / "leaderboard.json").read_text())
    cell = saved["cells"]["bm25/r2med_biology"]
    assert cell["dataset"] == "R2MED/Biology" and cell["dataset_revision"] == BIOLOGY and cell["mteb_task"] == "R2MEDBiologyRetrieval"
    metrics = json.loads((world.root / "data" / "artifacts" / "bm25" / "r2med_biology" / "metrics" / cell["metrics_key"] / "metrics.json").read_text())
    ours = metrics["mean"]["ndcg_at_10"]
    (published / "Biology.json").write_text(json.dumps({"dataset_name": "Biology", "model_name": "bm25", "test": {"ndcg_at_10": round(ours, 5)}}))
    again = subprocess.run(
        [sys.executable, "-m", "medbench_cli", "run", "--tasks", "r2med_biology"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "[published] published scores: 1 cell compared, 1 reproduced (inside our 95% CI), 0 outside the CI" in again.stdout

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{world.root / 'state' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("medbench-test")
    (run,) = client.search_runs([exp.experiment_id], filter_string="tags.`medbench.task` = 'r2med_biology'")
    assert run.data.params["mteb_task"] == "R2MEDBiologyRetrieval" and run.data.params["dataset_revision"] == BIOLOGY
    assert run.data.metrics["published.ndcg_at_10"] == round(ours, 5) and run.data.metrics["published_in_ci.ndcg_at_10"] == 1.0

    export = subprocess.run(
        [sys.executable, "-m", "medbench_cli", "export", "--to", str(tmp_path / "export")], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert export.returncode == 0, export.stderr[-3000:]
    import mteb

    results = mteb.ResultCache(tmp_path / "export").load_results(tasks=["R2MEDBiologyRetrieval"], include_remote=False, validate_and_filter=True)
    (model,) = results.model_results
    (task,) = model.task_results
    assert (model.model_name, model.model_revision) == ("medbench/bm25", "bm25s-lucene")
    assert task.task_name == "R2MEDBiologyRetrieval" and task.dataset_revision == BIOLOGY and task.get_score() == ours
