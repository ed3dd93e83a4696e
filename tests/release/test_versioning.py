"""Benchmark versions end to end, on a real (small) benchmark in a temporary git repository.

The module fixture copies the project into a temporary git repository, runs the real main job
(`medbench run`, bm25 and tiny-clip-random on LiveQA-MedQuAD, ~40 s), and
releases it as `v1` to a temporary local DVC remote. Each test then works on fresh `git clone`s
and, where it damages the remote, on its own copy of it. RELIABILITY.md tests 7, 8, 9 and 10.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from medbench_release.gc import leftover_temp_files, missing_on_remote, rehash_objects
from medbench_release.release import verify_tree
from runtime import settings
from tests import processes
from tests.forked import python_m
from tests.release.version_world import GIT_ENV, git, ok

pytestmark = [pytest.mark.dvc, pytest.mark.slow, pytest.mark.timeout(900)]

PROJECT = Path(__file__).resolve().parents[2]
COPY = [
    "medbench_core",
    "runtime",
    "assets",
    "orchestration",
    "medbench_cli",
    "medbench_release",
    "tasks.yaml",
    "models.yaml",
    "dagster.yaml",
    "pyproject.toml",
    "requirements.lock",
    ".gitignore",
    ".dvcignore",
    ".dvc/config",
    ".dvc/.gitignore",
]
MODELS = ("bm25", "tiny-clip-random")
TASK = "liveqa_medquad"
# Everything a subprocess could inherit that would point it at the real checkout's data.
_SCRUB = (
    "MEDBENCH_ROOT",
    "MEDBENCH_DATA",
    "MEDBENCH_STATE",
    "MEDBENCH_MODELS",
    "MEDBENCH_TASKS",
    "MEDBENCH_DVC_REMOTE",
    "MLFLOW_TRACKING_URI",
    "DAGSTER_HOME",
    "PYTHONPATH",
)


@dataclass
class Bench:
    base: Path
    origin: Path
    remote: Path
    db: Path
    shared: Path
    version: str
    record: dict

    def env(self, repo: Path, remote: Path | None = None, db: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        env.update(GIT_ENV)
        env.update(
            MEDBENCH_ROOT=str(repo),
            PYTHONPATH=str(repo),
            MEDBENCH_SHARED=str(self.shared),
            MEDBENCH_STATE=str(self.base / "state"),
            DAGSTER_HOME=str(self.base / "dagster_home"),
            MLFLOW_TRACKING_URI=f"sqlite:///{db or self.db}",
            MEDBENCH_DVC_REMOTE=str(remote or self.remote),
            DVC_SITE_CACHE_DIR=str(self.base / "dvc_site"),
            DVC_NO_ANALYTICS="1",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
        )
        return env

    def run(self, repo: Path, *args: str, remote: Path | None = None, db: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=repo, env=self.env(repo, remote, db), capture_output=True, text=True, timeout=timeout)

    def medbench(self, repo: Path, *args: str, remote: Path | None = None, db: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
        return python_m("medbench_cli", *args, cwd=repo, env=self.env(repo, remote, db), timeout=timeout)

    def dvc(self, repo: Path, *args: str, **kw) -> subprocess.CompletedProcess:
        return self.run(repo, "-m", "dvc", *args, **kw)

    def clone(self, name: str, source: Path | None = None, tag: str = "v1") -> Path:
        dest = self.base / name
        git(self.base, "clone", "-q", str(source or self.origin), str(dest))
        git(dest, "checkout", "-q", tag)
        return dest

    def copy_remote(self, name: str) -> Path:
        dest = self.base / name
        shutil.copytree(self.remote, dest)
        return dest

    def copy_db(self, name: str) -> Path:
        dest = self.base / name
        with sqlite3.connect(self.db) as src, sqlite3.connect(dest) as dst:
            src.backup(dst)
        return dest


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Bench:
    base = tmp_path_factory.mktemp("versions")
    origin = base / "origin"
    for rel in COPY:
        src, dst = PROJECT / rel, origin / rel
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    (base / "dagster_home").mkdir()
    shutil.copy2(PROJECT / "dagster.yaml", base / "dagster_home" / "dagster.yaml")
    git(origin, "init", "-q", "-b", "main")
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "code")
    b = Bench(base, origin, base / "remote", base / "state" / "mlflow.db", settings.SHARED.resolve(), "", {})
    ok(b.medbench(origin, "run", "--models", ",".join(MODELS), "--tasks", TASK, timeout=600))
    ok(b.medbench(origin, "release", "v1"))
    b.record = json.loads((origin / "versions" / "v1.json").read_text())
    b.version = b.record["data_version"]
    return b


def _mlflow_runs(db: Path) -> dict[str, object]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("medbench")
    return {r.data.tags["medbench.model"]: r for r in client.search_runs([exp.experiment_id])}


def _dir_listing(store: Path, version: str) -> dict[str, str]:
    """relpath -> md5 of every file of a version, read from its directory object."""
    obj = store / "files" / "md5" / version[:2] / version[2:]
    return {e["relpath"]: e["md5"] for e in json.loads(obj.read_text())}


def _object(store: Path, md5: str) -> Path:
    return store / "files" / "md5" / md5[:2] / md5[2:]


def _relpath(bench: Bench, model: str, stage: str, name: str) -> str:
    entry = next(e for e in bench.record["runs"] if e["model"] == model)
    return f"artifacts/{model}/{TASK}/{stage}/{entry['keys'][stage]}/{name}"


def _tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _workspace_matches_listing(clone: Path, listing: dict[str, str]) -> list[str]:
    """Files under data/ that are not exactly a file of the version (a half-written file would be)."""
    bad = []
    data = clone / "data"
    for p in sorted(data.rglob("*")) if data.exists() else []:
        if p.is_file():
            rel = str(p.relative_to(data))
            if listing.get(rel) != hashlib.md5(p.read_bytes()).hexdigest():
                bad.append(rel)
    return bad


# --- release, fresh clone, pull, reproduce --------------------------------------------------


def test_release_records_the_version_in_git_dvc_and_every_mlflow_run(bench):
    origin = bench.origin
    assert git(origin, "rev-parse", "v1^{commit}") == git(origin, "rev-parse", "HEAD")
    assert set(git(origin, "show", "--name-only", "--format=", "v1^{commit}").split()) == {"data.dvc", "versions/v1.json"}
    assert f"md5: {bench.version}" in git(origin, "show", "v1:data.dvc")
    assert f"data.dvc md5: {bench.version}" in git(origin, "tag", "-l", "--format=%(contents)", "v1")
    assert git(origin, "status", "--porcelain") == ""

    runs = _mlflow_runs(bench.db)
    assert sorted(runs) == sorted(MODELS)
    assert sorted(e["model"] for e in bench.record["runs"]) == sorted(MODELS)
    for entry in bench.record["runs"]:
        run = runs[entry["model"]]
        assert run.data.tags["medbench.data_version"] == bench.version
        assert run.data.tags["medbench.release"] == "v1" and run.data.tags["medbench.releases"] == "v1"
        assert entry["mlflow_run_id"] == run.info.run_id
        assert entry["metrics"] == run.data.metrics  # the record holds what MLflow logged, bit for bit
        assert entry["keys"]["metrics"] == run.data.tags["medbench.run_key"]

    # The remote holds every file of data/ once, under names its bytes hash to.
    listing = _dir_listing(bench.remote, bench.version)
    assert set(listing) == set(_tree_digest(origin / "data"))
    n, problems = rehash_objects(bench.remote)
    assert problems == [] and n == len(set(listing.values())) + 1  # + the directory object


def test_fresh_clone_pulls_and_reproduces_every_metric_bit_identically(bench):
    clone = bench.clone("clone-reproduce")
    assert not (clone / "data").exists()

    proc = ok(bench.medbench(clone, "reproduce", "v1", "--require-mlflow"))

    runs = _mlflow_runs(bench.db)
    out = proc.stdout
    assert f"version v1 (data {bench.version}) reproduced: 2 model x task, every metric bit-identical" in out
    for model, searched in (("bm25", "bm25s index"), ("tiny-clip-random", "FAISS index with the stored query vectors")):
        run = runs[model]
        line = next(ln for ln in out.splitlines() if ln.startswith(f"[reproduce] {model} x {TASK}:"))
        assert f"{len(run.data.metrics)} metrics identical vs MLflow run {run.info.run_id[:12]}" in line
        assert f"ranking re-searched on the {searched}" in line
        assert line.endswith(f"ndcg_at_10 {run.data.metrics['ndcg_at_10']!r}")
    assert _tree_digest(clone / "data") == _tree_digest(bench.origin / "data")
    assert git(clone, "status", "--porcelain") == ""  # the remote url went to the ignored config.local


def test_a_metric_that_differs_from_mlflow_or_a_damaged_index_gives_a_nonzero_exit_naming_it(bench):
    clone = bench.clone("clone-differs")
    ok(bench.medbench(clone, "data", "pull"))
    db = bench.copy_db("differs.db")
    bm25 = _mlflow_runs(db)["bm25"]
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=f"sqlite:///{db}").log_metric(bm25.info.run_id, "ndcg_at_10", 0.5, step=1)

    print("METRICS", sorted(bm25.data.metrics))
    proc = bench.medbench(clone, "reproduce", "v1", "--no-pull", db=db)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    want = bm25.data.metrics["ndcg_at_10"]
    assert f"DIFFERS bm25 x {TASK}: ndcg_at_10: MLflow run {bm25.info.run_id} 0.5 != recomputed {want!r}" in proc.stderr
    assert "version v1 NOT reproduced: 1 difference(s)" in proc.stderr

    # A flipped byte inside the stored vectors: FAISS would load it; the manifest refuses it first.
    index = clone / "data" / _relpath(bench, "tiny-clip-random", "index", "index.faiss")
    raw = bytearray(index.read_bytes())
    raw[-3] ^= 0xFF
    index.write_bytes(bytes(raw))
    proc = bench.medbench(clone, "reproduce", "v1", "--no-pull")
    assert proc.returncode == 1
    assert f"DIFFERS tiny-clip-random x {TASK}: {index}: sha256" in proc.stderr and "does not match manifest" in proc.stderr
    assert f"[reproduce] tiny-clip-random x {TASK}: refused" in proc.stdout
    assert f"[reproduce] bm25 x {TASK}: 69 metrics identical" in proc.stdout
    # 11 means (5 TREC, 6 of judgement holes), their 22 CI bounds, 22 breakdowns (language, discipline),
    # 5 chance and 5 tie-aware values of the TREC five, 4 of the judged-non-relevant rule (2 counts, 2 means)


# --- faults on the remote (RELIABILITY 7 and 8) ---------------------------------------------


def test_an_object_corrupted_on_the_remote_fails_the_pull_and_nothing_is_scored(bench):
    remote = bench.copy_remote("remote-corrupted")
    rel = _relpath(bench, "tiny-clip-random", "index", "index.faiss")
    obj = _object(remote, _dir_listing(remote, bench.version)[rel])
    obj.chmod(0o644)
    raw = bytearray(obj.read_bytes())
    raw[-3] ^= 0xFF  # inside the vectors: FAISS itself would load it silently
    obj.write_bytes(bytes(raw))
    clone = bench.clone("clone-corrupted")
    # Someone turned verification off in this checkout; the wrapper turns it back on.
    ok(bench.dvc(clone, "remote", "modify", "--local", "medbench", "verify", "false"))

    proc = bench.medbench(clone, "reproduce", "v1", remote=remote)

    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"data/{rel} (object {_dir_listing(remote, bench.version)[rel]})" in proc.stderr and "Nothing was scored" in proc.stderr
    assert "data/ absent as before; nothing was scored" in proc.stderr.strip().splitlines()[-1]
    assert "metrics identical" not in proc.stdout and "x liveqa_medquad" not in proc.stdout
    assert not (clone / "data" / rel).exists()
    n, problems = rehash_objects(clone / ".dvc" / "cache")
    assert problems == [] and n > 0  # the good objects arrived; the corrupted one was not kept


def test_an_object_missing_on_the_remote_fails_cleanly_and_a_rerun_completes_once_it_is_back(bench):
    remote = bench.copy_remote("remote-missing")
    listing = _dir_listing(remote, bench.version)
    rel = _relpath(bench, "bm25", "run", "run.parquet")
    _object(remote, listing[rel]).unlink()
    clone = bench.clone("clone-missing")

    proc = bench.medbench(clone, "reproduce", "v1", remote=remote)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert listing[rel] in proc.stderr and "Nothing was scored" in proc.stderr
    assert _workspace_matches_listing(clone, listing) == []  # no half files
    status = json.loads(ok(bench.dvc(clone, "status", "--json", "data.dvc")).stdout)
    assert status != {}  # DVC knows the workspace is not at data.dvc
    assert rehash_objects(clone / ".dvc" / "cache")[1] == []

    # DVC's own push skips a folder whose directory object is on the remote; the wrapper checks file by file.
    ok(bench.medbench(bench.origin, "data", "remote", str(remote)))
    ok(bench.dvc(bench.origin, "push", "-r", "medbench", "data.dvc"))
    assert missing_on_remote(bench.origin, remote, {"v1": bench.version}) != []
    proc = ok(bench.medbench(bench.origin, "data", "push", remote=remote))
    assert f"the remote lacks 1 file(s) of {bench.version} (e.g. data/{rel})" in proc.stdout
    assert missing_on_remote(bench.origin, remote, {"v1": bench.version}) == []
    ok(bench.medbench(clone, "data", "pull", remote=remote))
    assert json.loads(ok(bench.dvc(clone, "status", "--json", "data.dvc")).stdout) == {}
    assert _tree_digest(clone / "data") == _tree_digest(bench.origin / "data")


def test_a_pull_killed_midway_leaves_no_half_file_and_a_rerun_completes(bench):
    clone = bench.clone("clone-killed")
    ok(bench.medbench(clone, "data", "remote", str(bench.remote)))
    listing = _dir_listing(bench.remote, bench.version)
    total = len(set(listing.values())) + 1
    cache = clone / ".dvc" / "cache" / "files" / "md5"
    # One transfer at a time, so that the kill lands between objects or inside one.
    proc = processes.start(
        [sys.executable, "-m", "dvc", "pull", "-j", "1"],
        cwd=clone,
        env=bench.env(clone),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seen = 0
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        seen = len(list(cache.glob("??/*"))) if cache.exists() else 0
        if seen >= 5:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.002)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the pull finished before it could be killed"
    assert 5 <= seen < total

    n, problems = rehash_objects(clone / ".dvc" / "cache")
    assert problems == [] and n < total  # every object present re-hashes to its name
    # A transfer cut short stays under DVC's temporary name (``.<token>.tmp``), never an object's.
    assert all(p.name.endswith(".tmp") for p in leftover_temp_files(clone / ".dvc" / "cache"))
    assert _workspace_matches_listing(clone, listing) == []
    ok(bench.medbench(clone, "data", "pull"))
    assert _tree_digest(clone / "data") == _tree_digest(bench.origin / "data")
    ok(bench.medbench(clone, "gc"))
    assert rehash_objects(clone / ".dvc" / "cache") == (total, [])
    assert leftover_temp_files(clone / ".dvc" / "cache") == []
    assert json.loads(ok(bench.dvc(clone, "status", "--json", "data.dvc")).stdout) == {}


# --- concurrency (RELIABILITY 10) -----------------------------------------------------------


def test_parallel_pulls_and_adds_succeed_or_fail_cleanly_then_succeed(bench):
    clone = bench.clone("clone-parallel")
    ok(bench.medbench(clone, "data", "remote", str(bench.remote)))

    def raw(args):
        return bench.dvc(clone, *args)

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(raw, [("pull",)] * 3))
    failed = [r for r in results if r.returncode != 0]
    for r in failed:  # a clean failure: DVC's repo lock, nothing half done
        assert "Unable to acquire lock" in r.stderr, r.stderr
    for _ in failed:
        ok(raw(("pull",)))
    assert json.loads(ok(bench.dvc(clone, "status", "--json", "data.dvc")).stdout) == {}

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(raw, [("add", "-q", "data")] * 3))
    for r in results:
        assert r.returncode == 0 or "Unable to acquire lock" in r.stderr, r.stderr
    assert f"md5: {bench.version}" in (clone / "data.dvc").read_text()  # same data, same version

    listing = _dir_listing(bench.remote, bench.version)
    assert rehash_objects(clone / ".dvc" / "cache") == (len(set(listing.values())) + 1, [])
    # the curated task, 2 models x 4 stages (embeddings, index, run, metrics), the task's contamination audit
    assert verify_tree(clone / "data") == 10

    # Through the wrapper, which retries on the lock, parallel pulls in separate clones all succeed.
    clones = [bench.clone(f"clone-parallel-{i}") for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda c: bench.medbench(c, "data", "pull"), clones))
    for c, r in zip(clones, results):
        ok(r)
        assert _tree_digest(c / "data") == _tree_digest(bench.origin / "data")


# --- garbage collection (RELIABILITY 9) -----------------------------------------------------


def test_gc_through_the_wrapper_keeps_every_tagged_version_fetchable(bench):
    remote = bench.copy_remote("remote-gc")
    db = bench.copy_db("gc.db")
    repo = bench.clone("repo-gc", tag="main")
    ok(bench.medbench(repo, "data", "pull", remote=remote))

    # v2: v1 plus a note; then an untagged state that is pushed and then abandoned.
    (repo / "data" / "reports" / "v2-note.txt").write_text("second version\n")
    ok(bench.medbench(repo, "release", "v2", remote=remote, db=db))
    v2 = json.loads((repo / "versions" / "v2.json").read_text())["data_version"]
    assert v2 != bench.version
    (repo / "data" / "scratch.txt").write_text("abandoned experiment\n")
    ok(bench.dvc(repo, "add", "-q", "data"))
    ok(bench.dvc(repo, "push", "-q"))
    scratch = hashlib.md5(b"abandoned experiment\n").hexdigest()
    assert _object(remote, scratch).exists()
    (repo / "data" / "scratch.txt").unlink()
    ok(bench.dvc(repo, "add", "-q", "data"))  # the workspace is back at v2

    # Control: DVC's gc keeping only the workspace would lose v1 (its directory object).
    control = bench.base / "remote-gc-control"
    shutil.copytree(remote, control)
    other = bench.clone("repo-gc-control", source=repo, tag="v2")
    ok(bench.dvc(other, "remote", "modify", "--local", "medbench", "url", str(control)))
    ok(bench.dvc(other, "gc", "--workspace", "--cloud", "--force", "-r", "medbench"))
    assert missing_on_remote(other, control, {"v1": bench.version}) != []

    proc = ok(bench.medbench(repo, "gc", "--cloud", "--keep-hours", "0", remote=remote, db=db))
    assert f"{bench.version[:12]} (tag v1)" in proc.stdout and f"{v2[:12]} (tag v2)" in proc.stdout
    assert "removed 2 object(s) no version needs" in proc.stdout  # the scratch file and its state's directory object
    assert not _object(remote, scratch).exists()
    assert not _object(repo / ".dvc" / "cache", scratch).exists()
    assert missing_on_remote(repo, remote, {"v1": bench.version, "v2": v2}) == []

    # Each tagged version, pulled into a fresh clone from the collected remote, is all there.
    v1 = bench.clone("repo-gc-v1", source=repo, tag="v1")
    ok(bench.medbench(v1, "data", "pull", remote=remote))
    assert _tree_digest(v1 / "data") == _tree_digest(bench.origin / "data")
    c2 = bench.clone("repo-gc-v2", source=repo, tag="v2")
    ok(bench.medbench(c2, "data", "pull", remote=remote))
    assert _tree_digest(c2 / "data") == {**_tree_digest(bench.origin / "data"), "reports/v2-note.txt": hashlib.sha256(b"second version\n").hexdigest()}
    assert verify_tree(c2 / "data") == 10  # as in test_parallel_pulls_...: v2 adds a note, no artifact
    runs = _mlflow_runs(db)
    assert {r.data.tags["medbench.releases"] for r in runs.values()} == {"v1,v2"}
    assert {r.data.tags["medbench.data_version"] for r in runs.values()} == {v2}

    # A tag is never moved to other data, and a version is reproduced only at its own commit.
    proc = bench.medbench(repo, "release", "v1", remote=remote, db=db)
    assert proc.returncode == 2 and f"tag v1 already names data {bench.version}; choose a new tag" in proc.stderr
    proc = bench.medbench(repo, "reproduce", "v1", remote=remote, db=db)
    assert proc.returncode == 2 and "run `git checkout v1` first" in proc.stderr
