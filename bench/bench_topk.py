"""medbench's exact top-k (ranking.topk) with and without its block-maximum bound, paired, on BM25 score rows.

    python bench/bench_topk.py --world /tmp/perf-scale/medbench-1.2mx20k [--queries 300] [--pairs 5]
    python bench/bench_topk.py --docs 1200000                       # synthetic rows, no world needed

With ``--world`` (a folder ``bench/bench_scale.py pipeline --keep`` left) the rows are the BM25
scores of that task's first ``--queries`` queries against its index, as the retrieval step computes
them (``get_scores``); without, seeded synthetic rows shaped like them (40 % zeros, scores rounded to
three decimals, so ties are common). Both sides select the top 100 of every row with the task's
tie-break (ranking.doc_order); ``plain`` is the selection over all n scores (the code before
2026-11-28), ``bounded`` first keeps the scores at or above the 100th largest maximum of 1,024-score
blocks. The results are checked equal, row by row, before anything is timed. Interleaved rounds
(bench/paired.py), CPU and wall of this process.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import paired  # noqa: E402
from bench_scale import BM25, K  # noqa: E402  # the settings and depth the world was built with

from medbench_core.retrieval import ranking  # noqa: E402


def world_rows(world: Path, queries: int) -> tuple[list[np.ndarray], np.ndarray]:
    import polars as pl

    from medbench_core.retrieval import bm25_index

    (emb,) = (world / "data" / "artifacts" / "bm25" / "scale" / "embeddings").iterdir()
    index = bm25_index.load(emb)
    task = world / "data" / "tasks" / "scale"
    texts = pl.read_parquet(task / "queries.parquet")["text"].to_list()[:queries]
    tie = ranking.doc_order(pl.read_parquet(task / "corpus.parquet", columns=["doc_id"])["doc_id"].to_list())
    return [index.get_scores(list(t)) if t else np.zeros(len(tie), dtype=np.float32) for t in bm25_index.tokenize(texts, BM25)], tie


def synthetic_rows(docs: int, queries: int) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(0)
    rows = [np.round(rng.gamma(2.0, 2.0, docs) * (rng.random(docs) > 0.4), 3).astype(np.float32) for _ in range(queries)]
    return rows, rng.permutation(docs).astype(np.int64)


def plain(scores: np.ndarray, tie_key: np.ndarray, k: int) -> np.ndarray:
    """ranking.topk over all n scores (its bound switched off)."""
    saved = ranking._above_bound
    ranking._above_bound = lambda scores, k: None
    try:
        return ranking.topk(scores, tie_key, k)
    finally:
        ranking._above_bound = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    paired.add_arguments(ap)
    ap.add_argument("--world", type=Path, help="a kept bench_scale.py world: real BM25 rows")
    ap.add_argument("--docs", type=int, default=1_200_000, help="synthetic rows' length without --world (default 1,200,000)")
    ap.add_argument("--queries", type=int, default=300)
    args = ap.parse_args()
    print(paired.header("exact top-k, plain vs bounded"), flush=True)
    rows, tie = world_rows(args.world, args.queries) if args.world else synthetic_rows(args.docs, args.queries)
    for i, row in enumerate(rows):
        if not np.array_equal(plain(row, tie, K), ranking.topk(row, tie, K)):
            raise SystemExit(f"row {i}: the bounded selection differs from the plain one")
    print(f"{len(rows)} rows of {len(tie):,} scores: both sides select the same {K} documents in the same order", flush=True)

    def side(fn):
        return lambda: paired.call(lambda: [fn(row, tie, K) for row in rows])

    m = paired.measure({"plain": side(plain), "bounded": side(ranking.topk)}, args.pairs)
    print(m.table([("bounded / plain", "bounded", "plain")]))
    for name in ("plain", "bounded"):
        print(f"{name}: {1000 * m.seconds(name, 'cpu')[0] / len(rows):.2f} ms CPU a row (median)")


if __name__ == "__main__":
    main()
