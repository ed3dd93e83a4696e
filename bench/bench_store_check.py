"""What checking the MLflow store costs (issue 29.4): SQLite's quick_check as runtime.store_integrity runs it.

Builds MLflow SQLite stores of growing size (the empty schema this MLflow version creates, then runs
and metric rows written straight into its tables, as MLflow lays them out), and times
:func:`runtime.store_integrity.store_problem` on each, ``--repeats`` times, in this process, after a
first read that puts the file in the page cache (the warm path's case: the store was just written or
read). Prints median and range per size.

    python bench/bench_store_check.py [--sizes-mb 1,10,100] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def grow(db: Path, mb: float) -> None:
    """Add runs with 20 metrics each until ``db`` is ``mb`` megabytes."""
    con = sqlite3.connect(db)
    exp = con.execute("SELECT experiment_id FROM experiments LIMIT 1").fetchone()[0]
    now = int(time.time() * 1000)
    while db.stat().st_size < mb * 1e6:
        runs, metrics = [], []
        for _ in range(500):
            rid = uuid.uuid4().hex
            runs.append((rid, f"bench/{rid[:6]}", "UNKNOWN", "", "", "bench", "FINISHED", now, now, "", "active", "", exp))
            metrics += [(f"ndcg_at_{i}", 0.5 + i / 100, now, rid, 0, 0) for i in range(20)]
        con.executemany(
            "INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, user_id, status, start_time, end_time,"
            " source_version, lifecycle_stage, artifact_uri, experiment_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            runs,
        )
        con.executemany("INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES (?,?,?,?,?,?)", metrics)
        con.commit()
    con.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mb", default="1,10,100")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    from runtime.mlflow_store import mlflow_schema
    from runtime.store_integrity import store_problem

    print(f"load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        for mb in (float(s) for s in args.sizes_mb.split(",")):
            db = Path(tmp) / f"mlflow-{mb:g}.db"
            shutil.copyfile(mlflow_schema(), db)
            con = sqlite3.connect(db)
            con.execute("INSERT INTO experiments (name, artifact_location, lifecycle_stage) VALUES ('bench', '', 'active')")
            con.commit()
            con.close()
            grow(db, mb)
            assert store_problem(db) == ""  # and the page cache holds it
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                assert store_problem(db) == ""
                times.append(time.perf_counter() - t)
            print(
                f"{db.stat().st_size / 1e6:8.1f} MB: median {statistics.median(times) * 1000:8.1f} ms, range {min(times) * 1000:.1f}-{max(times) * 1000:.1f} ms (n={len(times)})"
            )
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
