"""Rebuild a benchmark version from its sources and compare it with its version file.

Used when the remote cannot give the version's data (or with ``--from-sources``). The main job
(``medbench run``) of the version's models and tasks runs in a child process with its own data
and state folders (``<work>/data``, ``<work>/state``), from the source folder of this machine,
and :mod:`medbench_release.compare` judges what it wrote against the version file.

Which code runs (:func:`choose_code`):

- ``pinned`` (the default): the code of the version's commit, checked out as a temporary git
  worktree, with the registry and catalogue texts the version file holds. Code versions hash
  only ``medbench_core``; the commit pins the assets and the orchestration too, so it is the
  one rule that needs no argument about which files matter. The interpreter is this one when the
  commit's ``requirements.lock`` is this checkout's, else the environment ``scripts/setup.sh``
  builds for that lock (reused when present).
- a clone without that commit (a shallow clone): this checkout's code, but only when its code
  versions and lock hash equal the version's; otherwise the rebuild is refused.
- ``current`` (``--code current``): this checkout's code, models.yaml and tasks.yaml: does the
  code or registry as it is now still produce the published version?
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medbench_release.compare import ArtifactResult, Rebuilt, compare_version, first_difference, largest_differences, partitions, table
from medbench_release.record import ARRAY_TOLERANCE, METRIC_TOLERANCE, RULES, VOLATILE_JSON
from medbench_release.vcs import DATA, Log, VersioningError, git

# What a child must not inherit: anything pointing it at this checkout's data, state or registry.
_SCRUB = (
    "MEDBENCH_ROOT",
    "MEDBENCH_DATA",
    "MEDBENCH_STATE",
    "MEDBENCH_MODELS",
    "MEDBENCH_TASKS",
    "DAGSTER_HOME",
    "MLFLOW_TRACKING_URI",
    "PYTHONPATH",
    "MEDBENCH_DVC_REMOTE",
    "MEDBENCH_VENV",  # a development venv used as is: the version's setup.sh must build the environment of its own lock
)
# Asked of the version's own code: declared stage versions (code_versions) or, in versions made before
# they existed, hashes of each stage's sources (STAGE_MODULES).
_CODE_VERSIONS = """
import json
try:
    from medbench_core.provenance import code_versions
except ImportError:
    from medbench_core.provenance import STAGE_MODULES, code_version
    code_versions = lambda: {"core": code_version(), **{s: code_version(s) for s in STAGE_MODULES}}
print(json.dumps(code_versions()))
"""


@dataclass
class CodeChoice:
    """Where the rebuild's code comes from and how it is run."""

    code_dir: Path
    python: str
    how: str
    models_text: str
    tasks_text: str
    worktree: Path | None = None


@dataclass
class RebuildResult:
    tag: str
    data_version: str
    reproduced: bool
    results: list[ArtifactResult]
    rows: list[dict[str, Any]]
    first: dict[str, Any] | None
    report_path: Path
    report: dict[str, Any] = field(default_factory=dict)


def _lock_hash(path: Path) -> str:
    from medbench_core.provenance import file_hash

    return file_hash(path)


