"""open_clip encoders: a small random-weight architecture (seeded) on real PNGs from the shared data.

No pretrained CLIP weights are reachable here, so the values asserted are properties that hold
for any weights: shape, unit norm, determinism, the fusion algebra, checkpoint round trips and
refusals, and agreement of our metrics with pytrec_eval on the runs the model produces.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medbench_core.errors import DataError
from medbench_core.retrieval.model_registry import ModelSpec, model_spec

pytestmark = pytest.mark.model

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
if not DATA.exists():
    DATA = Path("/work/shared/data")
FIGURES = sorted((DATA / "medicat_sample" / "figures").glob("*.png"))
TINY = "medbench-tiny-clip"


def spec(name: str = "tiny", **settings) -> ModelSpec:
    return model_spec(name=name, kind="open_clip", settings={"architecture": TINY, **settings}, batch_size=4)


@pytest.fixture(scope="module")
def encoder():
    from medbench_core.retrieval.clip import load_clip_encoder

    return load_clip_encoder(spec(seed=0))


@pytest.fixture(scope="module")
def xray_png(tmp_path_factory) -> Path:
    """A real PneumoniaMNIST image as a PNG (the source holds arrays)."""
    arr = np.load(DATA / "pneumoniamnist" / "pneumoniamnist_val_test.npz")["test_images"][0]
    path = tmp_path_factory.mktemp("xray") / "test_0000.png"
    Image.fromarray(arr).save(path)
    return path


RECORDS = (
    ["a chest X-ray showing pneumonia", None, "Figure 1. Barium enema", None],
    [None, FIGURES[0], FIGURES[1], None],  # the last image is filled in per test (xray_png)
)


def _records(xray_png):
    texts, images = list(RECORDS[0]), list(RECORDS[1])
    images[3] = xray_png
    return texts, images, ["en"] * 4


def test_shape_dtype_and_unit_norm(encoder, xray_png):
    texts, images, langs = _records(xray_png)
    emb = encoder.encode_records(texts, images, langs, "query")
    assert emb.dtype == np.float32 and emb.shape == (4, 2 * 32) == (4, encoder.dim)  # score fusion: two slots of 32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert np.isfinite(emb).all()
    assert np.abs(emb[1] - emb[3]).max() > 1e-3  # two different images, two different vectors


def test_same_seed_same_vectors_other_seed_other_vectors(encoder, xray_png):
    from medbench_core.retrieval.clip import load_clip_encoder

    texts, images, langs = _records(xray_png)
    a = encoder.encode_records(texts, images, langs, "passage")
    b = load_clip_encoder(spec(seed=0)).encode_records(texts, images, langs, "passage")
    c = load_clip_encoder(spec(seed=1)).encode_records(texts, images, langs, "passage")
    np.testing.assert_allclose(a, b, atol=1e-6)
    assert np.abs(a - c).max() > 0.05


def test_safetensors_round_trip(encoder, xray_png, tmp_path):
    from medbench_core.retrieval.clip import clip_revision, load_clip_encoder
    from medbench_core.storage import sha256_file

    path = encoder.save_safetensors(tmp_path / "tiny.safetensors")
    # Another seed: the vectors can only match if the file's weights replaced the random ones.
    other = spec("tiny-file", seed=123, checkpoint=str(path))
    texts, images, langs = _records(xray_png)
    np.testing.assert_allclose(
        load_clip_encoder(other).encode_records(texts, images, langs, "query"),
        encoder.encode_records(texts, images, langs, "query"),
        atol=1e-6,
    )
    assert clip_revision(other) == other.plugin.revision(other) == "sha256:" + sha256_file(path)[:16]
    assert clip_revision(spec(seed=5)) == "random:seed=5"


def test_weights_only_torch_checkpoint_loads(encoder, xray_png, tmp_path):
    import torch

    from medbench_core.retrieval.clip import load_clip_encoder

    # A DDP-style training checkpoint: {"state_dict": {"module.<key>": tensor}}.
    torch.save({"state_dict": {f"module.{k}": v for k, v in encoder.model.state_dict().items()}, "epoch": 3}, tmp_path / "ckpt.pt")
    texts, images, langs = _records(xray_png)
    got = load_clip_encoder(spec(seed=9, checkpoint=str(tmp_path / "ckpt.pt"))).encode_records(texts, images, langs, "query")
    np.testing.assert_allclose(got, encoder.encode_records(texts, images, langs, "query"), atol=1e-6)


class _Payload:
    """Unpickling this calls Path.write_text: a stand-in for code a malicious checkpoint runs."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


