"""The MLflow store: one run per model x task partition, created safely, reused, reconciled.

A new local SQLite store starts as a copy of an empty schema built once per MLflow version
(:func:`mlflow_schema`), is created once before any parallel work (:meth:`MLflowResource.ensure_store`)
and is written under per-run-key file locks; runs left RUNNING by killed processes are marked
KILLED (RELIABILITY.md tests 11-13). Nothing is written into a store that SQLite finds damaged
(:mod:`runtime.store_integrity`, issue 29.4). Experiments are created as MLflow 3's classic
machine-learning experiments, with a saved view of their runs whose columns are the metrics
(:mod:`runtime.mlflow_ui`, issue 29.7).
"""

from __future__ import annotations

import fcntl
import shutil
import time
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import dagster as dg

from medbench_core.evaluation.run_record import DAGSTER_RUN_TAG, RUN_KEY_TAG
from medbench_core.storage import atomic_path, write_text_atomic
from runtime import settings
from runtime.mlflow_ui import CLASSIC_ML, EXPERIMENT_KIND_TAG, VIEW_TAG, runs_view
from runtime.store_integrity import sqlite_path, verify_store


class MLflowResource(dg.ConfigurableResource):
    """One MLflow run per model x task partition, identified by the tag ``medbench.run_key``.

    Policy for a re-run: a FINISHED run with the same key is reused (nothing new is logged);
    FAILED, KILLED or stale RUNNING runs with that key are deleted before a new run starts,
    so the store never holds two results for the same inputs. Two attempts of one partition at
    once (a retry while a zombie attempt still runs) are serialised by a file lock per run key
    beside a local SQLite store; on a tracking server the later finisher deletes its own run
    and reuses the earlier one. Runs left RUNNING by a killed process are marked KILLED by
    :meth:`reconcile_stale_runs`. Replaced runs are deleted the MLflow way (lifecycle
    ``deleted``); ``mlflow gc`` purges them for good.
    """

    tracking_uri: str
    artifact_root: str = ""

    def client(self):
        # One client per store and process: each new one costs ~0.1 s (store and engine set-up).
        if self.tracking_uri not in _CLIENTS:
            db = self._sqlite_path()
            if db is not None and db.is_file() and not _migrated(db):  # copied by ensure_store(open_now=False)
                self.verify()
                with self._store_lock():
                    if not _migrated(db):
                        self._let_mlflow_open(db)
            if self.tracking_uri not in _CLIENTS:
                from mlflow.tracking import MlflowClient

                _CLIENTS[self.tracking_uri] = MlflowClient(tracking_uri=self.tracking_uri)
        return _CLIENTS[self.tracking_uri]

    def _let_mlflow_open(self, db: Path) -> None:
        """MLflow opens the new store (checks its schema version, adds its default experiment), then the ready marker; the store's lock held."""
        from mlflow.tracking import MlflowClient

        client = _CLIENTS.get(self.tracking_uri) or MlflowClient(tracking_uri=self.tracking_uri)
        client.search_experiments(max_results=1)
        _CLIENTS[self.tracking_uri] = client
        write_text_atomic(_ready_marker(db), _mlflow_version() + "\n")

    def _sqlite_path(self) -> Path | None:
        return sqlite_path(self.tracking_uri)

    def verify(self) -> None:
        """Raise :class:`runtime.store_integrity.CorruptStore` (naming the file) when SQLite finds the local store damaged.

        Checked once per process and store, before the first write (the check reads every page: tens of
        ms for 10 MB, BENCHMARKS.md); a store this process has found sound stays so for it.
        """
        if self.tracking_uri not in _VERIFIED:
            verify_store(self.tracking_uri)
            _VERIFIED.add(self.tracking_uri)

    @contextmanager
    def _store_lock(self, run_key: str | None = None):
        """An exclusive lock beside a local SQLite store, on the store or on one run key (no-op for other stores)."""
        db = self._sqlite_path()
        if db is None:
            yield
            return
        path = db.with_suffix(".lock") if run_key is None else db.parent / f".{db.name}.locks" / f"{run_key}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def ensure_store(self, *, open_now: bool = True) -> None:
        """Create the SQLite store once, under a file lock, before any parallel work.

        Sixteen processes migrating one new SQLite file at once all fail (RELIABILITY.md). A new
        store starts as a copy of the empty schema this MLflow version builds once per machine
        (:func:`mlflow_schema`; its ~40 migrations take seconds); MLflow then opens it, checks the
        schema version and adds its default experiment, as for a store it created itself.

        ``open_now=False``: that opening is left to the first :meth:`client` of any process, under
        the same lock, so that a command which logs only after its stages (``medbench run``) does not
        hold MLflow's modules (about 150 MB resident) through them: at 100K documents the BM25 fit
        is the run's peak, and MLflow beside it was a ninth of it.
        """
        with self._out_of_space_said():
            self._ensure_store(open_now)

    def _ensure_store(self, open_now: bool) -> None:
        db = self._sqlite_path()
        if db is None:
            return
        if _migrated(db):
            self.verify()
            return
        if db.exists():  # a store left half-created by a killed creation: completed below, unless it is damaged
            self.verify()
        with self._store_lock():
            if _migrated(db):
                return
            if not db.exists():
                with atomic_path(db) as tmp:
                    shutil.copyfile(mlflow_schema(), tmp)
            if open_now:
                self._let_mlflow_open(db)

    def experiment_id(self, name: str, columns: Sequence[str] = ()) -> str:
        """The id of experiment ``name``, created if need be as a classic machine-learning experiment
        (:mod:`runtime.mlflow_ui`), with ``columns`` (metric keys, the main one first) as the columns
        of its saved runs view; an experiment missing either tag (or with other columns) gets it."""
        client = self.client()
        exp = client.get_experiment_by_name(name)
        wanted = {EXPERIMENT_KIND_TAG: CLASSIC_ML}
        if exp is not None:
            if columns:
                wanted[VIEW_TAG] = runs_view(columns, exp.tags.get(VIEW_TAG))
            for key, value in wanted.items():
                if exp.tags.get(key) != value:
                    self.verify()
                    client.set_experiment_tag(exp.experiment_id, key, value)
            return exp.experiment_id
        if columns:
            wanted[VIEW_TAG] = runs_view(columns)
        kwargs: dict[str, Any] = {"tags": wanted}
        # A tracking server keeps artifacts where it was told to; a local folder of this machine
        # would be wrong for every other client.
        if self.artifact_root and not self.tracking_uri.startswith(("http://", "https://")):
            Path(self.artifact_root).mkdir(parents=True, exist_ok=True)
            kwargs["artifact_location"] = Path(self.artifact_root, name).resolve().as_uri()
        self.verify()
        try:
            return client.create_experiment(name, **kwargs)
        except Exception:  # created by a concurrent writer in the meantime
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def find_runs(self, experiment: str, run_key: str) -> list[Any]:
        exp_id = self.experiment_id(experiment)
        return self.client().search_runs([exp_id], filter_string=f"tags.`{RUN_KEY_TAG}` = '{run_key}'", max_results=100)

    def finished_runs_by_key(self, experiment: str) -> dict[str, dict[str, str]]:
        """Run key -> ``{"run_id", "experiment_id"}`` of the newest FINISHED run of each key in ``experiment``, in one
        paged search ({} when the experiment does not exist): the leaderboard site's links from a cell to its run."""
        client = self.client()
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            return {}
        out: dict[str, dict[str, str]] = {}
        token = None
        while True:
            page = client.search_runs(
                [exp.experiment_id], filter_string="attributes.status = 'FINISHED'", max_results=1000, order_by=["attributes.start_time DESC"], page_token=token
            )
            for r in page:
                key = r.data.tags.get(RUN_KEY_TAG)
                if key and key not in out:
                    out[key] = {"run_id": r.info.run_id, "experiment_id": exp.experiment_id}
            token = page.token
            if not token:
                return out

    @contextmanager
    def annotating(self, experiment: str):
        """Within it, :meth:`annotate_run` on runs of ``experiment`` finds them in one paged search of its FINISHED runs,
        made at the first annotation (the leaderboard annotates every cell's run, up to three times: one search per
        annotation was ~0.1-0.5 s each, issue 53), instead of one search per run. The same run is found either way (the
        newest FINISHED run of the key: MLflow's default order, start time descending); what an annotation logs is kept
        in that index, and any other write through this resource meanwhile drops it."""
        key = (self.tracking_uri, experiment)
        _ANNOTATING[key] = None
        try:
            yield
        finally:
            _ANNOTATING.pop(key, None)

    def _finished_for_annotation(self, experiment: str, run_key: str) -> dict[str, Any] | None:
        """``{"run_id", "metrics", "tags"}`` of the newest FINISHED run of ``run_key``: from the index of :meth:`annotating`
        (built here on first use) when inside it, else from its own search."""
        key = (self.tracking_uri, experiment)
        if key not in _ANNOTATING:
            run = self.finished_run(experiment, run_key)
            return None if run is None else {"run_id": run.info.run_id, "metrics": dict(run.data.metrics), "tags": dict(run.data.tags)}
        if _ANNOTATING[key] is None:
            index: dict[str, dict[str, Any]] = {}
            client = self.client()
            exp = client.get_experiment_by_name(experiment)
            token = None
            while exp is not None:
                page = client.search_runs([exp.experiment_id], filter_string="attributes.status = 'FINISHED'", max_results=1000, page_token=token)
                for r in page:  # newest first: the first of each key is the one find_runs would give
                    k = r.data.tags.get(RUN_KEY_TAG)
                    if k and k not in index:
                        index[k] = {"run_id": r.info.run_id, "metrics": dict(r.data.metrics), "tags": dict(r.data.tags)}
                token = page.token
                if not token:
                    break
            _ANNOTATING[key] = index
        return _ANNOTATING[key].get(run_key)

    def finished_run(self, experiment: str, run_key: str) -> Any | None:
        for r in self.find_runs(experiment, run_key):
            if r.info.status == "FINISHED":
                return r
        return None

    @contextmanager
    def _out_of_space_said(self):
        """A write the store's disk refused is said as one: ENOSPC, the device, where it is mounted, and the store's file
        (:func:`medbench_core.storage.disk_full`; SQLite says only "database or disk is full", a copy only "[Errno 28]")."""
        try:
            yield
        except Exception as exc:
            from medbench_core.storage import disk_full

            places = [p for p in (self._sqlite_path(), Path(self.artifact_root) if self.artifact_root else None) if p is not None]
            full = disk_full(exc, *places) if places else None
            if full is not None:
                raise full from exc
            raise

    def log_run(
        self,
        experiment: str,
        run_key: str,
        run_name: str,
        params: dict[str, Any],
        metrics: dict[str, float],
        tags: dict[str, str],
        artifacts: list[Path],
        replace: bool = False,
        columns: Sequence[str] = (),
    ) -> tuple[str, bool]:
        """Log one result; returns ``(run_id, reused)``. See the class docstring for the policy.

        ``replace``: a FINISHED run with the same key is deleted once the new one has FINISHED, not
        before: a new run that fails leaves the old one as it was. ``columns``: the experiment's
        saved view shows these metrics (:meth:`experiment_id`). A full disk is said as one (ENOSPC, device, file).
        """
        with self._out_of_space_said():
            return self._log_run(experiment, run_key, run_name, params, metrics, tags, artifacts, replace, columns)

    def _log_run(
        self,
        experiment: str,
        run_key: str,
        run_name: str,
        params: dict[str, Any],
        metrics: dict[str, float],
        tags: dict[str, str],
        artifacts: list[Path],
        replace: bool,
        columns: Sequence[str],
    ) -> tuple[str, bool]:
        from mlflow.entities import Metric, Param, RunTag

        client = self.client()
        self.verify()
        _ANNOTATING.update(dict.fromkeys(_ANNOTATING))  # runs created or deleted: an annotation index is built again
        with self._store_lock(run_key):
            existing = self.find_runs(experiment, run_key)
            for r in existing:
                if r.info.status == "FINISHED" and not replace:
                    return r.info.run_id, True
            for r in existing:
                if r.info.status == "FINISHED":
                    continue  # replaced below, once the new run has finished
                if r.info.status == "RUNNING":  # a killed attempt's: ended first, so no deleted run stays RUNNING either
                    client.set_terminated(r.info.run_id, status="KILLED")
                client.delete_run(r.info.run_id)
            run = client.create_run(self.experiment_id(experiment, columns), run_name=run_name, tags={**tags, RUN_KEY_TAG: run_key})
            run_id = run.info.run_id
            try:
                now = int(time.time() * 1000)
                client.log_batch(
                    run_id,
                    metrics=[Metric(k, float(v), now, 0) for k, v in sorted(metrics.items())],
                    params=[Param(k, str(v)[:6000]) for k, v in sorted(params.items())],
                    tags=[RunTag(k, str(v)) for k, v in sorted(tags.items())],
                )
                for a in artifacts:
                    client.log_artifact(run_id, str(a))
            except BaseException:
                client.set_terminated(run_id, status="FAILED")
                raise
            client.set_terminated(run_id, status="FINISHED")
            for r in existing:
                if r.info.status == "FINISHED":  # replace: the old result goes once the new one is there
                    client.delete_run(r.info.run_id)
            # Without a lock (tracking server) a concurrent attempt may have finished too: the
            # earliest finisher wins, and later ones delete themselves and reuse it.
            finished = [r for r in self.find_runs(experiment, run_key) if r.info.status == "FINISHED"]
            first = min(finished, key=lambda r: (r.info.end_time or 0, r.info.run_id), default=None)
            if first is not None and first.info.run_id != run_id:
                client.delete_run(run_id)
                return first.info.run_id, True
        return run_id, False

    def annotate_run(self, experiment: str, run_key: str, metrics: dict[str, float], tags: dict[str, str]) -> str | None:
        """Add ``metrics`` and ``tags`` to the FINISHED run of ``run_key`` (facts learnt after it was logged, such as
        the published score beside it); values it already holds are not logged again. Returns its id, None when there is none."""
        with self._out_of_space_said():
            return self._annotate_run(experiment, run_key, metrics, tags)

    def _annotate_run(self, experiment: str, run_key: str, metrics: dict[str, float], tags: dict[str, str]) -> str | None:
        from mlflow.entities import Metric, RunTag

        run = self._finished_for_annotation(experiment, run_key)
        if run is None:
            return None
        new_metrics = {k: v for k, v in metrics.items() if run["metrics"].get(k) != v}
        new_tags = {k: v for k, v in tags.items() if run["tags"].get(k) != v}
        if new_metrics or new_tags:
            self.verify()
            now = int(time.time() * 1000)
            self.client().log_batch(
                run["run_id"],
                metrics=[Metric(k, float(v), now, 0) for k, v in sorted(new_metrics.items())],
                tags=[RunTag(k, str(v)) for k, v in sorted(new_tags.items())],
            )
            run["metrics"].update({k: float(v) for k, v in new_metrics.items()})  # the index (if any) as the store now holds it
            run["tags"].update({k: str(v) for k, v in new_tags.items()})
        return run["run_id"]

    def reconcile_stale_runs(
        self,
        experiment: str,
        *,
        older_than_seconds: float = 3600,
        is_alive: Callable[[str], bool] | None = None,
    ) -> list[str]:
        """Mark RUNNING runs that no process will finish as KILLED; returns their run ids.

        A SIGKILLed or SIGTERMed process leaves its run RUNNING with no end time (RELIABILITY.md).
        A run is stale when ``is_alive(dagster_run_id)`` says its Dagster run has ended, or when
        it started more than ``older_than_seconds`` ago (logging a partition takes seconds).
        """
        from mlflow.entities import RunStatus

        client = self.client()
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            return []
        self.verify()
        now_ms = time.time() * 1000
        stale = []
        for r in client.search_runs([exp.experiment_id], filter_string="attributes.status = 'RUNNING'", max_results=1000):
            dagster_run = r.data.tags.get(DAGSTER_RUN_TAG)
            dead = is_alive is not None and dagster_run is not None and not is_alive(dagster_run)
            if dead or now_ms - (r.info.start_time or 0) > older_than_seconds * 1000:
                client.set_terminated(r.info.run_id, status=RunStatus.to_string(RunStatus.KILLED))
                stale.append(r.info.run_id)
        return stale


