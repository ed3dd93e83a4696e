"""Kinds ``code-folder`` and ``code-folder-late``: a class in a folder, run only when models.yaml's ``trust_code`` lists
the folder with its content hash. A tiny folder written here has MedImageInsight's interface
(``MedImageInsight(model_dir=, vision_model_name=, language_model_name=)``, ``load_model()``,
``encode(images=<base64>, texts=)`` returning ``text_embeddings`` and ``image_embeddings``: M3Retrieve's
``Code/get_medImageInsight_results.py``) and a late-interaction class (token vectors, a padded output with
a mask); each run through the stages equals the class called directly as the script calls it."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from medbench_core.errors import DataError
from medbench_core.retrieval.model_registry import load_registry, model_spec
from medbench_core.taskdata.task import TaskMeta, make_task

TINY_MII = '''
import base64
import io
import os

import numpy as np
from PIL import Image


class MedImageInsight:
    """MedImageInsight's interface (lion-ai/MedImageInsights medimageinsightmodel.py), with tiny numpy weights."""

    def __init__(self, model_dir, vision_model_name, language_model_name):
        self.model_dir, self.vision_model_name, self.language_model_name = model_dir, vision_model_name, language_model_name
        self.model = None

    def load_model(self):
        self.vision = np.load(os.path.join(self.model_dir, "vision_model", self.vision_model_name))
        self.language = np.load(os.path.join(self.model_dir, "language_model", self.language_model_name))
        self.model = "loaded"

    def encode(self, images=None, texts=None):
        if not self.model:
            raise RuntimeError("Model not loaded. Call load_model() first.")
        output = {"image_embeddings": None, "text_embeddings": None}
        if images is not None:
            pics = [Image.open(io.BytesIO(base64.b64decode(b))).convert("RGB").resize((4, 4)) for b in images]
            output["image_embeddings"] = np.stack([np.asarray(p, dtype=np.float32).ravel() / 255.0 for p in pics]) @ self.vision
        if texts is not None:
            output["text_embeddings"] = np.stack([self.language[list(t.encode()[:64]) or [0]].mean(0) for t in texts])
        return output
'''

TINY_LATE = '''
import numpy as np


class TinyLate:
    """Token vectors: one per word of a text (queries get a marker word first), four per image (2x2 pixels);
    returned padded with a mask, as FLMR's query() and doc() return them."""

    def __init__(self, dim=8, seed=0):
        rng = np.random.default_rng(seed)
        self.words = rng.normal(size=(97, dim)).astype(np.float32)
        self.pixels = rng.normal(size=(3, dim)).astype(np.float32)

    def _text(self, text):
        return np.stack([self.words[sum(w.encode()) % 97] for w in text.split()])

    def _image(self, image):
        return np.asarray(image.convert("RGB").resize((2, 2)), dtype=np.float32).reshape(4, 3) / 255.0 @ self.pixels + 0.1

    def encode(self, texts=None, images=None, is_query=False):
        n = len(texts if texts is not None else images)
        sets = []
        for i in range(n):
            parts = [self._text(("query " if is_query else "") + texts[i])] if texts is not None else []
            parts += [self._image(images[i])] if images is not None else []
            sets.append(np.concatenate(parts))
        width = max(len(x) for x in sets)
        padded = np.zeros((n, width, self.words.shape[1]), dtype=np.float32)
        mask = np.zeros((n, width), dtype=bool)
        for i, x in enumerate(sets):
            padded[i, : len(x)], mask[i, : len(x)] = x, True
        padded[:, :, 0] += 5.0 * ~mask  # padding that would change MaxSim if it were kept
        return {"late_interaction_output": padded, "context_mask": mask}
