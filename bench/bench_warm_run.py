"""A warm ``medbench run`` from a new process: the recorded-state answer vs every step re-checked, paired.

    python bench/bench_warm_run.py [--pairs N] [--world DIR] [--no-recheck] [--bit-rot]

Needs a project state where the main job already ran (``scripts/demo``; or ``--world``, a folder
``bench/bench_scale.py pipeline --keep`` left: its data, state, models.yaml and tasks.yaml).
Runs, each in a fresh process and in interleaved rounds (bench/paired.py: A B, B A, ...),
``medbench run`` (answered from the recorded state: medbench_cli/uptodate.py, which reads no
artifact whose files' stat is unchanged since they were hashed, runtime/verified.py) and
``medbench run --recheck`` (every curation, gate and partition through Dagster, every artifact
read and hashed again, all cache hits, the leaderboard rebuilt); checks that both print the same
leaderboard; prints each side's wall and CPU (the process and its children), the per-round ratio
recheck / answered, and where the answered run's time goes (interpreter start, reading the
registry and catalogue, the inputs' hashes, the checks). With ``--no-recheck`` (a large world,
where a recheck takes many minutes) only the answered run is timed, n times.

With ``--bit-rot``, afterwards: one byte of the run stage's ``run.parquet`` is flipped, its size kept
and its stat written into the verified notes (as a disk's own corruption leaves a file: the case
tests/cli/test_uptodate_recheck.py holds at a small size); then ``medbench run`` (the answered
path trusts the stat: it still answers), ``medbench run --recheck`` (must rebuild that stage and
write the first bytes back) and ``medbench run`` again (answered). Each is timed and checked.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import paired  # noqa: E402

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


BIT_ROT = """
import hashlib, json, os
from runtime import settings, verified
(folder,) = (settings.DATA / "artifacts").glob("*/*/run/*")
notes = verified.notes_file(folder)
kept = json.loads(notes.read_text())
target = folder / "run.parquet"
data = bytearray(target.read_bytes())
good = hashlib.sha256(data).hexdigest()
data[len(data) // 2] ^= 0xFF
target.write_bytes(bytes(data))
st = os.stat(target)
kept["files"]["run.parquet"][:5] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
notes.write_text(json.dumps(kept))
print(json.dumps({"file": str(target), "sha256": good}))
"""


def bit_rot(medbench: list[str], env: dict[str, str], tmp: Path) -> None:
    """Flip a byte of the run stage's file behind the warm path's back; --recheck must rebuild it (module docstring)."""
    import hashlib
    import json

    rot = json.loads(subprocess.run([sys.executable, "-c", BIT_ROT], cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout)
    target = Path(rot["file"])
    print(f"bit rot: one byte of {target} flipped, size and stat notes kept", flush=True)
    steps = (
        ("run", medbench, True, "answered: the warm path trusts the unchanged stat"),
        ("run --recheck", medbench + ["--recheck"], False, ""),
        ("run", medbench, True, "answered again"),
    )
    for label, argv, answered, said in steps:
        s = run(argv, env, tmp / "rot.log")
        assert s.value.startswith("[up to date]") == answered, s.value[-3000:]
        if not answered:
            line = next(x for x in s.value.splitlines() if x.startswith("[evaluate]"))
            assert " ok " in line and "(cached)" not in line, s.value[-3000:]
            assert hashlib.sha256(target.read_bytes()).hexdigest() == rot["sha256"], "the rebuilt run.parquet differs from the first"
        what = said if answered else f"rebuilt the run stage, bytes as first written: {line.strip()}"
        print(f"  medbench {label}: wall {s.wall:.2f} s, CPU {s.cpu:.2f} s; {what}", flush=True)


def world_env(world: Path | None) -> dict[str, str]:
    """This checkout's environment, or that of a world bench_scale.py kept (``--world``)."""
    env = os.environ.copy()
    if world is not None:
        home = world / "state" / "dagster_home"
        env.update(
            MEDBENCH_SHARED=str(world / "shared"), MEDBENCH_DATA=str(world / "data"), MEDBENCH_STATE=str(world / "state"),
            MEDBENCH_MODELS=str(world / "models.yaml"), MEDBENCH_TASKS=str(world / "tasks.yaml"), DAGSTER_HOME=str(home),
        )  # fmt: skip
        env.pop("MLFLOW_TRACKING_URI", None)
    return env


def run(argv: list[str], env: dict[str, str], log: Path) -> paired.Sample:
    sample = paired.child(argv, env=env, cwd=ROOT, log=log, timeout=7200)
    return dataclasses.replace(sample, value=log.read_text())


def board(stdout: str) -> str:
    return stdout[stdout.index("| model") : stdout.index("saved to")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    paired.add_arguments(ap)
    ap.add_argument("--world", type=Path, help="a world folder bench_scale.py pipeline --keep left (default: this checkout's state)")
    ap.add_argument("--no-recheck", action="store_true", help="time the answered run alone")
    ap.add_argument("--bit-rot", action="store_true", help="then corrupt the run stage's file behind the warm path's back and check --recheck rebuilds it")
    args = ap.parse_args()
    env = world_env(args.world)
    print(paired.header(f"warm medbench run{f' in {args.world}' if args.world else ''}"), flush=True)
    medbench = [sys.executable, "-m", "medbench_cli", "run"]
    tmp = Path(tempfile.mkdtemp(prefix="medbench-warm-"))
    first = run(medbench, env, tmp / "first.log")  # reads (and notes) what the last full run left unnoted, if anything
    boards = {board(first.value)}
    print(
        f"  first run (untimed round): {'answered' if first.value.startswith('[up to date]') else 'full run'}, wall {first.wall:.2f} s, CPU {first.cpu:.2f} s",
        flush=True,
    )
    sides = {"answered": lambda: run(medbench, env, tmp / "answered.log")}
    if not args.no_recheck:
        sides["recheck"] = lambda: run(medbench + ["--recheck"], env, tmp / "recheck.log")

    def check(r: int, side: str, s: paired.Sample) -> None:
        assert s.value.startswith("[up to date]") == (side == "answered"), s.value[:500]
        boards.add(board(s.value))
        print(
            f"  round {r + 1} {side:<9} wall {s.wall:8.2f} s  CPU {s.cpu:8.2f} s  peak {s.peak_rss / 2**30:.2f} GB  load {os.getloadavg()[0]:.1f}", flush=True
        )

    m = paired.measure(sides, args.pairs, report=check)
    assert len(boards) == 1, "the answered run printed another leaderboard than the full one"
    for side in sides:
        w, c = m.seconds(side, "wall"), m.seconds(side, "cpu")
        print(
            f"medbench run{' --recheck' if side == 'recheck' else ''}: wall median {w[0]:.2f} s ({w[1]:.2f}-{w[2]:.2f}), "
            f"CPU median {c[0]:.2f} s ({c[1]:.2f}-{c[2]:.2f}), n={len(m.samples[side])}"
        )
    if "recheck" in sides:
        print(m.table([("recheck / answered", "recheck", "answered")]))
    else:
        print(m.load())
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    start = time.perf_counter() - t
    phases = subprocess.run([sys.executable, "-c", PHASES], cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout.split()
    names = (
        "imports (medbench_cli, runtime.settings)",
        "registry + catalogue",
        "inputs: code, lock, sources, weights (stat or hash)",
        "checks: Dagster, manifests (stat or hash), MLflow",
    )
    print(f"  python start-up: {start:.3f} s")
    for name, value in zip(names, phases, strict=True):
        print(f"  {name}: {float(value):.3f} s")
    if args.bit_rot:
        bit_rot(medbench, env, tmp)


if __name__ == "__main__":
    main()
