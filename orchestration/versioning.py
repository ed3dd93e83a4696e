"""Benchmark versions with DVC: release one, reproduce one, collect garbage without losing one.

    python -m orchestration.versioning remote [PATH]     show or set the DVC remote of this checkout
    python -m orchestration.versioning release TAG       after `python -m orchestration.main`
    python -m orchestration.versioning reproduce [TAG]   in a clone checked out at TAG
    python -m orchestration.versioning gc [--cloud]      never removes what a tagged version needs
    python -m orchestration.versioning check             cache objects re-hash to their names; tags complete on the remote
    python -m orchestration.versioning pull | push

A benchmark version is a git tag whose commit holds ``data.dvc`` (the DVC hash of the whole
``data/`` tree: curated tasks, embeddings, indices, runs, metrics) and ``versions/<tag>.json``
(every model x task of the version: its MLflow run id, its artifact keys and the metrics logged).
Release records the data hash in every MLflow run of the version (tags ``medbench.data_version``,
``medbench.release``, ``medbench.releases``). Reproduce pulls the data, re-searches each stored
index with the stored query vectors (nothing is re-encoded), re-scores each stored run and
compares every metric with MLflow, the stored ``metrics.json`` and the release record, bit for bit.

The remote is ``medbench`` in ``.dvc/config`` (``verify = true``: a pull refuses corrupted
objects); its url defaults to ``~/.cache/medbench/dvc-remote`` and is overridden per checkout by
``remote PATH`` or ``MEDBENCH_DVC_REMOTE`` (both write ``.dvc/config.local``). S3 and GCS urls
work with the ``dvc[s3]`` / ``dvc[gs]`` extras.

Exit codes: 0 done / identical; 1 a metric or ranking differs, or an artifact fails its manifest;
2 a usage or setup error; 3 ``dvc pull`` failed (nothing was scored).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from medbench_core.errors import IntegrityError, MedbenchError
from medbench_core.layout import STAGES
from medbench_core.storage import MANIFEST, verify_manifest, write_json_atomic
from orchestration import settings

REMOTE = "medbench"
DEFAULT_REMOTE_URL = "~/.cache/medbench/dvc-remote"
DATA = "data"
VERSIONS = "versions"
_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_LOCK_ERROR = "Unable to acquire lock"
_GIT_IDENTITY = ("-c", "user.name=medbench release", "-c", "user.email=medbench@localhost")

Log = Callable[[str], None]


class VersioningError(MedbenchError):
    """A release, reproduction or collection step failed; ``exit_code`` is what the CLI returns."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


class PullError(VersioningError):
    """``dvc pull`` failed: nothing was checked out from the objects at fault, nothing was scored."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=3)


# --- subprocesses -------------------------------------------------------------------------


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(f"    {ln}" for ln in text.strip().splitlines()[-lines:])


def dvc(root: Path, *args: str, retries: int = 6, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python -m dvc ARGS`` in ``root``; retry while another DVC process holds the repo lock.

    DVC refuses a second command on the same repository at once ("Unable to acquire lock");
    those fail cleanly and are retried with a growing pause. Other failures raise
    VersioningError with DVC's last lines.
    """
    cmd = [sys.executable, "-m", "dvc", *args]
    for attempt in range(retries + 1):
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        if proc.returncode == 0 or not check:
            return proc
        if _LOCK_ERROR in proc.stderr + proc.stdout and attempt < retries:
            time.sleep(min(0.25 * 2**attempt, 4.0))
            continue
        raise VersioningError(f"`dvc {' '.join(args)}` failed in {root} (exit {proc.returncode}):\n{_tail(proc.stderr + proc.stdout)}")
    raise AssertionError("unreachable")


def git(root: Path, *args: str, check: bool = True) -> str:
    """Run git in ``root``; returns stdout. Errors name the command and git's message."""
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise VersioningError(f"`git {' '.join(args)}` failed in {root} (exit {proc.returncode}):\n{_tail(proc.stderr + proc.stdout)}")
    return proc.stdout


def _git_commit_args(root: Path) -> tuple[str, ...]:
    # CI machines often have no git identity; a release must not fail for that.
    if git(root, "config", "user.email", check=False).strip():
        return ()
    return _GIT_IDENTITY