'''

MII_SETTINGS = {
    "entry": "medimageinsight_tiny:MedImageInsight",
    "init": {"model_dir": "{folder}/2024.09.27", "vision_model_name": "medimageinsigt-v1.0.0.npy", "language_model_name": "language_model.npy"},
    "setup": "load_model",
    "image_input": "base64",
    "text": {"method": "encode", "texts": "texts", "output": "text_embeddings"},
    "image": {"method": "encode", "images": "images", "output": "image_embeddings"},
    "image_text": {"method": "encode", "texts": "texts", "images": "images", "output": ["text_embeddings", "image_embeddings"]},
}
LATE_CALL = {"method": "encode", "output": "late_interaction_output", "mask": "context_mask", "query_kwargs": {"is_query": True}}
LATE_SETTINGS = {
    "entry": "tiny_late:TinyLate",
    "init": {"dim": 8},
    "text": {**LATE_CALL, "texts": "texts"},
    "image": {**LATE_CALL, "images": "images"},
    "image_text": {**LATE_CALL, "texts": "texts", "images": "images"},
}


def write_mii(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "medimageinsight_tiny.py").write_text(TINY_MII)
    rng = np.random.default_rng(5)
    for sub, name, shape in (("vision_model", "medimageinsigt-v1.0.0.npy", (48, 16)), ("language_model", "language_model.npy", (256, 16))):
        (folder / "2024.09.27" / sub).mkdir(parents=True)
        np.save(folder / "2024.09.27" / sub / name, rng.normal(size=shape).astype(np.float32))
    return folder


def write_late(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "tiny_late.py").write_text(TINY_LATE)
    return folder


def registry(tmp_path: Path, entries: list[dict], trust: list[dict]) -> list:
    path = tmp_path / "models.yaml"
    path.write_text(json.dumps({"trust_code": trust, "models": entries}))
    return load_registry(path)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("code")
    return write_mii(root / "MedImageInsights"), write_late(root / "late")


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(1)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, size=(10 + i, 12, 3), dtype=np.uint8)).save(root / f"p{i}.png")
    texts = ["ST elevation in the anterior leads", "dilated left ventricle", "enlarged cardiac silhouette on a chest film",
             "irregularly irregular rhythm", "crescendo decrescendo murmur", "diffuse ST elevation with PR depression"]  # fmt: skip
    corpus = pl.DataFrame({"doc_id": [f"d{i}" for i in range(6)], "text": texts, "language": ["en"] * 6})
    queries = pl.DataFrame({"query_id": ["q1", "q2", "q3"], "text": ["ECG with ST elevation", "heart failure echo", None],
                            "image": ["p0.png", None, "p2.png"], "language": ["en"] * 3})  # fmt: skip
    qrels = pl.DataFrame({"query_id": ["q1", "q2", "q3"], "doc_id": ["d0", "d1", "d2"], "relevance": [1, 1, 1]})
    meta = TaskMeta(name="code_toy", source="test", licences=("CC0-1.0",), query_modality="both", doc_modality="text")
    return make_task(meta, queries, corpus, qrels, image_root=root)


def run_stages(spec, task, tmp: Path) -> pl.DataFrame:
    from medbench_core.evaluation.scoring import score
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve

    d = {s: tmp / s for s in ("emb", "idx", "run", "met")}
    for folder in d.values():
        folder.mkdir(parents=True)
    embed_corpus(spec, task, d["emb"])
    build_corpus_index(spec, d["emb"], d["idx"])
    run, _ = retrieve(spec, task, d["emb"], d["idx"], d["run"], k=10)
    score(task, run, d["met"])
    return run


def assert_top(run: pl.DataFrame, scores: np.ndarray, task) -> None:
    doc_ids = task.corpus["doc_id"].to_list()
    for qid, row in zip(task.queries["query_id"].to_list(), scores):
        order = sorted(range(len(doc_ids)), key=lambda j: (-row[j], doc_ids[j]))
        got = run.filter(pl.col("query_id") == qid).sort("rank")
        assert got["doc_id"].to_list() == [doc_ids[j] for j in order], qid
        np.testing.assert_allclose(got["score"].to_numpy(), [row[j] for j in order], atol=1e-5)


def import_from(folder: Path, module: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"direct_{module}", folder / f"{module}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_code_runs_only_when_allowlisted_with_its_hash(folders, tmp_path):
    from medbench_core.retrieval.kinds.code_folder import code_hash, data_hash

    mii, _ = folders
    entry = {"name": "mii", "kind": "code-folder", "path": str(mii), "settings": MII_SETTINGS}
    digest = code_hash(mii)
    with pytest.raises(DataError) as err:
        registry(tmp_path, [entry], [])
    assert str(err.value) == (
        f"{tmp_path / 'models.yaml'}: model 'mii': the code in {mii} is not on the trust_code allowlist; read it, then add "
        f"{{path: {mii}, sha256: {digest}}} under trust_code"
    )
    with pytest.raises(DataError, match=rf"the code in {mii} changed since trust_code listed it \(sha256 now {digest}, listed {'0' * 64}\)"):
        registry(tmp_path, [entry], [{"path": str(mii), "sha256": "0" * 64}])
    with pytest.raises(DataError, match=r"trust_code\[0\] \(x\): sha256 must be 64 hex digits"):
        registry(tmp_path, [entry], [{"path": "x", "sha256": "abc"}])
    spec = registry(tmp_path, [entry], [{"path": str(mii), "sha256": digest}])[0]
    # The revision records the code's hash and the folder's other files (the weights).
    assert spec.plugin.revision(spec) == f"code-sha256:{digest[:16]}+files-sha256:{data_hash(mii)[:16]}"
    # An entry that did not come through a registry's allowlist never imports anything.
    bare = model_spec(**entry)
    with pytest.raises(DataError, match=r"model mii: its code runs only when models.yaml lists it under trust_code"):
        bare.plugin.load(bare)


def test_every_refused_code_folder_entry_is_named_in_one_pass(folders, tmp_path):
    """docs/m3retrieve.md: the first run refuses every code-folder entry at once, one line each with the hash to paste."""
    from medbench_core.retrieval.kinds.code_folder import code_hash

    mii, other = folders
    entries = [
        {"name": "mii", "kind": "code-folder", "path": str(mii), "settings": MII_SETTINGS},
        {"name": "mii-2", "kind": "code-folder", "path": str(mii), "settings": MII_SETTINGS},
        {"name": "other", "kind": "code-folder", "path": str(other), "settings": MII_SETTINGS},
    ]
    listed = [{"path": str(other), "sha256": "0" * 64}]
    with pytest.raises(DataError) as err:
        registry(tmp_path, entries, listed)
    lines = str(err.value).splitlines()
    assert lines[0] == f"{tmp_path / 'models.yaml'}: 3 model entries refused (the code each would run, by trust_code):"
    assert [line.split(": model ")[1].split(":")[0] for line in lines[1:]] == ["'mii'", "'mii-2'", "'other'"]
    assert f"sha256: {code_hash(mii)}}} under trust_code" in lines[1] and f"sha256 now {code_hash(other)}" in lines[3]


@pytest.mark.model
def test_medimageinsight_shaped_class_equals_the_script(folders, task, tmp_path):
    from medbench_core.retrieval.kinds.code_folder import code_hash

    mii, _ = folders
    entry = {"name": "mii", "kind": "code-folder", "path": str(mii), "settings": MII_SETTINGS, "batch_size": 2}
    spec = registry(tmp_path, [entry], [{"path": str(mii), "sha256": code_hash(mii)}])[0]
    run = run_stages(spec, task, tmp_path)
    # get_medImageInsight_results.py: queries encode(images=, texts=) and add the two; passages encode(texts=)["text_embeddings"].
    model = import_from(mii, "medimageinsight_tiny").MedImageInsight(
        model_dir=str(mii / "2024.09.27"), vision_model_name="medimageinsigt-v1.0.0.npy", language_model_name="language_model.npy"
    )
    model.load_model()
    b64 = lambda p: base64.encodebytes(Path(task.resolve_image(p)).read_bytes()).decode("utf-8")  # noqa: E731  (the script's read_image + encodebytes)
    q = []
    for text, image in task.queries.select("text", "image").iter_rows():
        out = model.encode(images=[b64(image)] if image else None, texts=[text] if text else None)
        q.append(sum(v[0] for v in out.values() if v is not None))
    d = model.encode(texts=task.corpus["text"].to_list())["text_embeddings"]
    unit = lambda a: np.asarray(a) / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    assert_top(run, unit(np.stack(q)) @ unit(d).T, task)


@pytest.mark.model
def test_late_interaction_class_equals_maxsim_of_its_own_outputs(folders, task, tmp_path):
    from medbench_core.retrieval.kinds.code_folder import code_hash
    from medbench_core.retrieval.multivector import load_tokens

    _, late = folders
    entry = {"name": "late", "kind": "code-folder-late", "path": str(late), "settings": LATE_SETTINGS, "batch_size": 2}
    spec = registry(tmp_path, [entry], [{"path": str(late), "sha256": code_hash(late)}])[0]
    run = run_stages(spec, task, tmp_path)
    model = import_from(late, "tiny_late").TinyLate(dim=8)
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731

    def direct(texts, images, is_query):
        out = model.encode(texts=texts, images=images, is_query=is_query)
        return [unit(v[m]) for v, m in zip(out["late_interaction_output"], out["context_mask"])]  # the mask drops the padding

    docs = direct(task.corpus["text"].to_list(), None, False)
    tokens, offsets = load_tokens(tmp_path / "emb")
    np.testing.assert_allclose(np.asarray(tokens), np.concatenate(docs), atol=1e-6)
    queries = []
    for text, image in task.queries.select("text", "image").iter_rows():
        pic = Image.open(task.resolve_image(image)).convert("RGB") if image else None
        queries += direct([text] if text else None, [pic] if pic else None, True)
    scores = np.array([[float((q @ d.T).max(axis=1).sum()) for d in docs] for q in queries])
    assert_top(run, scores, task)


def test_changed_or_foreign_code_is_refused_when_loading(folders, tmp_path):
    import shutil

    from medbench_core.retrieval.kinds.code_folder import code_hash

    copy = tmp_path / "late"
    shutil.copytree(folders[1], copy)
    trust = [{"path": str(copy), "sha256": code_hash(copy)}]
    spec = registry(tmp_path, [{"name": "late", "kind": "code-folder-late", "path": str(copy), "settings": LATE_SETTINGS}], trust)[0]
    (copy / "tiny_late.py").write_text(TINY_LATE + "\nprint('changed')\n")
    with pytest.raises(DataError, match=rf"model late: the code in {copy} changed after models.yaml allowlisted it \(sha256 now {code_hash(copy)}\)"):
        spec.plugin.load(spec)
    (copy / "tiny_late.py").write_text(TINY_LATE)
    foreign = {**LATE_SETTINGS, "entry": "json:JSONDecoder"}  # importable, but from the standard library
    spec = registry(tmp_path, [{"name": "late", "kind": "code-folder-late", "path": str(copy), "settings": foreign}], trust)[0]
    with pytest.raises(DataError, match=rf"module 'json' was imported from .*json/__init__.py, not from the allowlisted {copy}"):
        spec.plugin.load(spec)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({**MII_SETTINGS, "entry": "MedImageInsight"}, r"settings.entry must be module:Class"),
        ({**MII_SETTINGS, "image_input": "bytes"}, r"image_input 'bytes' unknown; use one of pil, path, base64"),
        ({**MII_SETTINGS, "text": {**MII_SETTINGS["text"], "mask": "m"}}, r"settings.text.mask is for token vectors \(kind code-folder-late\)"),
        ({**MII_SETTINGS, "class": "MedImageInsight"}, r"unknown setting 'class' for kind code-folder: give entry: module:Class"),
    ],
)
def test_entry_errors(folders, tmp_path, settings, message):
    with pytest.raises(DataError, match=message):
        registry(tmp_path, [{"name": "mii", "kind": "code-folder", "path": str(folders[0]), "settings": settings}], [])


def test_late_entries_take_no_sums(folders, tmp_path):
    bad = {**LATE_SETTINGS, "image_text": {"method": "query", "texts": "texts", "images": "images", "output": ["a", "b"]}}
    with pytest.raises(DataError, match=r"settings.image_text: token vectors are not added"):
        registry(tmp_path, [{"name": "late", "kind": "code-folder-late", "path": str(folders[1]), "settings": bad}], [])
