"""The warm path of ``medbench run``: nothing changed since the last complete run, said in one line.

A new process pays seconds to import Dagster before a cached run can even start (BENCHMARKS.md,
"Warm run"). This module decides without importing Dagster that a request is already answered,
from medbench's own record of the last complete run (:mod:`runtime.ledger`), and only answers yes
when all of the following hold:

- the run's inputs (:func:`inputs`: tasks.yaml, models.yaml, the project's code and lock file,
  every model's weights revision, every expansion's published files or generator and prompts, the
  source files of each requested task) are those recorded, and that run covered the requested
  models and tasks;
- every curated task (at the recorded content hash), its gates and every requested partition's
  artifacts at the keys the saved leaderboard lists verify against their manifests (the same
  check a cached stage makes; :mod:`medbench_core.status`), and the saved leaderboard is the one
  that run wrote;
- MLflow (its public client) holds a FINISHED run for every partition's metrics key and the
  leaderboard's run; or the store is the very file in which the run's end found them so (its
  fingerprint, :func:`runtime.ledger.store_fingerprint`), and MLflow is not imported at all. Before
  any of this, ``medbench run`` has had SQLite check the store (:mod:`runtime.store_integrity`): a
  damaged store is refused, naming it, rather than answered from (issue 29.4).

What an answer had to verify afresh (a copied or restored state: every file's inode moved, the store's too) is kept in
the ledger (:func:`keep`): the folders' new seal, and the store's fingerprint when MLflow was asked about every run
the ledger vouches for. Without it, every later run with nothing changed hashed those files and imported MLflow again
(issue 51: 5.3 s of CPU where 0.4-0.7 s do).

Anything else (a tracking server, MEDBENCH_ONLINE, ``--force``, a hub dataset) is not decided
here: the full run decides, as before.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime import settings

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
    # What the answer verified beyond the ledger's record, for :func:`keep`: folders whose seal did not hold, and
    # the MLflow store's fingerprint when every run the ledger vouches for was found FINISHED in it.
    unsealed: tuple[Path, ...] = ()
    store: dict[str, int] | None = None


def _files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def source_digest(entry: Any, data_root: Path) -> str:
    """The digest of a task's source files (:func:`medbench_core.taskdata.catalog.source_files_digest`, what releases record);
    a hub dataset (whose cached branch may move) or a missing source is undecided."""
    from medbench_core.taskdata.catalog import source_files_digest

    if not entry.path:
        raise Undecided(f"task {entry.name} reads a hub dataset")
    if not (Path(data_root) / entry.path).exists():
        raise Undecided(f"task {entry.name}: source {Path(data_root) / entry.path} not found")
    return noted_source_digest(Path(data_root) / entry.path, lambda: source_files_digest(Path(data_root) / entry.path))


def noted_source_digest(source: Path, digest: Any) -> str:
    """``digest()`` of the task's source files, reading only those whose stat changed since they were
    last hashed (the notes kept with the state, runtime/verified.py); the notes of what it read are kept."""
    from runtime import verified

    folder, names = (source, [str(p.relative_to(source)) for p in _files(source)]) if source.is_dir() else (source.parent, [source.name])
    verified.recall(folder)
    out = digest()
    verified.remember(folder, names)
    return out


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
    files. Recorded with a complete run (:mod:`runtime.ledger`), compared before the next."""

    key: str
    sources: dict[str, str]


def inputs(specs: list, catalog: Any, tasks: list[str]) -> Inputs:
    """The :class:`Inputs` of a run of every model in ``specs`` on ``tasks`` of ``catalog``."""
    from medbench_core.errors import MedbenchError
    from medbench_core.evaluation.judging.spec import load_judgements
    from medbench_core.evaluation.judging.stage import judgement_fingerprint
    from medbench_core.provenance import artifact_key, file_hash
    from medbench_core.retrieval.expansion.spec import load_expansions
    from medbench_core.retrieval.model_versions import model_versions

    try:  # the versions Dagster's model_spec observations record: weights, upstreams, expansions' files and generators
        versions = model_versions(specs, load_expansions(settings.MODELS_FILE), catalog.names)
        judged = judgement_fingerprint(load_judgements(settings.MODELS_FILE), tasks)  # judgement files and judges (issue 33)
    except MedbenchError as exc:
        raise Undecided(str(exc)) from exc
    key = artifact_key(
        kind="medbench-run",
        tasks_file=file_hash(settings.TASKS_FILE),
        models_file=file_hash(settings.MODELS_FILE),
        code=code_digest(settings.ROOT),
        models=versions,
        data=str(settings.DATA.resolve()),
        **({"judgements": judged} if judged else {}),
        **({"training_manifests": manifests} if (manifests := training_manifests(specs)) else {}),
    )
    return Inputs(key, {t: source_digest(catalog.task(t), settings.SHARED / "data") for t in tasks})


def training_manifests(specs: list) -> dict[str, str]:
    """The training manifests models.yaml declares (docs/contamination.md), each by its bytes: an edited manifest
    is new input for the contamination audits, though models.yaml is unchanged."""
    from medbench_core.evaluation.contamination.declared import manifest_sources
    from medbench_core.provenance import file_hash

    return {f"{kind}:{path}": file_hash(path) for kind, path in manifest_sources(specs)}


