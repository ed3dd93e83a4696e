"""Where the memory of one BM25 partition goes: medbench_core's functions phase by phase, in one process.

    python bench/scale_profile.py --data /tmp/medbench-scale/data/scale_100k_16k [--out DIR] [--json FILE]

The functions the main job's steps call, in their order, on a synthetic task of bench/scale_corpus.py:
the BEIR reader, the content hash, ``save_task`` and ``load_task`` (what every step does first),
the task contract (its tables built in polars, their pandas copies, the GX run), the overlap
contract, ``applicability`` (every step asks it), BM25's corpus text, tokenisation, vocabulary and
bm25s index, saving and loading the index, the search, the TREC file, ``score`` (metrics, CIs,
breakdowns) and the leaderboard's ``compare``. Each phase reports its time, the process's RSS
after it, and its peak (VmHWM, reset at the phase's start: exact) above the RSS it started from;
before each phase the collector runs and ``malloc_trim(0)`` hands free heap back to the OS, so
that a phase cannot hide its allocations in memory an earlier phase freed (polars' own allocator
keeps some: its figures are lower bounds).
Objects a phase returns are kept as the pipeline keeps them, and dropped where it drops them.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# MEDBENCH_CODE: profile another checkout's medbench_core (e.g. a `git archive` of an earlier commit).
sys.path.insert(0, os.environ.get("MEDBENCH_CODE") or str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scale_probe import gb, peak_and_reset, rss  # noqa: E402

BM25 = {"k1": 1.5, "b": 0.75, "method": "lucene", "stopwords": "en", "stemmer": "english"}


_LIBC = ctypes.CDLL("libc.so.6")


class Phases:
    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.pid = os.getpid()

    def __call__(self, phase: str, fn, *args, **kwargs):
        gc.collect()
        _LIBC.malloc_trim(0)  # free heap back to the OS, so that a phase's peak is its own
        start = rss(self.pid)
        peak_and_reset(self.pid)
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn(*args, **kwargs)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        peak = peak_and_reset(self.pid)
        row = {
            "phase": phase,
            "seconds": round(seconds, 2),
            "cpu_s": round(cpu, 2),
            "rss_start_gb": gb(start),
            "peak_gb": gb(peak),
            "extra_gb": gb(peak - start),
            "rss_after_gb": gb(rss(self.pid)),
        }
        self.rows.append(row)
        print(
            f"{phase:<36}{row['seconds']:>8.2f}s (CPU {row['cpu_s']:.2f}s)  start {row['rss_start_gb']:6.2f}  "
            f"peak {row['peak_gb']:6.2f}  (+{row['extra_gb']:.2f})  after {row['rss_after_gb']:6.2f} GB",
            flush=True,
        )
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("/tmp/medbench-scale/profile"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--skip", default="", help="comma-separated phases groups to skip: contract,overlap,compare")
    args = ap.parse_args()
    skip = set(args.skip.split(","))
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    ph = Phases()

    def imports():
        import bm25s  # noqa: F401
        import great_expectations  # noqa: F401
        import polars  # noqa: F401
        import scipy.stats  # noqa: F401

        from medbench_core.evaluation import scoring  # noqa: F401
        from medbench_core.retrieval import stages  # noqa: F401

    ph("imports (polars, bm25s, GX, scipy)", imports)
    from medbench_core.evaluation.scoring import score
    from medbench_core.retrieval import bm25_index
    from medbench_core.retrieval.model_registry import ModelSpec
    from medbench_core.retrieval.ranking import write_trec
    from medbench_core.retrieval.stages import applicability
    from medbench_core.taskdata.readers.beir import BeirOptions, read_beir
    from medbench_core.taskdata.task import load_task, save_task

    options = BeirOptions(name="scale", split="test", query_licence="CC-BY-4.0", doc_licence="ODC-By-1.0", discipline="biomedicine")
    task = ph("read_beir (reader, frames)", read_beir, args.data, options)
    digest = ph("content_hash", task.content_hash)
    ph("save_task (Parquet)", save_task, task, args.out / "task")
    del task
    task = ph("load_task (each step's first act)", load_task, args.out / "task")
    assert task.content_hash() == digest
    if "contract" not in skip:
        from medbench_core.taskdata.contracts import validate_task
        from medbench_core.taskdata.contracts.task_suite import _image_checker, _pair_table, _record_table
        from medbench_core.taskdata.licences import DEFAULT_POLICY

        def tables():
            check = _image_checker(task)
            out = [_record_table(task, t, DEFAULT_POLICY, False, check) for t in ("queries", "corpus")]
            return [*out, _pair_table(task, "qrels")]

        t = ph("contract: derived tables (polars)", tables)
        ph("contract: pandas copies of the tables", lambda: [x.frame.to_pandas() for x in t])
        del t
        res = ph("contract: validate_task (whole)", validate_task, task, args.out / "gate")
        assert res.passed, res.message
    if "overlap" not in skip:
        from medbench_core.taskdata.contracts import validate_tasks

        res = ph("overlap: validate_tasks", validate_tasks, [task], args.out / "overlap")
    spec = ModelSpec(name="bm25", kind="bm25", path="", revision="bm25s-lucene", settings=dict(BM25))
    ph("applicability (each step)", applicability, spec, task)
    texts = ph("bm25: doc_text", task.doc_text)
    tokens = ph("bm25: tokenize (strings)", bm25_index.tokenize, texts, BM25)
    del texts

    def vocab_ids():
        vocab = {tok: i for i, tok in enumerate(sorted({t for doc in tokens for t in doc}))}
        return [[vocab[t] for t in doc] for doc in tokens], vocab

    ids, vocab = ph("bm25: sorted vocabulary + id lists", vocab_ids)
    tokens = None  # drop the reference to free the memory (not `del`: vocab_ids() names it)

    def index():
        r = bm25_index._bm25s().BM25(k1=1.5, b=0.75, method="lucene")
        r.index((ids, vocab), show_progress=False)
        return r

    retriever = ph("bm25: bm25s index", index)
    ids = vocab = None  # as above (index() names them); the retriever keeps what it needs
    ph("bm25: save", bm25_index.save, retriever, args.out / "bm25")
    del retriever
    gc.collect()
    retriever = ph("bm25: load", bm25_index.load, args.out / "bm25")
    doc_ids = task.corpus["doc_id"].to_list()
    run = ph(
        "retrieve: search (k=100)",
        bm25_index.search,
        retriever,
        task.queries["query_id"].to_list(),
        task.queries["text"].fill_null("").to_list(),
        doc_ids,
        100,
        BM25,
    )
    del retriever, doc_ids
    ph("retrieve: run.parquet", run.write_parquet, args.out / "run.parquet", statistics=False)
    ph("retrieve: run.trec", lambda: (args.out / "run.trec").write_text(write_trec(run, "medbench-bm25")))
    (args.out / "metrics").mkdir()
    result = ph("score: metrics, CIs, breakdowns", score, task, run, args.out / "metrics")
    print("nDCG@10", result["mean"]["ndcg_at_10"])
    if "compare" not in skip:
        import polars as pl

        from medbench_core.evaluation.stats import compare

        pq = pl.read_parquet(args.out / "metrics" / "per_query.parquet")
        other = pq.with_columns(pl.col("ndcg_at_10").shuffle(seed=1))
        ph("leaderboard: compare (2 models)", compare, {"bm25": pq, "other": other}, "bm25", task="scale")
    if args.json:
        args.json.write_text(json.dumps({"data": str(args.data), "rows": ph.rows}, indent=1))


if __name__ == "__main__":
    main()
