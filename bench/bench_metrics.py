"""medbench's evaluator vs pytrec_eval-terrier (and ranx) on a seeded synthetic benchmark, paired.

    nice -n 5 python bench/bench_metrics.py [--queries 10000 --judged 1000 --depth 1000 --pairs 7]

Each query has ``--judged`` judged documents (grades 0-3: 70/15/10/5 %) and a run of ``--depth``
retrieved documents, half of them judged; scores are rounded to 3 decimals so that ties are
everywhere (their order, doc id descending, decides ranks). Every evaluator gets the input in its
own native form, built before the clock starts; the five metrics are the same, cut-offs included:

- **medbench**: ``evaluate_frame`` on polars frames (what ``stages.score`` calls on a task's qrels
  and a run.parquet): ndcg@10, recall@10, recall@100, mrr@10, map@100;
- **pytrec_eval**: ``RelevanceEvaluator(qrels, {ndcg_cut_10, recall_10, recall_100, map_cut_100})``
  and ``evaluate(run)`` (its constructor parses the qrels: counted), plus mrr@10, which trec_eval
  has no cut-off for: ``recip_rank`` of a second evaluator on the run cut to its trec_eval top 10
  (the cut itself is made before the clock starts: not counted, in pytrec_eval's favour);
- **pytrec_eval, 4 metrics**: the first evaluator alone (mrr@10 left out: less work than ours);
- with ``--dict``, medbench's ``evaluate`` on the same dicts pytrec_eval reads; with ``--ranx``,
  ranx's ``evaluate`` of the five metrics (numba, compiled before the clock on a tiny input; ranx
  breaks ties its own way, so its values are compared, not asserted).

The sides run in interleaved rounds (bench/paired.py: A B, B A, ...), each timed for wall and CPU
(every thread of this process); the figures are the per-round ratios pytrec_eval / medbench,
median and range. The script asserts that medbench's values equal pytrec_eval's for every query
(1e-9) before timing.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import polars as pl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paired  # noqa: E402

MEASURES = {"ndcg_cut_10": "ndcg_at_10", "recall_10": "recall_at_10", "recall_100": "recall_at_100", "map_cut_100": "map_at_100"}
RANX = {"ndcg@10": "ndcg_at_10", "recall@10": "recall_at_10", "recall@100": "recall_at_100", "mrr@10": "mrr_at_10", "map@100": "map_at_100"}
FIVE = ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_100")


def synthetic(n_queries: int, judged: int, depth: int, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """qrels (query_id, doc_id, relevance) and run (query_id, doc_id, score) frames, grouped by query."""
    rng = np.random.default_rng(seed)
    prime = 1_000_003  # doc numbers (a*j + b) mod prime are distinct for distinct j within a query
    a = rng.integers(1, prime, n_queries)[:, None]
    b = rng.integers(0, prime, n_queries)[:, None]
    qids = np.array([f"q{i}" for i in range(n_queries)], dtype=object)
    doc_of = lambda j: (a * j + b) % prime  # noqa: E731
    j_docs = doc_of(np.arange(judged)[None, :])
    r_docs = doc_of(np.arange(judged // 2, judged // 2 + depth)[None, :])
    names = np.array([f"d{i}" for i in range(prime)], dtype=object)
    qrels = pl.DataFrame(
        {
            "query_id": np.repeat(qids, judged),
            "doc_id": names[j_docs.ravel()],
            "relevance": rng.choice(4, n_queries * judged, p=[0.70, 0.15, 0.10, 0.05]).astype(np.int64),
        }
    )
    run = pl.DataFrame({"query_id": np.repeat(qids, depth), "doc_id": names[r_docs.ravel()], "score": np.round(rng.random(n_queries * depth), 3)})
    return qrels, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--judged", type=int, default=1_000)
    ap.add_argument("--depth", type=int, default=1_000)
    paired.add_arguments(ap, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dict", action="store_true", help="also time medbench's dict API")
    ap.add_argument("--ranx", action="store_true", help="also time ranx (about 13 s a round at the default size)")
    args = ap.parse_args()

    import time

    import pytrec_eval

    from medbench_core.evaluation.metrics import evaluate, evaluate_frame, qrels_to_dict, run_to_dict

    print(paired.header("metrics: medbench vs pytrec_eval-terrier"), flush=True)
    t0 = time.perf_counter()
    qrels_df, run_df = synthetic(args.queries, args.judged, args.depth, args.seed)
    qrels, run = qrels_to_dict(qrels_df), run_to_dict(run_df)
    top10 = {q: dict(sorted(docs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:10]) for q, docs in run.items()}
    print(
        f"data: {args.queries:,} queries x {args.judged:,} judged, runs of {args.depth:,} ({qrels_df.height:,} + {run_df.height:,} rows), built in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )

    def ours():
        return evaluate_frame(qrels_df, run_df, FIVE)

    def trec4():
        return pytrec_eval.RelevanceEvaluator(qrels, set(MEASURES)).evaluate(run)

    def trec5():
        return trec4(), pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)

    # Equal values first: every query, every metric.
    mine = ours()
    ref, rr = trec5()
    worst = max(abs(vals[t] - mine.per_query[q][m]) for q, vals in ref.items() for t, m in MEASURES.items())
    worst = max([worst, *(abs(rr[q]["recip_rank"] - mine.per_query[q]["mrr_at_10"]) for q in rr)])
    assert set(ref) == set(mine.per_query) and worst <= 1e-9, f"medbench differs from pytrec_eval by {worst}"
    print(f"values: equal to pytrec_eval on {len(ref):,} queries x 5 metrics (largest difference {worst:.1e})", flush=True)

    sides = {"medbench": lambda: paired.call(ours), "pytrec_eval": lambda: paired.call(trec5), "pytrec_eval_4": lambda: paired.call(trec4)}
    if args.dict:
        assert evaluate(qrels, run, FIVE).per_query == mine.per_query, "the two medbench APIs differ"
        sides["medbench_dict"] = lambda: paired.call(lambda: evaluate(qrels, run, FIVE))
    if args.ranx:
        from ranx import Qrels, Run
        from ranx import evaluate as ranx_evaluate

        ranx_evaluate(Qrels({"q": {"d": 1}}), Run({"q": {"d": 1.0, "e": 0.5}}), list(RANX))  # numba compile, untimed
        rx = ranx_evaluate(Qrels(qrels), Run(run), list(RANX), return_mean=False)
        differ = sum(any(abs(float(rx[name][i]) - mine.per_query[q][m]) > 1e-9 for name, m in RANX.items()) for i, q in enumerate(sorted(qrels)))
        print(f"ranx: queries where a value differs from trec_eval's: {differ:,} (ties)", flush=True)
        sides["ranx"] = lambda: paired.call(lambda: ranx_evaluate(Qrels(qrels), Run(run), list(RANX), return_mean=False))
    del mine, ref, rr

    def say(r: int, side: str, s: paired.Sample) -> None:
        print(f"  round {r + 1} {side:<14} wall {s.wall:7.3f} s  CPU {s.cpu:7.3f} s  load {os.getloadavg()[0]:.1f}", flush=True)

    m = paired.measure(sides, args.pairs, report=say)
    rows = [("pytrec_eval (5 metrics) / medbench", "pytrec_eval", "medbench"), ("pytrec_eval (4 metrics, no mrr@10) / medbench", "pytrec_eval_4", "medbench")]
    rows += [(f"{x} / medbench", x, "medbench") for x in ("medbench_dict", "ranx") if x in sides]
    print()
    print(m.table(rows))
    print(
        f"\nspeed-up over pytrec_eval, 5 metrics: CPU {m.ratio('pytrec_eval', 'medbench', 'cpu')}, wall {m.ratio('pytrec_eval', 'medbench', 'wall')} (target >= 10x)"
    )


if __name__ == "__main__":
    main()
