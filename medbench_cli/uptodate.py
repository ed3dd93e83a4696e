"""The warm path of ``medbench run``: nothing changed since the last complete run, said in one line.

A new process pays seconds to import Dagster and MLflow before a cached run can even start
(BENCHMARKS.md, "Warm run"). This module decides without importing either that a request is
already answered, and only answers yes when all of the following hold:

- the run's inputs (:func:`inputs`: tasks.yaml, models.yaml, the project's code and lock file,
  every model's weights revision, every expansion's published files or generator and prompts, the
  source files of each requested task) are those recorded on
  the last complete ``medbench run`` (tags of its leaderboard run in Dagster's run storage), and
  that run covered the requested models and tasks;
- nothing was materialised in Dagster after that run's leaderboard (from the UI, a sensor or
  the nightly schedule), and every requested partition's ``task_metrics`` was materialised with
  the metrics key the leaderboard lists;
- every curated task, its gates and every requested partition's artifacts verify against their
  manifests (the same check a cached stage makes), and MLflow holds one FINISHED run per metrics
  key and the leaderboard's run.

Anything else (another storage than Dagster's default SQLite, a tracking server, MEDBENCH_ONLINE,
``--force``, a hub dataset) is not decided here: the full run decides, as before.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime import settings

INPUTS_TAG = "medbench/inputs_key"
MODELS_TAG = "medbench/models"
SOURCES_TAG = "medbench/sources"  # {task: digest of its source files}, the tasks the run covered
# The project's own code: any edit takes the full run, which decides stage by stage what is stale.
CODE_FOLDERS = ("medbench_core", "assets", "runtime", "orchestration", "medbench_cli", "prompts")


class Undecided(Exception):
    """The warm path cannot tell; the full run decides."""


@dataclass(frozen=True)
class Answered:
    run_id: str
    partitions: int
    tasks: int
    leaderboard: Path


def _files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def source_digest(entry: Any, data_root: Path) -> str:
    """The digest of a task's source files the release record uses (:func:`medbench_release.record.source_digest`);
    a hub dataset (whose cached branch may move) or a missing source is undecided."""
    from medbench_release.record import source_digest as record_source_digest

    if not entry.path:
        raise Undecided(f"task {entry.name} reads a hub dataset")
    if not (Path(data_root) / entry.path).exists():
        raise Undecided(f"task {entry.name}: source {Path(data_root) / entry.path} not found")
    return record_source_digest(Path(data_root), {"path": entry.path})


def code_digest(root: Path) -> str:
    """sha256 over the names and bytes of the project's code folders, pyproject.toml, the lock file and dagster.yaml."""
    files = [p for d in CODE_FOLDERS for p in _files(root / d) if p.suffix in {".py", ".json", ".txt", ".yaml"}]
    files += [root / n for n in ("pyproject.toml", "requirements.lock", "dagster.yaml") if (root / n).is_file()]
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Inputs:
    """What a ``medbench run`` reads: ``key`` over the registry, the catalogue, the project's code
    and lock file and every model's version (weights, upstreams, expansions); ``sources``, each requested task's source
    files. Recorded as tags of a complete run's leaderboard run, compared before the next."""

    key: str
    sources: dict[str, str]

    def tags(self, models: list[str]) -> dict[str, str]:
        return {INPUTS_TAG: self.key, SOURCES_TAG: json.dumps(self.sources, sort_keys=True), MODELS_TAG: ",".join(models)}


def inputs(specs: list, catalog: Any, tasks: list[str]) -> Inputs:
    """The :class:`Inputs` of a run of every model in ``specs`` on ``tasks`` of ``catalog``."""
    from medbench_core.errors import MedbenchError
    from medbench_core.retrieval.expansion.spec import load_expansions
    from medbench_core.retrieval.model_versions import model_versions
    from medbench_core.provenance import artifact_key, file_hash

    try:  # the versions Dagster's model_spec observations record: weights, upstreams, expansions' files and generators
        versions = model_versions(specs, load_expansions(settings.MODELS_FILE), catalog.names)
    except MedbenchError as exc:
        raise Undecided(str(exc)) from exc
    key = artifact_key(
        kind="medbench-run",
        tasks_file=file_hash(settings.TASKS_FILE),
        models_file=file_hash(settings.MODELS_FILE),
        code=code_digest(settings.ROOT),
        models=versions,
        data=str(settings.DATA.resolve()),
    )
    return Inputs(key, {t: source_digest(catalog.task(t), settings.SHARED / "data") for t in tasks})


