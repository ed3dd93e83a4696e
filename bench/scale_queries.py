"""The stages that grow with the queries, at M3Retrieve's 164K: medbench's functions against the bare libraries.

    python bench/scale_queries.py --queries 164000 [--pairs 5] [--json FILE] [--skip scipy-perm]

Two seeded synthetic top-100 runs ("bm25" and "other", 16.4M rows each) over a task whose queries
have one relevant document each (as bench/scale_corpus.py's): the relevant document is retrieved
by "bm25" for 80% of the queries at a geometric rank (p = 0.35), "other" moves it by up to 3
ranks, misses 5% more and finds 5% that "bm25" missed; scores are rounded to 4 decimals, so
ties are common; the documents come from 1.2M ids, distinct within a query, 80 of them shared by the
two runs. Each phase runs medbench's functions and the bare libraries doing the same work in
interleaved rounds (bench/paired.py: medbench then bare, bare then medbench, ...), each call timed
for wall and CPU (this process, every thread) with its peak memory (VmHWM reset per call); the
figures are the per-round ratios medbench / bare, median and range:

- run files: ``run.parquet`` and ``run.trec`` (``ranking.write_trec_file``, what ``retrieve`` writes);
  bare: polars' Parquet;
- metrics: ``scoring.score`` (five metrics, their 95% bootstrap CIs, breakdowns, per_query.parquet)
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

import paired  # noqa: E402

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


class Phases:
    """Each phase's medbench and bare sides in interleaved rounds; rows of figures for the report."""

    def __init__(self, pairs: int) -> None:
        self.pairs, self.rows, self.values = pairs, [], {}

    def __call__(self, phase: str, medbench, bare=None):
        sides = {"medbench": lambda: paired.call(medbench)}
        if bare is not None:
            sides["bare"] = lambda: paired.call(bare)
        m = paired.measure(sides, self.pairs if bare is not None else 1)
        row = {"phase": phase, **{f"{side}_{what}": m.seconds(side, what)[0] for side in sides for what in ("wall", "cpu")}}
        row["medbench_peak_gb"] = round(max(x.peak_rss or 0 for x in m.samples["medbench"]) / 2**30, 2)
        if bare is not None:
            row.update({f"ratio_{what}": list(m.ratio("medbench", "bare", what).values) for what in ("cpu", "wall", "peak_rss")})
            row["bare_peak_gb"] = round(max(x.peak_rss or 0 for x in m.samples["bare"]) / 2**30, 2)
        self.rows.append(row)
        c = m.ratio("medbench", "bare", "cpu") if bare is not None else None
        print(
            f"{phase:<44} medbench CPU {row['medbench_cpu']:8.2f} s" + (f"  bare {row['bare_cpu']:8.2f} s  CPU ratio {c}" if c else "") + f"  ({m.load()})",
            flush=True,
        )
        self.values[phase] = {side: m.samples[side][-1].value for side in sides}
        return self.values[phase]

    def table(self) -> str:
        out = [
            "| phase | n | medbench CPU s | bare CPU s | CPU medbench / bare, median (range) | wall, median (range) | peak GB medbench / bare |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in self.rows:
            if "ratio_cpu" not in r:
                out.append(f"| {r['phase']} | 1 | {r['medbench_cpu']:.2f} | - | - | - | {r['medbench_peak_gb']} / - |")
                continue
            c, w = paired.Ratio("cpu", tuple(r["ratio_cpu"])), paired.Ratio("wall", tuple(r["ratio_wall"]))
            out.append(
                f"| {r['phase']} | {c.n} | {r['medbench_cpu']:.2f} | {r['bare_cpu']:.2f} | {c.median:.3f}x ({c.low:.3f}-{c.high:.3f}) "
                f"| {w.median:.3f}x ({w.low:.3f}-{w.high:.3f}) | {r['medbench_peak_gb']} / {r['bare_peak_gb']} |"
            )
        return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=164_000)
    ap.add_argument("--out", type=Path, default=Path("/tmp/medbench-scale/queries"))
    ap.add_argument("--json", type=Path)
    paired.add_arguments(ap)
    ap.add_argument("--skip", default="", help="comma-separated: bare, scipy-perm, mlflow, plots, fusion; only-fusion runs the fusion phases alone")
    args = ap.parse_args()
    skip = set(args.skip.split(","))
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    print(paired.header(f"stages that grow with the queries ({args.queries:,})"), flush=True)
    ph = Phases(args.pairs)

    from medbench_core.evaluation.scoring import flat_metrics, score
    from medbench_core.evaluation.stats import compare
    from medbench_core.retrieval.ranking import write_trec_file
    from medbench_core.taskdata.task import TaskMeta, make_task

    queries, qrels, runs = synthetic(args.queries)
    if "only-fusion" in skip:
        fusion(runs, ph)
        _save(args, ph)
        return
    task = make_task(
        TaskMeta(name="scale", source="synthetic"),
        queries.with_columns(pl.lit("biomedicine").alias("discipline")),
        pl.DataFrame(schema={"doc_id": pl.Utf8}),
        qrels,
    )
    for name in runs:
        (args.out / name).mkdir()
    with_bare = "bare" not in skip
    import pytrec_eval
    from scipy.stats import bootstrap, permutation_test, ttest_rel

    def run_files():
        for name, run in runs.items():
            run.write_parquet(args.out / name / "run.parquet", statistics=False)
            write_trec_file(run, args.out / name / "run.trec", f"medbench-{name}")

    def bare_run_files():
        for name, run in runs.items():
            run.write_parquet(args.out / name / "bare_run.parquet")

    ph("run files: run.parquet + run.trec / polars Parquet, 2 runs", run_files, bare_run_files if with_bare else None)

    def bare_eval(run: pl.DataFrame) -> tuple[pl.DataFrame, dict]:
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
        rows = [
            {"query_id": q, **{METRICS[k]: res.get(q, {}).get(k, 0.0) for k in METRICS}, "mrr_at_10": rr.get(q, {}).get("recip_rank", 0.0)}
            for q in sorted(judged)
        ]
        frame = pl.DataFrame(rows)
        frame.write_parquet(args.out / "bare_per_query.parquet")
        ci = {}
        for col in frame.columns[1:]:
            b = bootstrap((frame[col].to_numpy(),), np.mean, n_resamples=10_000, vectorized=True, method="percentile", rng=np.random.default_rng(0), batch=100)
            ci[col] = (float(b.confidence_interval.low), float(b.confidence_interval.high))
        return frame, ci

    got = ph(
        "metrics: score (5 metrics, CIs, breakdowns) / pytrec_eval + scipy CIs, 2 runs",
        lambda: {name: score(task, run, args.out / name) for name, run in runs.items()},
        (lambda: {name: bare_eval(run) for name, run in runs.items()}) if with_bare else None,
    )
    results = got["medbench"]
    pq = {name: pl.read_parquet(args.out / name / "per_query.parquet") for name in runs}
    if with_bare:
        for name in runs:
            frame, ci = got["bare"][name]
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

    got = ph(
        "paired tests: compare / scipy bootstrap, ttest_rel, permutation_test", lambda: compare(pq, "bm25", task="scale"), bare_tests if with_bare else None
    )
    stats = got["medbench"]
    print(stats.select("model", "mean", "ci_low", "ci_high", "p_ttest", "p_perm"))
    if with_bare:
        row = stats.filter(pl.col("model") == "other").row(0, named=True)
        assert got["bare"]["ci_other"] == (row["ci_low"], row["ci_high"]) and abs(got["bare"]["p_ttest"] - row["p_ttest"]) < 1e-12
        if "p_perm" in got["bare"]:
            assert got["bare"]["p_perm"] == row["p_perm"], (got["bare"]["p_perm"], row["p_perm"])
    if "mlflow" not in skip:
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        from runtime.mlflow_store import MLflowResource

        store = MLflowResource(tracking_uri=f"sqlite:///{args.out / 'mlflow.db'}", artifact_root=str(args.out / "mlartifacts"))
        store.ensure_store()
        files = [args.out / "bm25" / f for f in ("run.trec", "per_query.parquet", "metrics.json")]

        def bare_log():
            client = MlflowClient(tracking_uri=f"sqlite:///{args.out / 'mlflow.db'}")
            exp = client.get_experiment_by_name("bare-scale") or client.get_experiment(
                client.create_experiment("bare-scale", artifact_location=str(args.out / "bare_artifacts"))
            )
            run = client.create_run(exp.experiment_id, run_name="bm25/scale")
            now = int(time.time() * 1000)
            client.log_batch(run.info.run_id, metrics=[Metric(k, v, now, 0) for k, v in flat_metrics(results["bm25"]).items()], params=[Param("model", "bm25")])
            for f in files:
                client.log_artifact(run.info.run_id, str(f))
            client.set_terminated(run.info.run_id)

        ph(
            "MLflow: log_run (per-query files) / MlflowClient calls",
            lambda: store.log_run(
                "medbench-scale", "key-bm25", "bm25/scale", {"model": "bm25"}, flat_metrics(results["bm25"]), {"medbench.kind": "partition"}, files
            ),
            bare_log if with_bare else None,
        )
    if "plots" not in skip:
        from medbench_core.evaluation.reports import Cell, Significance, build_tables, write_leaderboard

        cells = [Cell(m, "scale", metrics=results[m], per_query=pq[m]) for m in runs]

        def bare_plot():
            import matplotlib

            matplotlib.use("Agg", force=True)
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=(9, 3))
            ax.hist(x - y, bins=41)
            fig.savefig(args.out / "bare_diff.png", dpi=100)
            plt.close(fig)

        ph(
            "reports: write_leaderboard (tables, stats, plots) / a matplotlib histogram (less work)",
            lambda: write_leaderboard(build_tables(cells, list(runs), ["scale"], Significance("bm25")), args.out / "reports"),
            bare_plot if with_bare else None,
        )
    if "fusion" not in skip:
        fusion(runs, ph)
    _save(args, ph)
    print()
    print(ph.table())