def test_pickle_checkpoint_is_refused_and_runs_nothing(tmp_path):
    import torch

    from medbench_core.retrieval.clip import load_clip_encoder

    # The payload is live: plain unpickling runs it.
    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(_Payload(probe)))
    assert probe.read_text() == "code ran"

    marker = tmp_path / "marker"
    torch.save({"weights": _Payload(marker)}, tmp_path / "evil.pt")
    with pytest.raises(DataError, match=r"refused .*evil\.pt: it does not load with torch\.load\(weights_only=True\)"):
        load_clip_encoder(spec(checkpoint=str(tmp_path / "evil.pt")))
    assert not marker.exists()
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(DataError, match=r"only \.safetensors files"):
        load_clip_encoder(spec(checkpoint=str(tmp_path / "model.pkl")))
    assert not marker.exists()


def test_bad_checkpoints(encoder, tmp_path):
    from safetensors.torch import save_file

    from medbench_core.retrieval.clip import load_clip_encoder

    with pytest.raises(DataError, match=r"checkpoint .*absent\.safetensors not found"):
        load_clip_encoder(spec(checkpoint=str(tmp_path / "absent.safetensors")))
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(DataError, match=r"junk\.safetensors is not a readable safetensors file"):
        load_clip_encoder(spec(checkpoint=str(tmp_path / "junk.safetensors")))
    state = {k: v.clone().contiguous() for k, v in encoder.model.state_dict().items() if k != "logit_scale"}
    save_file(state, str(tmp_path / "partial.safetensors"))
    with pytest.raises(DataError, match=r"partial\.safetensors does not fit architecture 'medbench-tiny-clip'.*logit_scale"):
        load_clip_encoder(spec(checkpoint=str(tmp_path / "partial.safetensors")))
    # The one checkpoint reader (checkpoints.load_state_dict, shared with uniir-clip-sf): an empty or tensor-less file is refused by name.
    import torch

    for name, content in (("empty.pt", {}), ("epoch.pth", {"epoch": 3})):
        torch.save(content, tmp_path / name)
        with pytest.raises(DataError, match=rf"{name.replace('.', '[.]')} holds no state dict of tensors"):
            load_clip_encoder(spec(checkpoint=str(tmp_path / name)))


def test_bad_settings():
    from medbench_core.retrieval.clip import load_clip_encoder

    with pytest.raises(DataError, match=r"architecture 'no-such-arch' unknown.*medbench-tiny-clip"):
        load_clip_encoder(model_spec(name="x", kind="open_clip", settings={"architecture": "no-such-arch"}))
    with pytest.raises(DataError, match="settings need 'architecture'"):
        load_clip_encoder(model_spec(name="x", kind="open_clip", settings={}))
    with pytest.raises(DataError, match="fusion 'sum' unknown"):
        load_clip_encoder(spec(fusion="sum"))
    with pytest.raises(DataError, match=r"fusion_weight 1.5 must lie in \[0, 1\]"):
        load_clip_encoder(spec(fusion_weight=1.5))


