"""medbench's evaluator vs pytrec_eval-terrier (and ranx) on a seeded synthetic benchmark, paired.

    nice -n 5 python bench/bench_metrics.py [--queries 10000 --judged 1000 --depth 1000 --pairs 7] [--each]

Each query has ``--judged`` judged documents (grades 0-3: 70/15/10/5 %) and a run of ``--depth``
retrieved documents, half of them judged; scores are rounded to 3 decimals so that ties are
everywhere (their order, doc id descending, decides ranks). Every evaluator gets the input in its
own native form, built before the clock starts; the metrics are the same, cut-offs included:

- **medbench**: ``evaluate_frame`` on polars frames (what ``scoring.score`` calls on a task's qrels
  and a run.parquet): the five TREC metrics ndcg@10, recall@10, recall@100, mrr@10, map@100;
  **medbench_7**: those and the two hole-aware measures trec_eval defines, bpref@100 and nDCG@10 on
  the condensed list; **medbench_11**: all eleven default metrics (``DEFAULT_METRICS``: the five and
  the six hole metrics), what every cell computes;
- **pytrec_eval**: ``RelevanceEvaluator(qrels, {ndcg_cut_10, recall_10, recall_100, map_cut_100})``
  and ``evaluate(run)`` (its constructor parses the qrels: counted), plus mrr@10, which trec_eval
  has no cut-off for: ``recip_rank`` of a second evaluator on the run cut to its trec_eval top 10
  (the cut itself is made before the clock starts: not counted, in pytrec_eval's favour);
- **pytrec_eval, 4 metrics**: the first evaluator alone (mrr@10 left out: less work than ours);
- **pytrec_eval_7**: the five, plus ``bpref`` of an evaluator on the run cut to its top 100 (cut
  before the clock) and ``ndcg_cut_10`` of one made with ``judged_docs_only_flag=True`` (trec_eval
  -J: the condensed list) on the whole run;
- with ``--each``, each hole metric alone (against medbench's five); with ``--dict``, medbench's
  ``evaluate`` on the same dicts pytrec_eval reads; with ``--ranx``, ranx's ``evaluate`` of the five
  metrics (numba, compiled before the clock on a tiny input; ranx breaks ties its own way, so its
  values are compared, not asserted).

The sides run in interleaved rounds (bench/paired.py: A B, B A, ...), each timed for wall and CPU
(every thread of this process); the figures are the per-round ratios, median and range. The script
asserts that medbench's values equal pytrec_eval's for every query (1e-9) before timing, bpref and
the condensed nDCG@10 included, and prints issue 52's targets beside the figures: all eleven at
most 2x the five's CPU, and pytrec_eval at least 10x slower on the five and on the seven.
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
# The hole-aware measures trec_eval defines too: ours -> (pytrec_eval measure, which evaluator computes it).
SEVEN_EXTRA = {"bpref_at_100": "bpref", "ndcg_condensed_at_10": "ndcg_cut_10"}


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
    ap.add_argument("--each", action="store_true", help="also time each hole metric alone")
    ap.add_argument("--dict", action="store_true", help="also time medbench's dict API")
    ap.add_argument("--ranx", action="store_true", help="also time ranx (about 13 s a round at the default size)")
    args = ap.parse_args()

    import time

    import pytrec_eval

    from medbench_core.evaluation.metrics import DEFAULT_METRICS, HOLE_METRICS, evaluate, evaluate_frame, qrels_to_dict, run_to_dict

    print(paired.header("metrics: medbench vs pytrec_eval-terrier"), flush=True)
    t0 = time.perf_counter()
    qrels_df, run_df = synthetic(args.queries, args.judged, args.depth, args.seed)
    qrels, run = qrels_to_dict(qrels_df), run_to_dict(run_df)
    top100 = {q: dict(sorted(docs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:100]) for q, docs in run.items()}
    top10 = {q: dict(list(docs.items())[:10]) for q, docs in top100.items()}
    print(
        f"data: {args.queries:,} queries x {args.judged:,} judged, runs of {args.depth:,} ({qrels_df.height:,} + {run_df.height:,} rows), "
        f"built in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )

    def ours():
        return evaluate_frame(qrels_df, run_df, FIVE)

    def trec4():
        return pytrec_eval.RelevanceEvaluator(qrels, set(MEASURES)).evaluate(run)

    def trec5():
        return trec4(), pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)

    def trec7():
        bpref = pytrec_eval.RelevanceEvaluator(qrels, {"bpref"}).evaluate(top100)
        condensed = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}, judged_docs_only_flag=True).evaluate(run)
        return trec5(), bpref, condensed

    # Equal values first: every query, every metric.
    mine = evaluate_frame(qrels_df, run_df, DEFAULT_METRICS)
    (ref, rr), bpref, condensed = trec7()
    worst = max(abs(vals[t] - mine.per_query[q][m]) for q, vals in ref.items() for t, m in MEASURES.items())
    worst = max([worst, *(abs(rr[q]["recip_rank"] - mine.per_query[q]["mrr_at_10"]) for q in rr)])
    for (m, t), values in zip(SEVEN_EXTRA.items(), (bpref, condensed), strict=True):
        assert set(values) == set(mine.per_query), m
        worst = max([worst, *(abs(v[t] - mine.per_query[q][m]) for q, v in values.items())])
    assert set(ref) == set(mine.per_query) and worst <= 1e-9, f"medbench differs from pytrec_eval by {worst}"
    assert ours().per_query == {q: {m: v[m] for m in FIVE} for q, v in mine.per_query.items()}, "the five differ when asked alone"
    print(f"values: equal to pytrec_eval on {len(ref):,} queries x 7 metrics (largest difference {worst:.1e})", flush=True)

    seven = (*FIVE, *SEVEN_EXTRA)
    sides = {
        "medbench": lambda: paired.call(ours),
        "medbench_7": lambda: paired.call(lambda: evaluate_frame(qrels_df, run_df, seven)),
        "medbench_11": lambda: paired.call(lambda: evaluate_frame(qrels_df, run_df, DEFAULT_METRICS)),
        "pytrec_eval": lambda: paired.call(trec5),
        "pytrec_eval_4": lambda: paired.call(trec4),
        "pytrec_eval_7": lambda: paired.call(trec7),
    }
    if args.each:
        for name in HOLE_METRICS:
            sides[name] = lambda name=name: paired.call(lambda: evaluate_frame(qrels_df, run_df, (name,)))
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
    del mine, ref, rr, bpref, condensed

    def say(r: int, side: str, s: paired.Sample) -> None:
        print(f"  round {r + 1} {side:<14} wall {s.wall:7.3f} s  CPU {s.cpu:7.3f} s  load {os.getloadavg()[0]:.1f}", flush=True)

    m = paired.measure(sides, args.pairs, report=say)
    rows = [
        ("pytrec_eval (5 metrics) / medbench (5)", "pytrec_eval", "medbench"),
        ("pytrec_eval (4 metrics, no mrr@10) / medbench (5)", "pytrec_eval_4", "medbench"),
        ("pytrec_eval (7: the 5, bpref, condensed nDCG@10) / medbench (the same 7)", "pytrec_eval_7", "medbench_7"),
        ("pytrec_eval (7) / medbench (all 11)", "pytrec_eval_7", "medbench_11"),
        ("medbench, all 11 / medbench, the 5", "medbench_11", "medbench"),
        ("medbench, the 7 / medbench, the 5", "medbench_7", "medbench"),
    ]
    rows += [(f"medbench, {x} alone / medbench, the 5", x, "medbench") for x in HOLE_METRICS if x in sides]
    rows += [(f"{x} / medbench (5)", x, "medbench") for x in ("medbench_dict", "ranx") if x in sides]
    print()
    print(m.table(rows))
    print("\nissue 52's targets (CPU, median of the paired rounds):")
    for label, num, den, want, at_least in (
        ("all eleven metrics / the five", "medbench_11", "medbench", 2.0, False),
        ("pytrec_eval / medbench, the five", "pytrec_eval", "medbench", 10.0, True),
        ("pytrec_eval / medbench, the seven pytrec_eval defines", "pytrec_eval_7", "medbench_7", 10.0, True),
    ):
        r = m.ratio(num, den, "cpu")
        met = r.median >= want if at_least else r.median <= want
        print(f"  {label}: {r} (target {'>=' if at_least else '<='} {want:g}x: {'met' if met else 'MISSED'})")


if __name__ == "__main__":
    main()