def _dagster_storage() -> Path:
    import os

    import yaml

    home = Path(os.environ["DAGSTER_HOME"])
    config = yaml.safe_load((home / "dagster.yaml").read_text()) if (home / "dagster.yaml").is_file() else None
    if {"storage", "run_storage", "event_log_storage"} & set(config or {}):
        raise Undecided("Dagster storage is not the default SQLite")
    storage = home / "history"  # Dagster's default SQLite layout: runs.db, and runs/index.db holding every asset event
    if not (storage / "runs.db").is_file() or not (storage / "runs" / "index.db").is_file():
        raise Undecided("no Dagster run recorded yet")
    return storage


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)


def _mlflow_db() -> Path:
    uri = settings.default_tracking_uri()
    if not uri.startswith("sqlite:///"):
        raise Undecided("MLflow tracking is not a local SQLite store")
    path = Path(uri[len("sqlite:///") :])
    if not path.is_file():
        raise Undecided("no MLflow store yet")
    return path


def recorded_run(storage: Path, inputs: Inputs, models: list[str]) -> str:
    """The latest successful leaderboard run recorded with ``inputs`` and covering the request; Undecided otherwise."""
    with _read_only(storage / "runs.db") as db:
        rows = db.execute(
            "SELECT r.run_id FROM runs r JOIN run_tags t ON t.run_id = r.run_id "
            "WHERE t.key = ? AND t.value = ? AND r.status = 'SUCCESS' ORDER BY r.id DESC LIMIT 1",
            (INPUTS_TAG, inputs.key),
        ).fetchall()
        if not rows:
            raise Undecided("inputs changed since the last complete run")
        run_id = rows[0][0]
        tags = dict(db.execute("SELECT key, value FROM run_tags WHERE run_id = ?", (run_id,)).fetchall())
    if not set(models) <= set(tags.get(MODELS_TAG, "").split(",")):
        raise Undecided("the last complete run did not cover every requested model")
    recorded = json.loads(tags.get(SOURCES_TAG) or "{}")
    for task, digest in inputs.sources.items():
        if task not in recorded:
            raise Undecided(f"the last complete run did not cover task {task}")
        if recorded[task] != digest:
            raise Undecided(f"task {task}: its source files changed since the last complete run")
    return run_id


def _first(node: Any, pick: Any) -> Any:
    """The first non-None ``pick(n)`` over the nodes of a decoded JSON document, depth first (Dagster's serialised events)."""
    found = pick(node)
    if found is not None:
        return found
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    return next((v for v in (_first(c, pick) for c in children) if v is not None), None)


def data_version(event: str) -> str | None:
    """The data version a serialised Dagster event records (its ``dagster/data_version`` tag)."""

    def pick(n: Any) -> str | None:
        return n["dagster/data_version"] if isinstance(n, dict) and isinstance(n.get("dagster/data_version"), str) else None

    return _first(json.loads(event), pick)


def metadata_text(event: str, name: str) -> str | None:
    """A text metadata entry of a serialised materialisation event (stored as ``{label, entry_data: {text}}``)."""

    def pick(n: Any) -> str | None:
        return n["entry_data"].get("text") if isinstance(n, dict) and n.get("label") == name and isinstance(n.get("entry_data"), dict) else None

    return _first(json.loads(event), pick)


def latest_events(storage: Path, run_id: str, assets: tuple[str, ...]) -> dict[str, dict[str | None, str]]:
    """Each asset's latest materialisation event per partition (Dagster's asset events, read from its
    index shard); Undecided when any asset was materialised after ``run_id``'s last materialisation."""
    with _read_only(storage / "runs" / "index.db") as db:
        last = db.execute("SELECT run_id FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION' ORDER BY id DESC LIMIT 1").fetchone()
        if last is None or last[0] != run_id:
            raise Undecided("assets were materialised after the last complete run")
        query = "SELECT partition, event FROM event_logs WHERE asset_key = ? AND dagster_event_type = 'ASSET_MATERIALIZATION' ORDER BY id"
        return {a: dict(db.execute(query, (json.dumps([a]),)).fetchall()) for a in assets}  # later rows overwrite earlier ones


def finished_mlflow_runs(db_path: Path, experiment: str) -> dict[str, str | None]:
    """Run id -> run key (tag ``medbench.run_key``, None without one) of every active FINISHED run in ``experiment``."""
    from medbench_core.evaluation.run_record import RUN_KEY_TAG

    with _read_only(db_path) as db:
        rows = db.execute(
            "SELECT r.run_uuid, t.value FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id "
            "LEFT JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = ? "
            "WHERE e.name = ? AND r.status = 'FINISHED' AND r.lifecycle_stage = 'active'",
            (RUN_KEY_TAG, experiment),
        ).fetchall()
    return dict(rows)