def test_score_fusion_is_weighted_sum_of_same_modality_similarities(xray_png):
    from medbench_core.retrieval.clip import load_clip_encoder

    w = 0.3
    enc = load_clip_encoder(spec(seed=0, fusion="score", fusion_weight=w))
    cap1, cap2 = "Figure 1. Barium enema", "Figure 4. MRI of an occipital lesion"
    v = enc.encode_records([cap1, cap2, "pneumonia", None], [FIGURES[0], FIGURES[1], None, xray_png], ["en"] * 4, "query")
    txt = enc.encode_texts([cap1, cap2, "pneumonia"])
    img = enc.encode_images([FIGURES[0], FIGURES[1], xray_png], ["f0", "f1", "x"])
    # both . both = w cos(img, img') + (1-w) cos(txt, txt')
    assert v[0] @ v[1] == pytest.approx(w * img[0] @ img[1] + (1 - w) * txt[0] @ txt[1], abs=1e-5)
    # text-only . image-only = plain CLIP cos(txt, img)
    assert v[2] @ v[3] == pytest.approx(txt[2] @ img[2], abs=1e-5)
    # both . image-only: each side of the pair compared with the single image
    assert v[0] @ v[3] == pytest.approx(w * img[0] @ img[2] + (1 - w) * txt[0] @ img[2], abs=1e-5)


def test_embedding_fusion_is_renormalised_weighted_mean(xray_png):
    from medbench_core.retrieval.clip import load_clip_encoder

    w = 0.75
    enc = load_clip_encoder(spec(seed=0, fusion="embedding", fusion_weight=w))
    v = enc.encode_records(["Figure 1. Barium enema", "pneumonia", None], [FIGURES[0], None, xray_png], ["en"] * 3, "passage")
    assert v.shape == (3, 32)
    t = enc.encode_texts(["Figure 1. Barium enema", "pneumonia"])
    i = enc.encode_images([FIGURES[0], xray_png], ["f0", "x"])
    mix = w * i[0] + (1 - w) * t[0]
    np.testing.assert_allclose(v[0], mix / np.linalg.norm(mix), atol=1e-5)
    np.testing.assert_allclose(v[1], t[1], atol=1e-5)
    np.testing.assert_allclose(v[2], i[1], atol=1e-5)


def test_language_prefix_reaches_the_text_tower():
    from medbench_core.retrieval.clip import load_clip_encoder

    enc = load_clip_encoder(spec(seed=0, fusion="embedding", language_prefixes={"fr": {"query": "requête : "}}))
    v = enc.encode_records(["pneumonie", "pneumonie"], [None, None], ["fr", "en"], "query")
    np.testing.assert_allclose(v[0], enc.encode_texts(["requête : pneumonie"])[0], atol=1e-6)
    np.testing.assert_allclose(v[1], enc.encode_texts(["pneumonie"])[0], atol=1e-6)


def test_bad_records_are_named(encoder, tmp_path):
    with pytest.raises(DataError, match=r"have neither text nor image, e\.g\. \['fig2cap:b'\]"):
        encoder.encode_records(["x", "  "], [None, None], ["en", "en"], "query", ids=["a", "fig2cap:b"])
    with pytest.raises(DataError, match=r"neither text nor image, e\.g\. \['passage record at position 1'\]"):
        encoder.encode_records(["x", None], [None, None], ["en", "en"], "passage")
    with pytest.raises(DataError, match=r"record figure:k: image .*gone\.png: file not found"):
        encoder.encode_records([None], [tmp_path / "gone.png"], ["en"], "passage", ids=["figure:k"])
    Image.new("L", (2, 300)).save(tmp_path / "strip.png")
    with pytest.raises(DataError, match=r"record s1: image .*strip\.png is 2x300 \(aspect ratio 150\); model tiny takes at most 50"):
        encoder.encode_records([None], [tmp_path / "strip.png"], ["en"], "passage", ids=["s1"])
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nnope")
    with pytest.raises(DataError, match=r"record q7: image .*bad\.png"):
        encoder.encode_records(["text too"], [tmp_path / "bad.png"], ["en"], "query", ids=["q7"])


