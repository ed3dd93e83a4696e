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

With ``--work`` a third side, **work** (``bench/platform_floor_work.py``), makes the same imports and then
has the three libraries do one partition's bookkeeping by their bare calls (four Dagster runs on a
SQLite instance, the task's GX checkpoints with data docs, two MLflow runs): the floor of what the
platform's libraries cost a run, its imports included, before medbench's own code does anything.
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
    ap.add_argument("--work", action="store_true", help="also the libraries doing one partition's bookkeeping (bench/platform_floor_work.py)")
    args = ap.parse_args()
    print(paired.header("import floor"))
    cmds = {"bare": [sys.executable, "-c", BARE], "platform": [sys.executable, "-c", PLATFORM]}
    if args.work:
        cmds["work"] = [sys.executable, str(Path(__file__).resolve().parent / "platform_floor_work.py")]
    sides = {name: (lambda cmd=cmd: paired.child(cmd)) for name, cmd in cmds.items()}
    m = paired.measure(sides, pairs=args.pairs, warmup=1)
    print(m.table([(f"{name} / bare", name, "bare") for name in cmds if name != "bare"]))
    for name, what in (("platform", "the platform's imports"), ("work", "the platform's imports and one partition's bookkeeping")):
        if name not in cmds:
            continue
        extra = [p.cpu - b.cpu for b, p in zip(m.samples["bare"], m.samples[name])]
        med = statistics.median(extra)
        print(f"extra CPU of {what}: {med:.2f} s median ({min(extra):.2f}-{max(extra):.2f}), n = {len(extra)}")
        print(f"  smallest overhead a {args.bare_cpu:.1f} CPU-s partition can reach: {(args.bare_cpu + med) / args.bare_cpu:.3f}x")


if __name__ == "__main__":
    main()
