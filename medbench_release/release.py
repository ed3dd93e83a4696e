"""Release ``data/`` as a benchmark version: verify, `dvc add` + push, commit data.dvc and the record, tag, tag the MLflow runs.

A benchmark version is a git tag whose commit holds ``data.dvc`` (the DVC hash of the whole
``data/`` tree: curated tasks, embeddings, indices, runs, metrics) and ``versions/<tag>.json``
(every model x task of the version: its MLflow run id, its artifact keys and the metrics logged).
Release records the data hash in every MLflow run of the version (tags ``medbench.data_version``,
``medbench.release``, ``medbench.releases``). Nothing is encoded or scored.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from medbench_core.errors import IntegrityError
from medbench_core.layout import STAGES, Layout
from medbench_core.run_record import release_entry
from medbench_core.storage import MANIFEST, verify_manifest, write_json_atomic
from medbench_release.remote import configure_remote, push
from medbench_release.vcs import (
    DATA,
    VERSIONS,
    Log,
    VersioningError,
    check_tag,
    data_version,
    dvc,
    git,
    git_commit_args,
    repo_root,
    tag_commit,
    version_record,
)


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


def artifact_dirs(data_dir: Path, entry: dict[str, Any]) -> dict[str, Path]:
    """The artifact folder of each stage of a release record's entry."""
    layout = Layout(data_dir)
    return {stage: layout.artifact_dir(entry["model"], entry["task"], stage, entry["keys"][stage]) for stage in STAGES}


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
            entry = release_entry(r.info.run_id, params, tags, r.data.metrics)
        except KeyError as exc:
            skipped.append(f"MLflow run {r.info.run_id}: no {exc} tag/param (not logged by task_metrics)")
            continue
        missing = [s for s, d in artifact_dirs(data_dir, entry).items() if not (d / MANIFEST).exists()]
        if missing:
            skipped.append(f"MLflow run {r.info.run_id} ({entry['model']} x {entry['task']}): {', '.join(missing)} artifact(s) not in {data_dir}")
            continue
        if not (Layout(data_dir).task_dir(entry["task"]) / MANIFEST).exists():
            skipped.append(f"MLflow run {r.info.run_id} ({entry['model']} x {entry['task']}): curated task not in {data_dir}")
            continue
        entries.setdefault(entry["keys"]["metrics"], entry)
    return sorted(entries.values(), key=lambda e: (e["model"], e["task"], e["keys"]["metrics"])), skipped


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
    root: str | Path,
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
    root = repo_root(root)
    check_tag(tag)
    data_dir = root / DATA
    if not data_dir.is_dir():
        raise VersioningError(f"{data_dir}: no data; run `medbench run` first")
    url = configure_remote(root, remote)

    if tag_commit(root, tag):
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
    ident = git_commit_args(root)
    git(root, *ident, "commit", "-q", "-m", f"Benchmark version {tag}: data {version}", "--", *paths)
    git(root, *ident, "tag", "-a", tag, "-m", f"medbench benchmark version {tag}\n\ndata.dvc md5: {version}\nmodel x task runs: {len(runs)}")
    _tag_mlflow_runs(tracking_uri, [e["mlflow_run_id"] for e in runs], version, tag)
    log(f"[release] {tag}: data {version} pushed, committed and tagged; {len(runs)} MLflow runs tagged medbench.data_version")
    return record
