"""A small released benchmark version in a temporary git repository, for the reproduction tests.

The project's code is committed into a new repository with a tiny catalogue (the two BEIR tasks
of tests/orchestration/operating_env.py: five documents, three queries each) and three models
(bm25, bm25-k12 and tiny-clip-random, whose float vectors and FAISS index exercise the tolerance
rules); the source data lives in the world's own shared folder. ``build_world`` runs the real main
job and ``medbench release v1`` to a local remote (about 40 s); each test then works on fresh
clones, copies of the remote and copies of the source folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.forked import python_m
from tests.orchestration.operating_env import (
    BM25,
    BM25_K12,
    LQ_DOCS,
    LQ_QRELS,
    LQ_QUERIES,
    SCI_DOCS,
    SCI_QRELS,
    SCI_QUERIES,
    write_beir,
)

PROJECT = Path(__file__).resolve().parents[2]
COPY = [
    "medbench_core",
    "runtime",
    "assets",
    "orchestration",
    "medbench_cli",
    "medbench_release",
    "dagster.yaml",
    "pyproject.toml",
    "requirements.lock",
    ".gitignore",
    ".dvcignore",
    ".dvc/config",
    ".dvc/.gitignore",
]
CLIP = {
    "name": "tiny-clip-random",
    "kind": "open_clip",
    "revision": "random-seed-0",
    "settings": {"architecture": "medbench-tiny-clip", "seed": 0},
    "batch_size": 256,
}
MODELS = [BM25, BM25_K12, CLIP]
TASKS = ("scifact", "liveqa_medquad")
CATALOGUE = (
    "benchmark: medbench\n"
    "licence_allowlist: [CC-BY-4.0, ODC-By-1.0]\n"
    "tasks:\n"
    "  - {name: scifact, reader: beir, path: sci, split: test, query_licence: CC-BY-4.0, doc_licence: ODC-By-1.0}\n"
    "  - {name: liveqa_medquad, reader: beir, path: lq, split: test, query_licence: CC-BY-4.0, doc_licence: CC-BY-4.0}\n"
)
GIT_ENV = {
    "GIT_AUTHOR_NAME": "medbench test",
    "GIT_AUTHOR_EMAIL": "test@localhost",
    "GIT_COMMITTER_NAME": "medbench test",
    "GIT_COMMITTER_EMAIL": "test@localhost",
}
_SCRUB = (
    "MEDBENCH_ROOT",
    "MEDBENCH_DATA",
    "MEDBENCH_STATE",
    "MEDBENCH_MODELS",
    "MEDBENCH_TASKS",
    "MEDBENCH_DVC_REMOTE",
    "MEDBENCH_SHARED",
    "MLFLOW_TRACKING_URI",
    "DAGSTER_HOME",
    "PYTHONPATH",
)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, capture_output=True, text=True, check=True).stdout


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    return proc


@dataclass
class VersionWorld:
    base: Path
    origin: Path
    remote: Path
    shared: Path
    record: dict = field(default_factory=dict)

    def env(self, repo: Path, *, remote: Path | None = None, shared: Path | None = None, state: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        env.update(GIT_ENV)
        env.update(
            MEDBENCH_ROOT=str(repo),
            PYTHONPATH=str(repo),
            MEDBENCH_SHARED=str(shared or self.shared),
            MEDBENCH_STATE=str(state or repo / ".medbench"),
            MEDBENCH_DVC_REMOTE=str(remote or self.remote),
            DVC_SITE_CACHE_DIR=str(self.base / "dvc_site"),
            DVC_NO_ANALYTICS="1",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
        )
        return env

    def medbench(self, repo: Path, *args: str, timeout: int = 600, **kw) -> subprocess.CompletedProcess:
        return python_m("medbench_cli", *args, cwd=repo, env=self.env(repo, **kw), timeout=timeout)

    def clone(self, name: str) -> Path:
        """A fresh clone of the origin at main (which holds data.dvc and versions/v1.json), without its tags."""
        dest = self.base / name
        git(self.base, "clone", "-q", "--no-tags", str(self.origin), str(dest))
        return dest

    def copy_remote(self, name: str) -> Path:
        dest = self.base / name
        shutil.copytree(self.remote, dest)
        return dest

    def copy_shared(self, name: str) -> Path:
        dest = self.base / name
        shutil.copytree(self.shared, dest)
        return dest


def build_world(base: Path) -> VersionWorld:
    """Commit the code with the tiny catalogue and registry, run the main job, release v1 (see the module docstring)."""
    origin = base / "origin"
    for rel in COPY:
        src, dst = PROJECT / rel, origin / rel
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    (origin / "tasks.yaml").write_text(CATALOGUE)
    (origin / "models.yaml").write_text(json.dumps({"models": MODELS}, indent=1))
    shared = base / "shared"
    write_beir(shared / "data" / "sci", SCI_QUERIES, SCI_DOCS, SCI_QRELS)
    write_beir(shared / "data" / "lq", LQ_QUERIES, LQ_DOCS, LQ_QRELS)
    git(origin, "init", "-q", "-b", "main")
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "code")
    world = VersionWorld(base, origin, base / "remote", shared)
    ok(world.medbench(origin, "run"))
    ok(world.medbench(origin, "release", "v1"))
    world.record = json.loads((origin / "versions" / "v1.json").read_text())
    return world