def code_versions_of(code_dir: Path, python: str) -> dict[str, str]:
    """The code version of every stage as the code in ``code_dir`` computes it (asked of that code itself)."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(PYTHONPATH=str(code_dir), PYTHONSAFEPATH="1")
    proc = subprocess.run([python, "-c", _CODE_VERSIONS], cwd=code_dir, env=env, capture_output=True, check=False, text=True)
    if proc.returncode != 0:
        raise VersioningError(f"cannot read the code versions of {code_dir}: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)


def interpreter_for(lock_hash: str, *, current_lock: str, venv_root: Path, code_dir: Path, log: Log) -> tuple[str, str]:
    """A Python whose packages are those of ``lock_hash``: this one, a venv built for that lock, or one built now."""
    if lock_hash == current_lock:
        return sys.executable, "this environment (same requirements.lock)"
    venv = venv_root / lock_hash
    if not (venv / ".complete").exists():
        log(f"[rebuild] building the environment of lock {lock_hash} with scripts/setup.sh of the version's commit (needs the package registry)")
        env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        env["MEDBENCH_VENV_ROOT"] = str(venv_root)
        proc = subprocess.run(["bash", "-c", "source scripts/setup.sh >&2"], cwd=code_dir, env=env, capture_output=True, check=False, text=True)
        if proc.returncode != 0 or not (venv / ".complete").exists():
            raise VersioningError(f"cannot build the environment of requirements.lock {lock_hash}:\n{proc.stderr.strip()[-1500:]}")
    return str(venv / "bin" / "python"), f"the environment of requirements.lock {lock_hash} ({venv})"


def choose_code(root: Path, record: dict[str, Any], *, mode: str, models_file: Path, tasks_file: Path, venv_root: Path, scratch: Path, log: Log) -> CodeChoice:
    """Which code, registry, catalogue and interpreter rebuild the version (see the module docstring)."""
    current_lock = _lock_hash(root / "requirements.lock")
    registry = record["registry"]
    if mode == "current":
        return CodeChoice(
            root, sys.executable, "this checkout's code, models.yaml and tasks.yaml (--code current)", models_file.read_text(), tasks_file.read_text()
        )
    if mode != "pinned":
        raise VersioningError(f"--code {mode!r}: use pinned or current")
    commit = record["code_commit"]
    texts = (registry["models.yaml"]["text"], registry["tasks.yaml"]["text"])
    if _has_commit(root, commit):
        tree = scratch / "code"
        if tree.exists():
            git(root, "worktree", "remove", "--force", str(tree), check=False)
            shutil.rmtree(tree, ignore_errors=True)
        git(root, "worktree", "prune")
        git(root, "worktree", "add", "--detach", "-f", str(tree), commit)
        python, env_how = interpreter_for(record["lock_hash"], current_lock=current_lock, venv_root=venv_root, code_dir=tree, log=log)
        how = f"the code of commit {commit[:12]} (a temporary git worktree) with the version's models.yaml and tasks.yaml, in {env_how}"
        return CodeChoice(tree, python, how, *texts, worktree=tree)
    here = code_versions_of(root, sys.executable)
    moved = sorted(s for s, v in record["code_versions"].items() if s != "core" and here.get(s) != v)  # core: a digest of the sources, not an output version
    if moved or record["lock_hash"] != current_lock:
        what = (f"code versions of {', '.join(moved)} differ" if moved else "") + ("; " if moved and record["lock_hash"] != current_lock else "")
        what += f"requirements.lock {current_lock} != {record['lock_hash']}" if record["lock_hash"] != current_lock else ""
        raise VersioningError(
            f"commit {commit[:12]} of the version is not in this clone (a shallow clone? `git fetch --unshallow`), and this checkout's "
            f"code cannot stand in for it: {what}. Rebuild with --code current to compare this code anyway."
        )
    how = f"this checkout's code (commit {commit[:12]} is not in this clone; its code versions and lock equal the version's) with the version's models.yaml and tasks.yaml"
    return CodeChoice(root, sys.executable, how, *texts)


def _has_commit(root: Path, commit: str) -> bool:
    return subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True, check=False).returncode == 0


def _models_and_tasks(record: dict[str, Any]) -> tuple[list[str], list[str]]:
    models = list(dict.fromkeys(a["model"] for a in record["artifacts"] if a["model"]))
    models += [r["model"] for r in record["runs"] if r["model"] not in models]
    tasks = list(dict.fromkeys(a["task"] for a in record["artifacts"] if a["stage"] == "curated_task"))
    return models, tasks


def run_main_job(choice: CodeChoice, record: dict[str, Any], work: Path, *, cwd: Path, shared: Path, log: Log) -> tuple[int, Path]:
    """``medbench run`` of the version's models and tasks with the chosen code, into ``work/data`` and ``work/state``.

    The child's lines are echoed (prefixed) and kept in ``work/rebuild.log``. Returns its exit code and the log's path.
    """
    models, tasks = _models_and_tasks(record)
    (work / "models.yaml").write_text(choice.models_text)
    (work / "tasks.yaml").write_text(choice.tasks_text)
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(
        MEDBENCH_ROOT=str(choice.code_dir),
        PYTHONPATH=str(choice.code_dir),
        PYTHONSAFEPATH="1",  # the current folder (the user's checkout) must not shadow the chosen code
        MEDBENCH_DATA=str(work / DATA),
        MEDBENCH_STATE=str(work / "state"),
        MEDBENCH_MODELS=str(work / "models.yaml"),
        MEDBENCH_TASKS=str(work / "tasks.yaml"),
        MEDBENCH_SHARED=str(shared),
        HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"),
        TRANSFORMERS_OFFLINE=os.environ.get("TRANSFORMERS_OFFLINE", "1"),
    )
    cmd = [choice.python, "-m", "medbench_cli", "run", "--models", ",".join(models), "--tasks", ",".join(tasks)]
    log_path = work / "rebuild.log"
    log(f"[rebuild] medbench run --models {','.join(models)} --tasks {','.join(tasks)} (log: {log_path})")
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            if line.startswith(("[curate]", "[overlap]", "[gate]", "[evaluate]", "[warm-up]", "FAILED", "total", "error")):
                log(f"[rebuild]   {line.rstrip()}")
        code = proc.wait()
    if code != 0:
        tail = log_path.read_text().strip().splitlines()[-5:]
        log(f"[rebuild] the main job exited {code}; the end of its log ({log_path}):")
        for line in tail:
            log(f"[rebuild]   {line}")
    return code, log_path


def published_files(root: Path, data_version: str) -> Callable[[str], Path | None]:
    """relpath under data/ -> the version's own file in this checkout's DVC cache, when it is there (else None)."""
    cache = root / ".dvc" / "cache" / "files" / "md5"
    listing: dict[str, str] = {}
    dir_obj = cache / data_version[:2] / data_version[2:]
    if dir_obj.exists():
        try:
            listing = {e["relpath"]: e["md5"] for e in json.loads(dir_obj.read_text())}
        except (json.JSONDecodeError, KeyError, TypeError):
            listing = {}

    def find(relpath: str) -> Path | None:
        md5 = listing.get(relpath)
        obj = cache / md5[:2] / md5[2:] if md5 else None
        return obj if obj is not None and obj.exists() else None

    return find


def rebuild(
    root: Path,
    record: dict[str, Any],
    *,
    work: Path,
    shared: Path,
    models_file: Path,
    tasks_file: Path,
    venv_root: Path,
    code: str = "pinned",
    report_path: Path | None = None,
    tolerance: float = ARRAY_TOLERANCE,
    log: Log = print,
) -> RebuildResult:
    """Rebuild ``record``'s version from the sources in ``shared`` and compare it, artifact by artifact.

    ``work`` is emptied first and keeps the rebuilt data, state, log and (by default) the JSON
    report afterwards. The temporary worktree of the pinned code is removed at the end.
    """
    t0 = time.perf_counter()
    work = Path(work).resolve()
    if work == root.resolve() or work in (root / DATA).resolve().parents or (root / DATA).resolve() in (work / DATA, work):
        raise VersioningError(f"the rebuild's work folder {work} holds this checkout's data/ ({root / DATA}); point the state folder elsewhere")
    for sub in (DATA, "state"):  # the previous rebuild's output: rebuilt again below, nothing of the checkout's
        shutil.rmtree(work / sub, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="medbench-rebuild-"))
    choice = None
    try:
        choice = choose_code(root, record, mode=code, models_file=models_file, tasks_file=tasks_file, venv_root=venv_root, scratch=scratch, log=log)
        log(f"[rebuild] {record['tag']}: from the sources in {shared}, with {choice.how}")
        versions = code_versions_of(choice.code_dir, choice.python)
        exit_code, log_path = run_main_job(choice, record, work, cwd=root, shared=shared, log=log)
        lock = _lock_hash(choice.code_dir / "requirements.lock")
    finally:
        if choice is not None and choice.worktree is not None:
            git(root, "worktree", "remove", "--force", str(choice.worktree), check=False)
            git(root, "worktree", "prune", check=False)
        shutil.rmtree(scratch, ignore_errors=True)
    t_build = time.perf_counter() - t0
    rebuilt = Rebuilt(work / DATA, choice.models_text, choice.tasks_text, versions, shared / "data")
    results = compare_version(record, rebuilt, published_file=published_files(root, record["data_version"]), tolerance=tolerance)
    rows = partitions(results)
    first = first_difference(results, record, rebuilt)
    reproduced = first is None
    report_path = report_path or work / "report.json"
    report = {
        "tag": record["tag"],
        "data_version": record["data_version"],
        "path": "rebuilt from sources",
        "reproduced": reproduced,
        "code": choice.how,
        "code_commit": record["code_commit"],
        "lock_hash": {"version": record["lock_hash"], "rebuild": lock},
        "code_versions": {"version": record["code_versions"], "rebuild": versions},
        "sources": str(shared / "data"),
        "rules": RULES,
        "volatile_json_keys": list(VOLATILE_JSON),
        "tolerance": {"vectors_abs": tolerance, "metrics_abs": METRIC_TOLERANCE, "scores": "τ of each run, derived from vectors_abs (its rule)"},
        "main_job_exit_code": exit_code,
        "log": str(log_path),
        "rebuilt_data": str(work / DATA),
        "seconds": {"rebuild": round(t_build, 1), "compare": round(time.perf_counter() - t0 - t_build, 1)},
        "first_difference": first,
        "partitions": rows,
        "artifacts": [r.to_json() for r in results],
        "counts": {v: sum(r.verdict == v for r in results) for v in ("identical", "within_tolerance", "differs", "missing")},
        "largest_within_tolerance": largest_differences(results),
    }
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    log(table(rows, record))
    return RebuildResult(record["tag"], record["data_version"], reproduced, results, rows, first, report_path, report)
