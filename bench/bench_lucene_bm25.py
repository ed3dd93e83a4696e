"""r2med-bm25 (kind lucene-bm25) against bare bm25s: index and search, paired and interleaved.

    nice -n 10 python bench/bench_lucene_bm25.py --docs 100000 --queries 2000 --pairs 5
    nice -n 10 python bench/bench_lucene_bm25.py --docs 300000 --queries 2000 --pairs 3

The corpus is bench/scale_corpus.py's seeded synthetic BEIR task (shuffled SciFact abstracts,
made once under --work). Each side runs in a fresh process, one after the other, the order
alternating pair by pair (A B, B A, ...):

- **bm25s**: ``bm25s.tokenize(stopwords="en", stemmer=PyStemmer english)`` and
  ``BM25(method="lucene", k1=1.5, b=0.75).index`` of title + text (the index); the queries
  tokenized the same way and ``retrieve(k=100, n_threads=1)`` (the search): bench_scale.py's bare side;
- **r2med-bm25**: :func:`medbench_core.retrieval.lucene_bm25_index.fit` (Lucene's analysis ported,
  gensim's weights; the index) and the kind's search: each query analysed, scored against every
  document and its top 100 taken with the doc-id tie rule (:func:`lucene_bm25_index.search_terms`).

Each process prints its wall and CPU seconds per phase and its peak RSS; the script prints each
pair and the median and range of the ratios (r2med-bm25 / bm25s) of index, search and both (wall),
and of both in CPU seconds (what a loaded, shared machine measures best).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def _load(data: Path, n_queries: int) -> tuple[list[str], list[str], list[str], list[str]]:
    docs, ids = [], []
    with open(data / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            o = json.loads(line)
            ids.append(o["_id"])
            docs.append((f"{o.get('title') or ''} {o.get('text') or ''}").strip())
    qids, queries = [], []
    with open(data / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            o = json.loads(line)
            qids.append(o["_id"])
            queries.append(o["text"])
            if len(queries) >= n_queries:
                break
    return docs, ids, qids, queries


def _clock() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime + r.ru_stime


def side(name: str, data: Path, n_queries: int) -> dict:
    """One side's index and search in this process."""
    docs, ids, qids, queries = _load(data, n_queries)
    out = {}
    w0, c0 = _clock()
    if name == "bm25s":
        import bm25s
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
        tokens = bm25s.tokenize(docs, stopwords="en", stemmer=stemmer, show_progress=False)
        retriever = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
        retriever.index(tokens, show_progress=False)
        del tokens
        w1, c1 = _clock()
        qtok = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
        retriever.retrieve(qtok, k=100, n_threads=1, show_progress=False)
    else:
        from medbench_core.retrieval import lucene_bm25_index
        from medbench_core.retrieval.lucene_analysis import EnglishAnalyzer

        index = lucene_bm25_index.fit(docs)
        w1, c1 = _clock()
        analyzer = EnglishAnalyzer()
        lucene_bm25_index.search_terms(index, qids, [analyzer.analyze(q) for q in queries], ids, 100)
    w2, c2 = _clock()
    out.update(index_wall=w1 - w0, index_cpu=c1 - c0, search_wall=w2 - w1, search_cpu=c2 - c1)
    out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--work", default=os.environ.get("MEDBENCH_SCALE_WORK") or "/tmp/medbench-scale")
    parser.add_argument("--side", default="", help=argparse.SUPPRESS)
    parser.add_argument("--data", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(side(args.side, Path(args.data), args.queries)))
        return
    from bench_scale import size_name
    from scale_corpus import ensure

    data = ensure(Path(args.work) / "data" / f"scale_{size_name(args.docs)}_{size_name(args.docs // 10)}", args.docs, args.docs // 10)
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} load {os.getloadavg()[0]:.1f}: {args.docs} documents, {args.queries} queries, {args.pairs} pairs"
    )
    ratios: dict[str, list[float]] = {"index": [], "search": [], "total": [], "total_cpu": []}
    for p in range(args.pairs):
        order = ["bm25s", "r2med-bm25"] if p % 2 == 0 else ["r2med-bm25", "bm25s"]
        got = {}
        for name in order:
            proc = subprocess.run(
                [sys.executable, __file__, "--side", name, "--data", str(data), "--queries", str(args.queries)], capture_output=True, text=True, check=True
            )
            got[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        a, b = got["bm25s"], got["r2med-bm25"]
        r = {
            "index": b["index_wall"] / a["index_wall"], "search": b["search_wall"] / a["search_wall"],
            "total": (b["index_wall"] + b["search_wall"]) / (a["index_wall"] + a["search_wall"]),
            # CPU seconds: on a shared, loaded machine the wall clock mostly measures the others
            "total_cpu": (b["index_cpu"] + b["search_cpu"]) / (a["index_cpu"] + a["search_cpu"]),
        }  # fmt: skip
        for k, v in r.items():
            ratios[k].append(v)
        print(
            f"pair {p + 1} ({' then '.join(order)}), load {os.getloadavg()[0]:.1f}: bm25s index {a['index_wall']:.1f} s search {a['search_wall']:.1f} s "
            f"(peak {a['peak_rss_gb']:.2f} GB) | r2med-bm25 index {b['index_wall']:.1f} s search {b['search_wall']:.1f} s (peak {b['peak_rss_gb']:.2f} GB) "
            f"| CPU bm25s {a['index_cpu']:.1f}+{a['search_cpu']:.1f} s, r2med-bm25 {b['index_cpu']:.1f}+{b['search_cpu']:.1f} s "
            f"| ratios index {r['index']:.2f} search {r['search']:.2f} total {r['total']:.2f} total CPU {r['total_cpu']:.2f}",
            flush=True,
        )
    for k, v in ratios.items():
        print(f"{k}: median ratio {statistics.median(v):.2f} (range {min(v):.2f}-{max(v):.2f}, n={len(v)})")


if __name__ == "__main__":
    main()