def _repo_root(path: str | Path | None) -> Path:
    root = Path(path or settings.ROOT).resolve()
    top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode != 0:
        raise VersioningError(f"{root}: not a git checkout; benchmark versions are git tags (clone the repository first)")
    if Path(top.stdout.strip()).resolve() != root:
        raise VersioningError(f"{root}: run from the top of the checkout ({top.stdout.strip()})")
    if not (root / ".dvc" / "config").exists():
        raise VersioningError(f"{root}: no .dvc/config; this checkout predates DVC versioning (git pull, or run `dvc init`)")
    return root


# --- the remote ---------------------------------------------------------------------------


def configure_remote(root: Path, url: str | None = None) -> str:
    """Make ``medbench`` the remote of ``root``, with ``url`` (or MEDBENCH_DVC_REMOTE) if given.

    The url goes into ``.dvc/config.local`` (not committed), so each checkout can point at its
    own folder or bucket; ``verify = true`` is enforced. Returns the effective url.
    """
    url = url or settings.DVC_REMOTE
    config = _dvc_config(root)
    if url:
        if "://" not in url:
            url = str(Path(url).expanduser().resolve())
        if config.get(f"remote.{REMOTE}.url") != url:
            dvc(root, "remote", "modify", "--local", REMOTE, "url", url)
            config[f"remote.{REMOTE}.url"] = url
    if not config.get(f"remote.{REMOTE}.url"):
        raise VersioningError(f"{root}: no DVC remote {REMOTE!r}; set one with `python -m orchestration.versioning remote PATH`")
    if config.get(f"remote.{REMOTE}.verify") != "true":
        dvc(root, "remote", "modify", "--local", REMOTE, "verify", "true")
    return config[f"remote.{REMOTE}.url"]


def _dvc_config(root: Path) -> dict[str, str]:
    """The merged DVC config: `dvc config --list` prints system, global, project, local; the last wins."""
    out: dict[str, str] = {}
    for line in dvc(root, "config", "--list").stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def local_remote_path(root: Path, url: str) -> Path | None:
    """The folder of a local remote url, or None for s3://, gs:// and other schemes."""
    if url.startswith("file://"):
        return Path(url[len("file://") :])
    if "://" in url:
        return None
    p = Path(url).expanduser()
    return p if p.is_absolute() else (root / ".dvc" / p).resolve()  # DVC resolves relative urls from .dvc/


# --- data versions ------------------------------------------------------------------------


def data_version(root: Path, rev: str | None = None) -> str:
    """The DVC hash of ``data/`` recorded in ``data.dvc`` (at git ``rev``, or in the workspace)."""
    where = f"data.dvc at {rev}" if rev else str(root / "data.dvc")
    if rev:
        text = git(root, "show", f"{rev}:data.dvc", check=False)
        if not text:
            raise VersioningError(f"{where}: not found; {rev} is not a released benchmark version")
    else:
        if not (root / "data.dvc").exists():
            raise VersioningError(f"{where}: not found; run `python -m orchestration.versioning release TAG` first")
        text = (root / "data.dvc").read_text()
    doc = yaml.safe_load(text) or {}
    for out in doc.get("outs", []):
        if out.get("path") == DATA and out.get("md5"):
            return str(out["md5"])
    raise VersioningError(f"{where}: no md5 for the output 'data'; re-run `dvc add data`")


def version_record(root: Path, tag: str) -> dict[str, Any]:
    """``versions/<tag>.json`` as committed at ``tag``."""
    text = git(root, "show", f"{tag}:{VERSIONS}/{tag}.json", check=False)
    if not text:
        raise VersioningError(f"{tag}: no {VERSIONS}/{tag}.json in that commit; it was not made by `release`")
    return json.loads(text)


def verify_tree(data_dir: Path) -> int:
    """Verify every artifact folder (one holding a MANIFEST.json) under ``data_dir``; returns how many.

    Folders and files named ``.*`` (interrupted writes) are skipped: ``.dvcignore`` keeps them
    out of a version too.
    """
    n = 0
    for manifest in sorted(data_dir.rglob(MANIFEST)):
        rel = manifest.relative_to(data_dir)
        if any(part.startswith(".") for part in rel.parts):
            continue
        verify_manifest(manifest.parent)
        n += 1
    return n


def _artifact_dirs(data_dir: Path, entry: dict[str, Any]) -> dict[str, Path]:
    base = data_dir / "artifacts" / entry["model"] / entry["task"]
    return {stage: base / stage / entry["keys"][stage] for stage in STAGES}


