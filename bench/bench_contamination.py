"""The text audit (medbench_core.evaluation.contamination) against datasketch's bare MinHash + LSH calls on the same data.

    python bench/bench_contamination.py --docs 20000 --queries 2000 --manifest 2000 [--pairs 5]

Data: a synthetic BEIR task of ``--docs`` documents (bench/scale_corpus.py: SciFact abstracts,
shuffled and perturbed) and a training manifest of ``--manifest`` texts: half of them test
queries with one word changed, half documents with one word in ten changed, so pairs exist.
Sides, timed in interleaved rounds (bench/paired.py), each from the texts in memory:

- medbench: ``audit_task(task, [], [("texts", manifest)])``: normalising, shingling, signatures,
  datasketch's MinHashLSH over the manifest, every query and document looked up, candidates verified
  on their exact shingle sets; plus reading the manifest file;
- datasketch: per text ``MinHash(num_perm=128).update_batch`` of the same character 5-grams of the
  lower-cased text (its default SHA1 hash), the manifest's into a ``MinHashLSH(threshold=0.8)`` (medbench's threshold),
  every query and document looked up (no verification: what a bare user writes).

Both find the inserted near-duplicates; the figure printed is medbench's time over datasketch's.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import paired  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=2_000)
    ap.add_argument("--manifest", type=int, default=2_000)
    paired.add_arguments(ap)
    args = ap.parse_args()
    print(paired.header(f"contamination text audit vs bare datasketch, {args.docs} docs, {args.queries} queries, {args.manifest} manifest texts"))
    from scale_corpus import generate

    from medbench_core.evaluation.contamination.audit import audit_task
    from medbench_core.evaluation.contamination.texts import JACCARD_THRESHOLD, NUM_PERM, SHINGLE
    from medbench_core.taskdata.catalog import TaskEntry, build_task

    tmp = Path(tempfile.mkdtemp(prefix="bench-contamination-"))
    generate(tmp / "data" / "scale", args.docs, args.queries)
    options = {"split": "test", "query_licence": "CC-BY-4.0", "doc_licence": "ODC-By-1.0"}  # scale_corpus.py: SciFact's licences
    task = build_task(TaskEntry("scale", "beir", "scale", options=options), tmp / "data", tmp / "work")
    rng = random.Random(0)
    queries = task.queries["text"].to_list()
    docs = [" ".join(p for p in (a, b) if p) for a, b in zip(task.corpus["title"].to_list(), task.corpus["text"].to_list())]

    def changed(text: str, every: int) -> str:
        words = text.split()
        for i in range(0, len(words), every):
            words[i] = rng.choice(("alpha", "beta", "gamma"))
        return " ".join(words)

    half = args.manifest // 2
    manifest = [changed(rng.choice(queries), 12) for _ in range(half)] + [changed(rng.choice(docs), 10) for _ in range(args.manifest - half)]
    path = tmp / "manifest.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in manifest))

    def ours():
        from medbench_core.evaluation.contamination import audit

        audit._TEXTS.clear()  # no signatures kept from the last round
        pairs, _ = audit_task(task, [], [("texts", str(path))])
        return pairs.height

    def bare():
        from datasketch import MinHash, MinHashLSH

        def sketch(text: str) -> MinHash:
            t = text.lower()
            m = MinHash(num_perm=NUM_PERM)
            m.update_batch([t[i : i + SHINGLE].encode() for i in range(max(1, len(t) - SHINGLE + 1))])
            return m

        lsh = MinHashLSH(threshold=JACCARD_THRESHOLD, num_perm=NUM_PERM)
        for i, t in enumerate(manifest):
            lsh.insert(i, sketch(t), check_duplication=False)
        return sum(len(lsh.query(sketch(t))) for t in [*queries, *docs])

    m = paired.measure({"medbench": lambda: paired.call(ours), "datasketch": lambda: paired.call(bare)}, pairs=args.pairs)
    print(f"pairs found: medbench {m.samples['medbench'][0].value} (verified), datasketch {m.samples['datasketch'][0].value} (LSH candidates)")
    print(m.table([("medbench / datasketch", "medbench", "datasketch")], memory=True))


if __name__ == "__main__":
    main()
