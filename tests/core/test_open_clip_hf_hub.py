"""open_clip ``hf-hub:`` models read offline from the hub cache, BiomedCLIP-shaped: an open_clip_config.json
whose image tower is timm's and whose text tower is built from another repository's BERT config and
tokenizer, weights only as ``open_clip_pytorch_model.bin`` (loaded with ``weights_only=True``). The
kind ``open_clip`` equals open_clip's own ``hf-hub:`` loading (run in a subprocess with HF_HUB_CACHE
pointing at the same cache and HF_HUB_OFFLINE=1), and pins the text repository's revision."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from medbench_core.errors import DataError
from medbench_core.retrieval.model_registry import model_spec, pin_revision
from medbench_core.taskdata.task import TaskMeta, make_task

pytestmark = pytest.mark.model

CLIP_ID = "medbench-test/tiny-biomedclip"
TEXT_ID = "medbench-test/tiny-pubmedbert"
CLIP_SHA, TEXT_SHA = "c1" * 20, "b1" * 20

REFERENCE = """
import json, sys
import numpy as np, open_clip, torch
from PIL import Image
texts, images, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
model, _, preprocess = open_clip.create_model_and_transforms(sys.argv[4])
model.eval()
tokenizer = open_clip.get_tokenizer(sys.argv[4])
with torch.no_grad():
    t = model.encode_text(tokenizer(texts), normalize=True).numpy()
    i = model.encode_image(torch.stack([preprocess(Image.open(p)) for p in images]), normalize=True).numpy()
np.savez(out, text=t, image=i, tokenizer=np.array(tokenizer.tokenizer.name_or_path))
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    from reader_fixtures import hub_snapshot
    from tiny_models import tiny_biomedclip

    root = tmp_path_factory.mktemp("biomedclip")
    clip, text = tiny_biomedclip(root / "src", TEXT_ID)
    hub_snapshot(root / "hub", CLIP_ID, clip, sha=CLIP_SHA, repo_type="model")
    hub_snapshot(root / "hub", TEXT_ID, text, sha=TEXT_SHA, repo_type="model")
    return root / "hub"


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(5)
    for i in range(8):
        Image.fromarray(rng.integers(0, 256, size=(36, 30 + i, 3), dtype=np.uint8)).save(root / f"m{i}.png")
    texts = ["Chest radiograph with consolidation", None, "Brain MRI, T2 hyperintensity", "Knee effusion", None, "Skin biopsy",
             "Retinal photograph", None, "CT angiogram of the aorta", "Thyroid ultrasound", "Colonoscopy polyp", None]  # fmt: skip
    images = ["m0.png", "m1.png", None, "m3.png", "m4.png", None, "m6.png", "m7.png", None, None, "m2.png", "m5.png"]
    corpus = pl.DataFrame({"doc_id": [f"d{i:02d}" for i in range(12)], "text": texts, "image": images, "language": ["en"] * 12})
    queries = pl.DataFrame(
        {"query_id": ["q1", "q2", "q3"], "text": ["pneumonia on X-ray", None, "aortic dissection"], "image": ["m4.png", "m1.png", None], "language": ["en"] * 3}
    )
    qrels = pl.DataFrame({"query_id": ["q1", "q2", "q3"], "doc_id": ["d00", "d01", "d08"], "relevance": [1, 1, 1]})
    return make_task(
        TaskMeta(name="hub_clip_toy", source="test", licences=("CC0-1.0",), query_modality="both", doc_modality="both"), queries, corpus, qrels, image_root=root
    )