def collect_runs(tracking_uri: str, benchmark: str, data_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The FINISHED MLflow runs of ``benchmark`` whose artifacts are all in ``data_dir``.

    Returns ``(entries, skipped)``: one entry per run (model, task, run id, stage keys, model
    kind/path/settings, metrics as logged), and a note for each run left out.
    """
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(benchmark)
    if exp is None:
        return [], [f"no MLflow experiment {benchmark!r} at {tracking_uri}"]
    runs, token = [], None
    while True:
        page = client.search_runs(
            [exp.experiment_id],
            filter_string=f"tags.`medbench.benchmark` = '{benchmark}' and attributes.status = 'FINISHED'",
            max_results=1000,
            page_token=token,
            order_by=["attributes.start_time ASC"],
        )
        runs.extend(page)
        token = page.token
        if not token:
            break
    entries: dict[str, dict[str, Any]] = {}
    skipped: list[str] = []
    for r in runs:
        tags, params = r.data.tags, r.data.params
        try:
            entry = {
                "model": tags["medbench.model"],
                "task": tags["medbench.task"],
                "mlflow_run_id": r.info.run_id,
                "keys": {"embeddings": params["embeddings_key"], "index": params["index_key"], "run": params["run_key"], "metrics": tags["medbench.run_key"]},
                "model_kind": params["model_kind"],
                "model_id": params.get("model_id", ""),
                "model_settings": json.loads(params.get("model_settings") or "{}"),
                "task_content_hash": params["task_content_hash"],
                "metrics": dict(sorted(r.data.metrics.items())),
            }
        except KeyError as exc:
            skipped.append(f"MLflow run {r.info.run_id}: no {exc} tag/param (not logged by task_metrics)")
            continue
        missing = [s for s, d in _artifact_dirs(data_dir, entry).items() if not (d / MANIFEST).exists()]
        if missing:
            skipped.append(f"MLflow run {r.info.run_id} ({entry['model']} x {entry['task']}): {', '.join(missing)} artifact(s) not in {data_dir}")
            continue
        if not (data_dir / "tasks" / entry["task"] / MANIFEST).exists():
            skipped.append(f"MLflow run {r.info.run_id} ({entry['model']} x {entry['task']}): curated task not in {data_dir}")
            continue
        entries.setdefault(entry["keys"]["metrics"], entry)
    return sorted(entries.values(), key=lambda e: (e["model"], e["task"], e["keys"]["metrics"])), skipped


def not_in_remote(root: Path) -> list[str]:
    """Files of the workspace's data.dvc that the remote lacks, checked file by file."""
    proc = dvc(root, "data", "status", "--not-in-remote", "-r", REMOTE, "--json", "--granular", DATA)
    return sorted(json.loads(proc.stdout or "{}").get("not_in_remote", []))


def _drop_remote_object(root: Path, oid: str) -> None:
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        odb = repo.cloud.get_remote_odb(REMOTE, command="push")
        path = odb.oid_to_path(oid)
        if odb.fs.exists(path):
            odb.fs.rm(path)


def push(root: Path, log: Log = print) -> None:
    """`dvc push` the data of ``data.dvc``, then make sure the remote holds every file of it.

    DVC skips a folder whose directory object is already on the remote, assuming its files are
    there too; a remote that lost one of them is never repaired that way. When the file-by-file
    check finds gaps, the directory object is removed from the remote and the push repeated,
    which uploads the missing files and the directory object last.
    """
    dvc(root, "push", "-r", REMOTE, "data.dvc")
    missing = not_in_remote(root)
    if not missing:
        return
    version = data_version(root)
    log(f"[push] the remote lacks {len(missing)} file(s) of {version} (e.g. {missing[0]}); uploading them again")
    _drop_remote_object(root, version)
    dvc(root, "push", "-r", REMOTE, "data.dvc")
    missing = not_in_remote(root)
    if missing:
        raise VersioningError(f"after `dvc push`, the remote still lacks {len(missing)} file(s), e.g. {missing[:5]}; is the local cache complete (`dvc status`)?")


# --- release ------------------------------------------------------------------------------


def _check_tag(tag: str) -> None:
    if not _TAG_RE.match(tag):
        raise VersioningError(f"tag {tag!r}: use letters, digits, '.', '_' or '-' (it names versions/{tag}.json too)")


def _tag_commit(root: Path, tag: str) -> str | None:
    out = git(root, "rev-parse", "-q", "--verify", f"refs/tags/{tag}^{{commit}}", check=False).strip()
    return out or None


def _tag_mlflow_runs(tracking_uri: str, run_ids: list[str], version: str, tag: str) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    for run_id in run_ids:
        run = client.get_run(run_id)
        releases = {t for t in run.data.tags.get("medbench.releases", "").split(",") if t} | {tag}
        client.set_tag(run_id, "medbench.data_version", version)
        client.set_tag(run_id, "medbench.release", tag)
        client.set_tag(run_id, "medbench.releases", ",".join(sorted(releases)))


def release(
    root: str | Path | None,
    tag: str,
    *,
    tracking_uri: str,
    benchmark: str,
    remote: str | None = None,
    allow_dirty: bool = False,
    log: Log = print,
) -> dict[str, Any]:
    """Release ``data/`` as benchmark version ``tag``; returns the record written to versions/<tag>.json.

    Verifies every artifact's manifest, `dvc add data`, pushes to the remote, commits data.dvc
    and the record, creates an annotated tag, and tags every MLflow run of the version with the
    data hash. Nothing is encoded or scored. Re-running after a failure resumes: a tag that
    already names the same data is pushed and tagged again, a tag naming other data is refused.
    """
    root = _repo_root(root)
    _check_tag(tag)
    data_dir = root / DATA
    if not data_dir.is_dir():
        raise VersioningError(f"{data_dir}: no data; run `python -m orchestration.main` first")
    if settings.DATA.resolve() != data_dir and settings.ROOT.resolve() == root:
        raise VersioningError(f"MEDBENCH_DATA points at {settings.DATA}, but a version holds {data_dir}; unset MEDBENCH_DATA and rerun the main job")
    url = configure_remote(root, remote)

    if _tag_commit(root, tag):
        record = version_record(root, tag)
        if (root / "data.dvc").exists() and data_version(root) == record["data_version"]:
            log(f"[release] tag {tag} exists for data {record['data_version']}: pushing and tagging the MLflow runs again")
            push(root, log)
            _tag_mlflow_runs(tracking_uri, [e["mlflow_run_id"] for e in record["runs"]], record["data_version"], tag)
            return record
        raise VersioningError(f"tag {tag} already names data {record['data_version']}; choose a new tag for this data")

    dirty = [ln[3:] for ln in git(root, "status", "--porcelain", "--untracked-files=no").splitlines()]
    dirty = [p for p in dirty if p not in ("data.dvc", ".gitignore")]
    if dirty and not allow_dirty:
        raise VersioningError(
            f"tracked files differ from HEAD: {', '.join(dirty[:10])}; commit them first so the tag names the code that "
            "produced the data (or pass --allow-dirty)"
        )
    try:
        n = verify_tree(data_dir)
    except IntegrityError as exc:
        raise VersioningError(f"refusing to release a damaged artifact: {exc}", exit_code=1) from exc
    runs, skipped = collect_runs(tracking_uri, benchmark, data_dir)
    for note in skipped:
        log(f"[release] left out: {note}")
    if not runs:
        raise VersioningError(f"nothing to release: no FINISHED MLflow run of {benchmark!r} at {tracking_uri} has its artifacts in {data_dir}")
    log(f"[release] {n} artifact folders verified; {len(runs)} model x task runs; remote {url}")

    dvc(root, "add", "-q", DATA)
    push(root, log)  # every file of the version is on the remote before the tag exists
    version = data_version(root)
    record = {
        "tag": tag,
        "benchmark": benchmark,
        "data_version": version,
        "code_commit": git(root, "rev-parse", "HEAD").strip(),
        "released_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": runs,
    }
    rel = f"{VERSIONS}/{tag}.json"
    write_json_atomic(root / rel, record)
    paths = ["data.dvc", rel]
    if git(root, "status", "--porcelain", "--", ".gitignore").strip():
        paths.append(".gitignore")
    git(root, "add", "--", *paths)
    ident = _git_commit_args(root)
    git(root, *ident, "commit", "-q", "-m", f"Benchmark version {tag}: data {version}", "--", *paths)
    git(root, *ident, "tag", "-a", tag, "-m", f"medbench benchmark version {tag}\n\ndata.dvc md5: {version}\nmodel x task runs: {len(runs)}")
    _tag_mlflow_runs(tracking_uri, [e["mlflow_run_id"] for e in runs], version, tag)
    log(f"[release] {tag}: data {version} pushed, committed and tagged; {len(runs)} MLflow runs tagged medbench.data_version")
    return record


# --- reproduce ----------------------------------------------------------------------------


@dataclass
class Reproduction:
    """Outcome of reproducing one version: one line per model x task, and every difference found."""

    tag: str
    data_version: str
    lines: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.differences


class _StoredQueries:
    """Stands in for the encoder: returns the query vectors stored with the run (nothing is encoded)."""

    def __init__(self, vectors, label: str):
        self.vectors = vectors
        self.label = label

    def encode_records(self, texts, images, languages, role):
        if role != "query":
            raise VersioningError(f"{self.label}: reproduction asked to encode {role} records; only stored vectors may be used")
        return self.vectors


def _same(a: float, b: float) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _compare(label: str, got: dict[str, float], want: dict[str, float], where: str, extra_ok: bool = False) -> list[str]:
    diffs = []
    for key in sorted(set(got) | set(want)):
        if key not in want:
            diffs.append(f"{label}: {key}: recomputed {got[key]!r}, absent from {where}")
        elif key not in got:
            if not extra_ok:
                diffs.append(f"{label}: {key}: {where} has {want[key]!r}, not recomputed")
        elif not _same(float(got[key]), float(want[key])):
            diffs.append(f"{label}: {key}: {where} {want[key]!r} != recomputed {got[key]!r}")
    return diffs


def _first_run_difference(stored, again) -> str:
    if stored.height != again.height:
        return f"{stored.height} rows stored, {again.height} re-searched"
    for a, b in zip(stored.iter_rows(named=True), again.iter_rows(named=True)):
        if a != b:
            return f"query {a['query_id']} rank {a['rank']}: stored {a['doc_id']} ({a['score']!r}), re-searched {b['doc_id']} ({b['score']!r})"
    return "same rows, different column types"


def _research(entry: dict[str, Any], task, dirs: dict[str, Path], out: Path):
    """Re-run retrieval on the stored index: dense models with the stored query vectors, BM25 on its bm25s index."""
    import numpy as np

    from medbench_core.models import ModelSpec
    from medbench_core.pipeline import retrieve

    kind = entry["model_kind"]
    spec = ModelSpec(
        name=entry["model"],
        kind=kind,
        path="" if entry["model_id"] in ("", kind) else entry["model_id"],
        settings=entry["model_settings"],
    )
    k = json.loads((dirs["run"] / "info.json").read_text())["k"]
    label = f"{entry['model']} x {entry['task']}"
    if kind == "bm25":
        run, _ = retrieve(spec, task, dirs["embeddings"], dirs["index"], out, k=k)
        return run, "bm25s index"
    q_file = dirs["run"] / "query_embeddings.npy"
    if not (dirs["index"] / "index.faiss").exists() or not q_file.exists():
        return None, "no stored index or query vectors to re-search"
    queries = np.load(q_file, allow_pickle=False)
    run, _ = retrieve(spec, task, dirs["embeddings"], dirs["index"], out, k=k, encoder=_StoredQueries(queries, label))
    return run, "FAISS index with the stored query vectors"


def reproduce_entry(data_dir: Path, entry: dict[str, Any], tag: str, mlflow_metrics: dict[str, float] | None) -> tuple[str, list[str]]:
    """Re-search and re-score one model x task of a version; returns (summary line, differences)."""
    import polars as pl

    from medbench_core.model import load_task
    from medbench_core.pipeline import flat_metrics, score

    label = f"{entry['model']} x {entry['task']}"
    task_dir = data_dir / "tasks" / entry["task"]
    dirs = _artifact_dirs(data_dir, entry)
    try:
        verify_manifest(task_dir)
        for stage in STAGES:
            verify_manifest(dirs[stage])
    except IntegrityError as exc:
        return f"{label}: refused", [f"{label}: {exc}"]
    task = load_task(task_dir)
    if task.content_hash() != entry["task_content_hash"]:
        return f"{label}: refused", [f"{label}: task content hash {task.content_hash()[:12]} != {entry['task_content_hash'][:12]} recorded at release"]
    diffs: list[str] = []
    stored_run = pl.read_parquet(dirs["run"] / "run.parquet")
    with tempfile.TemporaryDirectory(prefix="medbench-reproduce-") as tmp:
        research_dir, score_dir = Path(tmp, "run"), Path(tmp, "metrics")
        research_dir.mkdir()
        score_dir.mkdir()
        try:
            again, how = _research(entry, task, dirs, research_dir)
            result = score(task, stored_run, score_dir)
        except MedbenchError as exc:
            return f"{label}: failed", [f"{label}: {exc}"]
        if again is not None and not again.equals(stored_run):
            diffs.append(f"{label}: re-searching the {how} gives another ranking: {_first_run_difference(stored_run, again)}")
        per_query = pl.read_parquet(score_dir / "per_query.parquet")
    got = flat_metrics(result)
    stored = json.loads((dirs["metrics"] / "metrics.json").read_text())
    diffs += _compare(label, got, flat_metrics(stored), f"stored {dirs['metrics'].relative_to(data_dir)}/metrics.json")
    if not per_query.equals(pl.read_parquet(dirs["metrics"] / "per_query.parquet")):
        diffs.append(f"{label}: per-query metrics differ from the stored per_query.parquet")
    diffs += _compare(label, got, entry["metrics"], f"{VERSIONS}/{tag}.json")
    against = "metrics.json and the release record"
    if mlflow_metrics is not None:
        diffs += _compare(label, got, mlflow_metrics, f"MLflow run {entry['mlflow_run_id']}", extra_ok=True)
        against = f"MLflow run {entry['mlflow_run_id'][:12]}, " + against
    main = "ndcg_at_10"
    searched = f"ranking re-searched on the {how}" if again is not None else how
    line = f"{label}: {len(got)} metrics {'identical' if not diffs else 'DIFFER'} vs {against}; {searched}; {main} {got.get(main, float('nan'))!r}"
    return line, diffs


def _mlflow_metrics(tracking_uri: str | None, run_ids: list[str]) -> tuple[dict[str, dict[str, float]], str | None]:
    """Metrics of each run id found at ``tracking_uri``; and why none could be read, if so."""
    if not tracking_uri:
        return {}, "no MLflow tracking URI"
    try:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=tracking_uri)
        out = {}
        for rid in run_ids:
            try:
                out[rid] = dict(client.get_run(rid).data.metrics)
            except MlflowException:
                continue
        return out, None
    except Exception as exc:  # an unreachable server: the caller decides whether that is fatal
        return {}, f"MLflow at {tracking_uri} unreachable ({str(exc).splitlines()[0][:200]})"


