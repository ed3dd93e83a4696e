"""A pull never loses what data/ held (issue 29, item 2): staged, verified, swapped in at once.

On the small released version of tests/release/version_world.py (two tiny BEIR tasks, three models,
one local remote), each test works on fresh clones and copies of the remote:

- the issue's case exactly: an object corrupted in both the local cache and the remote, its
  workspace file deleted: `medbench reproduce v1` used to end with exit 3 and no data/ at all (DVC's
  checkout deletes the folder); now exit 3 naming the file and object, data/ byte for byte as it
  was, and the same command succeeds once the remote is repaired;
- variants: the corrupted object's file still intact in data/ (the version is whole: pulled, and the
  cache repaired from data/), an object missing from the remote, changes never added to DVC (moved
  to a kept folder, named), and `medbench data pull` killed (SIGKILL) while staging and right after
  the swap: data/ is the old tree or the version, never a mixture, and the next pull finishes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from medbench_release.gc import rehash_objects
from tests.release.version_world import VersionWorld, ok

pytestmark = [pytest.mark.dvc, pytest.mark.slow, pytest.mark.timeout(900)]


def _tree(folder: Path) -> dict[str, str]:
    """relpath -> sha256 of every file under ``folder`` (what "nothing lost or changed" is checked with)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _listing(world: VersionWorld) -> dict[str, str]:
    version = world.record["data_version"]
    obj = world.remote / "files" / "md5" / version[:2] / version[2:]
    return {e["relpath"]: e["md5"] for e in json.loads(obj.read_text())}


def _object(store: Path, md5: str) -> Path:
    return store / "files" / "md5" / md5[:2] / md5[2:]


def _corrupt(path: Path) -> None:
    path.chmod(0o644)
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    path.write_bytes(bytes(raw))


def _run_file(world: VersionWorld, model: str, task: str = "scifact") -> str:
    a = next(a for a in world.record["artifacts"] if a["stage"] == "run" and a["model"] == model and a["task"] == task)
    return f"{a['path']}/run.parquet"


def _pulled_clone(world: VersionWorld, name: str, remote: Path) -> Path:
    clone = world.clone(name)
    ok(world.medbench(clone, "data", "pull", remote=remote))
    return clone


