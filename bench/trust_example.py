"""The worked example of docs/trust.md: what BM25's cells on the bundled text tasks rest on, and a
filled layer from a judge, with the agreement it earns.

    HF_HUB_OFFLINE=1 nice -n 10 python bench/trust_example.py

1. BM25 (models.yaml's entry: bm25s, Lucene scoring) on scifact, liveqa_medquad and frenchmedmcqa
   as tasks.yaml curates them: nDCG@10, its exact bounds, Judged@10, holes, and bpref and condensed
   nDCG@10 over the queries with a judged non-relevant document, as the reports show them (beside
   ir_measures' means over all queries) (the metrics stage's own code: ``score``).
2. On the first 60 judged SciFact queries, two judges over the same pool (the unjudged top 10 of
   BM25 + 40 calibration pairs): an oracle-like stub that grades a pair relevant when its abstract
   shares the claim's rarest word, and the real LLM path on a seeded random-weight Llama (no real
   weights are reachable offline: it shows what an uninformative judge's agreement looks like).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "core"))


def main() -> None:
    import argparse

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    import polars as pl

    from medbench_core.evaluation.judging.judge import Verdict
    from medbench_core.evaluation.judging.layers import score_filled
    from medbench_core.evaluation.judging.spec import JudgementSpec
    from medbench_core.evaluation.judging.stage import build_judgements, load_judge
    from medbench_core.evaluation.scoring import score
    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve
    from medbench_core.taskdata.catalog import build_task, load_catalog
    from medbench_core.taskdata.task import make_task

    catalog = load_catalog(ROOT / "tasks.yaml")
    spec = next(s for s in load_registry(ROOT / "models.yaml") if s.name == "bm25")
    tmp = Path(tempfile.mkdtemp())
    runs = {}
    print("| task | queries | nDCG@10 | bounds | Judged@10 | holes@10 | queries with a judged non-relevant | bpref | condensed nDCG@10 | "
          "bpref, condensed (all queries: ir_measures') |")  # fmt: skip
    for name in ("scifact", "liveqa_medquad", "frenchmedmcqa"):
        task = build_task(catalog.task(name), ROOT.parent / "shared" / "data", tmp / name)
        d = {s: tmp / name / s for s in ("emb", "index", "run", "metrics")}
        for f in d.values():
            f.mkdir(parents=True, exist_ok=True)
        embed_corpus(spec, task, d["emb"])
        build_corpus_index(spec, d["emb"], d["index"])
        run, _ = retrieve(spec, task, d["emb"], d["index"], d["run"], k=100)
        m = score(task, run, d["metrics"])
        mean, holes = m["mean"], m["holes"]
        nonrel = holes["judged_nonrelevant"]
        shown = {k: ("-" if v is None else f"{v:.4f}") for k, v in nonrel["mean"].items()}
        print(f"| {name} | {m['n_queries']} | {mean['ndcg_at_10']:.4f} | [{mean['ndcg_lower_at_10']:.4f}, {mean['ndcg_upper_at_10']:.4f}] | "
              f"{mean['judged_at_10']:.3f} | {holes['holes_at_10']} | {nonrel['queries_with']} | {shown['bpref_at_100']} | "
              f"{shown['ndcg_condensed_at_10']} | {mean['bpref_at_100']:.4f}, {mean['ndcg_condensed_at_10']:.4f} |")  # fmt: skip
        runs[name] = (task, run)

    task, run = runs["scifact"]
    qids = task.qrels["query_id"].unique(maintain_order=True).head(60).to_list()
    small = make_task(task.meta, task.queries.filter(pl.col("query_id").is_in(qids)), task.corpus, task.qrels.filter(pl.col("query_id").is_in(qids)))
    small_run = run.filter(pl.col("query_id").is_in(qids))
    texts_d = dict(zip(small.corpus["doc_id"], small.doc_text()))
    df: dict[str, int] = {}
    for t in texts_d.values():
        for w in set(t.lower().split()):
            df[w] = df.get(w, 0) + 1

    class RareWordJudge:
        revision = "rare-word-v1"

        def judge(self, queries, passages, cache=None, progress=False):
            out = []
            for q, p in zip(queries, passages):
                words = [w for w in q.lower().split() if len(w) > 3 and w in df]
                rare = min(words, key=lambda w: df[w]) if words else ""
                g = 3 if rare and rare in p.lower().split() else 0
                out.append(Verdict(g, f"##final score: {g}"))
            return out, {"judged": len(out), "seconds": 0.0, "seconds_total": 0.0}

    pool = {"models": ["bm25"], "depth": 10, "calibration": 40, "seed": 0}
    for label, jspec, judge in (
        ("rare-word stub", JudgementSpec(name="stub", source="generate", judge="rare-word", pool=pool, base_dir=str(ROOT)), RareWordJudge()),
        ("random-weight Llama", None, None),
    ):
        if jspec is None:
            from _expansion_fixtures import tiny_lm

            folder = tiny_lm(tmp / "tiny-judge", hidden=64, layers=2)
            jspec = JudgementSpec(name="tiny", source="generate", judge=str(folder), pool=pool, base_dir=str(ROOT))
            judge = load_judge(jspec)
        frame, info = build_judgements(jspec, small, runs={"bm25": small_run}, run_keys={"bm25": "bundled"}, judge=judge)
        (tmp / f"h-{jspec.name}").mkdir()
        human = score(small, small_run, tmp / f"h-{jspec.name}")["mean"]
        filled = score_filled(small, small_run, frame)["mean"]
        a = info["agreement"]
        print(f"{label}: {info['n_fill']} fill + {info['n_calibration']} calibration pairs, {info['n_fill_relevant']} fill pairs graded relevant, "
              f"{info['n_unparsed']} unparsed; kappa {a['kappa_quadratic']} {a['kappa_ci']}, alpha {a['alpha_ordinal']} {a['alpha_ci']}; "
              f"nDCG@10 human {human['ndcg_at_10']:.4f} [{human['ndcg_lower_at_10']:.4f}, {human['ndcg_upper_at_10']:.4f}] J@10 {human['judged_at_10']:.3f} -> "
              f"filled {filled['ndcg_at_10']:.4f} [{filled['ndcg_lower_at_10']:.4f}, {filled['ndcg_upper_at_10']:.4f}] J@10 {filled['judged_at_10']:.3f}; "
              f"seconds {info['seconds']}")  # fmt: skip


if __name__ == "__main__":
    main()
