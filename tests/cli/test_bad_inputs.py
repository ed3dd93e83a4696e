"""Bad input, as a new user gives it, against one small operated world (issue 24.6).

Each case changes one input (models.yaml, tasks.yaml, a source file, a stored artifact, an argument),
runs one ``medbench`` command and checks: the exit code (2 for usage and configuration, 1 for a failed
step, check or artifact); the last line printed, which names what was wrong, what was kept and what to
do; that no stack trace reached the terminal; and that the sha256 of every file under the data and
state folders, and the MLflow store's runs, are unchanged, but for what the case says it writes by
design (the record of a refusal: a new task's curated copy and its failed GATE.json, leaderboard
reports that now mark a cell stale). The state folder's logs/ (where the stack traces go) and
dagster_home/ (Dagster's run history, which records the failed run) are where a refusal is recorded.

The world: two tiny BEIR tasks curated and evaluated by BM25 through ``medbench run``, and catalogue
entries whose sources the cases write: ``bad_beir`` (strict-source cases), ``gate_licence`` and
``gate_overlap`` (data contracts), and one ``r_<reader>`` per reader, fed that reader's malformed
record (tests/core/reader_fixtures.py: text in a field the reader does not map). Every command runs
in a new process forked from one that imported Dagster, MLflow and Great Expectations once
(tests/cli/command.py, ``Forked``); a case undoes what it changed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Callable

import pytest

from tests.cli.command import Forked, without_trust
from tests.core.reader_fixtures import WRITERS
from tests.core.reader_fixtures import write_beir as write_reader_beir
from tests.orchestration.operating_env import BM25, LQ_DOCS, LQ_QRELS, LQ_QUERIES, SCI_DOCS, SCI_QRELS, SCI_QUERIES, write_beir, write_models

pytestmark = pytest.mark.slow

LICENCES = "query_licence: CC-BY-4.0, doc_licence: CC-BY-4.0"
NOT_RECORDS = ("logs", "dagster_home", "verified")  # under the state folder: where a refusal is recorded; notes of files already hashed


class World:
    """The operated world, its paths, the forking runner and a snapshot of what a command must not change."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.shared = root / "shared" / "data"
        self.data, self.state = root / "data", root / "state"
        self.models, self.tasks = root / "models.yaml", root / "tasks.yaml"
        self.staged = root / "staged"
        self.env = {
            "MEDBENCH_SHARED": str(root / "shared"), "MEDBENCH_DATA": str(self.data), "MEDBENCH_STATE": str(self.state),
            "MEDBENCH_MODELS": str(self.models), "MEDBENCH_TASKS": str(self.tasks),
        }  # fmt: skip
        (root / "out").mkdir(parents=True, exist_ok=True)
        self.runner = Forked(root / "out")
        self.written: dict[str, object] = {}

    def medbench(self, *args: str) -> tuple[int, str]:
        return self.runner.run(*args, env=self.env)

    @property
    def board(self) -> Path:
        return self.data / "reports" / "leaderboard.md"

    def cells(self) -> dict:
        return json.loads((self.data / "reports" / "leaderboard.json").read_text())["cells"]

    def metrics_dir(self, model: str, task: str) -> Path:
        return self.data / "artifacts" / model / task / "metrics" / self.cells()[f"{model}/{task}"]["metrics_key"]

    def snapshot(self) -> tuple[dict[str, str], list]:
        files = {}
        for top in (self.data, self.state):
            for p in sorted(top.rglob("*")):
                rel = p.relative_to(self.root)
                if p.is_file() and not (top == self.state and rel.parts[1] in NOT_RECORDS):
                    files[str(rel)] = hashlib.sha256(p.read_bytes()).hexdigest()
        return files, self.mlflow_runs()

    def mlflow_runs(self) -> list:
        """Every MLflow run: id, status, end time, and its params, metrics and tags."""
        with sqlite3.connect(f"file:{self.state / 'mlflow.db'}?mode=ro", uri=True) as db:
            runs = db.execute("SELECT run_uuid, status, end_time, lifecycle_stage FROM runs ORDER BY run_uuid").fetchall()
            out = []
            for run_id, *rest in runs:
                params = db.execute("SELECT key, value FROM params WHERE run_uuid=? ORDER BY key", (run_id,)).fetchall()
                metrics = db.execute("SELECT key, value, step FROM metrics WHERE run_uuid=? ORDER BY key, step", (run_id,)).fetchall()
                tags = db.execute("SELECT key, value FROM tags WHERE run_uuid=? ORDER BY key", (run_id,)).fetchall()
                out.append((run_id, *rest, params, metrics, tags))
        return out