def check(specs: list, catalog: Any, models: list[str], tasks: list[str], given: Inputs) -> Answered:
    """Answered when every requested partition is already materialised and logged with the
    ``given`` inputs (:func:`inputs`) as recorded; Undecided (with why) otherwise.

    Dagster's and MLflow's tables are read with sqlite3, not through their APIs: importing either
    costs the seconds this path saves. Their schemas are the libraries' own, so anything that does
    not read as expected (a migrated schema, a locked or damaged file) leaves the decision to the
    full run instead of failing it.
    """
    try:
        return _check(specs, catalog, models, tasks, given)
    except (sqlite3.Error, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise Undecided(f"cannot read the recorded state ({type(exc).__name__}: {exc})") from exc


def _check(specs: list, catalog: Any, models: list[str], tasks: list[str], given: Inputs) -> Answered:
    from medbench_core.errors import MedbenchError
    from medbench_core.layout import Layout
    from medbench_core.storage import is_complete, read_manifest

    if settings.ONLINE:
        raise Undecided("online: hub revisions may have moved")
    storage, mlflow_db = _dagster_storage(), _mlflow_db()
    run_id = recorded_run(storage, given, models)
    layout = Layout(settings.DATA)
    board = layout.leaderboard_file("json")
    try:
        cells = json.loads(board.read_text())["cells"]
    except (OSError, ValueError, KeyError) as exc:
        raise Undecided(f"no readable leaderboard at {board}") from exc
    events = latest_events(storage, run_id, ("curated_task", "task_metrics", "leaderboard"))
    curated = {p: data_version(e) for p, e in events["curated_task"].items()}
    metrics = {p: data_version(e) for p, e in events["task_metrics"].items()}
    board_run = metadata_text(events["leaderboard"].get(None, "{}"), "mlflow_run_id")
    by_name = {s.name: s for s in specs}
    for task in tasks:
        folder = layout.task_dir(task)
        try:
            content = read_manifest(folder).get("content_hash", "")
        except MedbenchError as exc:
            raise Undecided(f"task {task}: {exc}") from exc
        if not is_complete(folder) or layout.gate_refusal(task, content) or curated.get(task) != content[:16]:
            raise Undecided(f"task {task} is not curated and gated as recorded")
    wanted: dict[str, tuple[str, str]] = {}
    for model in models:
        for task in tasks:
            version = metrics.get(f"{model}|{task}")
            if version is None:
                raise Undecided(f"{model} x {task} was never materialised")
            cell = cells.get(f"{model}/{task}")
            if cell is None:  # no metrics: n/a for this model, as recorded
                if not version.startswith("n/a-"):
                    raise Undecided(f"{model} x {task} has no result in the leaderboard")
                continue
            if cell.get("metrics_key") != version:
                raise Undecided(f"{model} x {task}: the leaderboard and Dagster disagree")
            spec = by_name[model]
            folders = {s: layout.artifact_dir(model, task, s, cell.get(f"{s}_key", "-")) for s in ("run", "metrics")}
            if not spec.derived:  # a derived model has no corpus artifacts of its own
                folders |= {s: layout.artifact_dir(model, task, s, cell.get(f"{s}_key", "-")) for s in ("embeddings", "index")}
            expansion = spec.plugin.expansion_name(spec)
            if expansion:
                folders["expansion"] = layout.expansion_dir(expansion, task, cell.get("expansion_key", "-"))
            for stage, folder in folders.items():
                if not is_complete(folder):
                    raise Undecided(f"{model} x {task}: its {stage} artifact is missing or fails its manifest")
            wanted[cell["metrics_key"]] = (model, task)
    benchmark = catalog.benchmark
    unlogged = set(wanted) - set(finished_mlflow_runs(mlflow_db, benchmark).values())
    if unlogged:
        model, task = wanted[min(unlogged)]
        raise Undecided(f"{model} x {task} has no FINISHED MLflow run")
    if board_run not in finished_mlflow_runs(mlflow_db, f"{benchmark}-leaderboard"):
        raise Undecided("the leaderboard's MLflow run is missing")
    return Answered(run_id, len(models) * len(tasks), len(tasks), layout.leaderboard_file("md"))

