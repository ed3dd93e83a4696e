"""The stages that grow with the queries, at M3Retrieve's 164K: medbench's functions against the bare libraries.

    python bench/scale_queries.py --queries 164000 [--json FILE] [--skip scipy-perm]

Two seeded synthetic top-100 runs ("bm25" and "other", 16.4M rows each) over a task whose queries
have one relevant document each (as bench/scale_corpus.py's): the relevant document is retrieved
by "bm25" for 80% of the queries at a geometric rank (p = 0.35), "other" moves it by up to 3
ranks, misses 5% more and finds 5% that "bm25" missed; scores are rounded to 4 decimals, so
ties are common; the documents come from 1.2M ids, distinct within a query, 80 of them shared by the
two runs. Phases, each timed with its peak memory (VmHWM reset per phase, as in
bench/scale_profile.py), medbench first, then the bare libraries doing the same work:

- run files: ``run.parquet`` and ``run.trec`` (``ranking.write_trec_file``, what ``retrieve`` writes);
  bare: polars' Parquet;
- metrics: ``stages.score`` (five metrics, their 95% bootstrap CIs, breakdowns, per_query.parquet)
  for each run; bare: pytrec_eval-terrier (dicts from the frames; MRR@10 from a second evaluator
  on the run cut at 10) and scipy's bootstrap (10,000 resamples, seed 0, batches of 100: scipy's
  default, all at once, needs 26 GB at this size);
- paired tests: ``stats.compare`` of the two models (CIs, paired t, randomisation test); bare:
  scipy's ``bootstrap``, ``ttest_rel`` and ``permutation_test`` (batched), results asserted equal;
- per-query logging: ``MLflowResource.log_run`` of one partition (params, metrics, run.trec,
  per_query.parquet, metrics.json) into a fresh SQLite store; bare: ``MlflowClient`` calls;
- plots and reports: ``reports.write_leaderboard`` of the two cells (tables, stats.csv,
  heatmap, per-query difference plot); bare: matplotlib's ``hist`` of the differences;
- fusion of the two runs (16.4M rows each, documents drawn from 1.2M ids): ``fuse_rerank.fuse``
  RRF k=60 and wsum min-max 0.5/0.5 on the run frames, against ``ranx.fuse`` on prebuilt
  ``ranx.Run`` objects (its numba compile excluded: a warm-up call on a small run first) and
  with the Runs built from the frames (``Run.from_df``), the fused scores compared.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scale_profile import Phases  # noqa: E402

K = 100
METRICS = {"ndcg_cut_10": "ndcg_at_10", "recall_10": "recall_at_10", "recall_100": "recall_at_100", "map_cut_100": "map_at_100"}


def synthetic(n: int, seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, pl.DataFrame]]:
    """queries, qrels and two runs (query_id, doc_id, score, rank), grouped by query, ranks 1..100."""
    rng = np.random.default_rng(seed)
    qids = np.array([f"q{i}" for i in range(n)], dtype=object)
    prime = 1_200_007  # (a*j + b) mod prime: distinct documents for distinct j within a query
    a, b = rng.integers(1, prime, (n, 1)), rng.integers(0, prime, (n, 1))
    pool = (a * np.arange(200)[None, :] + b) % prime
    rel = pool[:, 199]
    queries = pl.DataFrame({"query_id": qids, "text": [f"query {i}" for i in range(n)]})
    qrels = pl.DataFrame({"query_id": qids, "doc_id": [f"d{d}" for d in rel], "relevance": np.ones(n, dtype=np.int32)})
    found = rng.random(n) < 0.8
    at = np.minimum(rng.geometric(0.35, n), K) - 1
    runs = {}
    for name, first in (("bm25", 0), ("other", 20)):  # the two runs share 80 documents per query
        docs = pool[:, first : first + K].copy()
        if name == "other":
            at = np.clip(at + rng.integers(-3, 4, n), 0, K - 1)
            flip = rng.random(n) < 0.05
            found = np.where(flip, ~found, found)
        rows = np.flatnonzero(found)
        docs[rows, at[rows]] = rel[rows]
        score = np.round(np.sort(rng.gamma(2.0, 3.0, (n, K)), axis=1)[:, ::-1], 4)
        runs[name] = pl.DataFrame(
            {
                "query_id": np.repeat(qids, K),
                "doc_id": pl.Series(docs.ravel()).cast(pl.Utf8).str.replace(r"^", "d"),
                "score": score.ravel(),
                "rank": np.tile(np.arange(1, K + 1, dtype=np.int32), n),
            }
        )
    return queries, qrels, runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=164_000)
    ap.add_argument("--out", type=Path, default=Path("/tmp/medbench-scale/queries"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--skip", default="", help="comma-separated: bare, scipy-perm, mlflow, plots, fusion; only-fusion runs the fusion phases alone")
    args = ap.parse_args()
    skip = set(args.skip.split(","))
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    ph = Phases()

    from medbench_core.evaluation.stats import compare
    from medbench_core.retrieval.ranking import write_trec_file
    from medbench_core.retrieval.stages import flat_metrics, score
    from medbench_core.taskdata.task import TaskMeta, make_task

    queries, qrels, runs = ph("synthetic task and two runs", synthetic, args.queries)
    if "only-fusion" in skip:
        fusion(runs, ph)
        _save(args, ph)
        return
    task = make_task(TaskMeta(name="scale", source="synthetic"), queries.with_columns(pl.lit("biomedicine").alias("discipline")), pl.DataFrame(schema={"doc_id": pl.Utf8}), qrels)
    for name, run in runs.items():
        (args.out / name).mkdir()
    # --- medbench -------------------------------------------------------------------------------
    for name, run in runs.items():
        ph(f"medbench: {name} run.parquet", run.write_parquet, args.out / name / "run.parquet", statistics=False)
        ph(f"medbench: {name} run.trec", write_trec_file, run, args.out / name / "run.trec", f"medbench-{name}")
    results = {}
    for name, run in runs.items():
        results[name] = ph(f"medbench: score {name} (metrics, CIs, breakdowns)", score, task, run, args.out / name)
    pq = {name: pl.read_parquet(args.out / name / "per_query.parquet") for name in runs}
    stats = ph("medbench: compare (CIs, paired t, randomisation)", compare, pq, "bm25", task="scale")
    print(stats.select("model", "mean", "ci_low", "ci_high", "p_ttest", "p_perm"))
    if "mlflow" not in skip:
        from runtime.mlflow_store import MLflowResource

        store = MLflowResource(tracking_uri=f"sqlite:///{args.out / 'mlflow.db'}", artifact_root=str(args.out / "mlartifacts"))
        ph("medbench: MLflow store", store.ensure_store)
        files = [args.out / "bm25" / f for f in ("run.trec", "per_query.parquet", "metrics.json")]
        ph(
            "medbench: MLflow log_run (per-query files)",
            store.log_run, "medbench-scale", "key-bm25", "bm25/scale", {"model": "bm25"}, flat_metrics(results["bm25"]), {"medbench.kind": "partition"}, files,
        )  # fmt: skip
    if "plots" not in skip:
        from medbench_core.evaluation.reports import Cell, Significance, write_leaderboard

        cells = [Cell(m, "scale", metrics=results[m], per_query=pq[m]) for m in runs]
        ph("medbench: write_leaderboard (tables, stats, plots)", write_leaderboard, cells, list(runs), ["scale"], Significance("bm25"), args.out / "reports")
    if "bare" in skip:
        if "fusion" not in skip:
            fusion(runs, ph)
        _save(args, ph)
        return
    # --- bare -------------------------------------------------------------------------------------
    import pytrec_eval
    from scipy.stats import bootstrap, permutation_test, ttest_rel

    for name, run in runs.items():
        ph(f"bare: {name} run.parquet (polars)", run.write_parquet, args.out / name / "bare_run.parquet")

    def bare_eval(run: pl.DataFrame) -> pl.DataFrame:
        judged: dict[str, dict[str, int]] = {}
        for q, d, s in qrels.iter_rows():
            judged.setdefault(q, {})[d] = int(s)
        as_dict: dict[str, dict[str, float]] = {}
        top10: dict[str, dict[str, float]] = {}
        for q, d, s, r in run.iter_rows():
            as_dict.setdefault(q, {})[d] = s
            if r <= 10:
                top10.setdefault(q, {})[d] = s
        res = pytrec_eval.RelevanceEvaluator(judged, set(METRICS)).evaluate(as_dict)
        rr = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank"}).evaluate(top10)
        rows = [{"query_id": q, **{METRICS[k]: res.get(q, {}).get(k, 0.0) for k in METRICS}, "mrr_at_10": rr.get(q, {}).get("recip_rank", 0.0)} for q in sorted(judged)]
        frame = pl.DataFrame(rows)
        frame.write_parquet(args.out / "bare_per_query.parquet")
        ci = {}
        for col in frame.columns[1:]:
            b = bootstrap((frame[col].to_numpy(),), np.mean, n_resamples=10_000, vectorized=True, method="percentile", rng=np.random.default_rng(0), batch=100)
            ci[col] = (float(b.confidence_interval.low), float(b.confidence_interval.high))
        return frame, ci

    bare = {}
    for name, run in runs.items():
        bare[name] = ph(f"bare: pytrec_eval + scipy CIs {name}", bare_eval, run)
        frame, ci = bare[name]
        mine = pq[name].sort("query_id")
        for m in METRICS.values():
            assert np.allclose(frame.sort("query_id")[m].to_numpy(), mine[m].to_numpy(), atol=1e-9), (name, m)
            assert tuple(results[name]["ci"][m]) == ci[m], (name, m, results[name]["ci"][m], ci[m])
    x = pq["other"].sort("query_id")["ndcg_at_10"].to_numpy()
    y = pq["bm25"].sort("query_id")["ndcg_at_10"].to_numpy()

    def bare_tests():
        out = {}
        for name, v in (("bm25", y), ("other", x)):
            b = bootstrap((v,), np.mean, n_resamples=10_000, vectorized=True, method="percentile", rng=np.random.default_rng(0), batch=100)
            out[f"ci_{name}"] = (float(b.confidence_interval.low), float(b.confidence_interval.high))
        out["p_ttest"] = float(ttest_rel(x, y).pvalue)
        if "scipy-perm" not in skip:
            diff = lambda a, b, axis: np.mean(a, axis=axis) - np.mean(b, axis=axis)  # noqa: E731
            out["p_perm"] = float(
                permutation_test((x, y), diff, permutation_type="samples", vectorized=True, n_resamples=10_000, rng=np.random.default_rng(0), batch=100).pvalue
            )
        return out

    got = ph("bare: scipy CIs, ttest_rel, permutation_test", bare_tests)
    row = stats.filter(pl.col("model") == "other").row(0, named=True)
    assert got["ci_other"] == (row["ci_low"], row["ci_high"]) and abs(got["p_ttest"] - row["p_ttest"]) < 1e-12
    if "p_perm" in got:
        assert got["p_perm"] == row["p_perm"], (got["p_perm"], row["p_perm"])
    if "mlflow" not in skip:
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        def bare_log():
            client = MlflowClient(tracking_uri=f"sqlite:///{args.out / 'mlflow.db'}")
            exp = client.get_experiment_by_name("bare-scale") or client.get_experiment(client.create_experiment("bare-scale", artifact_location=str(args.out / "bare_artifacts")))
            run = client.create_run(exp.experiment_id, run_name="bm25/scale")
            now = int(time.time() * 1000)
            client.log_batch(run.info.run_id, metrics=[Metric(k, v, now, 0) for k, v in flat_metrics(results["bm25"]).items()], params=[Param("model", "bm25")])
            for f in files:
                client.log_artifact(run.info.run_id, str(f))
            client.set_terminated(run.info.run_id)

        ph("bare: MlflowClient (same files)", bare_log)
    if "plots" not in skip:

        def bare_plot():
            import matplotlib

            matplotlib.use("Agg", force=True)
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=(9, 3))
            ax.hist(x - y, bins=41)
            fig.savefig(args.out / "bare_diff.png", dpi=100)
            plt.close(fig)

        ph("bare: matplotlib histogram of the differences", bare_plot)
    if "fusion" not in skip:
        fusion(runs, ph)
    _save(args, ph)


def fusion(runs: dict[str, pl.DataFrame], ph) -> None:
    """medbench's fuse against ranx's on the same two runs (module docstring)."""
    from ranx import Run
    from ranx import fuse as ranx_fuse

    from medbench_core.retrieval.fuse_rerank import fuse

    names = list(runs)

    def as_run(df: pl.DataFrame) -> Run:
        frame = df.select("query_id", "doc_id", "score").to_pandas().astype({"query_id": object, "doc_id": object})  # ranx wants object columns
        return Run.from_df(frame, q_id_col="query_id", doc_id_col="doc_id", score_col="score")

    small = {n: as_run(r.head(2000)) for n, r in runs.items()}
    ranx_fuse(list(small.values()), method="rrf", params={"k": 60})
    ranx_fuse(list(small.values()), method="wsum", norm="min-max", params={"weights": [0.5, 0.5]})

    def build():
        return [as_run(runs[n]) for n in names]

    built = ph("ranx: Run.from_df of both runs", build)
    for label, ours, theirs in (
        ("rrf k=60", lambda: fuse(runs, "rrf", k=60, top_k=K), {"method": "rrf", "params": {"k": 60}}),
        ("wsum min-max", lambda: fuse(runs, "wsum", weights=[0.5, 0.5], norm="min-max", top_k=K), {"method": "wsum", "norm": "min-max", "params": {"weights": [0.5, 0.5]}}),
    ):
        mine = ph(f"medbench: fuse {label}", ours)
        ref = ph(f"ranx: fuse {label} (prebuilt Runs)", lambda a=theirs: ranx_fuse(built, **a))
        # Same fused score for every (query, document) both kept in their top 100.
        got = mine.select("query_id", "doc_id", "score")
        want = pl.DataFrame(
            [(q, d, s) for q, docs in ref.run.items() for d, s in docs.items()], schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64}, orient="row"
        )
        joined = got.join(want, on=["query_id", "doc_id"], suffix="_ranx")
        print(f"{label}: {joined.height} of {got.height} fused rows also in ranx's top 100; largest score difference {float((joined['score'] - joined['score_ranx']).abs().max()):.2e}")


def _save(args, ph) -> None:
    if args.json:
        args.json.write_text(json.dumps({"queries": args.queries, "rows": ph.rows}, indent=1))


if __name__ == "__main__":
    main()