def catalogue(world: World) -> str:
    lines = [
        "benchmark: medbench-test",
        "licence_allowlist: [CC-BY-4.0, ODC-By-1.0]",
        "tasks:",
        "  - {name: scifact, reader: beir, path: sci, split: test, query_licence: CC-BY-4.0, doc_licence: ODC-By-1.0}",
        "  - {name: liveqa_medquad, reader: beir, path: lq, split: test, query_licence: CC-BY-4.0, doc_licence: CC-BY-4.0}",
        f"  - {{name: bad_beir, reader: beir, path: bad_beir, split: test, {LICENCES}}}",
        "  - {name: gate_licence, reader: beir, path: gate_licence, split: test, query_licence: Proprietary, doc_licence: CC-BY-4.0}",
        f"  - {{name: gate_overlap, reader: beir, path: gate_overlap, split: test, {LICENCES}}}",
    ]
    for name, writer in WRITERS.items():
        # The malformed source is written aside now and copied in by its case: until then the task was never curated.
        written = writer(world.staged / name, "body_text")
        world.written[name] = written
        rel = written.source.relative_to(world.staged / name)
        entry = {"name": f"r_{name}", "reader": name, "path": f"readers/{name}" + ("" if str(rel) == "." else f"/{rel}"), **written.options}
        lines.append("  - " + json.dumps(entry))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("bad_inputs"))
    write_beir(w.shared / "sci", SCI_QUERIES, SCI_DOCS, SCI_QRELS)
    write_beir(w.shared / "lq", LQ_QUERIES, LQ_DOCS, LQ_QRELS)
    w.tasks.write_text(catalogue(w))
    write_models(w.models, [BM25])
    try:
        rc, out = w.medbench("run", "--tasks", "scifact,liveqa_medquad")
        assert rc == 0, out[-3000:]
        assert "| bm25 | 1.0000 [1.00, 1.00] | 1.0000 [1.00, 1.00] | - |" in without_trust(w.board.read_text())
        yield w
    finally:
        w.runner.close()


# --- the cases ------------------------------------------------------------------------------------

Undo = Callable[[], None]


@dataclass
class Case:
    id: str
    args: tuple[str, ...]
    code: int
    last: tuple[str, ...]  # in the last line, after .format(w=world, ...)
    setup: Callable[[World], Undo | None] | None = None
    writes: tuple[str, ...] = ()  # globs (relative to the world) of files written by design
    check: Callable[[World, str], None] | None = None
    new_runs: int = 0  # MLflow runs added by design
    verbose: bool = False  # --verbose: the stack traces are printed, not logged


def edit(path_of: Callable[[World], Path], change: Callable[[str], str]) -> Callable[[World], Undo]:
    def setup(w: World) -> Undo:
        path = path_of(w)
        before = path.read_bytes()
        path.write_text(change(before.decode()))
        return lambda: path.write_bytes(before)

    return setup


def models(change: Callable[[dict], None]) -> Callable[[World], Undo]:
    def apply(text: str) -> str:
        doc = json.loads(text)
        change(doc["models"][0])
        return json.dumps(doc, indent=1)

    return edit(lambda w: w.models, apply)


def task_option(name: str, old: str, new: str) -> Callable[[World], Undo]:
    def apply(text: str) -> str:
        line = next(line for line in text.splitlines() if f"name: {name}," in line)
        assert old in line
        return text.replace(line, line.replace(old, new))

    return edit(lambda w: w.tasks, apply)


def source(folder: str, change: Callable[[Path], None] | None = None) -> Callable[[World], Undo]:
    """The tiny BEIR source of ``bad_beir``-like tasks, written to shared/data/``folder`` and changed."""

    def setup(w: World) -> Undo:
        write_reader_beir(w.shared / folder)
        if change:
            change(w.shared / folder)
        return lambda: shutil.rmtree(w.shared / folder)

    return setup


def reader_source(name: str) -> Callable[[World], Undo]:
    def setup(w: World) -> Undo:
        shutil.copytree(w.staged / name, w.shared / "readers" / name)
        return lambda: shutil.rmtree(w.shared / "readers" / name)

    return setup


def append(rel: str, data: bytes) -> Callable[[Path], None]:
    def change(folder: Path) -> None:
        with open(folder / rel, "ab") as f:
            f.write(data)

    return change


