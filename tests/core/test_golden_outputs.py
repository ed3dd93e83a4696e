"""Declared versions and golden outputs (tests/core/golden_outputs.py).

Every stage's output for every kind equals the recorded one, or its version was bumped (and the
outputs recorded again). Shown on temporary copies of the library: an output changed without a
bump fails the check, a bump without recording fails it too, and moving a module to another
subpackage changes no output and no artifact key of the bundled demo. Shown in this process, by
changing what production calls: a leaderboard that averages over fewer tasks, and BM25 without its
per-language stemmer, fail the check; ``--record --only`` merges and deletes nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import golden_outputs
import pytest
from golden_outputs import GOLDEN, compare, compute, models_yaml, record

from medbench_core.retrieval.kinds import KINDS

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("MEDBENCH_SHARED", ROOT.parent / "shared"))

BUNDLED_KEYS = """
import json, sys, tempfile
from pathlib import Path
from medbench_core.retrieval.derived import registry_partition_keys
from medbench_core.retrieval.model_registry import load_registry
from medbench_core.taskdata.catalog import build_task, load_catalog
root, shared = Path(sys.argv[1]), Path(sys.argv[2])
specs = load_registry(root / "models.yaml")
with tempfile.TemporaryDirectory() as tmp:
    keys = {e.name: registry_partition_keys(specs, build_task(e, shared / "data", Path(tmp) / e.name)) for e in load_catalog(root / "tasks.yaml").tasks}
print(json.dumps(keys, sort_keys=True))
"""


@pytest.mark.slow
@pytest.mark.model
def test_every_stage_output_is_the_recorded_one_or_its_version_was_bumped(tmp_path):
    problems = compare(json.loads(GOLDEN.read_text()), compute(tmp_path))
    assert problems == []


def test_every_registered_kind_has_a_model_in_the_fixture(tmp_path):
    """Derived from KINDS: a kind without a written entry gets ``{name: <kind>, kind: <kind>}``, so its outputs are made and checked."""
    import yaml

    models = yaml.safe_load(models_yaml(tmp_path))["models"]
    assert {m["kind"] for m in models} == set(KINDS)
    recorded = json.loads(GOLDEN.read_text())
    for m in models:  # each model's run is recorded (on its home task: images for a kind that reads images, text otherwise)
        assert any(name.startswith(f"{m['name']}/") and name.endswith(("/run", "/derived_run", "/expanded_run")) for name in recorded), m["name"]


def _names(problems: list[str]) -> set[str]:
    return {p.split(": ", 1)[0] for p in problems}


def test_a_leaderboard_that_averages_over_fewer_tasks_fails_the_check(tmp_path, monkeypatch):
    """The leaderboard users see is reports.leaderboard's (through write_leaderboard); dropping a task from its average is caught."""
    import polars as pl

    from medbench_core.evaluation import reports

    production = reports.leaderboard

    def fewer(cells, models, tasks, metric="ndcg_at_10"):
        board = production(cells, models, tasks, metric)

        def average(row):  # the mean over every task it can read but the last
            over = row["averaged_over"].split(", ")[:-1]
            values = [row[t] for t in over]
            return round(sum(values) / len(values), 4) if values and None not in values else None

        return board.with_columns(pl.Series("average", [average(r) for r in board.iter_rows(named=True)], dtype=pl.Float64))

    monkeypatch.setattr(reports, "leaderboard", fewer)
    problems = compare(json.loads(GOLDEN.read_text()), compute(tmp_path, {"leaderboard"}))
    assert _names(problems) == {"leaderboard", "reports"}  # the cells themselves hold
    assert all("output changed without a version bump" in p for p in problems)


def _words_only(self, spec, task):
    """Every record analysed by the model's own stopwords and stemmer: no analyser per language."""
    from medbench_core.retrieval.analysis import words

    langs = set(task.queries["language"].unique().to_list()) | set(task.corpus["language"].unique().to_list())
    return {lang: words(spec.settings.stopwords, spec.settings.stemmer) for lang in langs}


@pytest.mark.parametrize("where", ["bm25_settings", "analyzers"])
def test_bm25_without_its_per_language_stemmer_fails_the_check(tmp_path, monkeypatch, where):
    """``language_analyzers: {fr: {stopwords: fr, stemmer: french}}`` (the bundled bm25's) dropped from the
    effective settings, or from the kind's per-language analysis: the French candidate-set task's BM25 outputs move."""
    from dataclasses import asdict

    from medbench_core.retrieval import bm25
    from medbench_core.retrieval.kinds.bm25 import BM25Kind

    assert compare(json.loads(GOLDEN.read_text()), compute(tmp_path / "before", {"bm25"})) == []  # as recorded before the change
    if where == "bm25_settings":
        production = bm25.bm25_settings
        monkeypatch.setattr(bm25, "bm25_settings", lambda settings, language=None: production(settings, None))
    else:
        monkeypatch.setattr(BM25Kind, "analyzers", _words_only)
        monkeypatch.setattr(BM25Kind, "analyzer", lambda self, spec, task: bm25.bm25_settings(asdict(spec.settings)))
    problems = compare(json.loads(GOLDEN.read_text()), compute(tmp_path / "after", {"bm25"}))
    assert "bm25/frenchmedmcqa/embeddings" in _names(problems)
    assert all(name.startswith("bm25/") for name in _names(problems))  # the text task's bm25 is English: unchanged
    if where == "analyzers":  # French documents stemmed as English: other scores
        assert {"bm25/frenchmedmcqa/run", "bm25/frenchmedmcqa/metrics", "bm25/multi/run"} <= _names(problems)


