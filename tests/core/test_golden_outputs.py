"""Declared versions and golden outputs (tests/core/golden_outputs.py).

Every stage's output for every kind equals the recorded one, or its version was bumped (and the
outputs recorded again). Shown on temporary copies of the library: an output changed without a
bump fails the check, a bump without recording fails it too, and moving a module to another
subpackage changes no output and no artifact key of the bundled demo.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from golden_outputs import GOLDEN, compare, compute

pytestmark = [pytest.mark.slow, pytest.mark.model]

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


def test_every_stage_output_is_the_recorded_one_or_its_version_was_bumped(tmp_path):
    problems = compare(json.loads(GOLDEN.read_text()), compute(tmp_path))
    assert problems == []


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
    return subprocess.run([sys.executable, str(copy / "tests" / "core" / "golden_outputs.py"), "--check", "--only", only], cwd=copy, env=env, capture_output=True, text=True)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: {old!r}"
    path.write_text(text.replace(old, new))


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


@pytest.mark.skipif(not (SHARED / "data").is_dir(), reason="needs ../shared/data (the bundled tasks)")
def test_moving_a_module_to_another_subpackage_changes_no_output_and_no_key_of_the_bundled_demo(tmp_path):
    copy = library_copy(tmp_path)
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    before = subprocess.run([sys.executable, "-c", BUNDLED_KEYS, str(copy), str(SHARED)], env={**env, "PYTHONPATH": str(copy)}, capture_output=True, text=True, check=True)
    move_module(copy, "medbench_core.retrieval.ranking", "medbench_core.evaluation.ranking")
    move_module(copy, "medbench_core.retrieval.bm25", "medbench_core.taskdata.lexical")
    assert not (copy / "medbench_core" / "retrieval" / "ranking.py").exists()
    after = subprocess.run([sys.executable, "-c", BUNDLED_KEYS, str(copy), str(SHARED)], env={**env, "PYTHONPATH": str(copy)}, capture_output=True, text=True, check=True)
    keys = json.loads(before.stdout)
    assert json.loads(after.stdout) == keys
    assert sum(len(stages) for models in keys.values() for stages in models.values()) >= 60  # every stage of every model on every task
    moved = check(copy, "bm25,fusion")
    assert moved.returncode == 0, moved.stdout + moved.stderr
