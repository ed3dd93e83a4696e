"""Kind ``remote-code-embedder``: a multimodal embedder shipping its own code, read offline from a hub cache
written here (``models--org--name/{blobs,snapshots/<sha>,refs/main}``, config.json's ``auto_map`` naming
the repository's modeling file), called as the entry says (MM-Embed's ``encode([{txt, img}])`` and
jina-clip's ``encode_text`` / ``encode_image``), equal to the model called directly (scores to 1e-6,
the same top 10), and refused unless its hub id is on the registry's trust_remote_code allowlist."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from medbench_core.errors import DataError
from medbench_core.retrieval.model_registry import load_registry
from medbench_core.taskdata.task import TaskMeta, make_task

pytestmark = pytest.mark.model

HUB_ID = "medbench-test/tiny-embedder"
SHA = "e1" * 20
INSTRUCTION = "Retrieve the relevant paragraph that provides an answer to the given medical query and image."
MMEMBED_CALL = {"method": "encode", "records": {"arg": 0, "text": "txt", "image": "img"}, "output": "hidden_states", "instruction": "instruction"}
MMEMBED_KW = {"query_kwargs": {"is_query": True, "max_length": 512}, "passage_kwargs": {"max_length": 4096}}  # M3Retrieve's mm_embed_new (1).py l.100-102
MMEMBED = {
    "text": {**MMEMBED_CALL, **MMEMBED_KW}, "image": {**MMEMBED_CALL, **MMEMBED_KW}, "image_text": {**MMEMBED_CALL, **MMEMBED_KW},
    "instructions": {"default": INSTRUCTION},
}  # fmt: skip
JINA = {
    "text": {"method": "encode_text", "texts": 0}, "image": {"method": "encode_image", "images": 0}, "image_text": {"fuse": "sum"},
    "image_input": "path", "query_template": "{instruction}{query}", "instructions": {"remote_toy": "Represent the query for retrieving evidence documents: "},
}  # fmt: skip


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Path:
    from reader_fixtures import hub_snapshot
    from tiny_models import tiny_remote_embedder

    root = tmp_path_factory.mktemp("remote")
    hub_snapshot(root / "hub", HUB_ID, tiny_remote_embedder(root / "repo"), sha=SHA, repo_type="model")
    return root / "hub"


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    """transformers copies a repository's code into its modules cache: a tmp one, not ~/.cache/huggingface/modules."""
    import sys

    import transformers.dynamic_module_utils as dynamic

    mp = pytest.MonkeyPatch()
    folder = tmp_path_factory.mktemp("hf_modules")
    mp.setattr(dynamic, "HF_MODULES_CACHE", str(folder))
    mp.setattr(sys, "path", list(sys.path))
    yield folder
    mp.undo()


def registry(tmp_path: Path, settings: dict, allow: list[str] | None = None, **extra) -> list:
    entry = {"name": "tiny-mm", "kind": "remote-code-embedder", "path": HUB_ID, "revision": "main", "settings": settings, "batch_size": 3, **extra}
    path = tmp_path / "models.yaml"
    path.write_text(json.dumps({"trust_remote_code": [HUB_ID] if allow is None else allow, "models": [entry]}))
    return load_registry(path)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(3)
    for i in range(9):
        Image.fromarray(rng.integers(0, 256, size=(20 + i, 24, 3), dtype=np.uint8)).save(root / f"p{i}.png")
    texts = ["Cardiomegaly on a chest film", "ST elevation", None, "Renal biopsy", "Gallstones on ultrasound", None,
             "Fracture of the distal radius", "Retinal haemorrhages", "Psoriatic plaques", "Pulmonary embolism on CT", None, "Appendicitis"]  # fmt: skip
    images = ["p0.png", None, "p2.png", "p3.png", None, "p5.png", "p6.png", None, "p8.png", None, "p1.png", None]
    corpus = pl.DataFrame({"doc_id": [f"d{i:02d}" for i in range(12)], "text": texts, "image": images, "language": ["en"] * 12})
    queries = pl.DataFrame({
        "query_id": ["q1", "q2", "q3"], "text": ["enlarged heart", "kidney tissue", None], "image": ["p4.png", None, "p7.png"], "language": ["en"] * 3,
    })  # fmt: skip
    qrels = pl.DataFrame({"query_id": ["q1", "q2", "q3"], "doc_id": ["d00", "d03", "d05"], "relevance": [1, 1, 1]})
    return make_task(
        TaskMeta(name="remote_toy", source="test", licences=("CC0-1.0",), query_modality="both", doc_modality="both"), queries, corpus, qrels, image_root=root
    )


