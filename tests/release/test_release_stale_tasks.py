"""`release` refuses a task whose sources changed since it was curated, and `reproduce` says when the sources changed (issue 44, item 6).

The issue's case on the small released version of tests/release/version_world.py: one qrels line of
scifact's source edited after `medbench run`, then `medbench release v4`. Before, the release went
through (exit 0), recording the new sources' sha256 beside a task curated from the old ones, and
`reproduce v4 --from-sources` then blamed "the environment or code that is not deterministic". Now the
release refuses in one line naming the task, the changed file and what to run, and commits, tags
and pushes nothing; and a rebuild from changed sources says "the sources changed", for a version
recorded the right way and for one recorded the old way alike.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from medbench_core.taskdata.catalog import source_files_digest
from medbench_release.record import dumps_version
from tests.release.version_world import git, ok

pytestmark = [pytest.mark.dvc, pytest.mark.slow, pytest.mark.timeout(1200)]


def _edit_a_qrels_line(shared):
    qrels = shared / "data" / "sci" / "qrels" / "test.tsv"
    text = qrels.read_text()
    assert "q2\ts3\t1\n" in text
    qrels.write_text(text.replace("q2\ts3\t1\n", "q2\ts3\t2\n"))  # one grade changed
    return qrels


def test_release_refuses_a_task_whose_sources_changed_since_it_was_curated(world):
    shared = world.copy_shared("shared-edited-after-run")
    qrels = _edit_a_qrels_line(shared)
    remote = world.copy_remote("remote-stale-release")
    clone = world.clone("clone-stale-release")
    ok(world.medbench(clone, "data", "pull", remote=remote))
    state = world.base / "state-stale-release"
    shutil.copytree(world.origin / ".medbench", state, ignore=shutil.ignore_patterns("dagster_home", "logs"))  # its MLflow runs
    head, data_dvc = git(clone, "rev-parse", "HEAD"), (clone / "data.dvc").read_text()
    remote_files = sorted(p.relative_to(remote) for p in remote.rglob("*"))

    proc = world.medbench(clone, "release", "v4", remote=remote, shared=shared, state=state)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"medbench release: error: task scifact: its source files ({qrels.parents[1]}) changed since it was curated (qrels/test.tsv), "
        "and data/tasks/scifact still holds the task curated before"
    ), last
    assert "run `medbench run --tasks scifact` (curates it again and re-scores it), then release" in last
    assert len(proc.stderr.strip().splitlines()) <= 3  # MLflow's own start-up lines at most, then the one line
    assert git(clone, "rev-parse", "HEAD") == head and git(clone, "tag") == "" and not (clone / "versions" / "v4.json").exists()
    assert (clone / "data.dvc").read_text() == data_dvc
    assert sorted(p.relative_to(remote) for p in remote.rglob("*")) == remote_files  # nothing pushed, no index entry


def _first_difference(proc) -> dict:
    path = re.search(r"(?:^|; )report: (.+)$", proc.stdout + proc.stderr, re.MULTILINE).group(1)
    return json.loads(open(path).read())["first_difference"]


def test_reproduce_says_the_sources_changed_for_a_version_recorded_before_the_release_check(world):
    # A version file written by a release without the check: scifact's source sha256 as the sources were at release
    # time (already edited), beside a task curated from the sources before the edit.
    shared = world.copy_shared("shared-old-record")
    _edit_a_qrels_line(shared)
    clone = world.clone("clone-old-record")
    record = json.loads((clone / "versions" / "v1.json").read_text())
    for a in record["artifacts"]:
        if a["stage"] == "curated_task" and a["task"] == "scifact":
            a["upstream"]["source_sha256"] = source_files_digest(shared / "data" / "sci")
    (clone / "versions" / "v1.json").write_text(dumps_version(record))
    git(clone, "commit", "-q", "-am", "v1 as an older release recorded it")
    remote = world.base / "remote-old-record-absent"  # no remote: rebuilt from the sources

    proc = world.medbench(clone, "reproduce", "v1", remote=remote, shared=shared)

    assert proc.returncode == 1, proc.stdout + proc.stderr
    first = _first_difference(proc)
    assert first["artifact"] == "curated_task scifact" and first["moved"] == []
    assert "the sources changed after the version's task was curated" in first["cause"]
    assert "not deterministic" not in first["cause"].split(", or ")[0]
    assert "so same upstream provenance, other bytes: the sources changed" in proc.stderr
