"""medbench's run fusion (medbench_core.retrieval.fuse_rerank.fuse) against ranx's fuse on the same runs.

    python bench/bench_fusion.py [--run NAME=RUN_FOLDER ...] [--task scifact] [--pairs 7]

Without --run it builds SciFact train from ../shared/data and retrieves the top 100 with medbench's
BM25 twice (bm25s Lucene k1=1.5 b=0.75, and R2MED's k1=0.9 b=0.4), about ten seconds. With --run it
reads each folder's run.parquet (e.g. the retrieval_run artifacts of bm25 and all-MiniLM-L6-v2).

Timed in interleaved rounds (bench/paired.py: forward, then reversed; wall and CPU of each call),
on the same in-memory runs; figures are the per-round ratios to ranx, median and range:
- medbench: ``fuse(runs)`` from the polars run frames to a top-100 run frame (ranks, ties by doc id);
- ranx: ``ranx.fuse`` on prebuilt ``ranx.Run`` objects (its own data structure, numba-compiled;
  the first call, which compiles, is reported apart), and the same plus building the Runs from
  the run dicts, which is what a caller holding medbench runs pays.
Methods: RRF (k=60) and weighted sum (min-max, weights 0.5/0.5). It also checks the fused scores
agree (RRF given medbench's rankings), and prints nDCG@10 of the inputs and the fusion with the
fusion's 95% bootstrap CI and its paired tests against each input (medbench_core.evaluation.stats).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import paired  # noqa: E402

SHARED = Path(os.environ.get("MEDBENCH_SHARED") or ROOT.parent / "shared")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="append", default=[], help="NAME=FOLDER holding run.parquet (give two)")
    ap.add_argument("--task", default="scifact")
    paired.add_arguments(ap, default=7)
    args = ap.parse_args()
    print(paired.header("fusion: medbench vs ranx"), flush=True)

    # imported here, below the sys.path line (this file runs as a script); --help imports none of them
    from ranx import Run
    from ranx import fuse as ranx_fuse

    from medbench_core.evaluation.metrics import evaluate, qrels_to_dict, run_to_dict
    from medbench_core.evaluation.stats import compare, format_cell
    from medbench_core.retrieval import bm25_index
    from medbench_core.retrieval.fuse_rerank import fuse, ranked
    from medbench_core.taskdata.catalog import build_task, load_catalog

    with tempfile.TemporaryDirectory() as tmp:
        task = build_task(load_catalog(ROOT / "tasks.yaml").task(args.task), SHARED / "data", Path(tmp))
    qrels = qrels_to_dict(task.qrels)
    runs: dict[str, pl.DataFrame] = {}
    if args.run:
        for spec in args.run:
            name, _, folder = spec.partition("=")
            runs[name] = pl.read_parquet(Path(folder) / "run.parquet")
    else:
        qids, texts, dids = task.queries["query_id"].to_list(), task.queries["text"].to_list(), task.corpus["doc_id"].to_list()
        for name, settings in {"bm25": {}, "bm25-k0.9-b0.4": {"k1": 0.9, "b": 0.4}}.items():
            runs[name] = bm25_index.search(bm25_index.fit(task.doc_text(), settings), qids, texts, dids, 100, settings)
    names = list(runs)
    print(f"task {args.task}: {task.queries.height} queries; runs {', '.join(f'{n} ({r.height} rows)' for n, r in runs.items())}")

    dicts = {n: run_to_dict(r) for n, r in runs.items()}
    rank_dicts = {n: run_to_dict(ranked(r).with_columns(score=1000.0 - pl.col("rank").cast(pl.Float64))) for n, r in runs.items()}
    t0 = time.perf_counter()
    ranx_runs = [Run(dicts[n]) for n in names]
    build = time.perf_counter() - t0
    ranx_rank_runs = [Run(rank_dicts[n]) for n in names]

    results = {}
    for label, ours_fn, ranx_args in (
        ("rrf k=60", lambda: fuse(runs, "rrf", k=60, top_k=100), {"method": "rrf", "params": {"k": 60}}),
        (
            "wsum min-max 0.5/0.5",
            lambda: fuse(runs, "wsum", weights=[0.5, 0.5], norm="min-max", top_k=100),
            {"norm": "min-max", "method": "wsum", "params": {"weights": [0.5, 0.5]}},
        ),
    ):
        t0 = time.perf_counter()
        ranx_fuse(ranx_runs, **ranx_args)
        first = time.perf_counter() - t0
        m = paired.measure(
            {
                "medbench": lambda f=ours_fn: paired.call(f),
                "ranx": lambda a=ranx_args: paired.call(lambda: ranx_fuse(ranx_runs, **a)),
                "ranx_with_build": lambda a=ranx_args: paired.call(lambda: ranx_fuse([Run(dicts[n]) for n in names], **a)),
            },
            args.pairs,
        )
        ours, theirs = m.samples["medbench"][-1].value, m.samples["ranx"][-1].value
        t_ours, t_ranx, t_ranx_build = (m.seconds(x, "wall")[0] for x in ("medbench", "ranx", "ranx_with_build"))
        print(
            f"\n{label}:\n"
            + m.table([("medbench / ranx (prebuilt Runs)", "medbench", "ranx"), ("medbench / ranx (Runs built from the dicts)", "medbench", "ranx_with_build")])
        )
        # Agreement: RRF given medbench's rankings (ranx orders tied scores arbitrarily), wsum on the raw scores.
        ref = ranx_fuse(ranx_rank_runs, **ranx_args) if ranx_args["method"] == "rrf" else theirs
        mine = run_to_dict(ours)
        worst = 0.0
        for q, docs in ref.run.items():
            top = dict(sorted(dict(docs).items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:100])
            worst = max(worst, max(abs(mine[q][d] - s) for d, s in top.items()))
        nd_ours = evaluate(qrels, mine, ["ndcg_at_10"]).mean["ndcg_at_10"]
        nd_ranx_raw = evaluate(qrels, {q: dict(v) for q, v in theirs.run.items()}, ["ndcg_at_10"]).mean["ndcg_at_10"]
        results[label] = {
            "medbench_s": round(t_ours, 4),
            "ranx_s": round(t_ranx, 4),
            "ranx_with_run_build_s": round(t_ranx_build, 4),
            "ranx_first_call_s": round(first, 2),
            "ratio_medbench_over_ranx_cpu": round(m.ratio("medbench", "ranx").median, 3),
            "ratio_medbench_over_ranx_with_build_cpu": round(m.ratio("medbench", "ranx_with_build").median, 3),
            "max_abs_score_diff": worst,
            "ndcg_at_10": nd_ours,
            "ndcg_at_10_ranx_raw_scores": nd_ranx_raw,
        }
        print(
            f"  medians: medbench {t_ours * 1000:.0f} ms, ranx {t_ranx * 1000:.0f} ms "
            f"(with Run building {t_ranx_build * 1000:.0f} ms; first call {first:.1f} s)"
        )
        print(f"  fused scores vs ranx: max |diff| {worst:.2e}; nDCG@10 medbench {nd_ours:.4f}, ranx on raw scores {nd_ranx_raw:.4f}")

        per_query = {n: evaluate(qrels, dicts[n], ["ndcg_at_10"]).per_query_frame() for n in names}
        per_query["fused"] = evaluate(qrels, mine, ["ndcg_at_10"]).per_query_frame()
        for base in names:
            st = compare(per_query, base, task=args.task).filter(pl.col("model") == "fused").row(0, named=True)
            print(
                f"  fused vs {base}: {format_cell(st['mean'], st['ci_low'], st['ci_high'], st['significant'])} "
                f"diff {st['diff']:+.4f}, p_ttest {st['p_ttest']:.2g}, p_perm {st['p_perm']:.2g}, p_holm {st['p_holm']:.2g}"
            )
            results[label][f"vs_{base}"] = {k: st[k] for k in ("mean", "ci_low", "ci_high", "diff", "p_ttest", "p_perm", "p_holm", "significant")}
    inputs = {n: evaluate(qrels, dicts[n], ["ndcg_at_10"]).mean["ndcg_at_10"] for n in names}
    print("\ninputs nDCG@10: " + ", ".join(f"{n} {v:.4f}" for n, v in inputs.items()) + f"; ranx Run building {build * 1000:.0f} ms for both")
    print(json.dumps({"task": args.task, "inputs": inputs, "results": results}, default=float))


if __name__ == "__main__":
    main()
