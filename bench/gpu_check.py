"""The GPU path against the CPU one: MiniLM in fp16 through medbench and bare sentence-transformers, FAISS flat and IVF on the GPU.

    source scripts/setup.sh --gpu && python bench/gpu_check.py [--docs 0] [--nprobe 32] [--pairs 5]

On a machine without a CUDA device (or without a GPU build of FAISS) it prints one line saying
what is missing and exits 0. With one:

1. encodes the bundled SciFact corpus (all 5,183 abstracts; ``--docs N`` for the first N) and its
   809 train claims with all-MiniLM-L6-v2 (the package's weights) in fp16 on the GPU, through
   medbench (``stages.embed_corpus`` and ``records.encode_side`` with a ``dtype: fp16`` model
   entry, ``device="cuda"``) and through bare sentence-transformers (``model.half()``, batch 64,
   max length 256, normalised), in interleaved rounds (bench/paired.py: A B, B A, ...; the device
   synchronised around each call), the figure being the per-round ratio medbench / bare, median
   and range; the vectors must agree to 1e-2 per value (fp16);
2. the same corpus in fp32 on the CPU through medbench, the reference index's input;
3. FAISS flat (exact) and IVF (nlist 64, nprobe ``--nprobe``) over the fp16 vectors, built on
   the GPU through ``index.build_index(use_gpu=True)`` and on the CPU (``use_gpu=False``), then
   searched (k = 10): the top 10 of each query must be the same documents, with scores within 1e-3;
4. prints the times and the ratios (medbench / bare encoding; GPU / CPU build and search;
   fp16 GPU / fp32 CPU encoding) and nDCG@10 of the fp16 run beside the fp32 one.

Exit 1 when a comparison fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import paired  # noqa: E402


def cuda_missing() -> str | None:
    """Why the GPU path cannot run here (None when it can)."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is in the lock
        return f"torch cannot be imported ({exc})"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    import faiss

    if not hasattr(faiss, "StandardGpuResources"):
        return f"this FAISS ({faiss.__version__}) is a CPU build: build the GPU environment with `source scripts/setup.sh --gpu`"
    if faiss.get_num_gpus() < 1:
        return "FAISS sees no GPU"
    return None