def _last_line(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.strip().splitlines()[-1]


def test_the_issues_case_an_object_corrupt_in_cache_and_remote_with_its_file_deleted_keeps_data_as_it_was(world):
    remote = world.copy_remote("remote-issue")
    clone = _pulled_clone(world, "clone-issue", remote)
    listing, rel = _listing(world), _run_file(world, "bm25")
    md5 = listing[rel]
    _corrupt(_object(remote, md5))
    _corrupt(_object(clone / ".dvc" / "cache", md5))
    (clone / "data" / rel).unlink()
    before = _tree(clone / "data")
    assert len(before) == len(listing) - 1

    proc = world.medbench(clone, "reproduce", "v1", remote=remote)

    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert (clone / "data").is_dir(), "data/ was deleted (issue 29)"
    assert _tree(clone / "data") == before  # the intact files, byte for byte; nothing added, nothing removed
    last = _last_line(proc)
    assert f"data/{rel} (object {md5})" in last and "intact nowhere here" in last
    assert f"data/ as it was ({len(before)} files, none changed); nothing was scored" in last
    assert "metrics identical" not in proc.stdout and not (clone / ".medbench" / "pull" / "journal.json").exists()
    assert not list((clone / ".medbench" / "pull").glob("stage-*"))

    # The remote repaired: the same command pulls the version and reproduces it.
    shutil.copy2(_object(world.remote, md5), _object(remote, md5))
    proc = ok(world.medbench(clone, "reproduce", "v1", remote=remote))
    assert "every metric bit-identical" in proc.stdout
    assert _tree(clone / "data") == _tree(world.origin / "data")
    assert rehash_objects(clone / ".dvc" / "cache")[1] == []


def test_an_object_corrupt_everywhere_but_intact_in_data_is_pulled_from_data_and_put_back_into_the_cache(world):
    remote = world.copy_remote("remote-intact-in-data")
    clone = _pulled_clone(world, "clone-intact-in-data", remote)
    listing, rel = _listing(world), _run_file(world, "tiny-clip-random")
    md5 = listing[rel]
    _corrupt(_object(remote, md5))
    _corrupt(_object(clone / ".dvc" / "cache", md5))
    other = _run_file(world, "bm25", "liveqa_medquad")
    (clone / "data" / other).unlink()  # restored from the (intact) cache

    proc = ok(world.medbench(clone, "reproduce", "v1", remote=remote))

    assert f"data/ now holds data {world.record['data_version']}" in proc.stdout and "put back from data/" in proc.stdout
    assert _tree(clone / "data") == _tree(world.origin / "data")
    obj = _object(clone / ".dvc" / "cache", md5)
    assert hashlib.md5(obj.read_bytes()).hexdigest() == md5  # the cache holds it intact again
    assert rehash_objects(clone / ".dvc" / "cache")[1] == []


def test_an_object_missing_from_the_remote_and_cache_refuses_and_changes_never_added_are_kept_not_deleted(world):
    remote = world.copy_remote("remote-missing-object")
    clone = _pulled_clone(world, "clone-missing-object", remote)
    listing, rel = _listing(world), _run_file(world, "bm25-k12")
    md5 = listing[rel]
    _object(remote, md5).unlink()
    _object(clone / ".dvc" / "cache", md5).unlink()
    (clone / "data" / rel).unlink()
    mine = clone / "data" / "reports" / "my-notes.txt"
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("not in any version\n")
    before = _tree(clone / "data")

    proc = world.medbench(clone, "data", "pull", remote=remote)

    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"data/{rel} (object {md5})" in proc.stderr and md5 in proc.stderr  # dvc's own line names it too
    assert f"data/ as it was ({len(before)} files, none changed)" in _last_line(proc)
    assert _tree(clone / "data") == before

    # With the object back on the remote, the pull swaps the version in; the file no version holds is kept aside.
    shutil.copy2(_object(world.remote, md5), _object(remote, md5))
    proc = ok(world.medbench(clone, "data", "pull", remote=remote))
    assert _tree(clone / "data") == _tree(world.origin / "data")
    kept = sorted((clone / ".medbench" / "pull" / "kept").glob("*/reports/my-notes.txt"))
    assert len(kept) == 1 and kept[0].read_text() == "not in any version\n"
    assert f"moved to {kept[0].parents[1]}: reports/my-notes.txt" in proc.stdout

    # A pull with nothing to do changes nothing; gc leaves data/ and the kept files alone.
    proc = ok(world.medbench(clone, "data", "pull", remote=remote))
    assert "nothing changed" in proc.stdout
    ok(world.medbench(clone, "gc", remote=remote))
    assert _tree(clone / "data") == _tree(world.origin / "data") and kept[0].exists()


_KILL = """
import os, signal, sys
from pathlib import Path
import medbench_release.workspace as w

point, root = sys.argv[1], Path(sys.argv[2])
if point == "staging":  # SIGKILL once half of the version's files are in the staging folder
    calls = [0]
    link = os.link
    def link_then_die(*a, **kw):
        calls[0] += 1
        if calls[0] == 60:
            os.kill(os.getpid(), signal.SIGKILL)
        return link(*a, **kw)
    w.os.link = link_then_die
else:  # SIGKILL right after the atomic exchange, before the old tree is sorted out
    exchange = w.exchange_paths
    def exchange_then_die(a, b):
        exchange(a, b)
        os.kill(os.getpid(), signal.SIGKILL)
    w.exchange_paths = exchange_then_die
w.pull_data(root)
"""


@pytest.mark.parametrize("point", ["staging", "exchange"])
def test_a_pull_killed_while_staging_or_right_after_the_swap_leaves_old_or_new_data_and_the_next_pull_finishes(world, point):
    clone = _pulled_clone(world, f"clone-killed-{point}", world.remote)
    listing = _listing(world)
    (clone / "data" / _run_file(world, "bm25")).unlink()
    mine = clone / "data" / "my-notes.txt"
    mine.write_text("mine\n")
    before = _tree(clone / "data")
    version = _tree(world.origin / "data")

    proc = subprocess.run([sys.executable, "-c", _KILL, point, str(clone)], cwd=clone, env=world.env(clone), capture_output=True, text=True, timeout=300)

    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    now = _tree(clone / "data")
    assert now == (before if point == "staging" else version)  # old or new, never a mixture
    # Killed after the exchange but before the journal said so: the next pull tells by data/'s inode.
    area = clone / ".medbench" / "pull"
    assert json.loads((area / "journal.json").read_text())["state"] == ("building" if point == "staging" else "swapping")

    proc = ok(world.medbench(clone, "data", "pull"))

    assert _tree(clone / "data") == version
    assert not (area / "journal.json").exists() and not list(area.glob("stage-*")) and not list(area.glob("old-*"))
    kept = sorted((area / "kept").glob("*/my-notes.txt"))
    assert len(kept) == 1 and kept[0].read_text() == "mine\n"  # the file no version holds, from the old tree
    said = "removed the staging folder of an interrupted pull" if point == "staging" else "finished an interrupted pull"
    assert said in proc.stdout
    assert len(listing) == len(version)
    assert os.listdir(area / "kept") and rehash_objects(clone / ".dvc" / "cache")[1] == []
