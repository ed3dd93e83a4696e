"""The text audit (medbench_core.evaluation.contamination) against datasketch's bare MinHash + LSH calls on the same data.

    python bench/bench_contamination.py --docs 200000 --queries 16000 --manifest 4000 [--pairs 5] [--data DIR] [--crc32]

Data: a synthetic BEIR task of ``--docs`` documents (bench/scale_corpus.py: SciFact abstracts,
shuffled and perturbed, about 1,500 characters each) and a training manifest of ``--manifest``
texts: half of them test queries with one word in twelve changed, half documents with one word in
ten changed, so pairs exist. With ``--data DIR`` the task and the manifest are written once under
DIR and reused by later runs of the same arguments (the 1.2M-document task is 1.9 GB of JSONL).
Sides, timed in interleaved rounds (bench/paired.py) in this process, each from the task's frames:

- medbench: ``audit_task(task, [], [("texts", manifest)])``: the task's texts out of its frames,
  its content hash, normalising, shingling, numpy signatures, datasketch's ``MinHashLSH`` over the
  manifest (read from its file), every query and document looked up, every candidate verified on
  its exact shingle set (the task's texts in blocks of ``audit.BLOCK_TEXTS`` rows, dropped after each
  block; its signatures kept, as ``medbench run`` keeps them for the other tasks' audits);
- datasketch, written as its documentation advises at its best: the same normalised texts
  (medbench's ``normalise``: NFKC, case-folded, punctuation to spaces) and the same character
  5-gram shingles, each text's *set* of shingles as bytes into ``MinHash.generator(...,
  num_perm=128)`` (its default SHA1 hash; one permutation set for all texts); the manifest's
  sketches as ``LeanMinHash`` into ``MinHashLSH(threshold=0.8, num_perm=128)`` (medbench's
  threshold, so the same bands and rows) through ``insertion_session``; every query and document
  sketched and looked up as it is read (the corpus streamed from the frame 10,000 rows at a time,
  no sketch kept), nothing verified (what a bare user writes);
- with ``--crc32``, a third side: the same datasketch calls with ``hashfunc=zlib.crc32`` (the
  cheapest per-shingle hash a user can pass; SHA1 is most of datasketch's time).

What differs: the shingle hashes (medbench: a 32-bit polynomial of the code points, datasketch:
SHA1), so the two sides' candidates differ by LSH chance; medbench verifies its candidates and
datasketch does not. Each run prints each side's sample as it ends (a long run shows its progress;
the datasketch side also its CPU per document every 100,000 documents), the process's memory
before the rounds (the frames both sides read), and the ratios medbench / datasketch. Between
sides the sketches are dropped and freed memory handed back (``malloc_trim``) so that a side's
peak is its own plus that floor.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import paired  # noqa: E402

SLICE = 10_000  # corpus rows the datasketch side turns into Python strings at a time
PROGRESS = 100_000  # documents between two progress lines of the datasketch side


def _trim() -> None:
    """Collect garbage and give freed heap back to the system (glibc), so the next side's peak starts from the floor."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=2_000)
    ap.add_argument("--manifest", type=int, default=2_000)
    ap.add_argument("--data", type=Path, default=None, help="folder keeping the generated task and manifest between runs (default: a new temporary folder)")
    ap.add_argument("--crc32", action="store_true", help="a third side: datasketch with hashfunc=zlib.crc32")
    paired.add_arguments(ap)
    args = ap.parse_args()
    print(
        paired.header(f"contamination text audit vs bare datasketch, {args.docs} docs, {args.queries} queries, {args.manifest} manifest texts"),
        flush=True,
    )
    import zlib

    from datasketch import LeanMinHash, MinHash, MinHashLSH
    from scale_corpus import ensure

    from medbench_core.evaluation.contamination import audit
    from medbench_core.evaluation.contamination.audit import audit_task
    from medbench_core.evaluation.contamination.texts import JACCARD_THRESHOLD, NUM_PERM, normalise, shingles
    from medbench_core.taskdata.catalog import TaskEntry, build_task

    base = args.data or Path(tempfile.mkdtemp(prefix="bench-contamination-"))
    name = f"scale_{args.docs}_{args.queries}"
    t0 = time.perf_counter()
    ensure(base / "data" / name, args.docs, args.queries)
    options = {"split": "test", "query_licence": "CC-BY-4.0", "doc_licence": "ODC-By-1.0"}  # scale_corpus.py: SciFact's licences
    task = build_task(TaskEntry(name, "beir", name, options=options), base / "data", base / "work")
    rng = random.Random(0)
    queries = task.queries["text"].to_list()
    corpus = task.corpus.select("title", "text")

    def doc(i: int) -> str:
        a, b = corpus.row(i)
        return " ".join(p for p in (a, b) if p)

    def changed(text: str, every: int) -> str:
        words = text.split()
        for i in range(0, len(words), every):
            words[i] = rng.choice(("alpha", "beta", "gamma"))
        return " ".join(words)

    half = args.manifest // 2
    manifest = [changed(rng.choice(queries), 12) for _ in range(half)] + [changed(doc(rng.randrange(corpus.height)), 10) for _ in range(args.manifest - half)]
    path = base / f"manifest_{name}_{args.manifest}.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in manifest))
    print(f"task and manifest ready in {time.perf_counter() - t0:.0f} s ({base})", flush=True)

    def ours():
        audit._TEXTS.clear()  # no texts or signatures kept from the last round
        audit._SIGNATURES.clear()
        try:
            pairs, _ = audit_task(task, [], [("texts", str(path))])
            return pairs.height
        finally:
            audit._TEXTS.clear()
            audit._SIGNATURES.clear()

    def probe_texts():
        """Every query, then every document (title and text), read from the frames as the audit reads them."""
        yield from queries
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for lo in range(0, corpus.height, SLICE):
            if lo and lo % PROGRESS == 0:  # a long round's rate so far (its CPU per text) while it runs
                cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
                print(f"  datasketch: {lo} documents in {cpu:.0f} s CPU, {wall:.0f} s wall ({1000 * cpu / lo:.2f} ms CPU a document)", flush=True)
            part = corpus.slice(lo, SLICE)
            yield from (" ".join(p for p in (a, b) if p) for a, b in zip(part["title"].to_list(), part["text"].to_list()))

    def shingle_sets(texts):
        for t in texts:
            n = normalise(t)
            if n:
                yield [s.encode() for s in set(shingles(n))]

    def bare(**minhash_kwargs):
        def run():
            lsh = MinHashLSH(threshold=JACCARD_THRESHOLD, num_perm=NUM_PERM)
            with lsh.insertion_session() as session:
                for i, m in enumerate(MinHash.generator(shingle_sets(manifest), num_perm=NUM_PERM, **minhash_kwargs)):
                    session.insert(i, LeanMinHash(m), check_duplication=False)
            return sum(len(lsh.query(m)) for m in MinHash.generator(shingle_sets(probe_texts()), num_perm=NUM_PERM, **minhash_kwargs))

        return run

    def timed(fn):
        def side():
            _trim()
            try:
                return paired.call(fn)
            finally:
                _trim()

        return side

    sides = {"medbench": timed(ours), "datasketch": timed(bare())}
    if args.crc32:
        sides["datasketch-crc32"] = timed(bare(hashfunc=zlib.crc32))
    _trim()
    print(f"process memory before the rounds (task frames, manifest, imports): {_rss() / 1e9:.2f} GB", flush=True)

    def report(r: int, side: str, s: paired.Sample) -> None:
        peak = f"{s.peak_rss / 1e9:.2f} GB" if s.peak_rss else "-"
        print(f"round {r + 1} {side}: CPU {s.cpu:.1f} s, wall {s.wall:.1f} s, peak {peak}, found {s.value} ({time.strftime('%H:%M:%S')})", flush=True)

    m = paired.measure(sides, pairs=args.pairs, report=report)
    found = ", ".join(f"{k} {v[0].value}" for k, v in m.samples.items())
    print(f"pairs found: {found} (medbench: verified at Jaccard >= {JACCARD_THRESHOLD}; datasketch: LSH candidates)")
    rows = [("medbench / datasketch", "medbench", "datasketch")]
    if args.crc32:
        rows.append(("medbench / datasketch-crc32", "medbench", "datasketch-crc32"))
    print(m.table(rows, memory=True))


if __name__ == "__main__":
    main()
