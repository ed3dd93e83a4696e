"""`medbench gc --cloud` never removes what a version recorded in the remote needs, nor what was pushed lately (issue 44, item 3).

The issue's case on the small released version of tests/release/version_world.py: clones share one
remote (as every clone on a machine shares ``~/.cache/medbench/dvc-remote``). Clone A releases v3
("pushed, committed and tagged") but has not pushed its tag; clone D, which has never seen v3, runs
`gc --cloud`; then a clone of A checks v3 out and pulls it. Before, D's gc removed v3's objects and
the pull failed (exit 3). Now release and `data push` record each version in the remote's own index
(``medbench-versions/<data version>.json``), gc keeps what those versions need and every object
written in the last ``--keep-hours``, and says what it kept and why; what no version needs and is
older goes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.release.version_world import git, ok

pytestmark = [pytest.mark.dvc, pytest.mark.slow, pytest.mark.timeout(900)]


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _objects(remote: Path) -> set[str]:
    return {p.parent.name + p.name for p in (remote / "files" / "md5").glob("??/*") if p.is_file()}


def _dvc(world, repo: Path, remote: Path, *args: str) -> subprocess.CompletedProcess:
    return ok(subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, env=world.env(repo, remote=remote), capture_output=True, text=True))


def test_gc_cloud_in_another_clone_keeps_a_version_released_but_not_yet_tagged_there(world):
    remote = world.copy_remote("remote-gc-index")
    a = world.clone("clone-gc-a")
    ok(world.medbench(a, "data", "pull", remote=remote))
    (a / "data" / "reports" / "v3-note.txt").write_text("third version\n")
    state = world.base / "state-gc-a"
    shutil.copytree(world.origin / ".medbench", state, ignore=shutil.ignore_patterns("dagster_home", "logs"))  # its MLflow runs
    ok(world.medbench(a, "release", "v3", remote=remote, state=state))
    v3 = json.loads((a / "versions" / "v3.json").read_text())["data_version"]
    index = remote / "medbench-versions" / f"{v3}.json"
    entry = json.loads(index.read_text())
    assert entry["data_version"] == v3 and entry["label"] == "release v3"
    note = hashlib.md5(b"third version\n").hexdigest()

    # An abandoned state pushed with DVC alone (no release, no index entry).
    (a / "data" / "scratch.txt").write_text("abandoned experiment\n")
    _dvc(world, a, remote, "add", "-q", "data")
    _dvc(world, a, remote, "push", "-q", "-r", "medbench")
    scratch = hashlib.md5(b"abandoned experiment\n").hexdigest()
    scratch_dir = [o for o in _objects(remote) if o.endswith(".dir") and o not in (v3, world.record["data_version"])]
    assert scratch in _objects(remote) and len(scratch_dir) == 1

    d = world.clone("clone-gc-d")  # has seen v1 (origin's tag), never v3
    proc = ok(world.medbench(d, "gc", "--cloud", remote=remote))

    kept = [ln for ln in proc.stdout.splitlines() if ln.startswith("[gc] remote: kept")]
    assert f"{v3[:12]} (release v3 (the remote's index: pushed {entry['pushed_at']}" in kept[0]
    assert f"{world.record['data_version'][:12]} (tag v1)" in kept[0]
    assert "kept 2 object(s) no version here needs, written in the last 24 h (a push may be under way)" in kept[1]
    assert "[gc] remote: removed 0 object(s)" in proc.stdout
    assert {note, v3, scratch} <= _objects(remote)

    # Once older than --keep-hours, what no version needs goes; the recorded version stays, however old.
    old = time.time() - 3 * 86400
    for p in (remote / "files" / "md5").glob("??/*"):
        os.utime(p, (old, old))
    proc = ok(world.medbench(d, "gc", "--cloud", remote=remote))
    assert "[gc] remote: removed 2 object(s) no version needs, each older than 24 h" in proc.stdout
    assert scratch not in _objects(remote) and scratch_dir[0] not in _objects(remote)
    assert {note, v3} <= _objects(remote) and index.exists()

    # A clone of A checks v3 out and pulls it from the collected remote: all there.
    e = world.base / "clone-gc-e"
    git(world.base, "clone", "-q", str(a), str(e))
    git(e, "checkout", "-q", "v3")
    ok(world.medbench(e, "data", "pull", remote=remote))
    assert _tree(e / "data") == {**_tree(world.origin / "data"), "reports/v3-note.txt": hashlib.sha256(b"third version\n").hexdigest()}


def test_data_push_records_the_version_and_data_check_checks_it(world):
    remote = world.copy_remote("remote-push-index")
    a = world.clone("clone-push-a")
    ok(world.medbench(a, "data", "pull", remote=remote))
    (a / "data" / "reports" / "pushed-note.txt").write_text("pushed, never released\n")
    _dvc(world, a, remote, "add", "-q", "data")
    ok(world.medbench(a, "data", "push", remote=remote))
    pushed = sorted(p.name.removesuffix(".json") for p in (remote / "medbench-versions").glob("*.json"))
    assert len(pushed) == 2 and world.record["data_version"] in pushed  # v1 (its release) and this push
    entry = next(json.loads((remote / "medbench-versions" / f"{v}.json").read_text()) for v in pushed if v != world.record["data_version"])
    assert entry["label"].startswith("pushed from commit ")

    old = time.time() - 3 * 86400
    for p in (remote / "files" / "md5").glob("??/*"):
        os.utime(p, (old, old))
    d = world.clone("clone-push-d")
    ok(world.medbench(d, "gc", "--cloud", remote=remote))
    assert hashlib.md5(b"pushed, never released\n").hexdigest() in _objects(remote)

    (remote / "files" / "md5" / entry["data_version"][:2] / entry["data_version"][2:]).unlink()  # the remote damaged
    proc = world.medbench(d, "data", "check", remote=remote)
    assert proc.returncode == 1 and f"directory object {entry['data_version']} missing" in proc.stderr
    before = _objects(remote)
    proc = world.medbench(d, "gc", "--cloud", remote=remote)  # which files that version needs is unknown now: nothing goes
    assert proc.returncode == 2 and f"the files of data {entry['data_version']}" in proc.stderr and "nothing was removed from the remote" in proc.stderr
    assert _objects(remote) == before