_CLIENTS: dict[str, Any] = {}
# (tracking URI, experiment) -> run key -> its newest FINISHED run, while MLflowResource.annotating is open (None: not read yet).
_ANNOTATING: dict[tuple[str, str], dict[str, dict[str, Any]] | None] = {}
_VERIFIED: set[str] = set()  # tracking URIs this process found sound (MLflowResource.verify)


def _ready_marker(db: Path) -> Path:
    return db.parent / f".{db.name}.ready"


def _mlflow_version() -> str:
    from importlib.metadata import version

    return version("mlflow")


def _migrated(db: Path) -> bool:
    """True when ``db`` was created completely by this MLflow version (checked without importing mlflow: ~1.5 s).

    The marker is written after the migrations finished; a killed creation leaves none, so the
    next ensure_store lets MLflow complete it.
    """
    marker = _ready_marker(db)
    return db.is_file() and marker.is_file() and marker.read_text().strip() == _mlflow_version()


def mlflow_schema() -> Path:
    """An empty MLflow SQLite schema at this MLflow version's head, built once per machine.

    Built the way MLflow builds a new store (initial tables, then every migration) into a
    temporary file and renamed into place, so a killed build leaves nothing half-made.
    """
    # Installation-level (MEDBENCH_CACHE), read when called: tests point it elsewhere.
    path = settings.CACHE / "mlflow-schema" / f"mlflow-{_mlflow_version()}.db"
    if path.is_file():
        return path
    import sqlalchemy

    # MLflow's own (private) steps for a new store; tests/orchestration/test_main_job.py checks
    # that a copy equals a store MLflow creates itself.
    from mlflow.store.db.utils import _initialize_tables, _verify_schema

    with atomic_path(path) as tmp:
        engine = sqlalchemy.create_engine(f"sqlite:///{tmp}")
        try:
            _initialize_tables(engine)
            _verify_schema(engine)
        finally:
            engine.dispose()
    return path


def dagster_run_alive(instance: dg.DagsterInstance) -> Callable[[str], bool]:
    """``is_alive`` for :meth:`MLflowResource.reconcile_stale_runs`: has this Dagster run not ended?

    A run id this instance does not know counts as alive (it may belong to another instance).
    """

    def alive(run_id: str) -> bool:
        run = instance.get_run_by_id(run_id)
        return run is None or not run.is_finished

    return alive
