"""The three model kinds of issue 22 run through ``medbench run`` on an M3Retrieve discipline (captions and
images), to MLflow and the leaderboard, each equal to its direct computation: UniIR's CLIP-SF from a
checkpoint in UniIR's layout, a remote-code embedder from the hub cache (allowlisted), and a
BiomedCLIP-shaped open_clip ``hf-hub:`` model with a Hugging Face text tower."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from medbench_core.layout import Layout
from tests.cli.test_run import _main_env
from tests.core.reader_fixtures import hub_snapshot, write_release
from tests.orchestration.operating_env import BM25, ROOT, new_world

pytestmark = [pytest.mark.slow, pytest.mark.model]

TASK = "m3r_cardiology"


def test_uniir_remote_code_and_hf_hub_clip_run_to_mlflow_and_the_leaderboard(tmp_path):
    from mlflow.tracking import MlflowClient

    from tests.core import test_open_clip_hf_hub as hubclip
    from tests.core import test_remote_code_kind as remote
    from tests.core import test_uniir_clip_sf as uniir
    from tests.core.tiny_models import tiny_biomedclip, tiny_remote_embedder

    hub = tmp_path / "hub"
    hub_snapshot(hub, remote.HUB_ID, tiny_remote_embedder(tmp_path / "src" / "remote"), sha=remote.SHA, repo_type="model")
    clip, text = tiny_biomedclip(tmp_path / "src" / "biomedclip", hubclip.TEXT_ID)
    hub_snapshot(hub, hubclip.CLIP_ID, clip, sha=hubclip.CLIP_SHA, repo_type="model")
    hub_snapshot(hub, hubclip.TEXT_ID, text, sha=hubclip.TEXT_SHA, repo_type="model")
    source = uniir.tiny_source()
    checkpoint = uniir.save_uniir_checkpoint(source.model, tmp_path / "clip_sf_large.pth")

    models = [
        BM25,
        {"name": "clip-sf", "kind": "uniir-clip-sf", "path": str(checkpoint), "settings": {"architecture": "medbench-tiny-clip"}, "batch_size": 4},
        {"name": "mm-embed-tiny", "kind": "remote-code-embedder", "path": remote.HUB_ID, "revision": "main", "settings": remote.MMEMBED, "batch_size": 4},
        {"name": "biomedclip-tiny", "kind": "open_clip", "revision": "main", "settings": {"checkpoint": f"hf-hub:{hubclip.CLIP_ID}"}, "batch_size": 4},
    ]
    world = new_world(tmp_path / "w", models)
    world.models_file.write_text(json.dumps({"trust_remote_code": [remote.HUB_ID], "models": models}, indent=1))
    write_release(world.shared / "M3Retrieve")
    catalogue = (world.root / "tasks.yaml").read_text().replace("licence_allowlist: [", "licence_allowlist: [CC-BY-SA-4.0, ")
    (world.root / "tasks.yaml").write_text(catalogue + "  - {name: m3r, reader: m3retrieve, path: M3Retrieve, subsets: [Cardiology]}\n")
    env = {**_main_env(world, tmp_path), "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "hf_modules")}
    out = subprocess.run([sys.executable, "-m", "medbench_cli", "run", "--tasks", TASK], env=env, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for name in ("bm25", "clip-sf", "mm-embed-tiny", "biomedclip-tiny"):
        assert re.search(rf"\[evaluate\] {re.escape(name)}\s+x {TASK}\s+ok", out.stdout), (name, out.stdout)

    data = world.root / "data"
    task = Layout(data).load_task(TASK)
    assert task.queries["image"].null_count() == 0  # every query is caption + image
    cells = json.loads((data / "reports" / "leaderboard.json").read_text())["cells"]
    client = MlflowClient(tracking_uri=f"sqlite:///{world.root / 'state' / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]

    def stored_run(name: str) -> pl.DataFrame:
        cell = cells[f"{name}/{TASK}"]
        metrics = json.loads((data / "artifacts" / name / TASK / "metrics" / cell["metrics_key"] / "metrics.json").read_text())
        runs = client.search_runs(experiments, filter_string=f"tags.`medbench.model` = '{name}' and tags.`medbench.task` = '{TASK}'")
        finished = [r for r in runs if r.info.status == "FINISHED"]
        assert len(finished) == 1, name
        assert finished[0].data.params["model_kind"] == next(m["kind"] for m in models if m["name"] == name)
        assert finished[0].data.metrics["ndcg_at_10"] == pytest.approx(metrics["mean"]["ndcg_at_10"], abs=1e-12)
        folders = sorted((data / "artifacts" / name / TASK / "run").iterdir())
        assert len(folders) == 1
        return pl.read_parquet(folders[0] / "run.parquet")

    def assert_equal(name: str, q: np.ndarray, d: np.ndarray) -> None:
        run = stored_run(name)
        scores = q @ d.T
        doc_ids = task.corpus["doc_id"].to_list()
        for qid, row in zip(task.queries["query_id"].to_list(), scores):
            order = sorted(range(len(doc_ids)), key=lambda j: (-row[j], doc_ids[j]))[:10]
            got = run.filter(pl.col("query_id") == qid).sort("rank")
            assert got["doc_id"].to_list() == [doc_ids[j] for j in order], (name, qid)
            np.testing.assert_allclose(got["score"].to_numpy(), [row[j] for j in order], atol=1e-6, err_msg=name)

    # UniIR's CLIP-SF: normalise(raw image + raw text), computed with torch.
    passages = task.corpus.with_columns(pl.Series("text", task.doc_text()))  # title and text joined, as the reader joins them
    uniir_docs = uniir.direct_vectors(source, make_side(task, passages), "passage")
    assert_equal("clip-sf", uniir.direct_vectors(source, task, "query"), uniir_docs)

    # The remote-code embedder called directly (its own class, from the same snapshot).
    import torch

    model = remote.direct_model(hub)
    q = [model.encode([r], is_query=True, instruction=remote.INSTRUCTION, max_length=512)["hidden_states"][0] for r in remote.records(task, "query")]
    d = [model.encode([{"txt": t}], max_length=4096)["hidden_states"][0] for t in task.doc_text()]
    assert_equal("mm-embed-tiny", remote.unit(torch.stack(q)), remote.unit(torch.stack(d)))

    # The hf-hub open_clip model as open_clip itself loads it, with medbench's score fusion.
    texts = sorted({*task.queries["text"].to_list(), *task.doc_text()})
    images = sorted(set(task.queries["image"].to_list()))
    ref = hubclip.reference(hub, texts, [task.resolve_image(im) for im in images], tmp_path)
    t_of, i_of = dict(zip(texts, ref["text"])), dict(zip(images, ref["image"]))
    assert_equal("biomedclip-tiny", hubclip.score_fusion(task.queries, t_of, i_of), hubclip.score_fusion(passages, t_of, i_of))


def make_side(task, passages: pl.DataFrame):
    """``task`` with its corpus frame's text replaced by the joined passage text (what the encoders see)."""
    import dataclasses

    return dataclasses.replace(task, corpus=passages)
