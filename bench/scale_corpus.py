"""A seeded synthetic BEIR task of any size, built from the SciFact abstracts (for bench/bench_scale.py).

    python bench/scale_corpus.py --docs 100000 --queries 16000 --out /tmp/medbench-scale/data/scale_100k

Each document is one SciFact abstract (title + text, chosen uniformly), its words shuffled, one
word in ten replaced by a word drawn from the whole SciFact word stream (so the frequencies stay
SciFact's and no two documents are bags of the same words), plus two identifier-like tokens
(``zx`` + a base-26 code drawn from a Zipf(1.2) law over 2**24 codes, like gene or compound
names) so that the vocabulary keeps growing with the corpus as real text's does. Each query is 12
consecutive words of one document (distinct documents), judged relevant (1) to it alone.
Document ids ``d<n>``, query ids ``q<n>``; files ``corpus.jsonl``, ``queries.jsonl``,
``qrels/test.tsv``. Blocks of 10,000 documents each draw from ``default_rng([seed, block])``:
the same arguments give the same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MEDBENCH_SHARED") or ROOT.parent / "shared")
BLOCK = 10_000
QUERY_WORDS = 12
REPLACE = 0.1
CODES = 2**24
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _code(n: int) -> str:
    out = []
    for _ in range(5):
        n, r = divmod(n, 26)
        out.append(LETTERS[r])
    return "zx" + "".join(out)


def _abstracts(source: Path) -> tuple[list[list[str]], list[list[str]]]:
    titles, texts = [], []
    with open(source / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            obj = json.loads(line)
            titles.append((obj.get("title") or "").split())
            texts.append((obj.get("text") or "").split())
    return titles, texts


def generate(out: Path, n_docs: int, n_queries: int, seed: int = 0, source: Path | None = None) -> dict:
    """Write the task into ``out`` (atomically: a temporary folder renamed); returns its description."""
    source = source or SHARED / "data" / "scifact"
    if n_queries > n_docs:
        raise SystemExit(f"--queries {n_queries} > --docs {n_docs}: each query comes from its own document")
    titles, texts = _abstracts(source)
    stream = np.array([w for t in texts for w in t], dtype=object)
    rng = np.random.default_rng([seed, 0])
    query_docs = np.sort(rng.choice(n_docs, n_queries, replace=False))
    tmp = out.with_name(out.name + ".tmp")
    (tmp / "qrels").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    qi = 0
    with (
        open(tmp / "corpus.jsonl", "w", encoding="utf-8") as fc,
        open(tmp / "queries.jsonl", "w", encoding="utf-8") as fq,
        open(tmp / "qrels" / "test.tsv", "w", encoding="utf-8") as fr,
    ):
        fr.write("query-id\tcorpus-id\tscore\n")
        for start in range(0, n_docs, BLOCK):
            stop = min(start + BLOCK, n_docs)
            r = np.random.default_rng([seed, 1, start])
            picks = r.integers(0, len(texts), stop - start)
            codes = np.minimum(r.zipf(1.2, (stop - start, 2)), CODES) - 1
            lines = []
            for j, a in enumerate(picks.tolist()):
                words = np.array(texts[a], dtype=object)
                words = words[r.permutation(len(words))]
                swap = np.flatnonzero(r.random(len(words)) < REPLACE)
                words[swap] = stream[r.integers(0, len(stream), len(swap))]
                ids = [_code(int(c)) for c in codes[j]]
                body = list(words)
                for c in ids:
                    body.insert(int(r.integers(0, len(body) + 1)), c)
                title = [titles[a][i] for i in r.permutation(len(titles[a]))]
                d = start + j
                lines.append(json.dumps({"_id": f"d{d}", "title": " ".join(title), "text": " ".join(body)}) + "\n")
                if qi < n_queries and query_docs[qi] == d:
                    at = int(r.integers(0, max(1, len(body) - QUERY_WORDS + 1)))
                    fq.write(json.dumps({"_id": f"q{qi}", "text": " ".join(body[at : at + QUERY_WORDS])}) + "\n")
                    fr.write(f"q{qi}\td{d}\t1\n")
                    qi += 1
            fc.write("".join(lines))
    info = {"docs": n_docs, "queries": n_queries, "seed": seed, "source": str(source), "seconds": round(time.perf_counter() - t0, 1)}
    (tmp / "GENERATED.json").write_text(json.dumps(info, indent=1) + "\n")
    if out.exists():
        import shutil

        shutil.rmtree(out)
    os.replace(tmp, out)
    return info


def ensure(out: Path, n_docs: int, n_queries: int, seed: int = 0) -> Path:
    """``out`` holding the task of these arguments, generated only when it is not there yet."""
    marker = out / "GENERATED.json"
    if marker.exists():
        got = json.loads(marker.read_text())
        if (got["docs"], got["queries"], got["seed"]) == (n_docs, n_queries, seed):
            return out
    generate(out, n_docs, n_queries, seed)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, required=True)
    ap.add_argument("--queries", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    print(json.dumps(generate(args.out, args.docs, args.queries, args.seed)))


if __name__ == "__main__":
    main()
