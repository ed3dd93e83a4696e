"""The model kinds of issues 22 and 32 run through ``medbench run`` on an M3Retrieve discipline (captions and
images), to MLflow and the leaderboard, each equal to its direct computation: UniIR's CLIP-SF from a
checkpoint in UniIR's layout, a remote-code embedder from the hub cache (allowlisted), a
BiomedCLIP-shaped open_clip ``hf-hub:`` model with a Hugging Face text tower, a ColBERT (exact MaxSim
and PLAID) equal to pylate called directly, and code folders allowlisted by hash (MedImageInsight's
interface; a late-interaction class), each equal to the class called as M3Retrieve's scripts call it.
An unlisted code folder is refused first, before anything runs (exit 2)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

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

    from medbench_core.retrieval.kinds.code_folder import code_hash
    from tests.core import test_code_folder_kind as codefolder
    from tests.core import test_colbert_kind as colbert
    from tests.core import test_open_clip_hf_hub as hubclip
    from tests.core import test_remote_code_kind as remote
    from tests.core import test_uniir_clip_sf as uniir
    from tests.core.tiny_models import tiny_biomedclip, tiny_colbert, tiny_remote_embedder

    hub = tmp_path / "hub"
    hub_snapshot(hub, remote.HUB_ID, tiny_remote_embedder(tmp_path / "src" / "remote"), sha=remote.SHA, repo_type="model")
    clip, text = tiny_biomedclip(tmp_path / "src" / "biomedclip", hubclip.TEXT_ID)
    hub_snapshot(hub, hubclip.CLIP_ID, clip, sha=hubclip.CLIP_SHA, repo_type="model")
    hub_snapshot(hub, hubclip.TEXT_ID, text, sha=hubclip.TEXT_SHA, repo_type="model")
    source = uniir.tiny_source()
    checkpoint = uniir.save_uniir_checkpoint(source.model, tmp_path / "clip_sf_large.pth")

    colbert_dir = tiny_colbert(tmp_path / "src" / "colbert")
    mii, late = codefolder.write_mii(tmp_path / "code" / "MedImageInsights"), codefolder.write_late(tmp_path / "code" / "late")
    models = [
        BM25,
        {"name": "clip-sf", "kind": "uniir-clip-sf", "path": str(checkpoint), "settings": {"architecture": "medbench-tiny-clip"}, "batch_size": 4},
        {"name": "mm-embed-tiny", "kind": "remote-code-embedder", "path": remote.HUB_ID, "revision": "main", "settings": remote.MMEMBED, "batch_size": 4},
        {"name": "biomedclip-tiny", "kind": "open_clip", "revision": "main", "settings": {"checkpoint": f"hf-hub:{hubclip.CLIP_ID}"}, "batch_size": 4},
        {"name": "colbert-tiny", "kind": "colbert", "path": str(colbert_dir), "batch_size": 4},
        {"name": "colbert-plaid", "kind": "colbert", "path": str(colbert_dir), "batch_size": 4, "index": {"type": "plaid", "nbits": 8}},
        {"name": "mii-tiny", "kind": "code-folder", "path": str(mii), "settings": codefolder.MII_SETTINGS, "batch_size": 2},
        {"name": "late-tiny", "kind": "code-folder-late", "path": str(late), "settings": codefolder.LATE_SETTINGS, "batch_size": 2},
    ]
    trust = [{"path": str(mii), "sha256": code_hash(mii)}, {"path": str(late), "sha256": code_hash(late)}]
    world = new_world(tmp_path / "w", models)
    write_release(world.shared / "M3Retrieve")
    catalogue = (world.root / "tasks.yaml").read_text().replace("licence_allowlist: [", "licence_allowlist: [CC-BY-SA-4.0, ")
    (world.root / "tasks.yaml").write_text(catalogue + "  - {name: m3r, reader: m3retrieve, path: M3Retrieve, subsets: [Cardiology]}\n")
    env = {**_main_env(world, tmp_path), "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "hf_modules")}
    # A code folder that models.yaml does not allowlist is refused before anything runs: one line, exit 2.
    world.models_file.write_text(json.dumps({"trust_remote_code": [remote.HUB_ID], "trust_code": trust[1:], "models": models}, indent=1))
    refused = subprocess.run([sys.executable, "-m", "medbench_cli", "run", "--tasks", TASK], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert f"model 'mii-tiny': the code in {mii} is not on the trust_code allowlist" in last and f"sha256: {code_hash(mii)}" in last, last
    assert not (world.root / "data" / "artifacts").exists()
    world.models_file.write_text(json.dumps({"trust_remote_code": [remote.HUB_ID], "trust_code": trust, "models": models}, indent=1))
    out = subprocess.run([sys.executable, "-m", "medbench_cli", "run", "--tasks", TASK], env=env, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for name in [m["name"] for m in models]:
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

    def assert_scores(name: str, scores: np.ndarray, atol: float) -> pl.DataFrame:
        run = stored_run(name)
        doc_ids = task.corpus["doc_id"].to_list()
        for qid, row in zip(task.queries["query_id"].to_list(), scores):
            order = sorted(range(len(doc_ids)), key=lambda j: (-row[j], doc_ids[j]))[:10]
            got = run.filter(pl.col("query_id") == qid).sort("rank")
            assert got["doc_id"].to_list() == [doc_ids[j] for j in order], (name, qid)
            np.testing.assert_allclose(got["score"].to_numpy(), [row[j] for j in order], atol=atol, err_msg=name)
        return run

    # ColBERT: pylate's own outputs on these captions and passages (recorded by bench/record_pylate_reference.py),
    # compared with the stored token vectors and run by the one rule (medbench_release/tolerance.py).
    ref = colbert.pylate_reference("m3r_cardiology")
    assert [t for _, t in ref["texts"]["queries"]] == task.queries["text"].to_list() and [t for _, t in ref["texts"]["docs"]] == task.doc_text()
    stored = {s: _only_folder(data / "artifacts" / "colbert-tiny" / TASK / s) for s in ("embeddings", "run")}
    colbert.assert_equals_recorded(
        stored_run("colbert-tiny"), task.queries["query_id"].to_list(), task.corpus["doc_id"].to_list(), ref,
        np.load(stored["run"] / "query_tokens.npy"), np.load(stored["embeddings"] / "tokens.npy"),
    )  # fmt: skip
    plaid = stored_run("colbert-plaid")
    exact = stored_run("colbert-tiny")
    for qid in task.queries["query_id"].to_list():  # six documents: PLAID finds them all; 8-bit residuals keep the order of the best
        got, want = plaid.filter(pl.col("query_id") == qid).sort("rank"), exact.filter(pl.col("query_id") == qid).sort("rank")
        assert set(got["doc_id"]) == set(want["doc_id"]) and got["doc_id"][0] == want["doc_id"][0], qid

    # MedImageInsight's interface, called as get_medImageInsight_results.py calls it: text + image embeddings added.
    import base64

    model = codefolder.import_from(mii, "medimageinsight_tiny").MedImageInsight(
        model_dir=str(mii / "2024.09.27"), vision_model_name="medimageinsigt-v1.0.0.npy", language_model_name="language_model.npy"
    )
    model.load_model()
    emb = model.encode(images=[base64.encodebytes(task.resolve_image(p).read_bytes()).decode() for p in task.queries["image"].to_list()],
                       texts=task.queries["text"].to_list())  # fmt: skip
    q = emb["text_embeddings"] + emb["image_embeddings"]
    d = model.encode(texts=task.doc_text())["text_embeddings"]
    assert_equal("mii-tiny", q / np.linalg.norm(q, axis=1, keepdims=True), d / np.linalg.norm(d, axis=1, keepdims=True))

    # The late-interaction class called directly, scored by MaxSim.
    from PIL import Image

    tiny = codefolder.import_from(late, "tiny_late").TinyLate(dim=8)
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    sets = lambda out: [unit(v[m]) for v, m in zip(out["late_interaction_output"], out["context_mask"])]  # noqa: E731
    qv = sets(
        tiny.encode(
            texts=task.queries["text"].to_list(),
            images=[Image.open(task.resolve_image(p)).convert("RGB") for p in task.queries["image"].to_list()],
            is_query=True,
        )
    )
    dv = sets(tiny.encode(texts=task.doc_text()))
    assert_scores("late-tiny", np.array([[float((a @ b.T).max(axis=1).sum()) for b in dv] for a in qv]), 1e-5)


def _only_folder(parent: Path) -> Path:
    """The one artifact folder (key) under a stage's folder."""
    (folder,) = sorted(parent.iterdir())
    return folder


def make_side(task, passages: pl.DataFrame):
    """``task`` with its corpus frame's text replaced by the joined passage text (what the encoders see)."""
    import dataclasses

    return dataclasses.replace(task, corpus=passages)