def test_record_only_merges_and_rewrites_only_what_differs(tmp_path, monkeypatch):
    recorded = json.loads(GOLDEN.read_text())
    damaged = {k: v for k, v in recorded.items() if k != "bm25/frenchmedmcqa/index"}  # one entry missing, one wrong
    damaged["bm25/run"] = {**recorded["bm25/run"], "output": {"rows": [], "info": {}}}
    path = tmp_path / "golden_outputs.json"
    path.write_text(json.dumps(damaged, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    monkeypatch.setattr(golden_outputs, "GOLDEN", path)
    assert golden_outputs.main(["--record", "--only", "bm25"]) == 0
    assert json.loads(path.read_text()) == recorded  # the other models' entries all kept
    assert path.read_text() == GOLDEN.read_text()  # byte for byte: entries that hold are written as recorded


def test_record_without_only_removes_what_is_no_longer_made_and_keeps_what_holds():
    entry = {"versions": "run=1", "tolerance": "neural", "output": [0.5]}
    recorded = {"kept": entry, "moved": entry, "gone": entry}
    now = {"kept": {**entry, "output": [0.5 + 1e-6]}, "moved": {**entry, "output": [0.7]}, "new": entry}
    merged, written, removed = record(recorded, now, None)
    assert merged == {"kept": entry, "moved": now["moved"], "new": entry} and written == ["moved", "new"] and removed == ["gone"]
    assert record(recorded, now, {"x"})[0] == {**merged, "gone": entry}  # with --only nothing is removed


def library_copy(tmp: Path) -> Path:
    """The library, the registry and the golden-output check in a fresh folder (changed by the tests)."""
    copy = tmp / "copy"
    shutil.copytree(ROOT / "medbench_core", copy / "medbench_core", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "tests" / "core").mkdir(parents=True)
    for name in ("golden_outputs.py", "golden_outputs.json", "tiny_models.py"):
        shutil.copy(ROOT / "tests" / "core" / name, copy / "tests" / "core" / name)
    for name in ("models.yaml", "tasks.yaml"):
        shutil.copy(ROOT / name, copy / name)
    return copy


def check(copy: Path, only: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONSAFEPATH": "1"}
    return subprocess.run(
        [sys.executable, str(copy / "tests" / "core" / "golden_outputs.py"), "--check", "--only", only], cwd=copy, env=env, capture_output=True, text=True
    )


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: {old!r}"
    path.write_text(text.replace(old, new))


@pytest.mark.slow
@pytest.mark.model
def test_an_output_change_without_a_version_bump_fails_and_a_bump_asks_for_recording(tmp_path):
    copy = library_copy(tmp_path)
    assert check(copy, "bm25").returncode == 0  # the copy as it is passes
    # BM25's default stopword list changes what it indexes; the fixture's entry does not set it.
    edit(copy / "medbench_core" / "retrieval" / "kinds" / "bm25.py", 'stopwords: str | list | None = "en"', "stopwords: str | list | None = None")
    unbumped = check(copy, "bm25")
    assert unbumped.returncode == 1
    assert "bm25/embeddings: output changed without a version bump (curated_task=1 embeddings=1 bm25=1)" in unbumped.stdout
    edit(copy / "medbench_core" / "retrieval" / "kinds" / "bm25.py", 'version = "1"', 'version = "2"')
    bumped = check(copy, "bm25")
    assert bumped.returncode == 1
    assert "bm25/embeddings: versions curated_task=1 embeddings=1 bm25=1 -> curated_task=1 embeddings=1 bm25=2: record the new outputs" in bumped.stdout


def move_module(copy: Path, old: str, new: str) -> None:
    """Move module ``old`` (dotted) to ``new`` and rewrite every import of it in the copy, as a refactoring would."""
    src, dst = copy / (old.replace(".", "/") + ".py"), copy / (new.replace(".", "/") + ".py")
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(src, dst)
    pattern = re.compile(rf"\b{re.escape(old)}\b")
    parent_old, leaf = old.rsplit(".", 1)
    parent_new, leaf_new = new.rsplit(".", 1)
    for path in copy.rglob("*.py"):
        text = path.read_text()
        alias = leaf_new if leaf_new == leaf else f"{leaf_new} as {leaf}"
        changed = re.sub(rf"^(\s*)from {re.escape(parent_old)} import {leaf}$", rf"\1from {parent_new} import {alias}", pattern.sub(new, text), flags=re.M)
        if changed != text:
            path.write_text(changed)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.skipif(not (SHARED / "data").is_dir(), reason="needs ../shared/data (the bundled tasks)")
def test_moving_a_module_to_another_subpackage_changes_no_output_and_no_key_of_the_bundled_demo(tmp_path):
    copy = library_copy(tmp_path)
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    before = subprocess.run(
        [sys.executable, "-c", BUNDLED_KEYS, str(copy), str(SHARED)], env={**env, "PYTHONPATH": str(copy)}, capture_output=True, text=True, check=True
    )
    move_module(copy, "medbench_core.retrieval.ranking", "medbench_core.evaluation.ranking")
    move_module(copy, "medbench_core.retrieval.bm25", "medbench_core.taskdata.lexical")
    assert not (copy / "medbench_core" / "retrieval" / "ranking.py").exists()
    after = subprocess.run(
        [sys.executable, "-c", BUNDLED_KEYS, str(copy), str(SHARED)], env={**env, "PYTHONPATH": str(copy)}, capture_output=True, text=True, check=True
    )
    keys = json.loads(before.stdout)
    assert json.loads(after.stdout) == keys
    assert sum(len(stages) for models in keys.values() for stages in models.values()) >= 60  # every stage of every model on every task
    moved = check(copy, "bm25,fusion")
    assert moved.returncode == 0, moved.stdout + moved.stderr
