"""Reproduce a benchmark version: pull it and re-score it, or rebuild it from the sources when the remote cannot give it.

:func:`reproduce_version` decides. When the remote holds the version (its directory object), the
data is pulled into a staging folder and swapped into ``data/`` only when whole
(:func:`medbench_release.workspace.pull_data`; the remote has ``verify = true``: a file intact
nowhere fails the pull, ``data/`` is left as it was and nothing is scored), each stored index is re-searched with the stored query vectors (nothing
is re-encoded), each stored run re-scored, and every metric compared with MLflow, the stored
``metrics.json`` and the version file, whose sha256 of every artifact file is checked too
(:func:`reproduce`). When the remote is missing, unreachable or does not hold the version, one
line says so and every artifact is rebuilt from the sources and compared with the version file
(:mod:`medbench_release.rebuild`).
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
from medbench_core.layout import Layout
from medbench_core.storage import verify_manifest
from medbench_release.record import check_version
from medbench_release.release import artifact_dirs
from medbench_release.remote import configure_remote, public_url, version_on_remote
from medbench_release.tolerance import compare_rankings, partition_vectors, ranked_lists, score_tolerance
from medbench_release.vcs import (
    DATA,
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
from medbench_release.workspace import pull_data


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

    from medbench_core.retrieval.model_registry import model_spec
    from medbench_core.retrieval.stages import retrieve

    if "embeddings" not in dirs:  # before a spec is made: a derived entry's record has no upstreams to make it from
        return None, "run built from upstream runs (re-scored, not re-searched)"
    kind = entry["model_kind"]
    spec = model_spec(
        name=entry["model"],
        kind=kind,
        path="" if entry["model_id"] in ("", kind) else entry["model_id"],
        settings=entry["model_settings"],
    )
    k = json.loads((dirs["run"] / "info.json").read_text())["k"]
    label = f"{entry['model']} x {entry['task']}"
    if not spec.plugin.loads_weights:  # its queries need no model (BM25): searched again on its own stored index
        run, _ = retrieve(spec, task, dirs["embeddings"], dirs["index"], out, k=k)
        index_type = json.loads((dirs["index"] / "info.json").read_text()).get("type", kind)
        return run, "bm25s index" if index_type == "bm25s-sparse" else f"{index_type} index"
    q_file = dirs["run"] / "query_embeddings.npy"
    if not (dirs["index"] / "index.faiss").exists() or not q_file.exists():
        return None, "no stored index or query vectors to re-search"
    queries = np.load(q_file, allow_pickle=False)
    run, _ = retrieve(spec, task, dirs["embeddings"], dirs["index"], out, k=k, encoder=_StoredQueries(queries, label))
    return run, "FAISS index with the stored query vectors"


def _scored_family(dirs: dict[str, Path]) -> str | None:
    """The retriever family the stored metrics were scored for (identical query/doc ids: medbench_core.evaluation.scoring.drops_identical_ids)."""
    stored = dirs.get("metrics")
    if stored is None or not (stored / "metrics.json").exists():
        return None
    return (json.loads((stored / "metrics.json").read_text()).get("identical_ids") or {}).get("family")


def reproduce_entry(data_dir: Path, entry: dict[str, Any], tag: str, mlflow_metrics: dict[str, float] | None) -> tuple[str, list[str]]:
    """Re-search and re-score one model x task of a version; returns (summary line, differences)."""
    import polars as pl

    from medbench_core.evaluation.scoring import flat_metrics, score
    from medbench_core.taskdata.task import load_task

    label = f"{entry['model']} x {entry['task']}"
    task_dir = Layout(data_dir).task_dir(entry["task"])
    dirs = artifact_dirs(data_dir, entry)
    try:
        verify_manifest(task_dir)
        for d in dirs.values():
            verify_manifest(d)
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
            result = score(task, stored_run, score_dir, family=_scored_family(dirs))
        except MedbenchError as exc:
            return f"{label}: failed", [f"{label}: {exc}"]
        if again is not None and not again.equals(stored_run):
            # The same stored vectors, searched on other hardware or threads: float sums may differ in their last bits.
            queries, docs = partition_vectors(dirs["run"], dirs.get("embeddings"), dirs.get("index"))
            tol = score_tolerance(queries, docs, 0.0)
            if tol is None:  # no vectors behind the run (BM25): exact work
                diffs.append(f"{label}: re-searching the {how} gives another ranking: {_first_run_difference(stored_run, again)}")
            else:
                k = json.loads((dirs["run"] / "info.json").read_text()).get("k", 100)
                cmp = compare_rankings(ranked_lists(stored_run), ranked_lists(again), tol.tau, k=k)
                if cmp.within:
                    how += f" (scores within {tol.describe()}: largest difference {cmp.worst_score_diff:.3g}, {cmp.swapped_pairs} tied pair(s) swapped)"
                else:
                    diffs.append(f"{label}: re-searching the {how} gives another ranking beyond the ties of {tol.describe()}: {cmp.problems[0]}")
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


def find_record(root: Path, tag: str) -> tuple[dict[str, Any], str]:
    """The version file of ``tag`` and where it was found: this checkout's ``versions/``, the tag, or the commit that added it.

    Git tags need not travel with a clone: the file alone names the version.
    """
    path = root / VERSIONS / f"{tag}.json"
    if path.exists():
        return _well_formed(json.loads(path.read_text()), f"{VERSIONS}/{tag}.json")
    if tag_commit(root, tag):
        return _well_formed(version_record(root, tag), f"tag {tag}")
    commit = git(root, "log", "--all", "-1", "--format=%H", "--", f"{VERSIONS}/{tag}.json", check=False).strip()
    text = git(root, "show", f"{commit}:{VERSIONS}/{tag}.json", check=False) if commit else ""
    if text:
        return _well_formed(json.loads(text), f"commit {commit[:12]}")
    raise VersioningError(
        f"no benchmark version {tag!r} here: no {VERSIONS}/{tag}.json, no tag {tag}, no commit that added it "
        f"(known: {', '.join(known_versions(root)) or 'none'})"
    )


def _well_formed(record: dict[str, Any], where: str) -> tuple[dict[str, Any], str]:
    """``(record, where)``; a version file of format 2 or later that :func:`check_version` finds fault with is refused
    before anything is pulled (one of format 1 lists no artifacts to check: it is pulled from its remote as it was)."""
    problems = check_version(record) if record.get("format", 1) >= 2 else []
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise VersioningError(f"{where}: not a well-formed version file: {'; '.join(problems[:3])}{more}; nothing was pulled or changed")
    return record, where


def known_versions(root: Path) -> list[str]:
    folder = root / VERSIONS
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def release_commit(root: Path, tag: str) -> str | None:
    """The commit that added ``versions/<tag>.json`` (the version's data.dvc is the one committed with it)."""
    if tag_commit(root, tag):
        return tag_commit(root, tag)
    out = git(root, "log", "--all", "--diff-filter=A", "-1", "--format=%H", "--", f"{VERSIONS}/{tag}.json", check=False).strip()
    return out or None


def _tag_at_head(root: Path) -> str:
    tags = [t for t in git(root, "tag", "--points-at", "HEAD").split() if t]
    released = [t for t in tags if _has_record(root, t)]
    if len(released) == 1:
        return released[0]
    if not released and (root / "data.dvc").exists():
        here = data_version(root)
        matching = [t for t in known_versions(root) if json.loads((root / VERSIONS / f"{t}.json").read_text()).get("data_version") == here]
        if len(matching) == 1:
            return matching[0]
    raise VersioningError(
        f"HEAD carries {len(released)} released version tags ({', '.join(released) or 'none'}); "
        f"name the version to reproduce (known: {', '.join(known_versions(root)) or 'none'})"
    )


def _has_record(root: Path, tag: str) -> bool:
    return subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{tag}:{VERSIONS}/{tag}.json"], capture_output=True).returncode == 0


def verify_against_record(data_dir: Path, record: dict[str, Any]) -> list[str]:
    """Files of the version's artifacts that are missing or whose sha256 is not the one the version file records."""
    from medbench_core.storage import sha256_file

    problems = []
    for a in record.get("artifacts", []):
        for name, f in a["files"].items():
            p = data_dir / a["path"] / name
            if not p.exists():
                problems.append(f"{a['path']}/{name}: missing (the version file lists it)")
            elif sha256_file(p) != f["sha256"]:
                problems.append(f"{a['path']}/{name}: sha256 differs from the version file's {f['sha256'][:12]}")
    return problems


def _check_checkout(root: Path, tag: str, record: dict[str, Any]) -> None:
    """The workspace's data.dvc must name the version's data (a pull checks out what data.dvc names)."""
    version = record["data_version"]
    if tag_commit(root, tag):
        at_tag = data_version(root, rev=tag)
        if at_tag != version:
            raise VersioningError(f"{tag}: data.dvc says {at_tag} but {VERSIONS}/{tag}.json says {version}", exit_code=1)
    here = data_version(root) if (root / "data.dvc").exists() else None
    if here != version:
        where = tag if tag_commit(root, tag) else (release_commit(root, tag) or tag)
        raise VersioningError(
            f"{root}/data.dvc names data {here or '(none)'}, not {tag}'s {version}; run `git checkout {where}` first "
            "(or rebuild from the sources: --from-sources)"
        )


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
    """Reproduce version ``tag`` from its data: pull, verify, re-search, re-score, compare.

    The workspace's data.dvc must name the version's data. Raises PullError when `dvc pull`
    fails (corrupted or missing objects on the remote): nothing is scored then. Every other
    difference is collected in the returned Reproduction.
    """
    root = repo_root(root)
    tag = tag or _tag_at_head(root)
    check_tag(tag)
    record, _ = find_record(root, tag)
    _check_checkout(root, tag, record)
    version = record["data_version"]
    if pull:
        url = configure_remote(root, remote)
        log(f"[reproduce] {tag}: pulling data {version} from {public_url(url)}")
        try:
            pulled = pull_data(root, log=log)
        except PullError as exc:
            raise PullError(f"{exc}\nNothing was scored. Fix the remote (re-push the version from a checkout that has it) and rerun.", kept=exc.kept) from exc
        log(f"[reproduce] {pulled.summary()}")
        status = dvc(root, "status", "--json", "data.dvc").stdout.strip()
        if status not in ("", "{}"):  # DVC must agree that data/ is the version
            raise PullError(
                f"after the pull, DVC says data/ differs from data.dvc: {status[:500]}; nothing was scored", kept=f"data/ as pulled ({pulled.files} files)"
            )
    out = Reproduction(tag, version)
    out.differences.extend(f"{tag}: {p}" for p in verify_against_record(root / DATA, record))
    metrics, problem = _mlflow_metrics(tracking_uri, [e["mlflow_run_id"] for e in record["runs"]])
    if problem:
        log(f"[reproduce] warning: {problem}")
    absent = [e for e in record["runs"] if e["mlflow_run_id"] not in metrics]
    if absent and not require_mlflow:
        which = f"{absent[0]['model']} x {absent[0]['task']}'s {absent[0]['mlflow_run_id']}" if len(absent) == 1 else f"{len(absent)} of {len(record['runs'])}"
        log(f"[reproduce] warning: MLflow run(s) not found at {tracking_uri} ({which}); comparing those with metrics.json and {VERSIONS}/{tag}.json only")
    for entry in record["runs"]:
        logged = metrics.get(entry["mlflow_run_id"])
        if logged is None and require_mlflow:
            out.differences.append(f"{entry['model']} x {entry['task']}: MLflow run {entry['mlflow_run_id']} not found at {tracking_uri}")
        line, diffs = reproduce_entry(root / DATA, entry, tag, logged)
        out.lines.append(line)
        out.differences.extend(diffs)
        log(f"[reproduce] {line}")
    return out


@dataclass
class Outcome:
    """What ``medbench reproduce`` did: ``pulled`` (or ``local`` with --no-pull) and re-scored, or ``rebuilt`` from sources."""

    path: str
    tag: str
    reproduction: Reproduction | None = None
    rebuild: Any = None  # medbench_release.rebuild.RebuildResult

    @property
    def reproduced(self) -> bool:
        return self.reproduction.identical if self.reproduction is not None else bool(self.rebuild and self.rebuild.reproduced)


def reproduce_version(
    root: str | Path,
    tag: str | None = None,
    *,
    tracking_uri: str | None,
    remote: str | None = None,
    mode: str = "auto",
    require_mlflow: bool = False,
    rebuild_options: dict[str, Any] | None = None,
    log: Log = print,
) -> Outcome:
    """Reproduce ``tag`` the way ``mode`` says: ``auto`` (pull when the remote holds the version, else rebuild),
    ``pull`` (never rebuild), ``local`` (the data/ already here), ``sources`` (always rebuild).

    ``rebuild_options`` are :func:`medbench_release.rebuild.rebuild`'s keyword arguments (work,
    shared, models_file, tasks_file, venv_root, code, report_path, tolerance).
    """
    root = repo_root(root)
    tag = tag or _tag_at_head(root)
    check_tag(tag)
    record, where = find_record(root, tag)
    if mode in ("pull", "local"):
        return Outcome(
            "pulled" if mode == "pull" else "local",
            tag,
            reproduce(root, tag, tracking_uri=tracking_uri, remote=remote, pull=mode == "pull", require_mlflow=require_mlflow, log=log),
        )
    if mode == "auto":
        try:
            url = configure_remote(root, remote)
            state, why = version_on_remote(root, url, record["data_version"])
        except VersioningError as exc:
            state, why = "unreachable", str(exc).splitlines()[0]
        if state == "present":
            return Outcome("pulled", tag, reproduce(root, tag, tracking_uri=tracking_uri, remote=remote, pull=True, require_mlflow=require_mlflow, log=log))
        log(f"[reproduce] {tag}: {why}; rebuilding every artifact of the version from the sources instead")
    elif mode != "sources":
        raise VersioningError(f"unknown reproduction mode {mode!r}")
    if record.get("format", 1) < 2:
        raise VersioningError(f"{where}: a version file of format {record.get('format', 1)} lists no artifacts; it can be reproduced only from its remote")
    from medbench_release.rebuild import rebuild

    return Outcome("rebuilt", tag, rebuild=rebuild(root, record, log=log, **(rebuild_options or {})))
