"""Tokens per second of the dense encoder through medbench vs bare sentence-transformers, same texts.

    HF_HUB_OFFLINE=1 nice -n 5 python bench/bench_encode.py [--docs 1000] [--repeats 2]

Texts: the first ``--docs`` SciFact abstracts (title and body, as ``Task.doc_text`` joins them);
model: all-MiniLM-L6-v2 from its package, max length 256, batch 64, normalised (models.yaml). Both
sides load the model before the clock starts and alternate, ``--repeats`` times each; wall time
and process CPU time (torch's two threads) are both reported, the second being steadier on a
shared machine:

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
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 6400  # tokens/s: MiniLM-L6 at length 256 when matmul-bound on this machine's 2 cores (issue 13)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    import polars as pl
    import torch
    from sentence_transformers import SentenceTransformer

    from medbench_core.taskdata.catalog import build_task, load_catalog
    from medbench_core.retrieval.weights import resolve_model_path
    from medbench_core.taskdata.task import make_task
    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.retrieval.records import load_encoder
    from medbench_core.retrieval.vectors import encode_side_to

    spec = next(s for s in load_registry(ROOT / "models.yaml") if s.name == "all-MiniLM-L6-v2")
    shared = Path(os.environ.get("MEDBENCH_SHARED") or ROOT.parent / "shared") / "data"
    work = Path(tempfile.mkdtemp(prefix="medbench-bench-encode-"))
    full = build_task(load_catalog(ROOT / "tasks.yaml").task("scifact"), shared, work)
    task = make_task(full.meta, full.queries, full.corpus.head(args.docs), full.qrels.filter(pl.col("doc_id").is_in(full.corpus["doc_id"].head(args.docs).to_list())))
    texts = task.doc_text()

    bare = SentenceTransformer(resolve_model_path(spec.path), device="cpu")
    bare.max_seq_length = int(spec.settings["max_length"])
    encoder = load_encoder(spec)
    tok = bare.tokenizer(texts, truncation=True, max_length=bare.max_seq_length)
    tokens = sum(len(ids) for ids in tok["input_ids"])
    print(f"{len(texts):,} SciFact abstracts, {tokens:,} tokens (mean {tokens / len(texts):.0f}, truncated at {bare.max_seq_length}); torch threads {torch.get_num_threads()}", flush=True)

    def run_bare():
        return bare.encode(texts, batch_size=spec.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)

    def run_medbench():
        encode_side_to(work / "corpus.npy", encoder, task, "passage")
        return np.load(work / "corpus.npy")

    times: dict[str, list[float]] = {"bare": [], "medbench": []}
    cpu: dict[str, list[float]] = {"bare": [], "medbench": []}
    out = {}
    for _ in range(args.repeats):
        for name, fn in (("bare", run_bare), ("medbench", run_medbench)):
            t0, c0 = time.perf_counter(), time.process_time()
            out[name] = fn()
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            print(f"{name}: {times[name][-1]:.1f} s = {tokens / times[name][-1]:,.0f} tokens/s, CPU {cpu[name][-1]:.1f} s (load average {os.getloadavg()[0]:.1f})", flush=True)
    assert out["medbench"].dtype == np.float32 and np.array_equal(out["medbench"].view(np.uint32), out["bare"].view(np.uint32)), "medbench's vectors differ from bare sentence-transformers'"

    t0 = time.perf_counter()
    unsorted = np.concatenate([run_bare_batch(bare, texts[i : i + spec.batch_size]) for i in range(0, len(texts), spec.batch_size)])
    t_unsorted = time.perf_counter() - t0
    print(f"unsorted batches: {t_unsorted:.1f} s = {tokens / t_unsorted:,.0f} tokens/s; largest difference from sorted {np.abs(unsorted - out['bare']).max():.1e}", flush=True)

    best = {k: min(v) for k, v in times.items()}
    med = {k: statistics.median(v) for k, v in times.items()}
    print("\n| encoder | fastest s | tokens/s (fastest) | tokens/s (median) | share of ~6,400 tokens/s |\n|---|---:|---:|---:|---:|")
    for name, label in (("bare", "bare sentence-transformers (sorts by length)"), ("medbench", "medbench (its batches, written as encoded)")):
        print(f"| {label} | {best[name]:.1f} | {tokens / best[name]:,.0f} | {tokens / med[name]:,.0f} | {tokens / best[name] / LIMIT:.0%} |")
    print(f"| batches in corpus order (no length sorting) | {t_unsorted:.1f} | {tokens / t_unsorted:,.0f} | | {tokens / t_unsorted / LIMIT:.0%} |")
    pairs = [b / m for b, m in zip(times["bare"], times["medbench"])]  # each medbench run against the bare run just before it
    print(f"\nper pair (medbench vs the bare run before it): {', '.join(f'{r:.3f}x' for r in pairs)}; median {statistics.median(pairs):.3f}x")
    print(f"ratio medbench / bare tokens/s: {best['bare'] / best['medbench']:.3f}x (fastest), {med['bare'] / med['medbench']:.3f}x (median); "
          f"per CPU second (both sides' threads): {min(cpu['bare']) / min(cpu['medbench']):.3f}x; vectors bit-identical")


def run_bare_batch(model, batch: list[str]) -> np.ndarray:
    """One batch in the given order: sentence-transformers sorts within it only."""
    return model.encode(batch, batch_size=len(batch), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)


if __name__ == "__main__":
    main()