def timed(fn, *args, **kwargs):
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=0, help="first N abstracts only (0: all)")
    ap.add_argument("--nprobe", type=int, default=32)
    ap.add_argument("--nlist", type=int, default=64)
    paired.add_arguments(ap)
    args = ap.parse_args()
    missing = cuda_missing()
    if missing:
        print(f"[gpu_check] skipped: {missing}; nothing was compared (exit 0)")
        return 0

    import faiss
    import torch
    from sentence_transformers import SentenceTransformer

    from medbench_core.evaluation.metrics import evaluate_frame
    from medbench_core.retrieval.index import build_index, search
    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.retrieval.records import encode_side, load_encoder
    from medbench_core.retrieval.stages import embed_corpus
    from medbench_core.retrieval.weights import resolve_model_path
    from medbench_core.taskdata.catalog import build_task, load_catalog

    shared = ROOT.parent / "shared" / "data"
    task = build_task(load_catalog(ROOT / "tasks.yaml").task("scifact"), shared, Path(tempfile.mkdtemp()))
    if args.docs:
        task = dataclasses.replace(task, corpus=task.corpus.head(args.docs), _hash=None)
    spec32 = {m.name: m for m in load_registry(ROOT / "models.yaml")}["all-MiniLM-L6-v2"]
    spec16 = dataclasses.replace(spec32, settings=dataclasses.replace(spec32.settings, dtype="fp16"))
    print(f"[gpu_check] {torch.cuda.get_device_name(0)}; faiss {faiss.__version__}; {task.corpus.height} documents, {task.queries.height} queries")
    failures: list[str] = []

    # 1. fp16 on the GPU: medbench and bare sentence-transformers
    work = Path(tempfile.mkdtemp())
    enc16 = load_encoder(spec16, device="cuda")
    (work / "e16").mkdir()
    bare = SentenceTransformer(resolve_model_path(spec32.path), device="cuda").half()
    bare.max_seq_length = int(spec32.settings.max_length or 256)
    texts = list(task.doc_text())

    def synced(fn):
        def run() -> paired.Sample:
            torch.cuda.synchronize()
            return paired.call(lambda: (fn(), torch.cuda.synchronize())[0])

        return run

    m = paired.measure(
        {
            "medbench": synced(lambda: embed_corpus(spec16, task, work / "e16", device="cuda", encoder=enc16)),
            "bare": synced(lambda: bare.encode(texts, batch_size=spec32.batch_size, normalize_embeddings=True, convert_to_numpy=True)),
        },
        args.pairs,
        warmup=1,
    )
    emb16 = np.load(work / "e16" / "corpus.npy")
    q16 = encode_side(enc16, task, "query")
    bare_emb = m.samples["bare"][-1].value
    t_mb, t_bare = m.seconds("medbench", "wall")[0], m.seconds("bare", "wall")[0]
    print(m.table([("encode fp16 on the GPU: medbench / bare sentence-transformers", "medbench", "bare")]))
    gap = float(np.abs(emb16 - bare_emb.astype(np.float32)).max())
    print(f"encode fp16 on the GPU, medians: medbench {t_mb:.2f} s, bare sentence-transformers {t_bare:.2f} s; largest difference {gap:.2e}")
    if gap > 1e-2:
        failures.append(f"fp16 vectors differ from bare sentence-transformers by {gap:.2e}")

    # 2. fp32 on the CPU through medbench (the reference)
    enc32 = load_encoder(spec32, device="cpu")
    (work / "e32").mkdir()
    _, t_cpu = timed(embed_corpus, spec32, task, work / "e32", device="cpu", encoder=enc32)
    emb32 = np.load(work / "e32" / "corpus.npy")
    q32 = encode_side(enc32, task, "query")
    print(
        f"encode fp32 on the CPU: {t_cpu:.2f} s; fp16 GPU / fp32 CPU time {t_mb / t_cpu:.3f}x; largest fp16-fp32 difference {np.abs(emb16 - emb32).max():.2e}"
    )

    # 3. FAISS flat and IVF on the GPU against the CPU, on the same fp16 vectors
    qids, dids = task.queries["query_id"].to_list(), task.corpus["doc_id"].to_list()
    for spec in ({"type": "flat"}, {"type": "ivf", "nlist": args.nlist, "nprobe": args.nprobe}):
        built = {}
        for where, use_gpu in (("gpu", True), ("cpu", False)):
            (index, info), t_build = timed(build_index, emb16, spec, use_gpu=use_gpu)
            if info["built_on"] != where:
                failures.append(f"{spec['type']}: asked for {where}, built on {info['built_on']}")
            if where == "gpu":
                index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
            run, t_search = timed(search, index, q16, qids, dids, 10)
            built[where] = (run, t_build, t_search)
        g, c = built["gpu"][0], built["cpu"][0]
        same = g.select("query_id", "doc_id").sort("query_id", "doc_id").equals(c.select("query_id", "doc_id").sort("query_id", "doc_id"))
        joined = g.join(c, on=["query_id", "doc_id"], suffix="_cpu")
        score_gap = float((joined["score"] - joined["score_cpu"]).abs().max()) if joined.height else float("inf")
        print(
            f"{spec['type']:>4}: build GPU {built['gpu'][1]:.3f} s / CPU {built['cpu'][1]:.3f} s ({built['gpu'][1] / built['cpu'][1]:.3f}x); "
            f"search GPU {built['gpu'][2]:.3f} s / CPU {built['cpu'][2]:.3f} s ({built['gpu'][2] / built['cpu'][2]:.3f}x); "
            f"same top-10 documents: {same}; largest score difference {score_gap:.2e}"
        )
        if not same:
            failures.append(f"{spec['type']}: the GPU's top 10 differ from the CPU's")
        if score_gap > 1e-3:
            failures.append(f"{spec['type']}: scores differ by {score_gap:.2e} (> 1e-3)")

    # 4. what fp16 does to the figure
    flat32, _ = build_index(emb32, {"type": "flat"}, use_gpu=False)
    for name, index, q in (
        ("fp16 GPU", faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, build_index(emb16, {"type": "flat"}, use_gpu=True)[0]), q16),
        ("fp32 CPU", flat32, q32),
    ):
        run = search(index, q, qids, dids, 100)
        print(f"nDCG@10 {name}: {evaluate_frame(task.qrels, run).mean['ndcg_at_10']:.4f}")
    if failures:
        print("[gpu_check] FAILED: " + "; ".join(failures))
        return 1
    print("[gpu_check] passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
