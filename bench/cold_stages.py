"""Where the CPU of one cold ``medbench run`` goes, phase by phase, in one process (issue 52).

    MEDBENCH_DATA=W/data MEDBENCH_STATE=W/state DAGSTER_HOME=W/dagster_home \\
        python bench/cold_stages.py run --models bm25 --tasks scifact          # any `medbench` arguments

Runs ``medbench`` in this process with each phase of ``medbench_cli/run.py`` timed around its call
(``time.process_time``: the CPU of every thread of the process; the serial path, where nothing else
runs in a child): the imports before ``main``, the plan, the up-to-date check, the definitions, each
Dagster run (``inprocess.execute``, named as the run prints it: curation with its GX contract, the
overlap gate, each partition's evaluation, the audit, the leaderboard), the recovery of dead runs
(MLflow's first import, where it reconciles), the partitions' plan and the ledger of a complete run.
A library imported first inside a run is that run's cost. The table goes to stderr when the process
exits; "the rest" is what no phase above holds (the audit and judging runs' own bookkeeping,
Dagster's instance, the MLflow store). Point MEDBENCH_ROOT and PYTHONPATH at another checkout to
time it (e.g. a ``git archive`` of main).
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import time
from pathlib import Path

START_CPU, START_WALL = time.process_time(), time.perf_counter()
ROWS: list[tuple[str, float, float]] = []


def timed(module, name: str, label: str | None = None) -> None:
    """Replace ``module.name`` by a wrapper that records its CPU and wall seconds (the ``what=`` keyword names a Dagster run)."""
    inner = getattr(module, name)

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            ROWS.append((label or kwargs.get("what") or name, time.process_time() - cpu, time.perf_counter() - wall))

    setattr(module, name, wrapper)


def report() -> None:
    cpu, wall = time.process_time() - START_CPU, time.perf_counter() - START_WALL
    print("\n| phase | CPU s | wall s |\n|---|---:|---:|", file=sys.stderr)
    for what, c, w in ROWS:
        print(f"| {what} | {c:.2f} | {w:.2f} |", file=sys.stderr)
    print(f"| the rest | {cpu - sum(r[1] for r in ROWS):.2f} | |", file=sys.stderr)
    print(f"| the process (from its first bench line) | {cpu:.2f} | {wall:.2f} |", file=sys.stderr)


def main() -> int:
    sys.path.insert(0, os.environ.get("MEDBENCH_ROOT") or str(Path(__file__).resolve().parents[1]))
    import dagster  # noqa: F401 (what `medbench run` imports before its first step: counted with the CLI's modules)

    import medbench_cli.inprocess as inprocess
    import medbench_cli.run as run
    import orchestration.definitions as definitions
    import orchestration.run_steps as run_steps
    from medbench_cli.main import main as medbench

    ROWS.append(("imports before main (the CLI, orchestration, Dagster)", time.process_time() - START_CPU, time.perf_counter() - START_WALL))
    timed(inprocess, "execute")
    timed(inprocess, "recover", "recover (dead runs; MLflow reconciled)")
    timed(run, "_plan", "plan: registry and catalogue")
    timed(run, "refuse_a_corrupt_store", "the MLflow store's integrity")
    timed(run, "answered", "the up-to-date check")
    timed(run, "record_complete_run", "the ledger of a complete run")
    timed(definitions, "build_definitions", "build_definitions")
    timed(run_steps, "plan", "plan: partitions")
    timed(run_steps, "judge", "judging (its Dagster runs, if any)")
    timed(run_steps, "audit", "the contamination audit (its Dagster run)")
    atexit.register(report)
    return medbench(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