def direct_model(hub: Path):
    """The repository's own class, loaded by transformers from the snapshot (not through medbench)."""
    from transformers import AutoModel

    folder = hub / f"models--{HUB_ID.replace('/', '--')}" / "snapshots" / SHA
    return AutoModel.from_pretrained(str(folder), trust_remote_code=True, local_files_only=True).eval()


def unit(a) -> np.ndarray:
    a = np.asarray(a.detach() if hasattr(a, "detach") else a, dtype=np.float64)
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def run_stages(spec, task, tmp: Path) -> pl.DataFrame:
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve, score

    d = {s: tmp / s for s in ("emb", "idx", "run", "met")}
    for folder in d.values():
        folder.mkdir(parents=True)
    embed_corpus(spec, task, d["emb"])
    build_corpus_index(spec, d["emb"], d["idx"])
    run, _ = retrieve(spec, task, d["emb"], d["idx"], d["run"], k=10)
    score(task, run, d["met"])
    return run


def assert_top10(run: pl.DataFrame, q: np.ndarray, d: np.ndarray, task) -> None:
    scores = q @ d.T
    doc_ids = task.corpus["doc_id"].to_list()
    for qid, row in zip(task.queries["query_id"].to_list(), scores):
        order = sorted(range(len(doc_ids)), key=lambda j: (-row[j], doc_ids[j]))[:10]
        got = run.filter(pl.col("query_id") == qid).sort("rank")
        assert got["doc_id"].to_list() == [doc_ids[j] for j in order], qid
        np.testing.assert_allclose(got["score"].to_numpy(), [row[j] for j in order], atol=1e-6)


def records(task, side: str) -> list[dict]:
    frame = task.queries if side == "query" else task.corpus
    out = []
    for text, image in frame.select("text", "image").iter_rows():
        rec = {}
        if text:
            rec["txt"] = text
        if image:
            rec["img"] = Image.open(task.resolve_image(image)).convert("RGB")
        out.append(rec)
    return out


def test_mm_embed_style_calls_equal_the_model_called_directly(hub, modules, task, tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))
    spec = registry(tmp_path, MMEMBED)[0]
    assert spec.trust_remote_code and spec.hub_id == HUB_ID
    run = run_stages(spec, task, tmp_path)
    model = direct_model(hub)
    # MM-Embed's card and M3Retrieve's script: every query with is_query=True and the instruction (q3 is image-only and
    # gets it too), documents without; raw vectors under hidden_states.
    q = [model.encode([r], is_query=True, instruction=INSTRUCTION, max_length=512)["hidden_states"][0] for r in records(task, "query")]
    assert "txt" not in records(task, "query")[2]
    d = [model.encode([r], max_length=4096)["hidden_states"][0] for r in records(task, "passage")]
    import torch

    assert_top10(run, unit(torch.stack(q)), unit(torch.stack(d)), task)


def test_jina_style_calls_with_a_summed_pair_and_image_paths(hub, modules, task, tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))
    spec = registry(tmp_path, JINA)[0]
    run = run_stages(spec, task, tmp_path)
    model = direct_model(hub)
    prefix = JINA["instructions"]["remote_toy"]

    def vec(text, image, query):
        v = np.zeros(16)
        if text or query:  # an image-only query gets the instruction as its text (query_template with an empty query)
            v = v + model.encode_text([prefix + (text or "") if query else text])[0]
        if image:
            v = v + model.encode_image([str(task.resolve_image(image))])[0]  # a path, as image_input: path passes it
        return v

    q = np.stack([vec(t, im, True) for t, im in task.queries.select("text", "image").iter_rows()])
    d = np.stack([vec(t, im, False) for t, im in task.corpus.select("text", "image").iter_rows()])
    assert_top10(run, unit(q), unit(d), task)


