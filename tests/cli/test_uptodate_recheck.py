"""The warm path of `medbench run` verifies artifacts by the stat their files had when hashed (the notes
kept with the state, runtime/verified.py) instead of reading them again; `medbench run --recheck`
reads every byte and catches (and rebuilds) an artifact whose bytes changed with its stat unchanged."""

from __future__ import annotations

import json
import os

import pytest

from medbench_core import storage
from tests.cli.test_run import _main_env
from tests.cli.test_uptodate import medbench_run
from tests.orchestration.operating_env import BM25, new_world

pytestmark = pytest.mark.slow


def test_the_warm_path_reads_no_unchanged_artifact_and_recheck_catches_silent_corruption(tmp_path, monkeypatch):
    from runtime import settings, verified

    world = new_world(tmp_path / "w", [BM25])
    env = _main_env(world, tmp_path)
    args = ("--models", "bm25", "--tasks", "scifact")
    medbench_run(env, *args)
    # The first warm run reads what was too fresh to be noted when written (small files; large ones are
    # noted as written) and keeps its notes; the next reads nothing whose stat is unchanged.
    assert medbench_run(env, *args).stdout.startswith("[up to date]")
    monkeypatch.setattr(settings, "STATE", world.root / "state")
    (folder,) = (world.root / "data" / "artifacts" / "bm25" / "scifact" / "run").iterdir()
    notes = verified.notes_file(folder)
    kept = json.loads(notes.read_text())
    assert set(kept["files"]) == set(storage.read_manifest(folder)["files"])

    # Bit rot: other bytes, same size, and (as a disk's own corruption leaves it) a stat the notes still match.
    target = folder / "run.parquet"
    good = target.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    target.write_bytes(bytes(bad))
    st = os.stat(target)
    kept["files"]["run.parquet"][:5] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    notes.write_text(json.dumps(kept))
    monkeypatch.setattr(storage.hashes, "_NOTED", {})
    assert not storage.is_complete(folder)  # the bytes do not match the manifest...
    warm = medbench_run(env, *args)
    assert warm.stdout.startswith("[up to date]"), warm.stdout  # ...yet the warm path did not read them

    rechecked = medbench_run(env, *args, "--recheck")
    assert "[up to date]" not in rechecked.stdout
    line = next(x for x in rechecked.stdout.splitlines() if x.startswith("[evaluate] bm25"))
    assert " ok " in line and "(cached)" not in line, rechecked.stdout  # the run stage was rebuilt, not reused
    monkeypatch.setattr(storage.hashes, "_NOTED", {})
    assert storage.is_complete(folder) and target.read_bytes() == good  # the same bytes as first written
    assert medbench_run(env, *args).stdout.startswith("[up to date]")