def _tag_at_head(root: Path) -> str:
    tags = [t for t in git(root, "tag", "--points-at", "HEAD").split() if t]
    released = [t for t in tags if _has_record(root, t)]
    if len(released) != 1:
        raise VersioningError(f"HEAD carries {len(released)} released version tags ({', '.join(released) or 'none'}); name the tag to reproduce")
    return released[0]


def _has_record(root: Path, tag: str) -> bool:
    return subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{tag}:{VERSIONS}/{tag}.json"], capture_output=True).returncode == 0


def reproduce(
    root: str | Path | None,
    tag: str | None = None,
    *,
    tracking_uri: str | None,
    remote: str | None = None,
    pull: bool = True,
    require_mlflow: bool = False,
    log: Log = print,
) -> Reproduction:
    """Reproduce version ``tag`` in a checkout at that tag: pull, re-search, re-score, compare.

    Raises PullError when `dvc pull` fails (corrupted or missing objects on the remote): nothing
    is scored then. Every other difference is collected in the returned Reproduction.
    """
    root = _repo_root(root)
    tag = tag or _tag_at_head(root)
    _check_tag(tag)
    commit = _tag_commit(root, tag)
    if commit is None:
        raise VersioningError(f"tag {tag} not found in {root}; `git fetch --tags` or name an existing tag")
    head = git(root, "rev-parse", "HEAD").strip()
    if head != commit:
        raise VersioningError(f"{root} is at {head[:12]}, not at {tag} ({commit[:12]}); run `git checkout {tag}` first")
    record = version_record(root, tag)
    version = data_version(root, rev=tag)
    if version != record["data_version"]:
        raise VersioningError(f"{tag}: data.dvc says {version} but {VERSIONS}/{tag}.json says {record['data_version']}", exit_code=1)
    if pull:
        url = configure_remote(root, remote)
        log(f"[reproduce] {tag}: pulling data {version} from {url}")
        try:
            dvc(root, "pull", "-r", REMOTE, "data.dvc")
        except VersioningError as exc:
            raise PullError(f"{exc}\nNothing was scored. Fix the remote (re-push the version from a checkout that has it) and rerun.") from exc
        status = dvc(root, "status", "--json", "data.dvc").stdout.strip()
        if status not in ("", "{}"):
            raise PullError(f"after `dvc pull`, data/ still differs from data.dvc: {status[:500]}; nothing was scored")
    out = Reproduction(tag, version)
    metrics, problem = _mlflow_metrics(tracking_uri, [e["mlflow_run_id"] for e in record["runs"]])
    if problem:
        log(f"[reproduce] warning: {problem}")
    for entry in record["runs"]:
        logged = metrics.get(entry["mlflow_run_id"])
        if logged is None:
            msg = f"{entry['model']} x {entry['task']}: MLflow run {entry['mlflow_run_id']} not found at {tracking_uri}"
            if require_mlflow:
                out.differences.append(msg)
            else:
                log(f"[reproduce] warning: {msg}; comparing with metrics.json and {VERSIONS}/{tag}.json only")
        line, diffs = reproduce_entry(root / DATA, entry, tag, logged)
        out.lines.append(line)
        out.differences.extend(diffs)
        log(f"[reproduce] {line}")
    return out