def curate_failed(task: str) -> Callable[[World, str], None]:
    """The curation's reason is printed under its `[curate]` line, as a partition's is."""

    def check(w: World, out: str) -> None:
        lines = out.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(f"[curate] {task} ") and "FAILED" in line)
        assert lines[at + 1].startswith("           ") and lines[at + 1].strip(), lines[at : at + 2]
        assert "[leaderboard] not rebuilt: nothing was curated or evaluated in this run" in out

    return check


def break_scifact(w: World) -> Undo:
    corpus = w.shared / "sci" / "corpus.jsonl"
    before = corpus.read_bytes()
    reports = {p: p.read_bytes() for p in (w.data / "reports").glob("leaderboard.*")}
    corpus.write_bytes(before + b'{"_id": "s9", "text": "caf\xe9"}\n')

    def undo() -> None:
        # The source as it was: the rebuilt leaderboard is the one from before, byte for byte, and marks nothing.
        corpus.write_bytes(before)
        rc, out = w.medbench("leaderboard", "--rebuild")
        assert rc == 0 and "(stale)" not in out, out[-2000:]
        assert {p: p.read_bytes() for p in reports} == reports

    return undo


def stale_everywhere(w: World, out: str) -> None:
    """The old figure is kept, marked stale with its reason, in the printed and saved boards and in MLflow."""
    sci = w.shared / "sci"
    row = next(line for line in without_trust(out).splitlines() if line.startswith("| bm25 |"))
    assert row.startswith("| bm25 | 1.0000 [1.00, 1.00] (stale) | 1.0000 [1.00, 1.00] | - |"), row
    reason = f"task scifact: its source files ({sci}) changed since it was curated, and it has not been curated again (`medbench run --tasks scifact`)"
    assert f"- bm25 x scifact: {reason}" in out and out.count("(stale)") >= 2  # the cell and the row's average
    assert w.board.read_text() in out
    saved = json.loads((w.data / "reports" / "leaderboard.json").read_text())
    assert saved["stale"] == {"bm25/scifact": reason} and saved["cells"]["bm25/scifact"]["stale"] == reason
    header, row = (w.data / "reports" / "leaderboard.csv").read_text().splitlines()[:2]
    assert header.endswith(",stale") and row.endswith(f'"scifact: {reason.replace(chr(34), chr(34) * 2)}"'), row
    tags = {k: v for run in w.mlflow_runs() for k, v in run[-1]}
    assert tags.get("medbench.stale") == f"bm25/scifact: {reason}"
    # ... and in the export: its leaderboard files as saved, and the cell's MTEB result says so.
    rc, said = w.medbench("export", "--to", str(w.root / "exported-stale"))
    assert rc == 0 and "1 cell(s) marked stale in the leaderboard and their MTEB results (medbench.stale): bm25/scifact" in said, said[-2000:]
    (result,) = (w.root / "exported-stale" / "results" / "medbench__bm25").glob("*/scifact.json")  # MTEB's results layout
    doc = json.loads(result.read_text())
    assert doc["medbench"]["stale"] == reason and "stale" not in json.loads((result.parent / "liveqa_medquad.json").read_text())["medbench"]
    assert (w.root / "exported-stale" / "leaderboard.md").read_text() == w.board.read_text()
    shutil.rmtree(w.root / "exported-stale")


def corrupt_metrics(w: World) -> Undo:
    path = w.metrics_dir("bm25", "liveqa_medquad") / "metrics.json"
    before = path.read_bytes()
    path.write_bytes(before.replace(b"1.0", b"0.9", 1))
    return lambda: path.write_bytes(before)


def gate_licence(w: World) -> Undo:
    write_reader_beir(w.shared / "gate_licence")

    def undo() -> None:
        shutil.rmtree(w.shared / "gate_licence")
        shutil.rmtree(w.data / "tasks" / "gate_licence")

    return undo


def gate_overlap(w: World) -> Undo:
    """A task whose one query is scifact's: the overlap gate refuses it."""
    write_beir(w.shared / "gate_overlap", {"g1": SCI_QUERIES["q1"], "g2": "asthma inhalers"}, {"x1": "urate crystals", "x2": "steroid inhalers"},
               [("g1", "x1", 1), ("g2", "x2", 1)])  # fmt: skip
    keep = w.root / "overlap-before"
    shutil.copytree(w.data / "tasks", keep, ignore=lambda d, names: [n for n in names if Path(d) == w.data / "tasks" and not n.startswith(("_", "OVERLAP"))])

    def undo() -> None:
        shutil.rmtree(w.shared / "gate_overlap")
        shutil.rmtree(w.data / "tasks" / "gate_overlap")
        shutil.rmtree(w.data / "tasks" / "_overlap")
        shutil.copytree(keep / "_overlap", w.data / "tasks" / "_overlap")
        shutil.copy2(keep / "OVERLAP_GATE.json", w.data / "tasks" / "OVERLAP_GATE.json")
        shutil.rmtree(keep)

    return undo


