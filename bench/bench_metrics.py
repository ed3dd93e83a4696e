"""medbench's evaluator vs pytrec_eval-terrier (and ranx) on a seeded synthetic benchmark.

    nice -n 5 python bench/bench_metrics.py [--queries 10000 --judged 1000 --depth 1000 --repeats 3]

Each query has ``--judged`` judged documents (grades 0-3: 70/15/10/5 %) and a run of ``--depth``
retrieved documents, half of them judged; scores are rounded to 3 decimals so that ties are
everywhere (their order, doc id descending, decides ranks). Every evaluator gets the input in its
own native form, built before the clock starts:

- medbench: ``evaluate_frame`` on polars frames (what ``pipeline.score`` calls on a task's qrels
  and a run.parquet), all five default metrics;
- medbench (dict API): ``evaluate`` on the same dicts pytrec_eval reads;
- pytrec_eval: ``RelevanceEvaluator(qrels, {ndcg_cut_10, recall_10, recall_100, map_cut_100})``
  plus ``evaluate(run)`` (its constructor parses the qrels: counted); mrr@10 is left out of its
  time (it needs a second evaluator on a run cut to 10), so pytrec_eval does less work;
- ranx (numba): ``Qrels``/``Run`` from the dicts and ``evaluate`` of the five metrics, after a
  warm-up call on a tiny input compiles its kernels. ranx breaks ties its own way, so its values
  are compared, not asserted.

The script asserts that medbench's values equal pytrec_eval's for every query (1e-9) and that
its two APIs agree bit for bit, then prints the times and the ratio.
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import time

import numpy as np
import polars as pl

MEASURES = {"ndcg_cut_10": "ndcg_at_10", "recall_10": "recall_at_10", "recall_100": "recall_at_100", "map_cut_100": "map_at_100"}
RANX = {"ndcg@10": "ndcg_at_10", "recall@10": "recall_at_10", "recall@100": "recall_at_100", "mrr@10": "mrr_at_10", "map@100": "map_at_100"}


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


def timed(fn, repeats: int) -> tuple[list[float], object]:
    times, out = [], None
    for _ in range(repeats):
        out = None
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--judged", type=int, default=1_000)
    ap.add_argument("--depth", type=int, default=1_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-ranx", action="store_true")
    args = ap.parse_args()

    import pytrec_eval

    from medbench_core.evaluation.metrics import DEFAULT_METRICS, evaluate, evaluate_frame, qrels_to_dict, run_to_dict

    t0 = time.perf_counter()
    qrels_df, run_df = synthetic(args.queries, args.judged, args.depth, args.seed)
    qrels, run = qrels_to_dict(qrels_df), run_to_dict(run_df)
    print(f"data: {args.queries:,} queries x {args.judged:,} judged, runs of {args.depth:,} ({qrels_df.height:,} + {run_df.height:,} rows), built in {time.perf_counter() - t0:.1f} s", flush=True)

    t_frame, ours = timed(lambda: evaluate_frame(qrels_df, run_df, DEFAULT_METRICS), args.repeats)
    print(f"medbench evaluate_frame: {[round(t, 2) for t in t_frame]} s", flush=True)
    t_dict, ours_dict = timed(lambda: evaluate(qrels, run, DEFAULT_METRICS), args.repeats)
    print(f"medbench evaluate (dicts): {[round(t, 2) for t in t_dict]} s", flush=True)
    assert ours_dict.per_query == ours.per_query and ours_dict.mean == ours.mean, "the two medbench APIs differ"

    def trec():
        return pytrec_eval.RelevanceEvaluator(qrels, set(MEASURES)).evaluate(run)

    t_trec, ref = timed(trec, args.repeats)
    print(f"pytrec_eval: {[round(t, 2) for t in t_trec]} s", flush=True)

    # Equal values: every query, every metric (mrr@10 from a run cut to its trec_eval top 10, untimed).
    worst = 0.0
    for q, vals in ref.items():
        for trec_name, ours_name in MEASURES.items():
            worst = max(worst, abs(vals[trec_name] - ours.per_query[q][ours_name]))
    top10 = {q: dict(sorted(docs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:10]) for q, docs in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    worst = max([worst, *(abs(rr[q]["recip_rank"] - ours.per_query[q]["mrr_at_10"]) for q in rr)])
    assert set(ref) == set(ours.per_query) and worst <= 1e-9, f"medbench differs from pytrec_eval by {worst}"
    print(f"values: equal to pytrec_eval on {len(ref):,} queries x 5 metrics (largest difference {worst:.1e})", flush=True)

    t_ranx, ranx_diff = [], None
    if not args.no_ranx:
        from ranx import Qrels, Run
        from ranx import evaluate as ranx_evaluate

        ranx_evaluate(Qrels({"q": {"d": 1}}), Run({"q": {"d": 1.0, "e": 0.5}}), list(RANX))  # numba compile, untimed
        t_ranx, rx = timed(lambda: (lambda r: ranx_evaluate(Qrels(qrels), r, list(RANX), return_mean=False))(Run(run)), args.repeats)
        ranx_diff = sum(
            any(abs(float(rx[name][i]) - ours.per_query[q][m]) > 1e-9 for name, m in RANX.items())
            for i, q in enumerate(sorted(qrels))
        )
        print(f"ranx: {[round(t, 2) for t in t_ranx]} s; queries where a value differs from trec_eval's: {ranx_diff:,} (ties)", flush=True)

    med = statistics.median
    print("\n| evaluator | median s | fastest s | vs pytrec_eval (median) |\n|---|---:|---:|---:|")
    rows = [("medbench evaluate_frame (polars frames)", t_frame), ("medbench evaluate (dicts)", t_dict), ("pytrec_eval-terrier (4 of the 5 metrics)", t_trec)]
    if t_ranx:
        rows.append(("ranx (numba, dicts)", t_ranx))
    for name, ts in rows:
        print(f"| {name} | {med(ts):.2f} | {min(ts):.2f} | {med(t_trec) / med(ts):.1f}x |")
    print(f"\nratio pytrec_eval / medbench evaluate_frame: {med(t_trec) / med(t_frame):.1f}x (fastest: {min(t_trec) / min(t_frame):.1f}x)")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.1f} GB")


if __name__ == "__main__":
    main()
