"""Kind ``uniir-clip-sf``: UniIR's CLIP score fusion (normalise(raw image embedding + raw text embedding)),
loaded from UniIR's checkpoint layout (``{"model": {"clip_model.<key>": tensor}, "config": <OmegaConf>, ...}``)
without running the pickle, checked against the formula computed directly with torch on a tiny
random-weight CLIP: scores to 1e-6, the same top 10."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from medbench_core.errors import DataError
from medbench_core.retrieval.model_registry import load_registry, model_spec
from medbench_core.taskdata.task import TaskMeta, make_task

pytestmark = pytest.mark.model

TINY = "medbench-tiny-clip"
CAPTIONS = [
    "Chest film with an enlarged cardiac silhouette",
    "ECG showing ST elevation",
    "",
    "Axial CT of the abdomen",
    "Fundus photograph with cotton wool spots",
    "MRI of the knee",
    "",
    "Histology of a renal biopsy",
    "Skin lesion with irregular borders",
    "Ultrasound of the gallbladder",
    "Bone scan of the spine",
    "Mammogram with calcifications",
]


def tiny_source(seed: int = 7):
    """A random-weight tiny CLIP (open_clip) standing in for UniIR's fine-tuned ViT-L/14."""
    from medbench_core.retrieval.clip import load_clip_encoder

    return load_clip_encoder(model_spec(name="source", kind="open_clip", settings={"architecture": TINY, "seed": seed}))


def save_uniir_checkpoint(model, path: Path) -> Path:
    """``model`` saved as UniIR's train.py saves CLIPScoreFusion: state dict under ``model`` with
    ``clip_model.``, plus optimizer, OmegaConf config, epoch, scaler."""
    import torch
    from omegaconf import OmegaConf

    config = OmegaConf.create(
        {
            "model": {
                "name": "CLIPScoreFusion",
                "short_name": "CLIP_SF",
                "size": "Large",
                "clip_vision_model_name": "ViT-L/14",
                "ckpt_config": {"ckpt_dir": "checkpoint/CLIP_SF", "ckpt_name": "clip_sf_large.pth"},
            },
            "data_config": {"in_batch_neg_num": 0, "image_size": "224, 224"},
            "dataset_names": ["mscoco_task0", "cirr_task7"],
            "seed": 2023,
        }
    )
    state = {f"clip_model.{k}": v.detach().clone() for k, v in model.state_dict().items()}
    torch.save(
        {"model": state, "optimizer": {"state": {0: {"exp_avg": torch.zeros(3)}}, "param_groups": [{"lr": 1e-5, "params": [0]}]},
         "scheduler": {"last_epoch": 19}, "config": config, "epoch": 19, "scaler": {"scale": 65536.0, "growth_factor": 2.0}},
        path,
    )  # fmt: skip
    return path


@pytest.fixture(scope="module")
def source():
    return tiny_source()


@pytest.fixture(scope="module")
def checkpoint(source, tmp_path_factory) -> Path:
    return save_uniir_checkpoint(source.model, tmp_path_factory.mktemp("uniir") / "clip_sf_large.pth")