def test_medicat_with_random_clip_through_faiss_matches_pytrec_eval(encoder):
    """The whole dense path on a real image+text task with candidate pools."""
    import pytrec_eval

    from medbench_core.evaluation.metrics import evaluate, qrels_to_dict, run_to_dict
    from medbench_core.retrieval.index import build_index, search
    from medbench_core.retrieval.records import candidate_pools, encode_side, load_encoder
    from medbench_core.taskdata.readers.medicat import MedicatOptions, read_medicat

    task = read_medicat(DATA / "medicat_sample", MedicatOptions(research_only=True))
    enc = load_encoder(spec(seed=0))
    assert type(enc).__name__ == "ClipEncoder"
    q, d = encode_side(enc, task, "query"), encode_side(enc, task, "passage")
    index, _ = build_index(d)
    doc_ids = task.corpus["doc_id"].to_list()
    run = search(index, q, task.queries["query_id"].to_list(), doc_ids, 10, doc_emb=d, candidates=candidate_pools(task))
    assert run.height == 20 * 10
    kinds = {(a.split(":")[0], b.split(":")[0]) for a, b in run.select("query_id", "doc_id").iter_rows()}
    assert kinds == {("fig2cap", "caption"), ("cap2fig", "figure")}
    # Scores are the inner products of the stored vectors.
    row = run.row(0, named=True)
    qi = task.queries["query_id"].to_list().index(row["query_id"])
    assert row["score"] == pytest.approx(float(q[qi] @ d[doc_ids.index(row["doc_id"])]), abs=1e-5)
    ours = evaluate(qrels_to_dict(task.qrels), run_to_dict(run), ["ndcg_at_10", "mrr_at_10"])
    ref = pytrec_eval.RelevanceEvaluator(qrels_to_dict(task.qrels), {"ndcg_cut.10", "recip_rank"}).evaluate(run_to_dict(run))
    for qid, vals in ours.per_query.items():
        assert vals["ndcg_at_10"] == pytest.approx(ref[qid]["ndcg_cut_10"], abs=1e-9)
        assert vals["mrr_at_10"] == pytest.approx(ref[qid]["recip_rank"], abs=1e-9)


@pytest.mark.slow
def test_pneumoniamnist_1148_images_with_random_clip(tmp_path):
    from medbench_core.evaluation.metrics import evaluate, qrels_to_dict, run_to_dict
    from medbench_core.retrieval.index import build_index, search
    from medbench_core.retrieval.records import encode_side, load_encoder
    from medbench_core.taskdata.readers import ReadContext
    from medbench_core.taskdata.readers.pneumoniamnist import PneumoniaMNISTOptions, read_pneumoniamnist

    task = read_pneumoniamnist(DATA / "pneumoniamnist", PneumoniaMNISTOptions(), ReadContext(scratch=tmp_path / "img"))
    enc = load_encoder(model_spec(name="tiny", kind="open_clip", settings={"architecture": TINY}, batch_size=256))
    d = encode_side(enc, task, "passage")
    assert d.shape == (1148, 64)
    np.testing.assert_allclose(np.linalg.norm(d, axis=1), 1.0, atol=1e-5)
    index, _ = build_index(d)
    run = search(index, encode_side(enc, task, "query"), task.queries["query_id"].to_list(), task.corpus["doc_id"].to_list(), 100)
    assert run.group_by("query_id").len()["len"].to_list() == [100] * 4
    ev = evaluate(qrels_to_dict(task.qrels), run_to_dict(run), ["recall_at_100"])
    # recall@100 is bounded by 100 / |relevant|: 100/779 for pneumonia, 100/369 for normal.
    assert all(0.0 <= ev.per_query[q]["recall_at_100"] <= 100 / n + 1e-12 for q, n in (("pneumonia_0", 779), ("normal_0", 369)))
