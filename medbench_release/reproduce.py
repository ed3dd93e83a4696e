"""Reproduce a benchmark version in a checkout at its tag: pull, re-search, re-score, compare bit for bit.

Reproduce pulls the data, re-searches each stored index with the stored query vectors (nothing
is re-encoded), re-scores each stored run and compares every metric with MLflow, the stored
``metrics.json`` and the release record.
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medbench_core.errors import IntegrityError, MedbenchError
from medbench_core.layout import STAGES, Layout
from medbench_core.storage import verify_manifest
from medbench_release.release import artifact_dirs
from medbench_release.remote import configure_remote
from medbench_release.vcs import (
    DATA,
    REMOTE,
    VERSIONS,
    Log,
    PullError,
    VersioningError,
    check_tag,
    data_version,
    dvc,
    git,
    repo_root,
    tag_commit,
    version_record,
)


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
    task_dir = Layout(data_dir).task_dir(entry["task"])
    dirs = artifact_dirs(data_dir, entry)
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
    root: str | Path,
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
    root = repo_root(root)
    tag = tag or _tag_at_head(root)
    check_tag(tag)
    commit = tag_commit(root, tag)
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
