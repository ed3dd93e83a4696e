"""`medbench reproduce TAG`: pulled when the remote holds the version, rebuilt from the sources when it cannot give it.

On the small released version of tests/release/version_world.py (two tiny BEIR tasks; bm25,
bm25-k12 and tiny-clip-random; 26 artifacts): a fresh clone whose remote was deleted rebuilds
every artifact with the code of the version's commit and reports every partition reproduced;
with the remote present the same command pulls and rebuilds nothing, and a corrupted remote
object is still refused with nothing scored (RELIABILITY 7); one changed source record, or one
changed model setting, makes exactly the artifacts built from it differ, and the message names
the first of them with its upstream provenance. Each rebuild runs the real main job (~45 s).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from medbench_release.record import check_version, dvc_md5
from tests.release.version_world import PROJECT, TASKS, VersionWorld, git, ok

pytestmark = [pytest.mark.dvc, pytest.mark.slow, pytest.mark.timeout(1200)]

BUNDLED = "bundled-v1"  # the README's version; its file is checked when committed, else the world's v1 is


def _report(proc) -> dict:
    path = re.search(r"(?:^|; )report: (.+)$", proc.stdout + proc.stderr, re.MULTILINE).group(1)
    return json.loads(Path(path).read_text())


def _verdicts(report: dict) -> dict[str, str]:
    return {a["label"]: a["verdict"] for a in report["artifacts"]}


def _labels(record: dict, *, model: str | None = None, task: str | None = None) -> set[str]:
    out = set()
    for a in record["artifacts"]:
        label = f"{a['stage']} {a['model']} x {a['task']}" if a["model"] else f"{a['stage']} {a['task']}"
        if (model is None or a["model"] == model) and (task is None or a["task"] == task):
            out.add(label)
    return out


def test_a_clone_whose_remote_was_deleted_rebuilds_the_version_and_every_partition_reproduces(world):
    remote = world.copy_remote("remote-deleted")
    shutil.rmtree(remote)
    clone = world.clone("clone-no-remote")
    assert not (clone / "data").exists() and git(clone, "tag") == ""  # no data, no tags: the version file alone

    proc = ok(world.medbench(clone, "reproduce", "v1", remote=remote))  # the README's command

    said = [ln for ln in proc.stdout.splitlines() if ln.startswith("[reproduce]")]  # one line on the remote, then the rebuild
    assert said == [f"[reproduce] v1: remote folder {remote} does not exist; rebuilding every artifact of the version from the sources instead"]
    assert f"the code of commit {world.record['code_commit'][:12]} (a temporary git worktree)" in proc.stdout
    assert f"version v1 (data {world.record['data_version']}) reproduced from sources: 8 partitions, 26 artifacts identical" in proc.stdout
    for partition in ["task scifact", "task liveqa_medquad", *(f"{m} x {t}" for m in ("bm25", "bm25-k12", "tiny-clip-random") for t in TASKS)]:
        assert re.search(rf"^{re.escape(partition)}\s.*\sreproduced$", proc.stdout, re.MULTILINE), partition

    report = _report(proc)
    assert report["reproduced"] is True and report["path"] == "rebuilt from sources" and report["first_difference"] is None
    assert report["code_commit"] == world.record["code_commit"] and report["main_job_exit_code"] == 0
    assert report["lock_hash"]["version"] == report["lock_hash"]["rebuild"] == world.record["lock_hash"]
    assert report["counts"] == {"identical": 26, "within_tolerance": 0, "differs": 0, "missing": 0}
    assert [a["path"] for a in report["artifacts"]] == [a["path"] for a in world.record["artifacts"]]
    assert len(report["partitions"]) == 8 and all(p["reproduced"] for p in report["partitions"])
    # Bit for bit: the rebuilt tree holds the version's very files (the float vectors included).
    rebuilt = Path(report["rebuilt_data"])
    for a in world.record["artifacts"]:
        for name, f in a["files"].items():
            same = f["rule"] == "json" or (rebuilt / a["path"] / name).read_bytes() == (world.origin / "data" / a["path"] / name).read_bytes()
            assert same, f"{a['path']}/{name}"
    assert not (clone / "data").exists()  # nothing was pulled into the workspace
    assert git(clone, "status", "--porcelain") == "" and len(git(clone, "worktree", "list").splitlines()) == 1


def test_with_the_remote_the_same_command_pulls_and_rebuilds_nothing(world):
    clone = world.clone("clone-with-remote")

    proc = ok(world.medbench(clone, "reproduce", "v1"))

    assert f"[reproduce] v1: pulling data {world.record['data_version']} from {world.remote}" in proc.stdout
    assert f"version v1 (data {world.record['data_version']}) reproduced: 6 model x task, every metric bit-identical" in proc.stdout
    assert "[rebuild]" not in proc.stdout and not (clone / ".medbench" / "reproduce").exists()
    assert json.loads(ok(world_dvc(world, clone, "status", "--json", "data.dvc")).stdout) == {}


def world_dvc(world: VersionWorld, repo: Path, *args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, env=world.env(repo), capture_output=True, text=True, check=False)


def test_a_corrupted_remote_object_is_refused_and_nothing_is_scored_or_rebuilt(world):
    remote = world.copy_remote("remote-corrupted")
    version = world.record["data_version"]
    listing = {e["relpath"]: e["md5"] for e in json.loads((remote / "files" / "md5" / version[:2] / version[2:]).read_text())}
    index = next(a for a in world.record["artifacts"] if a["stage"] == "index" and a["model"] == "tiny-clip-random")
    md5 = listing[f"{index['path']}/index.faiss"]
    obj = remote / "files" / "md5" / md5[:2] / md5[2:]
    obj.chmod(0o644)
    raw = bytearray(obj.read_bytes())
    raw[-3] ^= 0xFF  # inside the vectors: FAISS would load it silently
    obj.write_bytes(bytes(raw))
    clone = world.clone("clone-corrupted")

    proc = world.medbench(clone, "reproduce", "v1", remote=remote)

    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Nothing was scored" in proc.stderr and "metrics identical" not in proc.stdout
    assert "[rebuild]" not in proc.stdout and not (clone / ".medbench" / "reproduce").exists()
    assert not (clone / "data" / index["path"] / "index.faiss").exists()


def test_one_changed_source_record_makes_that_task_and_everything_built_on_it_differ_and_nothing_else(world):
    shared = world.copy_shared("shared-one-record-changed")
    corpus = shared / "data" / "sci" / "corpus.jsonl"
    corpus.write_text(corpus.read_text().replace("Statins reduce LDL cholesterol", "Statins lower LDL cholesterol"))
    clone = world.clone("clone-changed-record")

    proc = world.medbench(clone, "reproduce", "v1", "--from-sources", shared=shared)

    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = _report(proc)
    differing = {label for label, v in _verdicts(report).items() if v != "identical"}
    assert differing == _labels(world.record, task="scifact")  # the curated task, then 3 models x 4 stages
    assert len(differing) == 13
    first = report["first_difference"]
    assert first["artifact"] == "curated_task scifact" and first["cause"] == "the sources changed"
    assert first["moved"] == ["source_sha256"]
    assert "first difference: curated_task scifact (tasks/scifact): differs" in proc.stderr
    assert re.search(r"source data sha256 [0-9a-f]{16} \(the version: [0-9a-f]{16}\): MOVED", proc.stderr)
    assert "code version " + world.record["code_versions"]["curated_task"] + " (same)" in proc.stderr
    assert "so the sources changed" in proc.stderr
    assert "version v1 NOT reproduced from sources: 4 of 8 partitions differ" in proc.stderr


def test_one_changed_model_setting_makes_that_models_artifacts_differ_and_nothing_else(world):
    clone = world.clone("clone-changed-setting")
    models = clone / "models.yaml"
    registry = json.loads(models.read_text())
    next(m for m in registry["models"] if m["name"] == "bm25-k12")["settings"]["k1"] = 1.3
    models.write_text(json.dumps(registry, indent=1))
    ok(world.medbench(clone, "data", "pull"))  # a workspace holding the version: a rebuild must leave it as it is
    before = {str(p.relative_to(clone / "data")): p.read_bytes() for p in sorted((clone / "data").rglob("*")) if p.is_file()}
    remote = world.base / "no-such-remote"

    proc = world.medbench(clone, "reproduce", "v1", "--code", "current", remote=remote)

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert {str(p.relative_to(clone / "data")): p.read_bytes() for p in sorted((clone / "data").rglob("*")) if p.is_file()} == before
    assert "with this checkout's code, models.yaml and tasks.yaml (--code current)" in proc.stdout
    report = _report(proc)
    differing = {label for label, v in _verdicts(report).items() if v != "identical"}
    assert differing == _labels(world.record, model="bm25-k12") and len(differing) == 8
    first = report["first_difference"]
    assert first["artifact"] == "embeddings bm25-k12 x scifact" and first["moved"] == ["model_entry"]
    assert first["entry_changes"] == ["settings.k1: 1.2 -> 1.3"] and first["cause"] == "the model moved"
    assert "registry entry" in proc.stderr and "MOVED (settings.k1: 1.2 -> 1.3)" in proc.stderr
    assert "model revision bm25s-lucene (same)" in proc.stderr and "so the model moved" in proc.stderr


def test_a_shallow_clone_without_the_versions_commit_rebuilds_with_its_own_code_only_when_the_code_versions_match(world, tmp_path):
    from medbench_release.rebuild import choose_code

    shallow = world.base / "clone-shallow"
    git(world.base, "clone", "-q", "--depth", "1", f"file://{world.origin}", str(shallow))
    record = json.loads((shallow / "versions" / "v1.json").read_text())
    kw = {
        "mode": "pinned",
        "models_file": shallow / "models.yaml",
        "tasks_file": shallow / "tasks.yaml",
        "venv_root": tmp_path,
        "scratch": tmp_path,
        "log": print,
    }

    choice = choose_code(shallow, record, **kw)
    assert choice.code_dir == shallow and choice.worktree is None
    assert f"commit {record['code_commit'][:12]} is not in this clone" in choice.how
    assert choice.models_text == record["registry"]["models.yaml"]["text"]

    moved = {**record, "code_versions": {**record["code_versions"], "embeddings": "0" * 16}}
    from medbench_release.vcs import VersioningError

    with pytest.raises(VersioningError, match="code versions of embeddings differ.*--code current"):
        choose_code(shallow, moved, **kw)


def test_the_bundled_version_file_is_well_formed_and_consistent_with_data_dvc(world):
    committed = PROJECT / "versions" / f"{BUNDLED}.json"
    if committed.exists():  # the README's version, once committed
        record = json.loads(committed.read_text())
        text = (PROJECT / "data.dvc").read_text() if (PROJECT / "data.dvc").exists() else ""
        if dvc_md5(text) != record["data_version"]:  # a later release moved data.dvc on: the one committed with the file
            added = git(PROJECT, "log", "--diff-filter=A", "-1", "--format=%H", "--", f"versions/{BUNDLED}.json").strip()
            text = git(PROJECT, "show", f"{added}:data.dvc")
        assert record["tag"] == BUNDLED
    else:
        record, text = world.record, (world.origin / "data.dvc").read_text()
    assert check_version(record, text) == []
    assert record["data_dvc"] == text
    stages = [a["stage"] for a in record["artifacts"]]
    assert stages == sorted(stages, key=["curated_task", "embeddings", "index", "run", "metrics"].index)
    for r in record["runs"]:
        assert set(r["stages"]) >= {"run", "metrics"} and r["metrics"]["ndcg_at_10"] >= 0

    # What the check catches, on copies of the record.
    broken = json.loads(json.dumps(record))
    broken["data_version"] = "0" * 32 + ".dir"
    assert any("data.dvc names" in p for p in check_version(broken, text))
    broken = json.loads(json.dumps(record))
    broken["artifacts"].reverse()
    assert any("out of stage order" in p for p in check_version(broken, text))
    broken = json.loads(json.dumps(record))
    run = broken["runs"][0]
    broken["artifacts"] = [a for a in broken["artifacts"] if a["key"] != run["keys"]["metrics"]]
    assert any(f"metrics key {run['keys']['metrics']} is not an artifact of the version" in p for p in check_version(broken, text))


def test_release_refuses_a_credential_in_the_tracked_dvc_config_and_records_no_secret(world):
    assert world.record["remote"] == str(world.remote)
    repo = world.clone("clone-credential")
    config = repo / ".dvc" / "config"
    config.write_text(config.read_text() + "    secret_access_key = not-a-real-secret-0042\n")
    git(repo, "commit", "-q", "-am", "a credential committed by mistake")
    head = git(repo, "rev-parse", "HEAD")

    proc = world.medbench(repo, "release", "v2")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "a credential is in a tracked file (.dvc/config: [remote medbench] secret_access_key)" in proc.stderr
    assert "not-a-real-secret-0042" not in proc.stdout + proc.stderr
    assert git(repo, "rev-parse", "HEAD") == head and git(repo, "tag") == ""
    assert not (repo / "versions" / "v2.json").exists()


def test_release_keeps_only_runs_current_for_its_commit_and_prune_moves_the_rest_out_of_the_version(world):
    import sqlite3

    repo = world.clone("clone-stale")
    ok(world.medbench(repo, "data", "pull"))
    db = world.base / "stale.db"
    with sqlite3.connect(world.origin / ".medbench" / "mlflow.db") as src, sqlite3.connect(db) as dst:
        src.backup(dst)
    # A registry change committed after v1: bm25-k12's runs are stale for this commit.
    registry = json.loads((repo / "models.yaml").read_text())
    next(m for m in registry["models"] if m["name"] == "bm25-k12")["settings"]["k1"] = 1.3
    (repo / "models.yaml").write_text(json.dumps(registry, indent=1))
    git(repo, "commit", "-q", "-am", "bm25-k12: k1 1.3")
    stray = repo / "data" / "artifacts" / "bm25" / "scifact" / "index" / "0123456789abcdef0123"
    shutil.copytree(repo / "data" / next(a["path"] for a in world.record["artifacts"] if a["stage"] == "index" and a["model"] == "bm25"), stray)

    proc = ok(world.medbench(repo, "release", "v2", "--prune", "--tracking-uri", f"sqlite:///{db}"))

    stale = [ln for ln in proc.stdout.splitlines() if "left out" in ln]
    assert len(stale) == 2 and all(
        "bm25-k12 x" in ln and "stale for this code, registry or curated task (embeddings, index, run, metrics key(s) differ)" in ln for ln in stale
    )
    assert "9 folder(s) no run of the version uses moved to" in proc.stdout  # bm25-k12's 8 and the stray one
    record = json.loads((repo / "versions" / "v2.json").read_text())
    assert sorted({r["model"] for r in record["runs"]}) == ["bm25", "tiny-clip-random"] and len(record["artifacts"]) == 18
    assert [a["path"] for a in record["artifacts"]] == [a["path"] for a in world.record["artifacts"] if a["model"] != "bm25-k12"]
    assert not stray.exists() and not (repo / "data" / "artifacts" / "bm25-k12").exists()
    pruned = list((repo / ".medbench" / "pruned").glob("*/artifacts/bm25/scifact/index/0123456789abcdef0123"))
    assert len(pruned) == 1 and (pruned[0] / "MANIFEST.json").exists()  # moved, not deleted
    assert check_version(record, (repo / "data.dvc").read_text()) == []
