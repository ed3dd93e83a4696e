"""The floor under one partition's overhead: what importing the platform's libraries costs a new process.

    python bench/import_floor.py --pairs 5

``medbench run`` imports Dagster, MLflow and Great Expectations (the orchestration, the tracking
store and the data contracts) beside what the bare library call needs (sentence-transformers). Two
sides, each a new Python process, in interleaved rounds (bench/paired.py):

- **bare**: ``import sentence_transformers, polars``;
- **platform**: the same, then ``import dagster, mlflow, great_expectations``.

The per-round difference of CPU seconds is the floor: no run through the platform can cost less
than the bare run plus it. Divided by the bare partition's CPU time (``--bare-cpu``, default the
123.6 s that bench/bench_overhead.py measured for all-MiniLM-L6-v2 x LiveQA-MedQuAD on 2026-11-27),
it is the smallest overhead ratio that partition can reach.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import paired  # noqa: E402

BARE = "import sentence_transformers, polars"
PLATFORM = BARE + "; import dagster, mlflow, great_expectations"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    paired.add_arguments(ap)
    ap.add_argument("--bare-cpu", type=float, default=123.6, help="CPU seconds of the bare partition the floor is set against (default 123.6)")
    args = ap.parse_args()
    print(paired.header("import floor"))
    sides = {name: (lambda code=code: paired.child([sys.executable, "-c", code])) for name, code in (("bare", BARE), ("platform", PLATFORM))}
    m = paired.measure(sides, pairs=args.pairs, warmup=1)
    extra = [p.cpu - b.cpu for b, p in zip(m.samples["bare"], m.samples["platform"])]
    print(m.table([("platform / bare", "platform", "bare")]))
    med = statistics.median(extra)
    print(f"extra CPU of the platform's imports: {med:.2f} s median ({min(extra):.2f}-{max(extra):.2f}), n = {len(extra)}")
    print(f"smallest overhead a {args.bare_cpu:.1f} CPU-s partition can reach: {(args.bare_cpu + med) / args.bare_cpu:.3f}x")


if __name__ == "__main__":
    main()