def damage_per_query(w: World) -> Undo:
    path = w.metrics_dir("bm25", "scifact") / "per_query.parquet"
    before = path.read_bytes()
    path.write_bytes(b"broken")
    return lambda: path.write_bytes(before)


def not_an_export(w: World) -> Undo:
    mine = w.root / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    return lambda: shutil.rmtree(mine)


def board_moved(w: World) -> Undo:
    w.board.rename(w.root / "moved.md")
    return lambda: (w.root / "moved.md").rename(w.board)


RUN = ("run",)
NOTHING = "nothing was run or changed"
CASES = [
    # --- configuration: exit 2 before any work, naming file, entry, key and the closest known one
    Case(
        "settings-typo-bb",
        RUN,
        2,
        ("{w.models}", "'bm25'", "unknown setting 'bb'", "did you mean 'b'?", NOTHING),
        setup=models(lambda m: m["settings"].update(bb=0.4)),
    ),
    Case(
        "settings-typo-methd",
        RUN,
        2,
        ("{w.models}", "'bm25'", "unknown setting 'methd'", "did you mean 'method'?", NOTHING),
        setup=models(lambda m: m["settings"].update(methd=m["settings"].pop("method"))),
    ),
    Case("unknown-kind", RUN, 2, ("{w.models}", "'bm25'", "bm52", "did you mean 'bm25'?", NOTHING), setup=models(lambda m: m.update(kind="bm52"))),
    Case(
        "models-yaml-not-yaml",
        RUN,
        2,
        ("medbench run: error: {w.models}:17: not valid YAML: expected '<document start>', but found '<block sequence start>'", NOTHING),
        setup=edit(lambda w: w.models, lambda t: t + "\n  - {name: [\n"),
    ),
    Case(
        "task-option-typo",
        RUN,
        2,
        ("{w.tasks}: task 'scifact': unknown option 'spilt' for reader beir; did you mean 'split'?", NOTHING),
        setup=task_option("scifact", "split: test", "spilt: test"),
    ),
    Case(
        "task-option-type",
        RUN,
        2,
        ("{w.tasks}: task 'scifact': option 'split' must be a string, not list", NOTHING),
        setup=task_option("scifact", "split: test", "split: [test]"),
    ),
    Case(
        "path-outside-data",
        RUN,
        2,
        ("{w.tasks}: task 'scifact': path '../../outside' leaves the data folder through '..'", NOTHING),
        setup=task_option("scifact", "path: sci", "path: ../../outside"),
    ),
    Case("unknown-reader", RUN, 2, ("{w.tasks}", "bier", "did you mean 'beir'?", NOTHING), setup=task_option("scifact", "reader: beir", "reader: bier")),
    Case(
        "tasks-yaml-not-yaml",
        RUN,
        2,
        ("medbench run: error: {w.tasks}:{stream_end}: not valid YAML: expected the node content, but found '<stream end>'", NOTHING),
        setup=edit(lambda w: w.tasks, lambda t: t + "  - {name: [\n"),
    ),
    Case("unknown-task", ("run", "--tasks", "scifactt"), 2, ("unknown task 'scifactt'; did you mean 'scifact'?", NOTHING)),
    Case("unknown-model", ("run", "--models", "bm2"), 2, ("unknown model 'bm2'; did you mean 'bm25'?", NOTHING)),
    Case("retire-a-listed-model", ("models", "retire", "bm25"), 2, ("medbench models retire: error: ", "bm25", "still listed", NOTHING)),
    Case(
        "export-over-a-folder",
        ("export", "--to", "{w.root}/mine"),
        2,
        ("medbench export: error: {w.root}/mine exists and is not an earlier medbench export; name a new folder", "left as it was"),
        setup=not_an_export,
    ),
    Case("release-outside-git", ("release", "v1", "--repo", "{w.root}/mine"), 2, ("medbench release: error: ", "not a git checkout"), setup=not_an_export),
    # --- sources read strictly (issue 24.2) through the main job: exit 1, the reason under [curate] and last
    Case(
        "non-utf8",
        ("run", "--tasks", "bad_beir"),
        1,
        (
            "medbench run: FAILED: curated_task[bad_beir]: {w.shared}/bad_beir/corpus.jsonl:3: not UTF-8: byte 0xe9 at byte offset",
            "re-encode the file as UTF-8",
            "kept: no curated bad_beir",
            "fix it, then: medbench run --tasks bad_beir",
            "stack traces: {w.state}/logs/run-",
        ),
        setup=source("bad_beir", append("corpus.jsonl", b'{"_id": "d3", "text": "caf\xe9"}\n')),
        check=curate_failed("bad_beir"),
    ),
    Case(
        "non-utf8-verbose",
        ("run", "--tasks", "bad_beir", "--verbose"),
        1,
        ("medbench run: FAILED: curated_task[bad_beir]: {w.shared}/bad_beir/corpus.jsonl:3: not UTF-8", "fix it, then: medbench run --tasks bad_beir"),
        setup=source("bad_beir", append("corpus.jsonl", b'{"_id": "d3", "text": "caf\xe9"}\n')),
        check=curate_failed("bad_beir"),
        verbose=True,
    ),
    Case(
        "empty-corpus",
        ("run", "--tasks", "bad_beir"),
        1,
        ("curated_task[bad_beir]: {w.shared}/bad_beir/corpus.jsonl: file is empty (0 bytes)", "kept: no curated bad_beir"),
        setup=source("bad_beir", lambda f: (f / "corpus.jsonl").write_bytes(b"")),
        check=curate_failed("bad_beir"),
    ),
    Case(
        "duplicate-doc-id",
        ("run", "--tasks", "bad_beir"),
        1,
        ("{w.shared}/bad_beir/corpus.jsonl:3: document id 'd1' appears twice (first at {w.shared}/bad_beir/corpus.jsonl:1)", "kept: no curated bad_beir"),
        setup=source("bad_beir", append("corpus.jsonl", b'{"_id": "d1", "text": "again"}\n')),
        check=curate_failed("bad_beir"),
    ),
    Case(
        "qrels-without-header",
        ("run", "--tasks", "bad_beir"),
        1,
        ("{w.shared}/bad_beir/qrels/test.tsv:1: no header line", "add the header"),
        setup=source("bad_beir", lambda f: (f / "qrels" / "test.tsv").write_text("q1\td1\t1\nq2\td2\t1\n")),
        check=curate_failed("bad_beir"),
    ),
    Case(
        "qrels-name-a-missing-document",
        ("run", "--tasks", "bad_beir"),
        1,
        ("curated_task[bad_beir]: {w.shared}/bad_beir/qrels/test.tsv: task bad_beir: qrels name 1 unknown document id(s): ['zz']", "kept: no curated bad_beir"),
        setup=source("bad_beir", append("qrels/test.tsv", b"q1\tzz\t1\n")),
        check=curate_failed("bad_beir"),
    ),
    Case(
        "integer-and-string-id-collide",
        ("run", "--tasks", "bad_beir"),
        1,
        ("{w.shared}/bad_beir/corpus.jsonl:4: document id '7' appears twice (first at {w.shared}/bad_beir/corpus.jsonl:3)", 'the number 7 and the string "7"'),
        setup=source("bad_beir", append("corpus.jsonl", b'{"_id": 7, "text": "seven"}\n{"_id": "7", "text": "seven again"}\n')),
        check=curate_failed("bad_beir"),
    ),
    # --- a task's source broken after it had curated: the old copy is kept and its figure marked stale everywhere
    Case(
        "source-broken-after-curation",
        ("run", "--tasks", "scifact"),
        1,
        (
            "medbench run: FAILED: curated_task[scifact]: {w.shared}/sci/corpus.jsonl:6: not UTF-8",
            "kept: the curated scifact from before",
            "the leaderboard marks 1 cell(s) stale: bm25/scifact",
            "fix it, then: medbench run --tasks scifact",
        ),
        setup=break_scifact,
        writes=("data/reports/leaderboard.*", "data/reports/site/*", "state/mlflow.db", "state/.mlflow.db.locks/*", "state/mlartifacts/*"),
        check=stale_everywhere,
        new_runs=1,
    ),
    # --- a stored metrics.json edited by hand: the saved leaderboard is not replaced by one without that cell
    Case(
        "rebuild-over-a-corrupt-metrics-file",
        ("leaderboard", "--rebuild"),
        1,
        (
            "medbench leaderboard: error: the saved leaderboard {w.board} was not replaced",
            "bm25 x liveqa_medquad: {w.data}/artifacts/bm25/liveqa_medquad/metrics/",
            "/metrics.json: sha256",
            "does not match manifest",
            "rematerialise task_metrics[bm25|liveqa_medquad] (`medbench run --models bm25 --tasks liveqa_medquad`)",
            "{w.data}/reports left as it was",
        ),
        setup=corrupt_metrics,
    ),
    Case(
        "export-over-a-damaged-artifact",
        ("export", "--to", "{w.root}/exported"),
        1,
        ("medbench export: error: ", "per_query.parquet: size 6 bytes", "{w.root}/exported not created"),
        setup=damage_per_query,
    ),
    Case("no-saved-leaderboard", ("leaderboard",), 1, ("no leaderboard at {w.board}", "medbench run"), setup=board_moved),
    # --- data contracts (RELIABILITY.md 14): exit 1 naming the rows; the new curated copy is kept with its refusal
    Case(
        "licence-outside-the-allowlist",
        ("run", "--tasks", "gate_licence"),
        1,
        (
            "medbench run: FAILED: curated_task[gate_licence]: task_contract: task gate_licence: gate FAILED",
            "every licence is in the licence allowlist",
            "'Proprietary'",
            "kept: the new curated gate_licence, refused by its gate ({w.data}/tasks/gate_licence/GATE.json)",
        ),
        setup=gate_licence,
        writes=("data/tasks/gate_licence/*", "state/scratch/*"),
    ),
    Case(
        "query-shared-with-another-task",
        ("run", "--tasks", "gate_overlap"),
        1,
        ("medbench run: FAILED: gate[gate_overlap]: ", "fix it, then: medbench run --tasks gate_overlap"),
        setup=gate_overlap,
        writes=("data/tasks/gate_overlap/*", "data/tasks/OVERLAP_GATE.json", "data/tasks/_overlap/*", "state/scratch/*"),
    ),
]
# --- one malformed record per reader: refused, naming file, place, id and field; nothing curated
for _name in WRITERS:
    CASES.append(
        Case(
            f"reader-{_name}",
            ("run", "--tasks", f"r_{_name}"),
            1,
            (
                f"medbench run: FAILED: curated_task[r_{_name}]: {{file}}{{place}}",
                "{rid}",
                "'body_text' holds text that this reader does not map",
                f"kept: no curated r_{_name}",
            ),
            setup=reader_source(_name),
            check=curate_failed(f"r_{_name}"),
        )  # fmt: skip
    )


