"""Bad input against the stored state (issue 29.4 and 29.5), as tests/cli/test_bad_inputs.py checks it.

One small world: two tiny BEIR tasks curated and evaluated by BM25 through ``medbench run``. Each
case damages one thing, runs one ``medbench`` command (forked, tests/cli/command.py) and checks the
exit code, the one last line (what was wrong, naming the file; what was kept; what to do), that no
stack trace reached the terminal, and that the sha256 of every file under data/ and the state folder
(the MLflow store's own bytes included) is unchanged but for what the case writes by design; where the
store can be read, its runs (status, end time, params, metrics, tags) too.

- A damaged MLflow store (random bytes inside it, a header that is not SQLite's, a truncated or empty
  file): ``medbench run`` (its warm path), ``--force`` and ``leaderboard --rebuild`` refuse before
  anything is run, naming the store; nothing is written into it (no FAILED runs).
- A partition whose task_metrics fails after its metrics artifact was written (the experiment's
  artifact folder in the state folder cannot be written, as on a full disk): exit 1, and the
  leaderboard marks that cell stale with the run and its error, everywhere; the partition's earlier
  FINISHED MLflow run is kept; once the folder is back, a rerun drops the mark.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import pytest

from tests.cli.test_bad_inputs import NOT_RECORDS, changed
from tests.cli.test_bad_inputs import World as BaseWorld
from tests.orchestration.operating_env import (
    BM25,
    LQ_DOCS,
    LQ_QRELS,
    LQ_QUERIES,
    SCI_DOCS,
    SCI_QRELS,
    SCI_QUERIES,
    write_beir,
    write_models,
)

pytestmark = pytest.mark.slow

TASKS = (
    "benchmark: medbench-test\n"
    "licence_allowlist: [CC-BY-4.0, ODC-By-1.0]\n"
    "tasks:\n"
    "  - {name: scifact, reader: beir, path: sci, split: test, query_licence: CC-BY-4.0, doc_licence: ODC-By-1.0}\n"
    "  - {name: liveqa_medquad, reader: beir, path: lq, split: test, query_licence: CC-BY-4.0, doc_licence: CC-BY-4.0}\n"
)


class World(BaseWorld):
    @property
    def store(self) -> Path:
        return self.state / "mlflow.db"

    def snapshot(self) -> tuple[dict[str, str], list]:
        """sha256 of every file (the store's bytes too) and, when SQLite can read the store, its runs."""
        return self.files(), self.mlflow_runs() if self.readable() else []

    def files(self) -> dict[str, str]:
        import hashlib

        return {
            str(p.relative_to(self.root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for top in (self.data, self.state) for p in sorted(top.rglob("*"))
            if p.is_file() and not (top == self.state and p.relative_to(self.root).parts[1] in NOT_RECORDS)
        }  # fmt: skip

    def readable(self) -> bool:
        try:
            with sqlite3.connect(f"file:{self.store}?mode=ro", uri=True) as db:
                return db.execute("PRAGMA quick_check(1)").fetchone()[0] == "ok" and db.execute("SELECT COUNT(*) FROM runs").fetchone() is not None
        except sqlite3.Error:
            return False


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("bad_inputs_web"))
    write_beir(w.shared / "sci", SCI_QUERIES, SCI_DOCS, SCI_QRELS)
    write_beir(w.shared / "lq", LQ_QUERIES, LQ_DOCS, LQ_QRELS)
    w.tasks.write_text(TASKS)
    write_models(w.models, [BM25])
    try:
        rc, out = w.medbench("run")
        assert rc == 0, out[-3000:]
        rc, out = w.medbench("run")  # the warm path answers
        assert rc == 0 and "[up to date]" in out, out[-3000:]
        yield w
    finally:
        w.runner.close()


Undo = Callable[[], None]


def damage_store(how: str) -> Callable[[World], Undo]:
    """Damage the MLflow store file in place (``how``), checked to be damaged as SQLite sees it; the undo puts its bytes back."""

    def setup(w: World) -> Undo:
        before = w.store.read_bytes()
        data = bytearray(before)
        if how == "random-16k":  # the case: 16 KB of random bytes inside the file
            start = len(data) // 3
            data[start : start + 16384] = random.Random(29).randbytes(16384)
        elif how == "header":
            data[:100] = random.Random(4).randbytes(100)
        elif how == "truncated":
            data = data[: (len(data) // 4096 // 2) * 4096]
        elif how == "empty":
            data = bytearray()
        w.store.write_bytes(bytes(data))
        assert not w.readable(), how
        return lambda: w.store.write_bytes(before)

    return setup


@dataclass
class Case:
    id: str
    args: tuple[str, ...]
    code: int
    last: tuple[str, ...]  # in the last line, after .format(w=world)
    setup: Callable[[World], Undo | None] | None = None
    writes: tuple[str, ...] = ()  # globs (relative to the world) of files written by design
    new_runs: int = 0
    check: Callable[[World, str], None] | None = None


CORRUPT = (
    "the MLflow store {w.state}/mlflow.db is corrupt (",
    "nothing was run or written",
    "restore {w.state}/mlflow.db from a backup, or move it aside and rerun",
)


def artifacts_unwritable(w: World) -> Undo:
    """The benchmark experiment's artifact folder in the state folder becomes a file: logging a partition's run fails
    after its metrics artifact was written (what a full disk does to task_metrics), while the leaderboard's experiment is writable."""
    folder = w.state / "mlartifacts" / "medbench-test"
    aside = w.root / "mlartifacts-aside"
    folder.rename(aside)
    folder.write_text("not a folder\n")

    def undo() -> None:
        folder.unlink()
        aside.rename(folder)
        rc, out = w.medbench("run", "--models", "bm25", "--tasks", "scifact")  # evaluated again: current, unmarked
        assert rc == 0 and "(stale)" not in out, out[-3000:]
        assert json.loads((w.data / "reports" / "leaderboard.json").read_text())["stale"] == {}

    return undo


def marked_everywhere(w: World, out: str) -> None:
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("[evaluate] bm25") and "scifact" in line)
    assert "FAILED" in lines[at] and "Not a directory" in lines[at + 1], lines[at : at + 2]
    # the head (figure and CI, issue 48) and the full table: each cell as before, in the table then the mark of a low
    # Judged@10 (issues 33, 46) after the stale mark; an average over a stale value is stale in both
    head = next(line for line in lines if line.startswith("| bm25 |"))
    assert head == "| bm25 | 1.0000 [1.00, 1.00] (stale) | 1.0000 [1.00, 1.00] | 1.0000 (stale) |", head
    row = next(line for line in lines[lines.index("nDCG@10 by model and task") :] if line.startswith("| bm25 |"))
    bare = re.sub(r" †(?= \|)", "", row)
    assert bare.startswith("| bm25 | 1.0000 [1.00, 1.00] (stale) | 1.0000 [1.00, 1.00] | 1.0000 (stale) |"), row
    assert row.startswith("| bm25 | 1.0000 [1.00, 1.00] (stale) † |"), row
    saved = json.loads((w.data / "reports" / "leaderboard.json").read_text())
    (why,) = saved["stale"].values()
    assert list(saved["stale"]) == ["bm25/scifact"] and why.startswith("the last evaluation of bm25 x scifact failed (Dagster run ")
    assert f"task_metrics: NotADirectoryError: [Errno 20] Not a directory: '{w.state}/mlartifacts/medbench-test/" in why and f"- bm25 x scifact: {why}" in out
    runs = w.mlflow_runs()
    tags = [dict(r[-1]) for r in runs]
    # rows come in run-id order (random): the latest leaderboard run is the one that ended last
    board = sorted(
        ((r, t) for r, t in zip(runs, tags, strict=True) if t.get("medbench.kind") == "leaderboard" and r[3] == "active"), key=lambda rt: rt[0][2] or 0
    )
    assert board[-1][1]["medbench.stale"] == f"bm25/scifact: {why}"
    # The partition's FINISHED run from before is still there and active; the last failed attempt's run is FAILED.
    partition = [
        r[1] for r, t in zip(runs, tags, strict=True) if t.get("medbench.model") == "bm25" and t.get("medbench.task") == "scifact" and r[3] == "active"
    ]
    assert sorted(partition) == ["FAILED", "FINISHED"], partition
    rc, said = w.medbench("export", "--to", str(w.root / "exported"))
    assert rc == 0 and "1 cell(s) marked stale in the leaderboard and their MTEB results (medbench.stale): bm25/scifact" in said, said[-2000:]
    shutil.rmtree(w.root / "exported")


CASES = [
    Case("corrupt-store-warm-path", ("run",), 1, ("medbench run: error: ", *CORRUPT, "SQLite's quick_check: *** in database main *** "),
         setup=damage_store("random-16k")),
    Case("corrupt-store-force", ("run", "--force"), 1, ("medbench run: error: ", *CORRUPT), setup=damage_store("random-16k")),
    Case("corrupt-store-one-task", ("run", "--models", "bm25", "--tasks", "scifact"), 1, CORRUPT, setup=damage_store("random-16k")),
    Case("store-header-not-sqlite", ("run",), 1, (*CORRUPT, "file is not a database"), setup=damage_store("header")),
    Case("store-truncated", ("run", "--force"), 1, CORRUPT, setup=damage_store("truncated")),
    Case("store-emptied", ("run",), 1, (*CORRUPT, "it holds no MLflow tables"), setup=damage_store("empty")),
    Case("corrupt-store-rebuild", ("leaderboard", "--rebuild"), 1, ("medbench leaderboard: error: the MLflow store {w.state}/mlflow.db is corrupt (",),
         setup=damage_store("random-16k")),
    # task_metrics fails after writing its artifact: the figure is kept but marked, everywhere, with the run and its error
    Case("partition-failed-after-its-metrics", ("run", "--models", "bm25", "--tasks", "scifact", "--force"), 1,
         ("medbench run: FAILED: bm25|scifact: task_metrics: [Errno 20] Not a directory: '{w.state}/mlartifacts/medbench-test/",
          "the leaderboard marks 1 cell(s) stale: bm25/scifact", "fix it, then: medbench run --models bm25 --tasks scifact"),
         # new_runs: 3 attempts of task_metrics (2 retries; each deletes the one before), the leaderboard's
         setup=artifacts_unwritable, check=marked_everywhere, new_runs=4,
         writes=("data/artifacts/bm25/scifact/*", "data/reports/*", "state/mlflow.db", "state/.mlflow.db.locks/*", "state/mlartifacts/*", "state/scratch/*")),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_state_ends_in_one_line_and_changes_nothing(world, case):
    undo = case.setup(world) if case.setup else None
    try:
        files, runs = world.snapshot()
        code, out = world.medbench(*case.args)
        lines = out.rstrip().splitlines()
        last = lines[-1] if lines else ""
        assert code == case.code, out[-3000:]
        for want in case.last:
            assert want.format(w=world) in last, f"{want.format(w=world)!r} not in the last line:\n{last}"
        for trace in ("Traceback (most recent call last)", "STEP_FAILURE", "dagster._core.errors", "Stack Trace:"):
            assert trace not in out, out[-3000:]
        now_files, now_runs = world.snapshot()
        moved = changed(files, now_files)
        assert {p for p in moved if not any(fnmatch(p, g) for g in case.writes)} == set(), sorted(moved)
        assert [r for r in now_runs if r in runs] == runs and len(now_runs) == len(runs) + case.new_runs
        if case.check:
            case.check(world, out)
    finally:
        if undo:
            undo()