def test_remote_code_runs_only_for_allowlisted_ids(hub, modules, tmp_path, monkeypatch):
    import transformers.dynamic_module_utils as dynamic

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))
    fresh = tmp_path / "modules"
    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(fresh))
    unlisted = registry(tmp_path, MMEMBED, allow=[])[0]
    assert unlisted.trust_remote_code is False
    with pytest.raises(DataError) as err:
        unlisted.plugin.load(unlisted)
    assert "maps to code shipped with the model (auto_map: ['AutoConfig', 'AutoModel'])" in str(err.value)
    assert f"it runs only when '{HUB_ID}' is on the trust_remote_code allowlist" in str(err.value)
    assert not list(fresh.rglob("modeling_tiny_embedder.py"))  # the repository's code was not even copied
    with pytest.raises(DataError, match=rf"asks for trust_remote_code but '{HUB_ID}' is not on the top-level trust_remote_code allowlist"):
        registry(tmp_path, MMEMBED, allow=["someone/else"], trust_remote_code=True)
    listed = registry(tmp_path, MMEMBED)[0]
    enc = listed.plugin.load(listed)
    assert type(enc.model).__name__ == "TinyEmbedder"  # the repository's own class ran
    # A local copy of the folder cannot be allowlisted (no hub id): refused too.
    local = registry(tmp_path, MMEMBED, path=str(hub / f"models--{HUB_ID.replace('/', '--')}" / "snapshots" / SHA))[0]
    assert local.hub_id == "" and not local.trust_remote_code
    with pytest.raises(DataError, match=r"maps to code shipped with the model"):
        local.plugin.load(local)


def test_revision_pinned_and_instruction_keys_the_run_only(hub, task, tmp_path, monkeypatch):
    from medbench_core.retrieval.model_registry import pin_revision
    from medbench_core.retrieval.stages import partition_keys

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))
    spec = registry(tmp_path, MMEMBED)[0]
    assert pin_revision(spec).revision == SHA
    other = registry(tmp_path, {**MMEMBED, "instructions": {"default": "Find it."}})[0]
    a, b = partition_keys(spec, task), partition_keys(other, task)
    assert a["embeddings"] == b["embeddings"] and a["run"] != b["run"]


def test_a_task_with_records_the_entry_has_no_call_for_is_na(hub, task, tmp_path):
    text_only = registry(tmp_path, {"text": {"method": "encode_text", "texts": 0}})[0]
    # A text-only model reads the caption of a captioned image (q1), but an image alone (q3) it cannot.
    assert text_only.plugin.applicability(text_only, task, {}) == "tiny-mm has no settings.image, and queries of remote_toy carry image (e.g. q3)"
    no_pair = registry(tmp_path, {"text": {"method": "encode_text", "texts": 0}, "image": {"method": "encode_image", "images": 0}})[0]
    assert no_pair.plugin.applicability(no_pair, task, {}) == "tiny-mm has no settings.image_text, and queries of remote_toy carry image and text (e.g. q1)"
    assert registry(tmp_path, MMEMBED)[0].plugin.applicability(registry(tmp_path, MMEMBED)[0], task, {}) is None