def changed(before: dict, after: dict) -> set[str]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_ends_in_one_line_and_changes_nothing(world, case):
    undo = case.setup(world) if case.setup else None
    try:
        files, runs = world.snapshot()
        args = [a.format(w=world) for a in case.args]
        code, out = world.medbench(*args)
        lines = out.rstrip().splitlines()
        last = lines[-1] if lines else ""
        where = {"w": world, "stream_end": len(world.tasks.read_text().splitlines()) + 1}  # the line after the file's last
        if case.id.startswith("reader-"):
            name = case.id.removeprefix("reader-")
            written = world.written[name]
            where |= {"file": world.shared / "readers" / name / written.file.relative_to(world.staged / name), "place": written.place, "rid": written.rid}
        assert code == case.code, out[-3000:]
        for want in case.last:
            assert want.format(**where) in last, f"{want.format(**where)!r} not in the last line:\n{last}"
        if case.verbose:
            assert "Stack Trace:" in out and "stack traces: " not in last
        else:
            for trace in ("Traceback (most recent call last)", "STEP_FAILURE", "dagster._core.errors", "Stack Trace:"):
                assert trace not in out, out[-3000:]
        if "stack traces: " in last:  # the log it names holds them
            logged = Path(last.rsplit("stack traces: ", 1)[1]).read_text()
            assert logged.startswith("--- ") and ("Stack Trace:" in logged or "Traceback (most recent call last)" in logged), logged[:2000]
        now_files, now_runs = world.snapshot()
        moved = changed(files, now_files)
        assert {p for p in moved if not any(fnmatch(p, g) for g in case.writes)} == set(), sorted(moved)
        assert [r for r in now_runs if r in runs] == runs and len(now_runs) == len(runs) + case.new_runs
        if case.check:
            case.check(world, out)
    finally:
        if undo:
            undo()
