"""Release ``data/`` as a benchmark version: verify, `dvc add` + push, commit data.dvc and the record, tag, tag the MLflow runs.

A benchmark version is ``data.dvc`` (the DVC hash of the whole ``data/`` tree: curated tasks,
embeddings, indices, runs, metrics) plus ``versions/<tag>.json``, committed together and tagged.
The version file is enough to find and rebuild the version without the tag
(:mod:`medbench_release.record`): the commit of the code, the lock hash, the registry and
catalogue, every model x task run with its MLflow run id and metrics, and every artifact with
its path, key, files and upstream provenance. Only runs whose keys are current for this commit's
code, registry and curated tasks enter a version. Release records the data hash in every MLflow
run of the version (tags ``medbench.data_version``, ``medbench.release``, ``medbench.releases``).
Nothing is encoded or scored.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import shutil
from pathlib import Path
from typing import Any

from medbench_core.errors import IntegrityError, MedbenchError
from medbench_core.evaluation.run_record import release_entry
from medbench_core.layout import STAGES, Layout
from medbench_core.storage import MANIFEST, read_manifest, verify_manifest, write_text_atomic
from medbench_release.record import (
    FORMAT,
    artifact_record,
    catalogue_entries,
    dumps_version,
    model_upstream,
    registry_entries,
    task_upstream,
)
from medbench_release.remote import configure_remote, public_url, push, tracked_credentials
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
    """The artifact folder of each stage of a release record's entry that has one (a derived model has no embeddings or index)."""
    layout = Layout(data_dir)
    stages = entry.get("stages") or [s for s in STAGES if entry["keys"].get(s)]
    return {stage: layout.artifact_dir(entry["model"], entry["task"], stage, entry["keys"][stage]) for stage in stages}


def _derived(kind: str) -> bool:
    from medbench_core.retrieval.kinds import get_kind
    from medbench_core.retrieval.kinds.derived_base import RunBuilder

    return isinstance(get_kind(kind), RunBuilder)


