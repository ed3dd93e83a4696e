"""The exact nDCG@10 bounds (issue 46) against the outer bound they replaced, on the same rankings.

    nice -n 10 python bench/bench_bounds.py [--pairs 5]

Synthetic judged rankings (30% of each top 10 judged, grades 0..top, a universe of up to 5,000
unjudged documents per query), both bounds computed by ``holes.ndcg_lower`` / ``holes.ndcg_upper``
and by the outer formula of e4511d5 (``lower = DCG0 / IDCG_G``, ``upper = min(1, DCG_G / IDCG0)``,
written out below as it was), alternately in one process; prints the medians and the paired
ratios exact / outer.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from medbench_core.evaluation import holes  # noqa: E402


def outer_bounds(r: holes.JudgedRanking, k: int) -> tuple[np.ndarray, np.ndarray]:
    """e4511d5's bounds: the best DCG over the worst ideal and the other way round, taken apart."""
    unjudged = r.ranked[:, :k] & ~r.judged[:, :k]
    u = np.where(r.unjudged < 0, k, np.minimum(r.unjudged, k))
    position = np.arange(k)[None, :]
    shifted = np.take_along_axis(r.ideal[:, :k], np.clip(position - u[:, None], 0, None), axis=1)
    ideal_g = np.where(position < u[:, None], r.top_grade, shifted)
    dcg0 = holes._dcg(r.gains[:, :k], r.discount[:k])
    idcg_g = holes._dcg(ideal_g, r.discount[:k])
    lower = np.divide(dcg0, idcg_g, out=np.zeros(len(u)), where=idcg_g != 0)
    dcg_g = holes._dcg(np.where(unjudged, r.top_grade, r.gains[:, :k]), r.discount[:k])
    idcg0 = holes._dcg(r.ideal[:, :k], r.discount[:k])
    upper = np.minimum(np.divide(dcg_g, idcg0, out=np.where(dcg_g > 0, 1.0, 0.0), where=idcg0 != 0), 1.0)
    return lower, upper


def ranking(n_queries: int, top: int, depth: int = 10, seed: int = 0) -> holes.JudgedRanking:
    rng = np.random.default_rng(seed)
    judged = rng.random((n_queries, depth)) < 0.3
    gains = np.where(judged, rng.integers(0, top + 1, (n_queries, depth)), 0)
    ideal = -np.sort(-np.concatenate([gains, rng.integers(0, top + 1, (n_queries, 5))], axis=1), axis=1)[:, :depth]
    ideal[:, 0] = np.maximum(ideal[:, 0], 1)
    return holes.JudgedRanking(
        gains=gains, judged=judged, ranked=np.ones((n_queries, depth), dtype=bool), ideal=ideal, n_rel=(ideal > 0).sum(axis=1),
        n_nonrel=np.zeros(n_queries, dtype=np.int64), top_grade=top, unjudged=rng.integers(0, 5000, n_queries),
        discount=np.array([math.log2(i + 2) for i in range(depth)]),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    for n_queries, top in ((10_000, 1), (10_000, 3), (100_000, 3)):
        r = ranking(n_queries, top)
        outer, exact = [], []
        for _ in range(args.pairs):
            t = time.perf_counter()
            outer_bounds(r, 10)
            outer.append(time.perf_counter() - t)
            t = time.perf_counter()
            holes.ndcg_lower(r, 10), holes.ndcg_upper(r, 10)
            exact.append(time.perf_counter() - t)
        ratios = sorted(e / o for o, e in zip(outer, exact))
        print(f"{n_queries:>7,} queries, grades 0-{top}: outer {np.median(outer) * 1e3:7.1f} ms, exact {np.median(exact) * 1e3:7.1f} ms "
              f"(medians of {args.pairs}); exact / outer, paired: median {np.median(ratios):.1f}x ({ratios[0]:.1f}-{ratios[-1]:.1f})")  # fmt: skip


if __name__ == "__main__":
    main()
