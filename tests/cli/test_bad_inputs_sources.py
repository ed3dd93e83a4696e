"""Hostile sources through ``medbench`` itself (issue 29.6), in the style of tests/cli/test_bad_inputs.py.

The world of test_bad_inputs.py (two tiny BEIR tasks curated and evaluated by BM25), with catalogue
entries whose sources the cases write: a task folder linked outside the data folder, ids with a tab,
a grade of -1, a grade of 10**20, a record nested 200,000 deep, an ``images.zip`` bomb. Each case
checks the exit code (2 for tasks.yaml and models.yaml, 1 for data), the last line (file, line and
id or value), that no stack trace reached the terminal, that it ends in time, and that the sha256 of
every stored file and the MLflow runs are unchanged. The rules themselves, one by one, are unit-tested
in tests/core/test_source_rules.py; here one run refuses five bad sources at once.
"""

from __future__ import annotations

import json
import shutil
import time
import zipfile
from pathlib import Path

import pytest

from tests.cli.test_bad_inputs import LICENCES, World, changed
from tests.core.reader_fixtures import jsonl, write_m3retrieve
from tests.core.reader_fixtures import write_beir as write_reader_beir
from tests.orchestration.operating_env import BM25, LQ_DOCS, LQ_QRELS, LQ_QUERIES, SCI_DOCS, SCI_QRELS, SCI_QUERIES, write_beir, write_models

HOSTILE = ("link_folder", "tab_id", "minus_one", "huge_grade", "deep", "zip_bomb")
TRACES = ("Traceback (most recent call last)", "STEP_FAILURE", "dagster._core.errors", "Stack Trace:")
NOTHING = "nothing was run or changed"


def catalogue() -> str:
    lines = [
        "benchmark: medbench-test",
        "licence_allowlist: [CC-BY-4.0, ODC-By-1.0, CC-BY-SA-4.0]",
        "tasks:",
        "  - {name: scifact, reader: beir, path: sci, split: test, query_licence: CC-BY-4.0, doc_licence: ODC-By-1.0}",
        "  - {name: liveqa_medquad, reader: beir, path: lq, split: test, query_licence: CC-BY-4.0, doc_licence: CC-BY-4.0}",
        *(f"  - {{name: {n}, reader: beir, path: {n}, split: test, {LICENCES}}}" for n in HOSTILE if n != "zip_bomb"),
        "  - {name: zip_bomb, reader: m3retrieve, path: zip_bomb, subset: Cardiology, licence: CC-BY-SA-4.0}",
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("bad_sources"))
    write_beir(w.shared / "sci", SCI_QUERIES, SCI_DOCS, SCI_QRELS)
    write_beir(w.shared / "lq", LQ_QUERIES, LQ_DOCS, LQ_QRELS)
    w.tasks.write_text(catalogue())
    write_models(w.models, [BM25])
    try:
        rc, out = w.medbench("run", "--tasks", "scifact,liveqa_medquad")
        assert rc == 0, out[-3000:]
        yield w
    finally:
        w.runner.close()


def ran(world: World, *args: str) -> tuple[int, str, str, float]:
    """The command's exit code, output, last line and seconds; no stack trace on the terminal."""
    started = time.monotonic()
    code, out = world.medbench(*args)
    seconds = time.monotonic() - started
    for trace in TRACES:
        assert trace not in out, out[-3000:]
    lines = out.rstrip().splitlines()
    return code, out, lines[-1] if lines else "", seconds


def unchanged(world: World, before: tuple) -> None:
    files, runs = before
    now_files, now_runs = world.snapshot()
    assert changed(files, now_files) == set()
    assert now_runs == runs


# --- data: exit 1, each source named with its file, line and value; nothing stored changes ----------