def collect_runs(tracking_uri: str, benchmark: str, data_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The FINISHED MLflow runs of ``benchmark`` whose artifacts are all in ``data_dir``.

    Returns ``(entries, skipped)``: one entry per run (model, task, run id, stage keys, the stages
    with an artifact, model kind/path/revision/settings, k, metrics as logged), and a note for
    each run left out. A derived model (fusion, reranker, expanded) needs run and metrics only.
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
    layout = Layout(data_dir)
    for r in runs:
        tags, params = r.data.tags, dict(r.data.params)
        if _derived(params.get("model_kind", "")):
            params = {"embeddings_key": "", "index_key": "", **params}
        try:
            entry = release_entry(r.info.run_id, params, tags, r.data.metrics)
        except KeyError as exc:
            skipped.append(f"MLflow run {r.info.run_id}: no {exc} tag/param (not logged by task_metrics)")
            continue
        entry["model_revision"] = params.get("model_revision", "")
        entry["k"] = int(params.get("k") or 100)
        label = f"MLflow run {r.info.run_id} ({entry['model']} x {entry['task']})"
        have = {s: (layout.artifact_dir(entry["model"], entry["task"], s, k) / MANIFEST).exists() for s, k in entry["keys"].items() if k}
        required = ("run", "metrics") if _derived(entry["model_kind"]) else STAGES
        missing = [s for s in required if not have.get(s)]
        if missing:
            skipped.append(f"{label}: {', '.join(missing)} artifact(s) not in {data_dir}")
            continue
        if not (layout.task_dir(entry["task"]) / MANIFEST).exists():
            skipped.append(f"{label}: curated task not in {data_dir}")
            continue
        entry["stages"] = [s for s in STAGES if have.get(s)]
        entries.setdefault(entry["keys"]["metrics"], entry)
    return sorted(entries.values(), key=lambda e: (e["model"], e["task"], e["keys"]["metrics"])), skipped


def current_runs(entries: list[dict[str, Any]], data_dir: Path, models_file: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The entries whose stage keys are the ones this code, the registry and the curated tasks give now.

    A run made with other code, other settings or an older curated task is left out (it could
    not be rebuilt from this commit); so is a model no longer in the registry. Returns
    ``(current, notes)``.
    """
    from medbench_core.retrieval.derived import registry_partition_keys
    from medbench_core.retrieval.model_registry import load_registry

    specs = load_registry(models_file)
    names = {s.name for s in specs}
    layout = Layout(data_dir)
    current, notes = [], []
    tasks: dict[str, Any] = {}
    for e in entries:
        label = f"{e['model']} x {e['task']} (MLflow run {e['mlflow_run_id'][:12]})"
        if e["model"] not in names:
            notes.append(f"{label}: model not in {models_file.name}")
            continue
        if e["task"] not in tasks:
            tasks[e["task"]] = layout.load_task(e["task"])
        try:
            want = registry_partition_keys(specs, tasks[e["task"]], k=e.get("k", 100), names=[e["model"]])[e["model"]]
        except MedbenchError as exc:
            notes.append(f"{label}: its keys cannot be computed ({exc})")
            continue
        stale = [s for s in e["stages"] if want.get(s) != e["keys"][s]]
        if stale:
            notes.append(f"{label}: stale for this code, registry or curated task ({', '.join(stale)} key(s) differ)")
            continue
        current.append(e)
    return current, notes


def refuse_stale_tasks(data_dir: Path, tasks: list[str], tasks_file: Path, shared_data: Path) -> None:
    """Refuse (one line) a version whose curated task is not what its sources and tasks.yaml entry give now: the version
    would record sources its task was not built from (issue 44). Names the task, the changed files and what to run."""
    from medbench_core.taskdata.catalog import changed_inputs, changed_source_files, load_catalog

    catalog = load_catalog(tasks_file)
    layout = Layout(data_dir)
    for task in tasks:
        if task not in catalog.names:
            continue  # collect_runs and current_runs say why such a run is left out
        entry = catalog.task(task)
        recorded = read_manifest(layout.task_dir(task)).get("inputs")
        why = changed_inputs(recorded, entry, shared_data)
        if not why:
            continue
        files = changed_source_files(recorded, entry, shared_data)
        named = f" ({', '.join(files[:5])}{', ...' if len(files) > 5 else ''})" if files else ""
        raise VersioningError(
            f"task {task}: {why}{named}, and {data_dir.name}/tasks/{task} still holds the task curated before; a version records the "
            f"sources its tasks were built from: run `medbench run --tasks {task}` (curates it again and re-scores it), then release"
        )


def version_artifacts(data_dir: Path, runs: list[dict[str, Any]], models_text: str, tasks_text: str, shared_data: Path) -> list[dict[str, Any]]:
    """Every artifact of the version in stage order: curated tasks, then each stage's artifacts (see :mod:`.record`)."""
    from medbench_core.provenance import stage_version

    layout = Layout(data_dir)
    models, catalogue = registry_entries(models_text), catalogue_entries(tasks_text)
    order = list(catalogue)
    tasks = sorted({e["task"] for e in runs}, key=lambda t: (order.index(t) if t in order else len(order), t))
    out = []
    for t in tasks:
        folder = layout.task_dir(t)
        up = task_upstream(folder, catalogue.get(t), shared_data, stage_version("curated_task"))
        out.append(artifact_record(data_dir, folder, "curated_task", model=None, task=t, key=read_manifest(folder)["content_hash"], upstream=up))
    model_order = list(models)
    ordered = sorted(runs, key=lambda e: (model_order.index(e["model"]) if e["model"] in model_order else len(model_order), tasks.index(e["task"])))
    for stage in STAGES:
        for e in ordered:
            if stage in e["stages"]:
                folder = layout.artifact_dir(e["model"], e["task"], stage, e["keys"][stage])
                up = model_upstream(folder, stage, e["keys"], models.get(e["model"]))
                out.append(artifact_record(data_dir, folder, stage, model=e["model"], task=e["task"], key=e["keys"][stage], upstream=up))
    return out


def unreferenced(data_dir: Path, artifacts: list[dict[str, Any]]) -> list[Path]:
    """Curated tasks and model x task artifact folders in ``data_dir`` that the version does not use."""
    used = {data_dir / a["path"] for a in artifacts}
    layout = Layout(data_dir)
    found = [p for p in layout.tasks_root().iterdir() if p.is_dir() and not p.name.startswith(("_", "."))] if layout.tasks_root().is_dir() else []
    arts = data_dir / "artifacts"
    found += [p for p in arts.glob("*/*/*/*") if p.is_dir() and not p.name.startswith(".")] if arts.is_dir() else []
    return sorted(p for p in found if p not in used)


def prune(data_dir: Path, folders: list[Path], dest: Path, log: Log = print) -> None:
    """Move ``folders`` out of ``data_dir`` to the same relative paths under ``dest`` (nothing is deleted)."""
    for p in folders:
        target = dest / p.relative_to(data_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(p), str(target))
    for d in sorted((data_dir / "artifacts").glob("**/"), key=lambda q: -len(q.parts)) if (data_dir / "artifacts").is_dir() else []:
        if d != data_dir / "artifacts" and not any(d.iterdir()):
            d.rmdir()
    log(f"[release] {len(folders)} folder(s) no run of the version uses moved to {dest}")


def _tag_mlflow_runs(tracking_uri: str, run_ids: list[str], version: str, tag: str) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    for run_id in run_ids:
        run = client.get_run(run_id)
        releases = {t for t in run.data.tags.get("medbench.releases", "").split(",") if t} | {tag}
        client.set_tag(run_id, "medbench.data_version", version)
        client.set_tag(run_id, "medbench.release", tag)
        client.set_tag(run_id, "medbench.releases", ",".join(sorted(releases)))


def _text_record(path: Path) -> dict[str, str]:
    text = path.read_text()
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "text": text}


def release(
    root: str | Path,
    tag: str,
    *,
    tracking_uri: str,
    benchmark: str,
    models_file: str | Path | None = None,
    tasks_file: str | Path | None = None,
    shared_data: str | Path | None = None,
    remote: str | None = None,
    allow_dirty: bool = False,
    prune_to: str | Path | None = None,
    log: Log = print,
) -> dict[str, Any]:
    """Release ``data/`` as benchmark version ``tag``; returns the record written to versions/<tag>.json.

    Refuses a tracked DVC config holding a credential. Verifies every artifact's manifest, keeps
    the runs current for this commit (:func:`current_runs`), describes every artifact
    (:func:`version_artifacts`; ``shared_data`` is the source folder the tasks were read from),
    with ``prune_to`` moves the folders no run uses out of ``data/`` first, then `dvc add data`,
    pushes to the remote, commits data.dvc and the record, creates an annotated tag, and tags
    every MLflow run of the version with the data hash. Nothing is encoded or scored. Re-running
    after a failure resumes: a tag that already names the same data is pushed and tagged again,
    a tag naming other data is refused.
    """
    from medbench_core.provenance import code_versions, environment_fingerprint, file_hash
    from medbench_core.retrieval.kinds import scoring_packages

    root = repo_root(root)
    check_tag(tag)
    data_dir = root / DATA
    models_file = Path(models_file or root / "models.yaml")
    tasks_file = Path(tasks_file or root / "tasks.yaml")
    shared_data = Path(shared_data or root.parent / "shared" / "data")
    secrets = tracked_credentials(root)
    if secrets:
        raise VersioningError(
            "a credential is in a tracked file (" + "; ".join(secrets) + "): move it to .dvc/config.local "
            "(`python -m dvc remote modify --local medbench OPTION VALUE`) or the environment, then release"
        )
    if not data_dir.is_dir():
        raise VersioningError(f"{data_dir}: no data; run `medbench run` first")
    url = configure_remote(root, remote)

    if tag_commit(root, tag):
        record = version_record(root, tag)
        if (root / "data.dvc").exists() and data_version(root) == record["data_version"]:
            log(f"[release] tag {tag} exists for data {record['data_version']}: pushing and tagging the MLflow runs again")
            push(root, log, label=f"release {tag}")
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
    runs, stale = current_runs(runs, data_dir, models_file) if runs else (runs, [])
    refuse_stale_tasks(data_dir, sorted({e["task"] for e in runs}), tasks_file, shared_data)
    for note in skipped + stale:
        log(f"[release] left out: {note}")
    if not runs:
        raise VersioningError(f"nothing to release: no FINISHED MLflow run of {benchmark!r} at {tracking_uri} is current and has its artifacts in {data_dir}")
    models_text, tasks_text = models_file.read_text(), tasks_file.read_text()
    artifacts = version_artifacts(data_dir, runs, models_text, tasks_text, shared_data)
    extra = unreferenced(data_dir, artifacts)
    if extra and prune_to:
        prune(data_dir, extra, Path(prune_to), log)
    elif extra:
        log(
            f"[release] note: {len(extra)} folder(s) in data/ that no run of the version uses are part of it "
            f"(e.g. {extra[0].relative_to(data_dir)}); --prune moves them out first"
        )
    log(f"[release] {n} artifact folders verified; {len(runs)} model x task runs, {len(artifacts)} artifacts; remote {public_url(url)}")

    dvc(root, "add", "-q", DATA)
    push(root, log, label=f"release {tag}")  # every file of the version is on the remote, and in its index, before the tag exists
    version = data_version(root)
    record = {
        "format": FORMAT,
        "tag": tag,
        "benchmark": benchmark,
        "data_version": version,
        "data_dvc": (root / "data.dvc").read_text(),
        "code_commit": git(root, "rev-parse", "HEAD").strip(),
        "lock_hash": file_hash(root / "requirements.lock"),
        "code_versions": code_versions(),
        "registry": {"models.yaml": _text_record(models_file), "tasks.yaml": _text_record(tasks_file)},
        "remote": public_url(url),
        "environment": environment_fingerprint(scoring_packages()),
        "released_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "artifacts": artifacts,
        "runs": runs,
    }
    rel = f"{VERSIONS}/{tag}.json"
    write_text_atomic(root / rel, dumps_version(record))
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