def uniir_spec(path: Path | str, **settings):
    return model_spec(name="clip-sf", kind="uniir-clip-sf", path=str(path), settings={"architecture": TINY, **settings}, batch_size=5)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """Queries with caption and image, caption only and image only, against documents of each kind too (12 of them)."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for i in range(10):
        Image.fromarray(rng.integers(0, 256, size=(40 + 3 * i, 48, 3), dtype=np.uint8)).save(root / f"i{i}.png")
    docs = pl.DataFrame({
        "doc_id": [f"d{i:02d}" for i in range(12)],
        "text": [c or None for c in CAPTIONS],
        "image": [f"i{i}.png" if i % 3 != 1 else None for i in range(12)[:10]] + [None, None],
        "language": ["en"] * 12,
    })  # fmt: skip
    queries = pl.DataFrame({
        "query_id": ["q1", "q2", "q3", "q4"],
        "text": ["enlarged heart on a chest film", "renal biopsy", None, "gallbladder stones"],
        "image": ["i0.png", None, "i5.png", "i9.png"],
        "language": ["en"] * 4,
    })  # fmt: skip
    qrels = pl.DataFrame({"query_id": ["q1", "q2", "q3", "q4"], "doc_id": ["d00", "d07", "d05", "d09"], "relevance": [1, 1, 1, 1]})
    meta = TaskMeta(name="uniir_toy", source="test", licences=("CC0-1.0",), query_modality="both", doc_modality="both")
    return make_task(meta, queries, docs, qrels, image_root=root)


def direct_vectors(source, task, side: str, formatter=lambda t: t) -> np.ndarray:
    """normalise(encode_text(txt) + encode_image(img)) per record, straight from open_clip and torch (UniIR's formula)."""
    import torch

    frame = task.queries if side == "query" else task.corpus
    rows = []
    with torch.no_grad():
        for text, image in frame.select("text", "image").iter_rows():
            vec = torch.zeros(source.model.text_projection.shape[1])
            if text:
                vec = vec + source.model.encode_text(source.tokenizer([formatter(text)]))[0]
            if image:
                pixels = source.preprocess(Image.open(task.resolve_image(image)).convert("RGB")).unsqueeze(0)
                vec = vec + source.model.encode_image(pixels)[0]
            rows.append(torch.nn.functional.normalize(vec, dim=-1).numpy())
    return np.stack(rows)


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


def expected_top10(q: np.ndarray, d: np.ndarray, task) -> dict[str, list[tuple[str, float]]]:
    scores = q @ d.T
    doc_ids = task.corpus["doc_id"].to_list()
    out = {}
    for qid, row in zip(task.queries["query_id"].to_list(), scores):
        order = sorted(range(len(doc_ids)), key=lambda j: (-row[j], doc_ids[j]))[:10]
        out[qid] = [(doc_ids[j], float(row[j])) for j in order]
    return out


def assert_run_matches(run: pl.DataFrame, want: dict[str, list[tuple[str, float]]]) -> None:
    for qid, ranked in want.items():
        got = run.filter(pl.col("query_id") == qid).sort("rank")
        assert got["doc_id"].to_list() == [d for d, _ in ranked], qid
        np.testing.assert_allclose(got["score"].to_numpy(), [s for _, s in ranked], atol=1e-6)


def test_stages_equal_uniir_formula_computed_with_torch(source, checkpoint, task, tmp_path):
    spec = uniir_spec(checkpoint)
    run = run_stages(spec, task, tmp_path)
    want = expected_top10(direct_vectors(source, task, "query"), direct_vectors(source, task, "passage"), task)
    assert_run_matches(run, want)

    assert spec.plugin.revision(spec).startswith("sha256:")
    vectors = np.load(tmp_path / "emb" / "corpus.npy")
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert vectors.shape == (12, 32)  # the model's width: one summed vector, not two halves


def test_a_one_modality_record_is_its_raw_embedding_normalised(source, checkpoint, tmp_path):
    import torch

    enc = uniir_spec(checkpoint).plugin.load(uniir_spec(checkpoint))
    img = tmp_path / "x.png"
    Image.fromarray(np.full((30, 30, 3), 90, dtype=np.uint8)).save(img)
    got = enc.encode_records(["a text", None, "a text"], [None, img, img], ["en"] * 3, "query")
    with torch.no_grad():
        t = source.model.encode_text(source.tokenizer(["a text"]))[0]
        i = source.model.encode_image(source.preprocess(Image.open(img).convert("RGB")).unsqueeze(0))[0]
    norm = torch.nn.functional.normalize
    np.testing.assert_allclose(got, torch.stack([norm(t, dim=0), norm(i, dim=0), norm(t + i, dim=0)]).numpy(), atol=1e-6)
    # Not a mean of unit vectors: the side with the larger raw norm weighs more.
    assert not np.allclose(got[2], norm(norm(t, dim=0) + norm(i, dim=0), dim=0).numpy(), atol=1e-4)
    with pytest.raises(DataError, match=r"1 query record\(s\) have neither text nor image, e.g. \['z'\]"):
        enc.encode_records(["  "], [None], ["en"], "query", ids=["z"])


def test_checkpoint_layouts_load_the_same_weights(source, checkpoint, tmp_path):
    import torch
    from safetensors.torch import save_file

    from medbench_core.retrieval.checkpoints import pickle_globals
    from medbench_core.retrieval.kinds.uniir_clip_sf import load_checkpoint_state

    # The OmegaConf config is in the pickle; torch refuses it by default.
    assert {"omegaconf.dictconfig.DictConfig", "omegaconf.base.Metadata", "collections.defaultdict", "typing.Any"} <= set(pickle_globals(checkpoint))
    with pytest.raises(pickle.UnpicklingError):
        torch.load(checkpoint, weights_only=True)
    want = {k: v for k, v in source.model.state_dict().items()}
    got = load_checkpoint_state(checkpoint, "m")
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    # safetensors, with and without the prefix; a bare state dict; DDP's module. prefix
    save_file({f"clip_model.{k}": v.contiguous() for k, v in want.items()}, str(tmp_path / "a.safetensors"))
    save_file({k: v.contiguous() for k, v in want.items()}, str(tmp_path / "b.safetensors"))
    torch.save({f"module.clip_model.{k}": v for k, v in want.items()}, tmp_path / "c.pt")
    torch.save({"state_dict": dict(want)}, tmp_path / "d.bin")
    for name in ("a.safetensors", "b.safetensors", "c.pt", "d.bin"):
        loaded = load_checkpoint_state(tmp_path / name, "m")
        assert set(loaded) == set(want) and all(torch.equal(loaded[k], want[k]) for k in want), name
    texts = ["cardiomegaly", "a fracture"]
    ref = uniir_spec(checkpoint).plugin.load(uniir_spec(checkpoint)).encode_records(texts, [None, None], ["en", "en"], "query")
    alt = uniir_spec(tmp_path / "a.safetensors")
    np.testing.assert_allclose(alt.plugin.load(alt).encode_records(texts, [None, None], ["en", "en"], "query"), ref, atol=1e-7)


class _Payload:
    """Unpickling this calls Path.write_text: a stand-in for code a malicious checkpoint runs."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


def test_a_pickle_that_runs_code_is_refused_and_runs_nothing(source, tmp_path):
    import torch

    from medbench_core.retrieval.kinds.uniir_clip_sf import load_checkpoint_state

    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(_Payload(probe)))
    assert probe.read_text() == "code ran"  # the payload is live
    marker = tmp_path / "marker"
    state = {f"clip_model.{k}": v for k, v in source.model.state_dict().items()}
    torch.save({"model": state, "config": _Payload(marker)}, tmp_path / "evil.pth")
    with pytest.raises(DataError, match=r"refused .*evil\.pth: .*its pickle names getattr, which is neither a tensor nor a UniIR config class"):
        load_checkpoint_state(tmp_path / "evil.pth", "m")
    assert not marker.exists()
    # An OmegaConf class name does not let a payload through: the stand-in runs nothing.
    from omegaconf import OmegaConf

    torch.save({"model": state, "config": OmegaConf.create({"a": 1}), "hook": _Payload(marker)}, tmp_path / "evil2.pth")
    with pytest.raises(DataError, match=r"evil2\.pth"):
        load_checkpoint_state(tmp_path / "evil2.pth", "m")
    assert not marker.exists()


def test_refusals_name_the_file(source, checkpoint, tmp_path):
    import torch

    spec = uniir_spec(tmp_path / "absent.pth")
    with pytest.raises(DataError, match=r"checkpoint .*absent\.pth not found"):
        spec.plugin.load(spec)
    torch.save({"model": {"clip_model.visual.proj": torch.zeros(2)}, "epoch": 1}, tmp_path / "partial.pth")
    spec = uniir_spec(tmp_path / "partial.pth")
    with pytest.raises(DataError, match=r"partial\.pth does not fit architecture 'medbench-tiny-clip'"):
        spec.plugin.load(spec)
    torch.save({"epoch": 1}, tmp_path / "empty.pth")
    with pytest.raises(DataError, match=r"empty\.pth holds no state dict of tensors"):
        uniir_spec(tmp_path / "empty.pth").plugin.load(uniir_spec(tmp_path / "empty.pth"))
    other = model_spec(name="x", kind="uniir-clip-sf", path=str(checkpoint), settings={"architecture": "ViT-B-32"})
    with pytest.raises(DataError, match=r"does not fit architecture 'ViT-B-32'"):
        other.plugin.load(other)


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"settings": {"fusion": "score"}}, r"unknown setting 'fusion' for kind uniir-clip-sf: UniIR's score fusion is the raw sum"),
        ({"settings": {"seed": 1}}, r"unknown setting 'seed' .*random weights are kind open_clip's"),
        ({"settings": {"text_format": "lower"}}, r"text_format 'lower' unknown; use one of raw, uniir"),
        ({"path": "weights.pkl"}, r"path 'weights\.pkl': give a checkpoint file"),
        ({"path": ""}, r"kind uniir-clip-sf needs 'path'"),
        ({"settings": {"query_template": "{query}"}}, r"query_template '\{query\}' needs both"),
        ({"settings": {"instructions": {"default": []}}}, r"an instruction text or a list of them"),
    ],
)
def test_entry_errors(tmp_path, entry, message):
    import yaml

    base = {"name": "clip-sf", "kind": "uniir-clip-sf", "path": "clip_sf_large.pth"}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": [{**base, **entry}]}))
    with pytest.raises(DataError, match=message):
        load_registry(tmp_path / "models.yaml")


def uniir_format_string(s):
    """UniIR's format_string as published (github.com/TIGER-AI-Lab/UniIR at 98dc570, src/data/preprocessing/utils.py l.110-116)."""
    s = (s or "").replace("\r", "").strip().strip('"')
    if s:
        s = s[0].upper() + s[1:]
        s = s + "." if s[-1] not in [".", "?", "!"] else s
    return s


def uniir_query_texts_as_published(query_txts, prompts, seed=2023):
    """UniIR's query text per entry, in order: set_seed (src/common/utils.py l.156-157, seed 2023 + rank 0), then
    _get_random_query_prompt (src/data/mbeir_dataset.py l.102-106) and l.335-336 for each query."""
    import random

    random.seed(seed)
    out = []
    for entry_txt in query_txts:
        query_txt = entry_txt or ""  # l.325: mbeir_entry.get("query_txt") or ""
        query_prompt = uniir_format_string(random.choice(prompts))
        out.append(uniir_format_string(f"{query_prompt} {query_txt}"))
    return out


def test_query_texts_are_built_as_uniir_builds_them():
    from medbench_core.retrieval.kinds.uniir_clip_sf import UNIIR_TEMPLATE, format_string, uniir_query_texts

    assert format_string('  "enlarged heart\r"  ') == "Enlarged heart." == uniir_format_string('  "enlarged heart\r"  ')
    assert format_string("why?") == "Why?" and format_string("") == "" and format_string(None) == ""
    prompts = ["Retrieve a medical image that answers the query", "find the picture matching this caption.", '"Show me the scan"', "Which report?"]
    texts = ["enlarged heart on a chest film", None, "", "renal biopsy\r", '"quoted" caption', "x-ray of {the} knee"] * 5
    want = uniir_query_texts_as_published(texts, prompts)
    got = uniir_query_texts(texts, (UNIIR_TEMPLATE, tuple(prompts)), "uniir")
    assert got == want
    assert len({t.split(".")[0] for t in got}) > 2  # several prompts were drawn
    assert got[1] == uniir_format_string(got[1]) and got[1][:-1] in {uniir_format_string(p)[:-1] for p in prompts}  # an image-only query's text is the prompt
    assert uniir_query_texts(texts, (UNIIR_TEMPLATE, tuple(prompts)), "uniir", seed=1) == uniir_query_texts_as_published(texts, prompts, seed=1)
    # One prompt: UniIR formats it before the join (a prompt without a final "." gets one).
    one = uniir_query_texts(["renal biopsy", None], (UNIIR_TEMPLATE, "Retrieve a medical image"), "uniir")
    assert one == ["Retrieve a medical image. renal biopsy.", "Retrieve a medical image."]
    # raw (M3Retrieve's captions as they are): the template, and the prompt alone for an image-only query.
    assert uniir_query_texts(["renal biopsy", None], (UNIIR_TEMPLATE, "Retrieve"), "raw") == ["Retrieve renal biopsy", "Retrieve"]
    assert uniir_query_texts([" a ", None], None, "uniir") == ["A.", None] and uniir_query_texts([" a ", None], None, "raw") == [" a ", None]


def test_uniir_text_format_and_instructions(source, checkpoint, task, tmp_path):
    from medbench_core.retrieval.kinds.uniir_clip_sf import format_string
    from medbench_core.retrieval.stages import partition_keys

    prompts = ["Retrieve a medical image that answers the query", "Find the matching figure."]
    spec = uniir_spec(checkpoint, text_format="uniir", instructions={"uniir_toy": prompts})
    run = run_stages(spec, task, tmp_path)
    # UniIR's texts: q3 is image-only, so its text is the drawn prompt and its embedding is image + prompt.
    texts = uniir_query_texts_as_published(task.queries["text"].to_list(), prompts)
    assert texts[2] in ("Retrieve a medical image that answers the query.", "Find the matching figure.")
    queries = task.queries.with_columns(pl.Series("text", texts))
    import dataclasses

    q = direct_vectors(source, dataclasses.replace(task, queries=queries), "query")
    d = direct_vectors(source, task, "passage", formatter=format_string)
    assert_run_matches(run, expected_top10(q, d, task))
    # The instructions and the seed key the run only; the corpus vectors are shared.
    plain = partition_keys(uniir_spec(checkpoint, text_format="uniir"), task)
    keys = partition_keys(spec, task)
    reseeded = partition_keys(uniir_spec(checkpoint, text_format="uniir", instructions={"uniir_toy": prompts}, prompt_seed=1), task)
    assert keys["embeddings"] == plain["embeddings"] == reseeded["embeddings"] and len({keys["run"], plain["run"], reseeded["run"]}) == 3


def test_checkpoint_inside_a_hub_snapshot(source, checkpoint, tmp_path):
    from reader_fixtures import hub_snapshot

    from medbench_core.retrieval.kinds.uniir_clip_sf import checkpoint_file
    from medbench_core.retrieval.model_registry import pin_revision

    src = tmp_path / "repo" / "checkpoint" / "CLIP_SF"
    src.mkdir(parents=True)
    (src / "clip_sf_large.pth").write_bytes(checkpoint.read_bytes())
    sha = "ab" * 20
    hub_snapshot(tmp_path / "hub", "TIGER-Lab/UniIR", tmp_path / "repo", sha=sha, repo_type="model")
    spec = model_spec(name="clip-sf", kind="uniir-clip-sf", path="TIGER-Lab/UniIR", revision="main",
                      settings={"architecture": TINY, "file": "checkpoint/CLIP_SF/clip_sf_large.pth"})  # fmt: skip
    assert spec.hub_id == "TIGER-Lab/UniIR" and pin_revision(spec, cache_dir=tmp_path / "hub").revision == sha
    path = checkpoint_file(spec, cache_dir=tmp_path / "hub")
    assert path.is_symlink() and path.resolve().parent.name == "blobs"
    from medbench_core.retrieval.kinds.uniir_clip_sf import load_uniir_encoder

    texts = ["cardiomegaly"]
    got = load_uniir_encoder(spec, cache_dir=tmp_path / "hub").encode_records(texts, [None], ["en"], "query")
    want = uniir_spec(checkpoint).plugin.load(uniir_spec(checkpoint)).encode_records(texts, [None], ["en"], "query")
    np.testing.assert_allclose(got, want, atol=1e-7)
    pinned = model_spec(**{**spec.to_entry(), "revision": sha})
    assert pinned.plugin.revision(pinned) == sha
    with pytest.raises(DataError, match=r"'checkpoint/BLIP_FF/blip_ff_large.pth' is not in TIGER-Lab/UniIR@"):
        checkpoint_file(spec.with_settings(file="checkpoint/BLIP_FF/blip_ff_large.pth"), cache_dir=tmp_path / "hub")


# --- UniIR's evaluation: MBEIRMainDataset draws a positive, then the prompt, in DataLoader workers ---------------


class MBEIRMainDatasetEval:
    """MBEIRMainDataset.__getitem__ in Mode.EVAL with shuffle_cand (src/data/mbeir_dataset.py at 1017242, UniIR's
    embed.yaml: shuffle_cand True), the query text only: the positives filtered to the query's dataset id, one drawn
    with random.choice (_get_random_cand), then the prompt (_get_random_query_prompt), formatted and joined."""

    def __init__(self, entries, prompts):
        self.entries, self.prompts = entries, prompts

    def __len__(self):
        return len(self.entries)

    def __getitem__(self, index):
        import random

        mbeir_entry = self.entries[index]
        query_txt = mbeir_entry.get("query_txt") or ""
        qid = mbeir_entry.get("qid", None)
        query_dataset_id = qid.split(":")[0] if qid else None
        pos_cand_list = mbeir_entry.get("pos_cand_list", [])
        pos_cand_list = [pos_cand_did for pos_cand_did in pos_cand_list if pos_cand_did.split(":")[0] == query_dataset_id]
        random.choice(pos_cand_list)  # selected_pos_cand_did = self.select_cand(pos_cand_list)
        query_prompt = uniir_format_string(random.choice(self.prompts))
        return uniir_format_string(f"{query_prompt} {query_txt}")


def test_prompt_draws_follow_uniirs_evaluation_dataset_and_its_dataloader_workers():
    """With shuffle_cand each query draws a positive before its prompt; with workers, torch's DataLoader seeds each
    worker's Python random with base_seed + worker_id and deals it every num_workers-th batch (called here directly)."""
    import random

    import torch
    from torch.utils.data import DataLoader

    from medbench_core.retrieval.kinds.uniir_clip_sf import UNIIR_TEMPLATE, uniir_query_texts

    rng = random.Random(5)
    prompts = ["Retrieve a medical image that answers the query", "find the picture matching this caption.", "Which report?", "Show me the scan"]
    entries = []
    for i in range(37):
        n_pos = rng.randint(1, 4)
        pos = [f"9:{rng.randint(0, 999)}" for _ in range(n_pos)] + ["4:7"] * rng.randint(0, 2)  # another dataset's positives are filtered out
        entries.append({"qid": f"9:{i}", "query_txt": rng.choice(["enlarged heart", "", None, "renal biopsy"]), "pos_cand_list": pos})
    texts = [e["query_txt"] for e in entries]
    counts = [sum(p.startswith("9:") for p in e["pos_cand_list"]) for e in entries]
    dataset = MBEIRMainDatasetEval(entries, prompts)

    random.seed(2023)  # one process, num_workers 0 (set_seed(2023 + rank 0))
    want = [dataset[i] for i in range(len(dataset))]
    got = uniir_query_texts(texts, (UNIIR_TEMPLATE, tuple(prompts)), "uniir", 2023, positives=counts)
    assert got == want
    assert got != uniir_query_texts(texts, (UNIIR_TEMPLATE, tuple(prompts)), "uniir", 2023)  # the positives' draws move the prompts

    generator = torch.Generator().manual_seed(11)
    loader = DataLoader(dataset, batch_size=4, num_workers=2, generator=generator, collate_fn=list)
    base_seed = int(torch.empty((), dtype=torch.int64).random_(generator=torch.Generator().manual_seed(11)).item())  # the iterator's _base_seed
    want = [t for batch in loader for t in batch]
    got = uniir_query_texts(texts, (UNIIR_TEMPLATE, tuple(prompts)), "uniir", base_seed, positives=counts, workers=2, batch_size=4)
    assert got == want
    with pytest.raises(DataError, match="query q2: no positive candidate to draw"):
        uniir_query_texts(["a", "b", "c"], (UNIIR_TEMPLATE, tuple(prompts)), "uniir", positives=[1, 2, 0], ids=["q0", "q1", "q2"])


def test_shuffle_cand_counts_the_tasks_positives_and_keys_the_run(source, checkpoint, task):
    from medbench_core.retrieval.kinds.uniir_clip_sf import positive_counts
    from medbench_core.retrieval.stages import partition_keys

    counts = positive_counts(task)
    assert counts == [int(((task.qrels["query_id"] == q) & (task.qrels["relevance"] > 0)).sum()) for q in task.queries["query_id"].to_list()]
    prompts = ["Retrieve a medical image that answers the query", "Find the matching figure."]
    plain = partition_keys(uniir_spec(checkpoint, text_format="uniir", instructions={"uniir_toy": prompts}), task)
    drawn = partition_keys(uniir_spec(checkpoint, text_format="uniir", instructions={"uniir_toy": prompts}, shuffle_cand=True), task)
    assert plain["embeddings"] == drawn["embeddings"] and plain["run"] != drawn["run"]