# --- garbage collection and checks ---------------------------------------------------------


def _md5_file(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


_DVC_TEMP = re.compile(r"^\.[A-Za-z0-9_-]+\.tmp$")


def leftover_temp_files(store: Path) -> list[Path]:
    """DVC's temporary files (``.<token>.tmp``) in a cache: what a killed transfer leaves.

    They never carry an object's name, so DVC never reads them; `dvc gc` (and so :func:`gc`)
    removes them.
    """
    base = store / "files" / "md5"
    return sorted(p for p in base.glob("??/*") if _DVC_TEMP.match(p.name)) if base.is_dir() else []


def rehash_objects(store: Path) -> tuple[int, list[str]]:
    """Re-hash every object of a DVC cache or local remote (``files/md5/xx/rest[.dir]``).

    Returns ``(count, problems)``: an object whose bytes do not hash to its name, or a file that
    is neither an object nor a DVC temporary file, is a problem. Partial transfers never carry an
    object's name (DVC renames them in when complete).
    """
    base = store / "files" / "md5"
    n, bad = 0, []
    if not base.is_dir():
        return 0, []
    for p in sorted(base.glob("??/*")):
        if not p.is_file() or _DVC_TEMP.match(p.name):
            continue
        name = p.parent.name + p.name.removesuffix(".dir")
        if not re.fullmatch(r"[0-9a-f]{32}", name):
            bad.append(f"{p}: not an object name (a leftover temporary file?)")
            continue
        n += 1
        got = _md5_file(p)
        if got != name:
            bad.append(f"{p}: bytes hash to {got}")
    return n, bad


def tagged_versions(root: Path) -> dict[str, str]:
    """tag -> data hash, for every git tag whose commit has a data.dvc."""
    out = {}
    for tag in git(root, "tag", "--list").split():
        text = git(root, "show", f"{tag}:data.dvc", check=False)
        if text:
            out[tag] = data_version(root, rev=tag)
    return out


def missing_on_remote(root: Path, remote_dir: Path, versions: dict[str, str]) -> list[str]:
    """Objects a tagged version needs that a local remote folder lacks (one line per object)."""
    problems = []
    base = remote_dir / "files" / "md5"
    for tag, version in sorted(versions.items()):
        dir_obj = base / version[:2] / version[2:]
        if not dir_obj.exists():
            problems.append(f"{tag}: directory object {version} missing from {remote_dir}")
            continue
        for item in json.loads(dir_obj.read_text()):
            obj = base / item["md5"][:2] / item["md5"][2:]
            if not obj.exists():
                problems.append(f"{tag}: {DATA}/{item['relpath']} (object {item['md5']}) missing from {remote_dir}")
    return problems


def gc(root: str | Path | None, *, cloud: bool = False, remote: str | None = None, fetch_tags: bool = True, log: Log = print) -> dict[str, Any]:
    """Remove cache (and with ``cloud`` remote) objects that no tag, branch or the workspace uses.

    Tags are fetched from ``origin`` first, so that a version tagged in another clone is known
    (a clone that has not seen a tag would otherwise delete its objects from a shared remote).
    DVC's temporary files left by a killed transfer go too. For a local remote every tagged
    version is checked complete afterwards. (DVC's own ``--not-in-remote`` is not used: it
    drops objects the workspace uses as soon as the remote has them.)
    """
    root = _repo_root(root)
    if fetch_tags and "origin" in git(root, "remote").split():
        git(root, "fetch", "-q", "--tags", "origin")
    url = configure_remote(root, remote)
    args = ["gc", "--workspace", "--all-tags", "--all-branches", "--force", "-r", REMOTE, *(["--cloud"] if cloud else [])]
    versions = tagged_versions(root)
    remote_dir = local_remote_path(root, url)
    before = missing_on_remote(root, remote_dir, versions) if remote_dir else []
    proc = dvc(root, *args)
    log(f"[gc] {proc.stdout.strip()}")
    summary: dict[str, Any] = {"tags": sorted(versions), "remote": url, "checked": bool(remote_dir)}
    if remote_dir:
        after = missing_on_remote(root, remote_dir, versions)
        lost = sorted(set(after) - set(before))
        if lost:
            raise VersioningError("garbage collection removed objects a tagged version needs:\n" + "\n".join(lost[:20]), exit_code=1)
        if after:
            log(f"[gc] warning: already incomplete before gc: {after[:5]}")
        log(f"[gc] every tagged version ({', '.join(sorted(versions)) or 'none'}) is complete on {remote_dir}")
    return summary


# --- CLI ----------------------------------------------------------------------------------


def _benchmark(root: Path) -> str:
    from medbench_core.catalog import load_catalog

    tasks = settings.TASKS_FILE if root == settings.ROOT.resolve() else root / "tasks.yaml"
    return load_catalog(tasks).benchmark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestration.versioning", description=__doc__.splitlines()[0])
    parser.add_argument("--repo", help="the checkout (default: MEDBENCH_ROOT or this one)")
    parser.add_argument("--remote", help="DVC remote url for this checkout (default: MEDBENCH_DVC_REMOTE, else .dvc/config)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else the project's SQLite store)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("remote", help="show the remote url, or set it for this checkout")
    p.add_argument("url", nargs="?")
    p = sub.add_parser("release", help="commit data/ to DVC, push, commit data.dvc, tag, tag the MLflow runs")
    p.add_argument("tag")
    p.add_argument("--allow-dirty", action="store_true", help="release although tracked code differs from HEAD")
    p = sub.add_parser("reproduce", help="pull a version and re-score it; non-zero exit naming any difference")
    p.add_argument("tag", nargs="?")
    p.add_argument("--no-pull", action="store_true", help="use data/ as it is")
    p.add_argument("--require-mlflow", action="store_true", help="a run missing from MLflow is a difference")
    p = sub.add_parser("gc", help="garbage-collect, keeping every tag, branch and the workspace")
    p.add_argument("--cloud", action="store_true", help="also remove unused objects from the remote")
    p.add_argument("--no-fetch-tags", action="store_true", help="do not fetch tags from origin first")
    sub.add_parser("check", help="re-hash the cache; check every tagged version is complete on a local remote")
    sub.add_parser("pull", help="configure the remote and `dvc pull` data")
    sub.add_parser("push", help="configure the remote and `dvc push` data")
    args = parser.parse_args(argv)
    tracking_uri = args.tracking_uri or settings.default_tracking_uri()
    try:
        root = _repo_root(args.repo)
        if args.cmd == "remote":
            print(configure_remote(root, args.url or args.remote))
        elif args.cmd == "release":
            release(root, args.tag, tracking_uri=tracking_uri, benchmark=_benchmark(root), remote=args.remote, allow_dirty=args.allow_dirty)
        elif args.cmd == "reproduce":
            rep = reproduce(root, args.tag, tracking_uri=tracking_uri, remote=args.remote, pull=not args.no_pull, require_mlflow=args.require_mlflow)
            if not rep.identical:
                print(f"version {rep.tag} NOT reproduced: {len(rep.differences)} difference(s)", file=sys.stderr)
                for d in rep.differences:
                    print(f"  DIFFERS {d}", file=sys.stderr)
                return 1
            print(f"version {rep.tag} (data {rep.data_version}) reproduced: {len(rep.lines)} model x task, every metric bit-identical")
        elif args.cmd == "gc":
            gc(root, cloud=args.cloud, remote=args.remote, fetch_tags=not args.no_fetch_tags)
        elif args.cmd == "check":
            url = configure_remote(root, args.remote)
            n, bad = rehash_objects(root / ".dvc" / "cache")
            problems = list(bad)
            remote_dir = local_remote_path(root, url)
            if remote_dir:
                m, rbad = rehash_objects(remote_dir)
                problems += rbad + missing_on_remote(root, remote_dir, tagged_versions(root))
                print(f"{m} remote objects re-hashed")
            temp = leftover_temp_files(root / ".dvc" / "cache")
            print(f"{n} cache objects re-hashed; {len(problems)} problem(s); {len(temp)} leftover temporary file(s) (gc removes them)")
            for p in problems:
                print(f"  {p}", file=sys.stderr)
            return 1 if problems else 0
        elif args.cmd == "pull":
            configure_remote(root, args.remote)
            print(dvc(root, "pull", "-r", REMOTE, "data.dvc").stdout.strip())
        elif args.cmd == "push":
            configure_remote(root, args.remote)
            push(root)
    except VersioningError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except MedbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