def reference(cache: Path, texts: list[str], images: list[Path], tmp: Path) -> dict[str, np.ndarray]:
    """open_clip's own hf-hub: loading, offline against ``cache``, in a fresh process."""
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp / "modules")}
    out = tmp / "ref.npz"
    argv = [sys.executable, "-c", REFERENCE, json.dumps(texts), json.dumps([str(p) for p in images]), str(out), f"hf-hub:{CLIP_ID}"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(np.load(out))


def score_fusion(frame: pl.DataFrame, t_of: dict, i_of: dict, w: float = 0.5) -> np.ndarray:
    """clip.py's score fusion of unit embeddings: [sqrt(w) img, sqrt(1-w) txt], a one-modality record's vector in both halves."""
    rows = []
    for t, im in frame.select("text", "image").iter_rows():
        tv = t_of[t] if t else i_of[im]
        iv = i_of[im] if im else t_of[t]
        v = np.concatenate([np.sqrt(w) * iv, np.sqrt(1 - w) * tv])
        rows.append(v / np.linalg.norm(v))
    return np.stack(rows)


def spec(**settings):
    return model_spec(name="biomedclip", kind="open_clip", revision="main", settings={"checkpoint": f"hf-hub:{CLIP_ID}", **settings}, batch_size=4)


def test_kind_open_clip_equals_open_clips_own_hf_hub_loading(cache, task, tmp_path, monkeypatch):
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    s = spec()
    assert pin_revision(s).revision == CLIP_SHA
    # The text repository is pinned too: its commit is part of the weights' revision.
    pinned = pin_revision(s)
    assert pinned.plugin.revision(pinned) == f"{CLIP_SHA}+{TEXT_ID}@{TEXT_SHA}"
    d = {n: tmp_path / n for n in ("emb", "idx", "run")}
    for folder in d.values():
        folder.mkdir()
    embed_corpus(s, task, d["emb"])
    build_corpus_index(s, d["emb"], d["idx"])
    run, _ = retrieve(s, task, d["emb"], d["idx"], d["run"], k=10)

    frames = {"query": task.queries, "passage": task.corpus}
    texts = sorted({t for f in frames.values() for t in f["text"].to_list() if t})
    images = sorted({im for f in frames.values() for im in f["image"].to_list() if im})
    ref = reference(cache, texts, [task.resolve_image(im) for im in images], tmp_path)
    assert str(ref["tokenizer"]) == TEXT_ID  # open_clip tokenizes with the named text repository
    t_of, i_of = dict(zip(texts, ref["text"])), dict(zip(images, ref["image"]))
    scores = score_fusion(task.queries, t_of, i_of) @ score_fusion(task.corpus, t_of, i_of).T
    doc_ids = task.corpus["doc_id"].to_list()
    for qid, row in zip(task.queries["query_id"].to_list(), scores):
        order = sorted(range(12), key=lambda j: (-row[j], doc_ids[j]))[:10]
        got = run.filter(pl.col("query_id") == qid).sort("rank")
        assert got["doc_id"].to_list() == [doc_ids[j] for j in order], qid
        np.testing.assert_allclose(got["score"].to_numpy(), [row[j] for j in order], atol=1e-6)


def test_the_text_repository_is_read_at_its_pinned_revision(cache, tmp_path):
    from medbench_core.retrieval.clip import hub_checkpoint_folder, hub_text_repos, load_clip_encoder

    folder = hub_checkpoint_folder(spec(), cache_dir=cache)
    assert hub_text_repos(spec(), folder, cache_dir=cache) == {TEXT_ID: (cache / f"models--{TEXT_ID.replace('/', '--')}" / "snapshots" / TEXT_SHA, TEXT_SHA)}
    with pytest.raises(
        DataError, match=rf"builds its text tower from hf_model_name '{TEXT_ID}', which is not in the local hub cache at '{'d' * 40}'.*hf download {TEXT_ID}"
    ):
        load_clip_encoder(spec(text_revision="d" * 40), cache_dir=cache)
    enc = load_clip_encoder(spec(text_revision=TEXT_SHA), cache_dir=cache)  # a sha pins it for good
    assert enc.tokenizer.tokenizer.name_or_path.endswith(TEXT_SHA)


def test_a_hub_model_without_its_text_repository_or_weights_is_refused(tmp_path):
    import shutil

    from reader_fixtures import hub_snapshot
    from tiny_models import tiny_biomedclip

    from medbench_core.retrieval.clip import load_clip_encoder

    clip, _ = tiny_biomedclip(tmp_path / "src", TEXT_ID)
    hub_snapshot(tmp_path / "hub", CLIP_ID, clip, sha=CLIP_SHA, repo_type="model")
    with pytest.raises(DataError, match=rf"text tower from hf_model_name '{TEXT_ID}', which is not in the local hub cache"):
        load_clip_encoder(spec(), cache_dir=tmp_path / "hub")
    (clip / "open_clip_pytorch_model.bin").unlink()
    shutil.rmtree(tmp_path / "hub")
    hub_snapshot(tmp_path / "hub", CLIP_ID, clip, sha=CLIP_SHA, repo_type="model")
    with pytest.raises(DataError, match=r"holds no weights .*open_clip would build the model with random weights"):
        load_clip_encoder(spec(), cache_dir=tmp_path / "hub")


def test_a_pickle_with_code_in_a_hub_bin_is_refused(cache, tmp_path):
    import shutil

    import torch
    from reader_fixtures import hub_snapshot

    from medbench_core.retrieval.clip import load_clip_encoder

    src = tmp_path / "evil"
    shutil.copytree(cache / f"models--{CLIP_ID.replace('/', '--')}" / "snapshots" / CLIP_SHA, src, symlinks=False)
    marker = tmp_path / "marker"

    class Payload:
        def __reduce__(self):
            return (Path.write_text, (marker, "code ran"))

    torch.save({"state_dict": {"x": Payload()}}, src / "open_clip_pytorch_model.bin")
    hub = tmp_path / "hub"
    hub_snapshot(hub, CLIP_ID, src, sha=CLIP_SHA, repo_type="model")
    text = cache / f"models--{TEXT_ID.replace('/', '--')}"
    shutil.copytree(text, hub / text.name, symlinks=True)
    with pytest.raises(DataError, match=r"open_clip could not build 'hf-hub:medbench-test/tiny-biomedclip'.*refused: its pickle names getattr.*never loads"):
        load_clip_encoder(spec(), cache_dir=hub)
    assert not marker.exists()


def test_a_transformers_clip_repository_is_not_an_open_clip_model(tmp_path):
    from reader_fixtures import hub_snapshot

    from medbench_core.retrieval.clip import load_clip_encoder

    src = tmp_path / "pubmedclip"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"model_type": "clip", "architectures": ["CLIPModel"]}))
    hub_snapshot(tmp_path / "hub", "flaviagiammarino/pubmed-clip-vit-base-patch32", src, repo_type="model")
    s = model_spec(name="pubmedclip", kind="open_clip", revision="main", settings={"checkpoint": "hf-hub:flaviagiammarino/pubmed-clip-vit-base-patch32"})
    with pytest.raises(DataError, match=r"has no open_clip_config.json; it is not an open_clip hub model.*transformers CLIPModel.*remote-code-embedder"):
        load_clip_encoder(s, cache_dir=tmp_path / "hub")