def test_a_text_only_model_reads_the_text_of_a_captioned_image(hub, modules, tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))
    spec = registry(tmp_path, {"text": {"method": "encode_text", "texts": 0}})[0]
    img = tmp_path / "x.png"
    Image.fromarray(np.full((8, 8, 3), 200, dtype=np.uint8)).save(img)
    got = spec.plugin.load(spec).encode_records(["gout", "gout"], [img, None], ["en", "en"], "query")
    np.testing.assert_allclose(got[0], got[1], atol=1e-7)
    np.testing.assert_allclose(got[0], direct_model(hub).encode_text(["gout"])[0], atol=1e-6)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({}, r"settings need at least one of text, image, image_text"),
        ({"text": {"method": "encode_text", "textz": 0}}, r"settings.text: unknown key 'textz' \(did you mean 'texts'\?\)"),
        ({"text": {"texts": 0}}, r"settings.text needs 'method'"),
        ({"text": {"method": 3, "texts": 0}}, r"settings.text: method must be str, not 3"),
        ({"text": {"method": "encode_text"}}, r"settings.text: say where the texts go"),
        ({"text": {"method": "__class__", "texts": 0}}, r"settings.text needs 'method'"),
        ({"image_text": {"fuse": "sum"}}, r"fuse: sum\}? adds the text and image calls' vectors; give settings.text and settings.image too"),
        ({"text": {"method": "encode", "records": {"arg": 0, "image": "img"}}}, r"with records, name the record keys \(text\) inside records"),
        ({"text": {"method": "encode_text", "texts": "a b"}}, r"texts must be a keyword name or a position"),
        ({"text": {"method": "encode_text", "texts": 0}, "image_input": "url"}, r"image_input 'url' unknown; use one of pil, path"),
        ({"text": {"method": "encode_text", "texts": 0}, "pooling": "cls"}, r"a remote-code embedder pools as its own encode method does"),
        ({"text": {"method": "get_text_features", "processor": True, "texts": 0}}, r"with processor: true the processor takes the texts and images"),
    ],
)
def test_entry_errors(tmp_path, settings, message):
    with pytest.raises(DataError, match=message):
        registry(tmp_path, settings)


def test_a_call_the_model_cannot_answer_names_the_method(hub, modules, tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))
    spec = registry(tmp_path, {"text": {"method": "get_text_embeddings", "texts": "texts"}})[0]
    enc = spec.plugin.load(spec)
    with pytest.raises(DataError, match=r"model tiny-mm: the loaded TinyEmbedder has no method 'get_text_embeddings' \(settings.text.method\)"):
        enc.encode_records(["x"], [None], ["en"], "passage")
    spec = registry(tmp_path, {"text": {"method": "encode", "records": {"arg": 0, "text": "txt"}}})[0]  # forgot output: hidden_states
    with pytest.raises(
        DataError, match=r"model tiny-mm: encode returned dict, not an array of vectors; name the key or attribute that holds them \(settings output\)"
    ):
        spec.plugin.load(spec).encode_records(["x"], [None], ["en"], "passage")


# --- a transformers CLIP through its processor (PubMedCLIP) ----------------------------------------------

PUBMEDCLIP = {
    "text": {"method": "get_text_features", "processor": True, "output": "pooler_output"},
    "image": {"method": "get_image_features", "processor": True, "output": "pooler_output"},
    "image_text": {"fuse": "sum"},
}


def test_a_transformers_clip_through_its_processor_equals_clipmodel_called_directly(task, tmp_path):
    import torch
    from reader_fixtures import hub_snapshot
    from tiny_models import tiny_transformers_clip
    from transformers import AutoProcessor, CLIPModel

    repo = "medbench-test/tiny-pubmedclip"
    snap = hub_snapshot(tmp_path / "hub", repo, tiny_transformers_clip(tmp_path / "src"), sha="f0" * 20, repo_type="model")
    entry = {"name": "pubmedclip", "kind": "remote-code-embedder", "path": repo, "revision": "main", "settings": PUBMEDCLIP, "batch_size": 4}
    (tmp_path / "models.yaml").write_text(json.dumps({"models": [entry]}))
    spec = load_registry(tmp_path / "models.yaml")[0]
    assert not spec.trust_remote_code  # no code of its own: nothing to allow
    import huggingface_hub.constants as constants

    mp = pytest.MonkeyPatch()
    mp.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    try:
        run = run_stages(spec, task, tmp_path / "run")
    finally:
        mp.undo()
    model, proc = CLIPModel.from_pretrained(str(snap)).eval(), AutoProcessor.from_pretrained(str(snap))

    def vec(text, image):
        v = torch.zeros(16)
        with torch.no_grad():
            if text:
                v = v + model.get_text_features(**proc(text=[text], return_tensors="pt", padding=True, truncation=True)).pooler_output[0]
            if image:
                v = v + model.get_image_features(**proc(images=[Image.open(task.resolve_image(image)).convert("RGB")], return_tensors="pt")).pooler_output[0]
        return v.numpy()

    q = np.stack([vec(t, im) for t, im in task.queries.select("text", "image").iter_rows()])
    d = np.stack([vec(t, im) for t, im in task.corpus.select("text", "image").iter_rows()])
    assert_top10(run, unit(q), unit(d), task)