def write_hostile(w: World) -> dict[str, Path]:
    """The five bad sources (and a good task folder kept outside the data folder, linked in)."""
    outside = w.root / "outside" / "link_folder"
    write_reader_beir(outside)
    (w.shared / "link_folder").symlink_to(outside)
    files = {}
    for name in ("tab_id", "minus_one", "huge_grade", "deep"):
        write_reader_beir(w.shared / name)
    files["tab_id"] = jsonl(w.shared / "tab_id" / "corpus.jsonl", [{"_id": "d1", "text": "gout"}, {"_id": "d\t2", "text": "asthma"}])
    for name, grade in (("minus_one", "-1"), ("huge_grade", "99999999999999999999")):
        files[name] = w.shared / name / "qrels" / "test.tsv"
        files[name].write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t{grade}\n")
    files["deep"] = w.shared / "deep" / "corpus.jsonl"
    with open(files["deep"], "a") as f:
        f.write('{"_id": "d3", "text": "x", "metadata": ' + "[" * 200_000 + "]" * 200_000 + "}\n")
    bomb = write_m3retrieve(w.shared / "zip_bomb")
    with zipfile.ZipFile(bomb.source / "images.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("Cardiology/c1.png", bytes(64 << 20))  # 64 MiB of zeros: about 64 KB deflated
        zf.writestr("Cardiology/c2.png", bytes(16))
    files["zip_bomb"] = bomb.source / "images.zip"
    return files


@pytest.mark.slow
def test_five_hostile_sources_are_refused_in_one_run_naming_file_line_and_value(world):
    files = write_hostile(world)
    try:
        before = world.snapshot()
        code, out, last, seconds = ran(world, "run", "--tasks", ",".join(HOSTILE))
        assert code == 1, out[-3000:]
        outside = world.root / "outside" / "link_folder"
        assert last.startswith(f"medbench run: FAILED ({len(HOSTILE)}): curated_task[link_folder]: task link_folder: "), last
        for want in (
            f"{world.shared / 'link_folder'} leads to {outside.resolve()}, outside the data folder {world.shared.resolve()}; links must stay inside it",
            f"curated_task[tab_id]: {files['tab_id']}:2: '_id' 'd\\t2' holds a tab (U+0009) at character 2",
            f"curated_task[minus_one]: {files['minus_one']}:3: relevance -1 is outside 0..1000",
            f"curated_task[huge_grade]: {files['huge_grade']}:3: relevance 99999999999999999999 is outside 0..1000",
            f"curated_task[deep]: {files['deep']}:3: JSON nested deeper than the parser can read (RecursionError)",
            f"curated_task[zip_bomb]: task zip_bomb: {files['zip_bomb']}: member 'Cardiology/c1.png' would expand from",
            "refusing the archive as a decompression bomb (nothing was extracted)",
            "kept: no curated link_folder, no curated tab_id, no curated minus_one, no curated huge_grade, no curated deep, no curated zip_bomb",
            f"fix them, then: medbench run --tasks {','.join(HOSTILE)}",
        ):
            assert want in last, f"{want!r} not in the last line:\n{last}"
        assert seconds < 300
        unchanged(world, before)  # nothing of the bomb is left in state/scratch, no task folder is written
    finally:
        (world.shared / "link_folder").unlink()
        shutil.rmtree(world.root / "outside")
        for name in HOSTILE[1:]:
            shutil.rmtree(world.shared / name)


# --- configuration: exit 2 before any work, naming the file and the line -----------------------------


def _edit(path: Path, text: str | bytes):
    before = path.read_bytes()
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return lambda: path.write_bytes(before)


@pytest.mark.slow
def test_a_model_or_task_name_ending_in_a_newline_is_refused_and_creates_nothing(world):
    doc = json.loads(world.models.read_text())
    doc["models"][0]["name"] = "bm25x\n"
    undo = _edit(world.models, json.dumps(doc))
    try:
        before = world.snapshot()
        code, out, last, _ = ran(world, "run")
        assert code == 2, out[-3000:]
        assert f"medbench run: error: {world.models}: model 'bm25x\\n': use letters, digits, '.', '_', '+' or '-' in a model name" in last
        assert last.endswith(NOTHING), last
        assert not any(p.name.startswith("bm25x") for p in (world.data / "artifacts").iterdir())
        unchanged(world, before)
    finally:
        undo()
    undo = _edit(world.tasks, world.tasks.read_text().replace("{name: scifact,", '{name: "scifact\\n",'))
    try:
        before = world.snapshot()
        code, out, last, _ = ran(world, "run", "--models", "bm25")
        assert code == 2, out[-3000:]
        assert f"medbench run: error: {world.tasks}: task name 'scifact\\n': use lowercase letters, digits and '_'" in last and last.endswith(NOTHING), last
        unchanged(world, before)
    finally:
        undo()


BOMB = "".join(f"{a}: &{a} [{', '.join([f'*{b}'] * 9) if b else ', '.join(['lol'] * 9)}]\n" for a, b in zip("abcdefghi", ["", *"abcdefgh"]))


@pytest.mark.slow
@pytest.mark.parametrize(
    "text, last",
    [
        (lambda t: BOMB + t.replace("split: test, query_licence: CC-BY-4.0, doc_licence: ODC-By-1.0",
                                    "split: test, query_licence: *i, doc_licence: ODC-By-1.0", 1),
         "{w.tasks}: its aliases repeat {n} nodes, over the limit of 100000 (an anchor bomb?)"),
        (lambda t: (t + "# caf\xe9\n").encode("latin-1"), "{w.tasks}:{lines}: not UTF-8: byte 0xe9 at byte offset"),
        (lambda t: t + "#" * (1 << 20) + "\n", "{w.tasks}: task catalogue is {size} bytes, over the limit of 1048576 for a YAML file"),
    ],
    ids=["anchor-bomb", "latin-1", "over-1-mib"],
)  # fmt: skip
def test_a_hostile_tasks_yaml_is_refused_at_once_by_every_command(world, text, last):
    undo = _edit(world.tasks, text(world.tasks.read_text()))
    try:
        before = world.snapshot()
        size, lines = world.tasks.stat().st_size, len(world.tasks.read_bytes().splitlines())
        for args in (("run",), ("leaderboard", "--rebuild")):
            code, out, said, seconds = ran(world, *args)
            assert code == 2, out[-3000:]
            want = last.format(w=world, n="{n}", size=size, lines=lines)
            head, _, tail = want.partition("{n}")
            assert head in said and tail in said, f"{want!r} not in the last line:\n{said}"
            assert seconds < 60, seconds
        unchanged(world, before)
    finally:
        undo()


# --- the last line of a failed curation cites only the gate verdict that was written -----------------


def test_a_curation_that_failed_before_its_gate_was_recorded_cites_no_gate_file(tmp_path):
    """Disk full after the new task was swapped in: no GATE.json was written, and the last line does not cite one."""
    from medbench_core.layout import Layout
    from medbench_core.storage import write_manifest
    from medbench_core.taskdata.contracts import ContractResult, record_gate
    from orchestration.preparation import kept_after_failed_curation

    layout = Layout(tmp_path / "data")
    folder = layout.task_dir("t")
    folder.mkdir(parents=True)
    (folder / "task.json").write_text("{}")
    write_manifest(folder, ["task.json"], {"content_hash": "new"})
    assert kept_after_failed_curation(layout, "t", before="new") == "the curated t from before"
    said = kept_after_failed_curation(layout, "t", before="old")
    assert said == "the new curated t, with no gate verdict recorded (its data contract is judged again before anything builds on it)"
    assert "GATE.json" not in said
    record_gate(folder, ContractResult(name="t", passed=False, outcomes=(), message="refused", content_hash="old"))
    assert "GATE.json" not in kept_after_failed_curation(layout, "t", before="older")  # a verdict on other content
    record_gate(folder, ContractResult(name="t", passed=False, outcomes=(), message="refused", content_hash="new"))
    assert kept_after_failed_curation(layout, "t", before="old") == f"the new curated t, refused by its gate ({layout.gate_file('t')})"
    assert kept_after_failed_curation(Layout(tmp_path / "none"), "t", before=None) == "no curated t"
