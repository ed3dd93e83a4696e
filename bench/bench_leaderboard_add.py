"""The leaderboard step when one model is added to a board of 8 or 50 (issue 53): its CPU and wall, before and after.

    python bench/bench_leaderboard_add.py [--models 9,51] [--tasks 8] [--queries 10] [--pairs 5] [--main DIR] [--work DIR]

For each board size N (models, the baseline bm25 among them) and each side (``after``: this checkout;
``before``: the code in ``--main DIR``, e.g. ``git archive main | tar -x -C DIR``), a child process
first builds the leaderboard of N - 1 models on ``--tasks`` synthetic tasks of ``--queries`` queries
(per-query nDCG@10 drawn from {0, 0.25, 0.5, 1}, seeded per model and task; Judged@10 and bounds per
cell, so each model has a trust plot) with the statistics' reuse on, as the leaderboard asset does
(``reuse.Results`` saved beside it). Then, in rounds (bench/paired.py: ABBA order, fresh child
processes), a copy of that state gets model N: ``build_tables`` + ``write_leaderboard`` of the N
models inside ``reusing``, with the last leaderboard's folder as ``previous_dir``: the leaderboard
step of the asset without its gathering, site and MLflow run. Each child times only that step
(``time.process_time`` and ``perf_counter``; matplotlib's and scipy's imports before the clock) and counts what it drew (the
difference plots, by wrapping ``reports.diff_plot_png``) and what the statistics computed and reused.

Printed: per round and side the step's CPU and wall seconds and the counts; per size the before / after
CPU and wall ratios (median and range; n >= 5 rounds make a figure); and after's own cost at the largest
size over the smallest (how much adding one model grows with the board).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import paired  # noqa: E402

BASELINE = "bm25"


def model_names(n: int) -> list[str]:
    return [BASELINE, *[f"model-{i:02d}" for i in range(1, n)]]


def task_names(n: int) -> list[str]:
    return [f"task-{i:02d}" for i in range(n)]


def board_cells(models: list[str], tasks: list[str], queries: int) -> list:
    """Every model x task cell, per-query nDCG@10 seeded by (model index, task index, queries)."""
    import numpy as np
    import polars as pl

    from medbench_core.evaluation.reports import Cell

    cells = []
    for i, m in enumerate(models):
        for j, t in enumerate(tasks):
            rng = np.random.default_rng([i, j, queries])
            values = rng.choice([0.0, 0.25, 0.5, 1.0], size=queries)  # ties between models and queries, as nDCG has
            pq = pl.DataFrame({"query_id": [f"q{k:05d}" for k in range(queries)], "ndcg_at_10": values})
            mean = float(values.mean())
            bounds = {"judged_at_10": 0.3 + 0.6 * rng.random(), "ndcg_lower_at_10": mean / 2, "ndcg_upper_at_10": (1 + mean) / 2}
            cells.append(Cell(m, t, metrics={"mean": {"ndcg_at_10": mean, **bounds}}, per_query=pq))
    return cells


def leaderboard_step(models: list[str], tasks: list[str], queries: int, out: Path, previous: Path, store: Path) -> dict:
    """build_tables + write_leaderboard inside ``reusing`` (the asset's leaderboard step without gathering, site and MLflow),
    timed; what it drew and what the statistics computed and reused."""
    from medbench_core.evaluation import reports
    from medbench_core.evaluation.reports import Significance, build_tables, write_leaderboard
    from medbench_core.evaluation.reuse import Results, reusing

    cells = board_cells(models, tasks, queries)
    draws = {"diff": 0}
    draw = reports.diff_plot_png

    def counted(*args, **kwargs):
        draws["diff"] += 1
        return draw(*args, **kwargs)

    reports.diff_plot_png = counted
    import matplotlib.pyplot  # noqa: F401 (imported before the clock starts: the step's work, not the imports, on both sides)
    import scipy.stats  # noqa: F401

    results = Results.load(store)
    c0, t0 = time.process_time(), time.perf_counter()
    with reusing(results):
        tables = build_tables(cells, models, tasks, Significance(BASELINE))
        write_leaderboard(tables, out, previous_dir=previous)
    results.save(store)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*.png"))
    return {"cpu": cpu, "wall": wall, "diff_draws": draws["diff"], "computed": results.computed, "reused": results.hits, "pngs": len(files)}


def run_child(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(args.code).resolve()))
    models, tasks = model_names(args.models), task_names(args.tasks)
    work = Path(args.work)
    if args.phase == "prepare":  # the board of N - 1 models, as the last leaderboard left it
        (work / "reports").mkdir(parents=True)
        got = leaderboard_step(models[:-1], tasks, args.queries, work / "reports", work / "reports", work / "stats_results.json")
    else:  # model N added: written aside, the last leaderboard's folder beside it (the asset's staging)
        got = leaderboard_step(models, tasks, args.queries, work / "staged", work / "reports", work / "stats_results.json")
    import medbench_core

    got["code"] = str(Path(medbench_core.__file__).resolve().parents[1])
    print("RESULT " + json.dumps(got))


def child_step(code: Path, work: Path, phase: str, n: int, a: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "child", "--code", str(code), "--work", str(work), "--phase", phase]
    cmd += ["--models", str(n), "--tasks", str(a.tasks), "--queries", str(a.queries)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the side's code only, first on sys.path
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stderr[-3000:]}")
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    got = json.loads(line.removeprefix("RESULT "))
    if Path(got["code"]) != code.resolve():
        raise RuntimeError(f"side {code} imported medbench_core from {got['code']}")
    return got


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", nargs="?", default="bench", choices=["bench", "child"])
    p.add_argument("--models", default="9,51", help="board sizes after the model is added, comma-separated (bench); N (child)")
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--queries", type=int, default=10)
    p.add_argument("--main", type=Path, help="a checkout of the code before, timed beside this one")
    p.add_argument("--work", type=Path, help="where the boards are built (default: a temporary folder, removed)")
    p.add_argument("--code", default=str(ROOT), help=argparse.SUPPRESS)
    p.add_argument("--phase", choices=["prepare", "add"], help=argparse.SUPPRESS)
    paired.add_arguments(p)
    a = p.parse_args(argv)
    if a.mode == "child":
        a.models = int(a.models)
        run_child(a)
        return 0

    import tempfile

    print(paired.header(f"leaderboard step, one model added ({a.tasks} tasks x {a.queries} queries)"))
    sides = {"after": ROOT, **({"before": a.main.resolve()} if a.main else {})}
    base = a.work or Path(tempfile.mkdtemp(prefix="bench-lb-add-"))
    sizes = [int(x) for x in a.models.split(",")]
    cpu_after: dict[int, float] = {}
    try:
        for n in sizes:
            prepared = {}
            for side, code in sides.items():
                prepared[side] = base / f"n{n}-{side}" / "prepared"
                shutil.rmtree(prepared[side].parent, ignore_errors=True)
                got = child_step(code, prepared[side], "prepare", n, a)  # the first N - 1 of the N models
                print(f"prepared {side} with {n - 1} models: {got['cpu']:.2f} s CPU, {got['pngs']} PNGs, {got['computed']} statistics/plots")

            def side_fn(side: str, n: int = n, prepared: dict = prepared):
                def run() -> paired.Sample:
                    round_dir = prepared[side].parent / "round"
                    shutil.rmtree(round_dir, ignore_errors=True)
                    shutil.copytree(prepared[side], round_dir)
                    got = child_step(sides[side], round_dir, "add", n, a)
                    return paired.Sample(got["wall"], got["cpu"], None, got)

                return run

            def report(r: int, side: str, s: paired.Sample) -> None:
                v = s.value
                print(f"  n={n} round {r + 1} {side:6s}: CPU {s.cpu:7.2f} s, wall {s.wall:7.2f} s, difference plots drawn {v['diff_draws']:4d}, "
                      f"statistics+plots computed {v['computed']}, reused {v['reused']}, load {os.getloadavg()[0]:.1f}")  # fmt: skip

            m = paired.measure({side: side_fn(side) for side in sides}, pairs=a.pairs, report=report)
            cpu_after[n] = m.seconds("after", "cpu")[0]
            print(f"\n## {n} models ({n - 1} + 1) x {a.tasks} tasks x {a.queries} queries")
            for side in sides:
                c, w = m.seconds(side, "cpu"), m.seconds(side, "wall")
                print(f"{side}: CPU {c[0]:.2f} s ({c[1]:.2f}-{c[2]:.2f}), wall {w[0]:.2f} s ({w[1]:.2f}-{w[2]:.2f})")
            if "before" in sides:
                print(m.table([("before / after", "before", "after")]))
            else:
                print(f"{m.started}, {m.load()}")
        if len(sizes) > 1:
            lo, hi = min(sizes), max(sizes)
            print(f"\nafter: adding one model at {hi} models / at {lo} models, CPU medians: {cpu_after[hi] / cpu_after[lo]:.2f}x")
    finally:
        if a.work is None:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
