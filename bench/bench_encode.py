"""Tokens per second of the dense encoder through medbench vs bare sentence-transformers, same texts.

    HF_HUB_OFFLINE=1 nice -n 5 python bench/bench_encode.py [--docs 1000] [--pairs 5]

Texts: the first ``--docs`` SciFact abstracts (title and body, as ``Task.doc_text`` joins them);
model: all-MiniLM-L6-v2 from its package, max length 256, batch 64, normalised (models.yaml). Both
sides load the model before the clock starts and run in interleaved rounds (bench/paired.py: A B,
B A, ...); the figures are the per-round ratios medbench / bare of wall time and of process CPU
time (torch's threads), median and range, the second being steadier on a shared machine:

- **bare**: ``SentenceTransformer.encode(texts, batch_size=64, normalize_embeddings=True)``;
- **medbench**: ``vectors.encode_side_to``, what ``pipeline.embed_corpus`` runs: sentence-transformers'
  own batches (longest texts first) encoded one at a time, each written into the preallocated
  corpus.npy, which is fsynced;
- **unsorted** (once, for the record): batches of 64 in corpus order, each encoded alone, to show
  what sentence-transformers' length sorting is worth.

Tokens are the tokenizer's, truncated at 256, padding excluded: the work the model must do. The
script asserts that medbench's vectors are bit-identical to bare sentence-transformers'.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import paired  # noqa: E402

LIMIT = 6400  # tokens/s: MiniLM-L6 at length 256 when matmul-bound on this machine's 2 cores (issue 13)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1000)
    paired.add_arguments(ap)
    args = ap.parse_args()

    import polars as pl
    import torch
    from sentence_transformers import SentenceTransformer

    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.retrieval.records import load_encoder
    from medbench_core.retrieval.vectors import encode_side_to
    from medbench_core.retrieval.weights import resolve_model_path
    from medbench_core.taskdata.catalog import build_task, load_catalog
    from medbench_core.taskdata.task import make_task

    spec = next(s for s in load_registry(ROOT / "models.yaml") if s.name == "all-MiniLM-L6-v2")
    shared = Path(os.environ.get("MEDBENCH_SHARED") or ROOT.parent / "shared") / "data"
    work = Path(tempfile.mkdtemp(prefix="medbench-bench-encode-"))
    full = build_task(load_catalog(ROOT / "tasks.yaml").task("scifact"), shared, work)
    task = make_task(
        full.meta, full.queries, full.corpus.head(args.docs), full.qrels.filter(pl.col("doc_id").is_in(full.corpus["doc_id"].head(args.docs).to_list()))
    )
    texts = list(task.doc_text())

    bare = SentenceTransformer(resolve_model_path(spec.path), device="cpu")
    bare.max_seq_length = int(spec.settings.max_length)
    encoder = load_encoder(spec)
    tok = bare.tokenizer(texts, truncation=True, max_length=bare.max_seq_length)
    tokens = sum(len(ids) for ids in tok["input_ids"])
    print(
        f"{len(texts):,} SciFact abstracts, {tokens:,} tokens (mean {tokens / len(texts):.0f}, truncated at {bare.max_seq_length}); torch threads {torch.get_num_threads()}",
        flush=True,
    )

    def run_bare():
        return bare.encode(texts, batch_size=spec.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)

    def run_medbench():
        encode_side_to(work / "corpus.npy", encoder, task, "passage")
        return np.load(work / "corpus.npy")

    def say(r: int, name: str, x: paired.Sample) -> None:
        print(f"{name}: {x.wall:.1f} s = {tokens / x.wall:,.0f} tokens/s, CPU {x.cpu:.1f} s (load average {os.getloadavg()[0]:.1f})", flush=True)

    m = paired.measure({"bare": lambda: paired.call(run_bare), "medbench": lambda: paired.call(run_medbench)}, args.pairs, report=say)
    out = {name: m.samples[name][-1].value for name in ("bare", "medbench")}
    assert out["medbench"].dtype == np.float32 and np.array_equal(out["medbench"].view(np.uint32), out["bare"].view(np.uint32)), (
        "medbench's vectors differ from bare sentence-transformers'"
    )
    times = {name: [x.wall for x in m.samples[name]] for name in ("bare", "medbench")}

    t0 = time.perf_counter()
    unsorted = np.concatenate([run_bare_batch(bare, texts[i : i + spec.batch_size]) for i in range(0, len(texts), spec.batch_size)])
    t_unsorted = time.perf_counter() - t0
    print(
        f"unsorted batches: {t_unsorted:.1f} s = {tokens / t_unsorted:,.0f} tokens/s; largest difference from sorted {np.abs(unsorted - out['bare']).max():.1e}",
        flush=True,
    )

    med = {k: m.seconds(k, "wall")[0] for k in times}
    print("\n| encoder | median s | tokens/s (median) | share of ~6,400 tokens/s |\n|---|---:|---:|---:|")
    for name, label in (("bare", "bare sentence-transformers (sorts by length)"), ("medbench", "medbench (its batches, written as encoded)")):
        print(f"| {label} | {med[name]:.1f} | {tokens / med[name]:,.0f} | {tokens / med[name] / LIMIT:.0%} |")
    print(f"| batches in corpus order (no length sorting), once | {t_unsorted:.1f} | {tokens / t_unsorted:,.0f} | {tokens / t_unsorted / LIMIT:.0%} |")
    print()
    print(m.table([("medbench / bare (time; < 1 is faster)", "medbench", "bare")]))
    print("vectors bit-identical")


def run_bare_batch(model, batch: list[str]) -> np.ndarray:
    """One batch in the given order: sentence-transformers sorts within it only."""
    return model.encode(batch, batch_size=len(batch), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)


if __name__ == "__main__":
    main()
