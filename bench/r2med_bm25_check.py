"""R2MED's own BM25 code against `medbench run`'s `r2med-bm25`, on tasks as medbench curates them.

    MEDBENCH_MODELS=<a models.yaml with r2med-bm25> medbench run --models r2med-bm25 --tasks scifact,liveqa_medquad
    python bench/r2med_bm25_check.py --tasks scifact,liveqa_medquad [--data DIR]

For each task the curated task is built in-process (tasks.yaml, ../shared/data), and R2MED's
``retrieval_bm25`` (eval_BM25.py lines 58-85 at 62b7074: pyserini's analyser, gensim's
LuceneBM25Model(k1=0.9, b=0.4) on documents and query, SparseMatrixSimilarity, top 100 by a stable
sort) runs on its document texts (title + text, as medbench joins them), queries and qrels; its
``calculate_retrieval_metrics`` (lines 12-56: pytrec_eval's ndcg_cut over the queries pytrec_eval
scores, rounded to 5 decimals) gives R2MED's figure. medbench's figure is the metrics.json that
`medbench run` stored for r2med-bm25 on the task (under --data, default data/). Both are printed
with their difference and with how many of the 100 documents per query differ.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def r2med_metrics(results: dict, qrels: dict) -> dict:
    """R2MED's calculate_retrieval_metrics (eval_BM25.py lines 12-56), the nDCG@10 part."""
    import pytrec_eval

    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.1,10,25,50,100", "recall.1,10,25,50,100"})
    scores = evaluator.evaluate(results)
    return {
        "ndcg_at_10": round(sum(s["ndcg_cut_10"] for s in scores.values()) / len(scores), 5),
        "recall_at_100": round(sum(s["recall_100"] for s in scores.values()) / len(scores), 5),
        "ndcg_at_10_unrounded": sum(s["ndcg_cut_10"] for s in scores.values()) / len(scores),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="scifact,liveqa_medquad")
    parser.add_argument("--data", default=str(ROOT / "data"))
    parser.add_argument("--model", default="r2med-bm25")
    args = parser.parse_args()

    from medbench_core.taskdata.catalog import build_task, load_catalog
    from tests.core.pyserini_reference import r2med_bm25

    catalog = load_catalog(ROOT / "tasks.yaml")
    for name in args.tasks.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            task = build_task(catalog.task(name), ROOT.parent / "shared" / "data", tmp)
        docs, doc_ids = list(task.doc_text()), task.corpus["doc_id"].to_list()
        qids, queries = task.queries["query_id"].to_list(), task.queries["text"].fill_null("").to_list()
        qrels: dict[str, dict[str, int]] = {}
        for q, d, r in task.qrels.select("query_id", "doc_id", "relevance").iter_rows():
            qrels.setdefault(str(q), {})[d] = int(r)
        results = {}
        for qid, row in zip(qids, r2med_bm25(docs, queries)):
            top = sorted(zip(doc_ids, row), key=lambda x: x[1], reverse=True)[:100]  # eval_BM25.py line 80
            results[str(qid)] = dict(top)
        theirs = r2med_metrics(results, qrels)
        found = sorted((Path(args.data) / "artifacts" / args.model / name / "metrics").glob("*/metrics.json"), key=lambda p: p.stat().st_mtime)
        if not found:
            print(f"{name}: no metrics.json of {args.model} under {args.data}; run medbench first")
            continue
        ours = json.loads(found[-1].read_text())
        ours_ndcg = ours.get("mean", ours).get("ndcg_at_10") if isinstance(ours.get("mean", ours), dict) else None
        run_dir = sorted((Path(args.data) / "artifacts" / args.model / name / "run").glob("*/"), key=lambda p: p.stat().st_mtime)[-1]
        import polars as pl

        run_files = list(run_dir.glob("*.parquet"))
        same = differ = 0
        if run_files:
            run = pl.read_parquet(run_files[0])
            for qid, group in run.group_by("query_id"):
                mine = set(group["doc_id"].to_list())
                if mine == set(results[str(qid[0])]):
                    same += 1
                else:
                    differ += 1
        print(
            f"{name}: {len(qids)} queries ({len(qrels)} judged), {len(docs)} documents | nDCG@10 R2MED's code {theirs['ndcg_at_10']:.5f} "
            f"({theirs['ndcg_at_10_unrounded']:.6f}), medbench {args.model} {ours_ndcg} | top-100 sets equal for {same} queries, differ for {differ}"
        )


if __name__ == "__main__":
    main()