def fusion(runs: dict[str, pl.DataFrame], ph: Phases) -> None:
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
    built = [as_run(runs[n]) for n in names]
    for label, ours, theirs in (
        ("rrf k=60", lambda: fuse(runs, "rrf", k=60, top_k=K), {"method": "rrf", "params": {"k": 60}}),
        (
            "wsum min-max",
            lambda: fuse(runs, "wsum", weights=[0.5, 0.5], norm="min-max", top_k=K),
            {"method": "wsum", "norm": "min-max", "params": {"weights": [0.5, 0.5]}},
        ),
    ):
        got = ph(f"fusion {label}: fuse / ranx.fuse on prebuilt Runs", ours, lambda a=theirs: ranx_fuse(built, **a))
        ph(f"fusion {label}: fuse / ranx.fuse with Run.from_df of both runs", ours, lambda a=theirs: ranx_fuse([as_run(runs[n]) for n in names], **a))
        mine, ref = got["medbench"], got["bare"]
        # Same fused score for every (query, document) both kept in their top 100.
        mine = mine.select("query_id", "doc_id", "score")
        want = pl.DataFrame(
            [(q, d, s) for q, docs in ref.run.items() for d, s in docs.items()],
            schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64},
            orient="row",
        )
        joined = mine.join(want, on=["query_id", "doc_id"], suffix="_ranx")
        print(
            f"{label}: {joined.height} of {mine.height} fused rows also in ranx's top 100; "
            f"largest score difference {float((joined['score'] - joined['score_ranx']).abs().max()):.2e}"
        )


def _save(args, ph) -> None:
    if args.json:
        args.json.write_text(json.dumps({"queries": args.queries, "rows": ph.rows}, indent=1))


if __name__ == "__main__":
    main()
