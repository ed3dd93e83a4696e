"""Every bench/ script still starts: each answers ``--help``, and the scale scripts run at their smallest size.

A script that no test runs rots silently (issue 36: ``bench/scale_profile.py`` called ``read_beir``
with keyword arguments the reader no longer takes and crashed before its first figure). ``--help``
catches a script that no longer imports or parses; running the scale profile on a 60-document
synthetic task catches a call whose signature moved.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if "__main__" in p.read_text())


def _run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=BENCH.parent, capture_output=True, text=True, timeout=timeout, check=False)


def test_every_bench_script_is_listed():
    assert len(SCRIPTS) >= 15 and "scale_profile.py" in SCRIPTS and "bench_metrics.py" in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_bench_script_answers_help(script):
    proc = _run(f"bench/{script}", "--help", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: "), proc.stdout[:200]


@pytest.mark.slow
def test_the_scale_profile_runs_every_phase_on_the_smallest_synthetic_task(tmp_path):
    data = tmp_path / "data"
    proc = _run("bench/scale_corpus.py", "--docs", "60", "--queries", "12", "--out", str(data))
    assert proc.returncode == 0, proc.stderr[-2000:]

    proc = _run("bench/scale_profile.py", "--data", str(data), "--out", str(tmp_path / "profile"), "--json", str(tmp_path / "profile.json"))

    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    phases = [r["phase"] for r in json.loads((tmp_path / "profile.json").read_text())["rows"]]
    assert phases[:2] == ["imports (polars, bm25s, GX, scipy)", "read_beir (reader, frames)"]
    assert "contract: validate_task (whole)" in phases and phases[-1] == "leaderboard: compare (2 models)"
    assert "nDCG@10 1.0" in proc.stdout  # each synthetic query's one relevant document is its own text: BM25 ranks it first


@pytest.mark.slow
def test_the_platform_floor_has_each_library_do_its_bookkeeping_on_the_bundled_task():
    # The floor is a figure in BENCHMARKS.md: the libraries' calls it makes must still run and pass
    # (a suite that fails or a Dagster job that no longer builds would make its number meaningless).
    proc = _run("bench/platform_floor_work.py", timeout=300)

    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    spent = json.loads(proc.stdout.strip().splitlines()[-1])["cpu_s"]
    assert sorted(spent) == ["dagster", "gx", "mlflow"] and all(v > 0 for v in spent.values()), spent


@pytest.mark.slow
def test_the_contamination_bench_runs_both_sides_on_a_small_task(tmp_path):
    # BENCHMARKS.md's issue-49 figures come from this script: both sides must still run and find the
    # near-duplicates it plants (half of its 40 manifest texts are test queries or documents, slightly changed).
    args = ["--docs", "300", "--queries", "30", "--manifest", "40", "--pairs", "1", "--data", str(tmp_path)]
    proc = _run("bench/bench_contamination.py", *args)

    assert proc.returncode == 0, proc.stderr[-3000:]
    found = next(line for line in proc.stdout.splitlines() if line.startswith("pairs found: "))
    counts = dict(part.rsplit(" ", 1) for part in found.removeprefix("pairs found: ").split(" (")[0].split(", "))
    assert set(counts) == {"medbench", "datasketch"} and int(counts["medbench"]) > 0 and int(counts["datasketch"]) > 0, found
    assert "| medbench / datasketch | 1 |" in proc.stdout
    # The task and the manifest are kept in --data for the next run of the same arguments.
    assert (tmp_path / "data" / "scale_300_30" / "GENERATED.json").is_file() and (tmp_path / "manifest_scale_300_30_40.jsonl").is_file()