def _mlflow_client() -> Any:
    uri = settings.default_tracking_uri()
    if not uri.startswith("sqlite:///"):
        raise Undecided("MLflow tracking is not a local SQLite store")
    if not Path(uri[len("sqlite:///") :]).is_file():
        raise Undecided("no MLflow store yet")
    from mlflow.tracking import MlflowClient  # the public client: no SQL on MLflow's tables

    return MlflowClient(tracking_uri=uri)


def finished_runs(client: Any, experiment: str, run_keys: set[str]) -> set[str]:
    """The run keys (tag ``medbench.run_key``) of ``run_keys`` that have an active FINISHED run in ``experiment``."""
    from mlflow.entities import ViewType

    from medbench_core.evaluation.run_record import RUN_KEY_TAG

    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return set()
    found: set[str] = set()
    token = None
    while True:
        page = client.search_runs(
            [exp.experiment_id], filter_string="attributes.status = 'FINISHED'", run_view_type=ViewType.ACTIVE_ONLY, max_results=1000, page_token=token
        )
        found |= {r.data.tags.get(RUN_KEY_TAG) for r in page} & run_keys
        token = page.token
        if not token:
            return found


def mlflow_state(experiment: str, run_keys: set[str], board_run_id: str) -> tuple[set[str], bool]:
    """``(run keys without an active FINISHED run in experiment, whether the leaderboard's run is active and FINISHED)``,
    asked of MLflow's public client; Undecided when the store cannot be read as an MLflow store."""
    try:
        client = _mlflow_client()
        unlogged = run_keys - finished_runs(client, experiment, run_keys)
        board = client.get_run(board_run_id).info if board_run_id else None
    except Undecided:
        raise
    except Exception as exc:  # MlflowException and the store's own errors: not readable as expected
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise Undecided(f"cannot read the MLflow store ({type(exc).__name__}: {first[:200]})") from exc
    return unlogged, board is not None and board.status == "FINISHED" and board.lifecycle_stage == "active"


def check(specs: list, catalog: Any, models: list[str], tasks: list[str], given: Inputs) -> Answered:
    """Answered when every requested partition is already materialised and logged with the
    ``given`` inputs (:func:`inputs`) as the last complete run recorded; Undecided (with why) otherwise.

    A record, leaderboard or store that does not read as expected leaves the decision to the full
    run instead of failing it.
    """
    try:
        return _check(specs, catalog, models, tasks, given)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise Undecided(f"cannot read the recorded state ({type(exc).__name__}: {exc})") from exc


def _check(specs: list, catalog: Any, models: list[str], tasks: list[str], given: Inputs) -> Answered:
    from medbench_core.errors import MedbenchError
    from medbench_core.layout import Layout
    from medbench_core.storage import read_manifest
    from runtime import verified
    from runtime.ledger import last_complete_run, store_fingerprint

    if settings.ONLINE:
        raise Undecided("online: hub revisions may have moved")
    done = last_complete_run(settings.STATE)
    if done is None:
        raise Undecided("no complete run recorded yet")
    if done.inputs_key != given.key:
        raise Undecided("inputs changed since the last complete run")
    if not set(models) <= set(done.models):
        raise Undecided("the last complete run did not cover every requested model")
    for task, digest in given.sources.items():
        if task not in done.sources:
            raise Undecided(f"the last complete run did not cover task {task}")
        if done.sources[task] != digest:
            raise Undecided(f"task {task}: its source files changed since the last complete run")
    layout = Layout(settings.DATA)
    board = layout.leaderboard_file("json")
    if hashlib.sha256(layout.leaderboard_file("md").read_bytes()).hexdigest() != done.leaderboard_sha256:
        raise Undecided("the saved leaderboard is not the one the last complete run wrote")
    try:
        cells = json.loads(board.read_text())["cells"]
    except (OSError, ValueError, KeyError) as exc:
        raise Undecided(f"no readable leaderboard at {board}") from exc
    sealed = verified.Sealed(done.sealed)
    unsealed: list[Path] = []  # folders whose seal did not hold (a copied state): verified from their notes or bytes

    def complete(folder: Path) -> bool:
        """The files' stat unchanged since sealed, or since hashed (the notes), or their bytes."""
        if sealed.sealed_as_is(folder):
            return True
        unsealed.append(folder)
        return verified.complete(folder)

    for task in tasks:
        folder = layout.task_dir(task)
        try:
            content = read_manifest(folder).get("content_hash", "")
        except MedbenchError as exc:
            raise Undecided(f"task {task}: {exc}") from exc
        if not complete(folder) or layout.gate_refusal(task, content) or done.curated.get(task) != content:
            raise Undecided(f"task {task} is not curated and gated as recorded")
    requested = requested_cells(cells, models, tasks)
    for model, task, stage, folder in partition_folders(layout, specs, requested):
        if not complete(folder):
            raise Undecided(f"{model} x {task}: its {stage} artifact is missing or fails its manifest")
    # Unless not one write reached MLflow's store since the run's end found every one of these runs FINISHED in it:
    fingerprint = store_fingerprint(settings.default_tracking_uri())
    asked = not (done.mlflow_store and done.mlflow_store == fingerprint)
    if asked:
        confirm_logged(catalog.benchmark, requested, done.leaderboard_mlflow_run_id)
    # The store as it was before MLflow was asked, when asked about every run the ledger vouches for (not a subset).
    store = fingerprint if asked and fingerprint and set(models) == set(done.models) and set(tasks) == set(done.tasks) else None
    return Answered(done.dagster_run_id, len(models) * len(tasks), len(tasks), layout.leaderboard_file("md"), tuple(unsealed), store)


