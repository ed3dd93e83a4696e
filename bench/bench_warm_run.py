"""A warm ``medbench run`` from a new process: the recorded-state answer vs every step re-checked.

    python bench/bench_warm_run.py [--repeats N]

Needs a project state where the main job already ran (``scripts/demo``). Alternates, each in a
fresh process, ``medbench run`` (answered from the artifact manifests and Dagster's and MLflow's
recorded state, medbench_cli/uptodate.py) and ``medbench run --recheck`` (every curation, gate
and partition run through Dagster, all cache hits, the leaderboard rebuilt), checks that both
print the same leaderboard, and prints the medians, their ratio, and where the answered run's
time goes (interpreter start, reading the registry and catalogue, the inputs' hashes, the checks).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PHASES = """
import time
t0 = time.perf_counter()
from medbench_cli import uptodate
from medbench_cli.common import prepare_environment
from medbench_core.taskdata.catalog import load_catalog
from medbench_core.retrieval.model_registry import load_registry
from runtime import settings
prepare_environment()
t1 = time.perf_counter()
specs, catalog = load_registry(settings.MODELS_FILE), load_catalog(settings.TASKS_FILE)
t2 = time.perf_counter()
given = uptodate.inputs(specs, catalog, catalog.names)
t3 = time.perf_counter()
uptodate.check(specs, catalog, [s.name for s in specs], catalog.names, given)
t4 = time.perf_counter()
print(f"{t1 - t0:.3f} {t2 - t1:.3f} {t3 - t2:.3f} {t4 - t3:.3f}")
"""


def timed(argv: list[str]) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=os.environ.copy(), timeout=1800, check=False)
    wall = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return wall, out.stdout


def board(stdout: str) -> str:
    return stdout[stdout.index("| model") : stdout.index("saved to")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    medbench = [sys.executable, "-m", "medbench_cli", "run"]
    _, first = timed(medbench + ["--recheck"])  # records the inputs if an earlier run could not
    answered, rechecked, boards = [], [], {board(first)}
    for _ in range(args.repeats):
        wall, out = timed(medbench)
        assert out.startswith("[up to date]"), out[:500]
        answered.append(wall)
        boards.add(board(out))
        wall, out = timed(medbench + ["--recheck"])
        assert "[up to date]" not in out
        rechecked.append(wall)
        boards.add(board(out))
    assert len(boards) == 1, "the answered run printed another leaderboard than the full one"
    a, r = statistics.median(answered), statistics.median(rechecked)
    print(f"medbench run, answered from the recorded state: median {a:.2f} s  {[round(x, 2) for x in answered]}")
    print(f"medbench run --recheck (every step, all cache hits): median {r:.2f} s  {[round(x, 2) for x in rechecked]}")
    print(f"ratio recheck / answered: {r / a:.1f}x")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    start = time.perf_counter() - t
    phases = subprocess.run([sys.executable, "-c", PHASES], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    names = ("imports (medbench_cli, runtime.settings)", "registry + catalogue", "inputs: code, lock, sources, weights hashed", "checks: Dagster, manifests, MLflow")
    print(f"  python start-up: {start:.3f} s")
    for name, value in zip(names, phases, strict=True):
        print(f"  {name}: {float(value):.3f} s")


if __name__ == "__main__":
    main()
