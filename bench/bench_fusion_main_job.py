"""A fusion as the main job stored it: its nDCG@10 against ranx's fusion of the same two stored runs, and its paired tests against both inputs.

    medbench run --models bm25-minilm-rrf --tasks scifact      # brings in bm25 and all-MiniLM-L6-v2 first
    python bench/bench_fusion_main_job.py --model bm25-minilm-rrf --task scifact

Reads this checkout's artifacts (MEDBENCH_DATA, MEDBENCH_MODELS): the keys come from the registry
(``registry_partition_keys``), so the folders are exactly the partition's. ranx is given the stored
upstream runs with their trec_eval ranks made explicit (score = 1000 - rank), as
tests/core/test_fusion.py does, and its fused run is scored by pytrec_eval-terrier. The paired
tests are ``medbench_core.evaluation.stats.compare`` with each input as the baseline in turn (10,000
sign flips and bootstrap resamples, seed 0).

It compares values, not times: nothing here is timed, so there is no ratio to pair (the fusion's
speed against ranx is bench/bench_fusion.py's, in paired rounds).
"""

from __future__ import annotations

import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bm25-minilm-rrf")
    ap.add_argument("--task", default="scifact")
    args = ap.parse_args()

    import polars as pl
    import pytrec_eval
    from ranx import Run, fuse

    from medbench_core.evaluation.metrics import qrels_to_dict, run_to_dict
    from medbench_core.evaluation.stats import compare
    from medbench_core.layout import Layout
    from medbench_core.retrieval.derived import registry_partition_keys
    from medbench_core.retrieval.expansion.spec import load_expansions
    from medbench_core.retrieval.fuse_rerank import ranked
    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.storage import verify_manifest
    from runtime import settings

    specs = {s.name: s for s in load_registry(settings.MODELS_FILE)}
    spec = specs[args.model]
    if spec.kind != "fusion" or spec.fusion["method"] != "rrf":
        sys.exit(f"{args.model} is not an RRF fusion")
    layout = Layout(settings.DATA)
    task = layout.load_task(args.task)
    keys = registry_partition_keys(list(specs.values()), task, names=[args.model], expansions=load_expansions(settings.MODELS_FILE))
    models = [args.model, *spec.upstream]
    folders = {m: {s: layout.artifact_dir(m, args.task, s, keys[m][s]) for s in ("run", "metrics")} for m in models}
    for m in models:
        for f in folders[m].values():
            verify_manifest(f)
    mean = {m: json.loads((folders[m]["metrics"] / "metrics.json").read_text())["mean"]["ndcg_at_10"] for m in models}

    qrels = qrels_to_dict(task.qrels)
    inputs = [Run(run_to_dict(ranked(pl.read_parquet(folders[u]["run"] / "run.parquet")).with_columns(score=1000.0 - pl.col("rank")))) for u in spec.upstream]
    fused = fuse(inputs, method="rrf", params={"k": spec.fusion["k"]})
    top = {q: dict(sorted(d.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:100]) for q, d in fused.run.items()}
    per_q = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(top)
    reference = sum(per_q.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / len(qrels)
    print(
        f"{args.model} x {args.task}: nDCG@10 {mean[args.model]:.10f} (main job) vs {reference:.10f} (ranx RRF, pytrec_eval): |diff| {abs(mean[args.model] - reference):.1e}"
    )
    print(f"run key {keys[args.model]['run']}, upstream run keys: " + ", ".join(f"{u} {keys[u]['run']}" for u in spec.upstream))

    per_query = {m: pl.read_parquet(folders[m]["metrics"] / "per_query.parquet") for m in models}
    print("\n| against | its nDCG@10 | fusion [95% CI] | diff | p (paired t) | p (randomisation) | p (Holm) |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for base in spec.upstream:
        row = compare({m: per_query[m] for m in models}, base, task=args.task).filter(pl.col("model") == args.model).row(0, named=True)
        mark = " *" if row["significant"] else ""
        print(
            f"| {base} | {mean[base]:.4f} | {row['mean']:.4f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]{mark} | {row['diff']:+.4f} | "
            f"{row['p_ttest']:.2g} | {row['p_perm']:.2g} | {row['p_holm']:.2g} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