def keep(answer: Answered) -> bool:
    """Keep in the ledger what ``answer`` verified, so that the next run need not verify it again: the seal of its
    unsealed folders, verified from their notes or bytes (a copied or restored state: every inode moved), and the MLflow
    store's fingerprint, when every run the ledger vouches for was found FINISHED in it and no write reached the store
    since (its fingerprint unchanged). Without this, a state copied once imported MLflow (seconds of CPU) and hashed its
    files again on every later run with nothing changed. Whether the ledger was written (not when nothing moved, nor
    when another run recorded itself meanwhile: its record stands). ``--recheck`` and ``--force`` read none of it."""
    from dataclasses import replace

    from runtime import ledger, verified

    done = ledger.last_complete_run(settings.STATE)
    if done is None or done.dagster_run_id != answer.run_id:
        return False
    changes: dict[str, Any] = {}
    if answer.unsealed:
        changes["sealed"] = {**done.sealed, **verified.seal(answer.unsealed, done.sealed)}
    if answer.store and ledger.store_fingerprint(settings.default_tracking_uri()) == answer.store:
        changes["mlflow_store"] = answer.store
    if not changes:
        return False
    ledger.record(settings.STATE, replace(done, **changes))
    return True


def logged_keys(experiment: str, wanted: dict[str, Any]) -> set[str]:
    """The metrics keys of ``wanted`` (key -> partition) that have an active FINISHED run in ``experiment``: those the last
    complete run found so, while MLflow's store is the very file it found them in (its fingerprint, as the warm path
    trusts it), the others asked of MLflow's public client (all of them, when the store was written since)."""
    from runtime.ledger import last_complete_run, store_fingerprint

    done = last_complete_run(settings.STATE)
    known: set[str] = set()
    if done is not None and done.mlflow_store and done.mlflow_store == store_fingerprint(settings.default_tracking_uri()):
        known = set(done.logged) & set(wanted)
    rest = set(wanted) - known
    uri = settings.default_tracking_uri()
    if not rest or (uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).is_file()):
        return known
    try:
        from mlflow.tracking import MlflowClient  # the public client: no SQL on MLflow's tables

        return known | finished_runs(MlflowClient(tracking_uri=uri), experiment, rest)
    except Exception:  # noqa: BLE001 (a store MLflow cannot read: those partitions run, and their logging says why)
        return known


def partition_folders(layout: Any, specs: list, requested: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[str, str, str, Path]]:
    """(model, task, stage, folder) of every artifact of each requested cell at the keys the leaderboard lists."""
    from medbench_core.status import stage_folders

    by_name = {s.name: s for s in specs}
    out = []
    for model, task, cell in requested:
        keys = {s: cell.get(f"{s}_key", "-") for s in ("embeddings", "index", "run", "metrics", "expansion")}
        out += [(model, task, stage, folder) for stage, folder in stage_folders(layout, by_name[model], task, keys).items()]
    return out


def seal(layout: Any, specs: list, cells: dict[str, Any], models: list[str], tasks: list[str], previous: dict | None) -> dict[str, list]:
    """The seal of what the warm path checks after this run (:func:`runtime.verified.seal`): the curated tasks and every
    requested cell's artifacts; what ``previous`` sealed and is unchanged is taken as it was."""
    from runtime import verified

    folders = [layout.task_dir(t) for t in tasks] + [f for _, _, _, f in partition_folders(layout, specs, requested_cells(cells, models, tasks))]
    return verified.seal(folders, previous)


def requested_cells(cells: dict[str, Any], models: list[str], tasks: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """(model, task, leaderboard cell) of every requested pair with metrics (one without is n/a: the leaderboard shows why)."""
    return [(m, t, cells[f"{m}/{t}"]) for m in models for t in tasks if f"{m}/{t}" in cells]


def confirm_logged(experiment: str, requested: list[tuple[str, str, dict[str, Any]]], board_run_id: str) -> None:
    """Undecided unless MLflow holds an active FINISHED run for every requested cell's metrics key and the leaderboard's run."""
    wanted = {cell["metrics_key"]: (model, task) for model, task, cell in requested}
    unlogged, board_logged = mlflow_state(experiment, set(wanted), board_run_id)
    if unlogged:
        model, task = wanted[min(unlogged)]
        raise Undecided(f"{model} x {task} has no FINISHED MLflow run")
    if not board_logged:
        raise Undecided("the leaderboard's MLflow run is missing")
