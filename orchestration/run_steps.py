"""The steps of ``medbench run`` after the prepare phase (:mod:`orchestration.preparation`; :mod:`medbench_cli.run`
parses the arguments, calls these and prints the end).

*Plan* what is new or stale (:func:`plan`); *evaluate* every model x usable task (:func:`evaluate`), then the
registry's judgements (:func:`judge`) and each task's contamination audit (:func:`audit`). A complete run writes the
ledger the next run's up-to-date check reads (:func:`record_complete_run`, :mod:`runtime.ledger`).

The command owns how a job is executed in its process and how a failure is said: each step takes
``execute`` (``job, instance, *, what, **execute_in_process kwargs`` -> result, as
:func:`medbench_cli.inprocess.execute`), ``failed_run`` (``title, result, quiet=False`` -> why, printed
under the step's line) and the jobs' ``run_config``.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import Any

from orchestration.preparation import Execute, SayFailure
from runtime import settings


def with_upstreams(models: list[str], specs: list) -> tuple[list[str], dict[str, list[str]]]:
    """``models`` and every model they are built from, in evaluation order (upstreams first), and
    for each model named, the upstreams added for it."""
    from medbench_core.retrieval.model_registry import evaluation_order, upstream_order

    added: dict[str, list[str]] = {}
    wanted = set(models)
    for m in models:
        extra = [u for u in upstream_order(m, specs) if u not in wanted]
        if extra:
            added[m] = extra
            wanted.update(extra)
    return [n for n in evaluation_order(specs) if n in wanted], added


def stage_run_config(force: bool, progress: bool, quiet: dict | None = None) -> dict:
    """The evaluation job's run config: ``quiet`` (the command's Dagster log settings), and each partition asset's ``force`` and ``progress``."""
    from assets.stage import PARTITION_ASSETS

    run_config: dict = copy.deepcopy(quiet or {})
    knobs = {k: v for k, v in (("force", force), ("progress", progress)) if v}
    if knobs:
        run_config["ops"] = {a: {"config": knobs} for a in PARTITION_ASSETS}
    return run_config


def plan(defs, instance, models: list[str], tasks: list[str], logged: Callable[[dict[str, Any]], set[str]]):
    """Which of ``models`` x ``tasks`` (curated, gated) are new or stale, from what is stored (:mod:`orchestration.plan`);
    ``logged`` says which metrics keys MLflow holds a FINISHED run for."""
    from medbench_core.retrieval.stages import DEFAULT_K
    from orchestration.plan import plan_partitions
    from runtime import verified
    from runtime.ledger import last_complete_run

    store, registry = defs.resources["store"], defs.resources["registry"]
    curated = []
    for task in tasks:
        verified.recall(store.layout.task_dir(task))  # its files' sha256 by their notes: read again only if their stat moved
        curated.append(store.load_task(task))
    done = last_complete_run(settings.STATE)
    sealed = verified.Sealed(done.sealed if done else {})  # by the files' stat where the last complete run sealed them
    return plan_partitions(
        instance, defs.resolve_asset_graph(), store, registry.models(), curated, models, expansions=registry.expansions, k=DEFAULT_K,
        logged=logged, complete=sealed.complete,
    )  # fmt: skip


def evaluate(
    defs,
    instance,
    models: list[str],
    tasks: list[str],
    force: bool,
    progress: bool = False,
    reasons: dict | None = None,
    *,
    execute: Execute,
    failed_run: SayFailure,
    run_config: dict,
    planned=None,
) -> list[str]:
    """Every model x task partition, in that order (one encoder is kept loaded at a time); with ``planned`` (an
    :class:`orchestration.plan.Plan`), only those it found due.

    ``models`` come upstreams first, so a fusion or reranker runs after the runs it is built
    from; a partition whose upstream failed fails alone, saying which upstream and what to run.
    ``progress``: bars on stderr for encoding, index building and search (see :func:`medbench_cli.run.main`).
    ``reasons`` receives each failed partition's error (``model|task`` -> text); ``execute``, ``failed_run`` and
    ``run_config`` (the quiet logs) as for :func:`prepare`.
    """
    from medbench_core.memory import give_back_free_memory
    from orchestration.jobs import EVALUATE_JOB
    from runtime.partitions import partition_key

    run_config = stage_run_config(force, progress, run_config)
    reasons = {} if reasons is None else reasons
    job = defs.resolve_job_def(EVALUATE_JOB)
    failed: list[str] = []
    due = None
    if planned is not None:
        print(planned.line(), flush=True)
        due = set(planned.due)
    for model in models:
        for task in tasks:
            if due is not None and (model, task) not in due:
                continue
            t = time.perf_counter()
            give_back_free_memory()  # what curation, the gates or the last partition freed: not the base of this one's peak
            res = execute(
                job, instance, what=f"evaluate {model} x {task}", partition_key=partition_key(model, task), run_config=run_config, raise_on_error=False
            )
            status = "ok" if res.success else "FAILED"
            note = "" if not res.success else " (n/a: model cannot read this task)" if not_applicable(res) else " (cached)" if all_cached(res) else ""
            print(f"[evaluate] {model:<24} x {task:<22} {status}{note} ({time.perf_counter() - t:.1f}s)", flush=True)
            if not res.success:
                failed.append(f"{model}|{task}")
                reasons[f"{model}|{task}"] = failed_run(f"evaluate {model} x {task}", res)
    return failed


def judge(defs, instance, tasks: list[str], reasons: dict, *, failed_run: SayFailure, run_config: dict) -> list[str]:
    """The registry's judgements: entries on each task they judge, after its runs (the second qrels layer,
    docs/trust.md); nothing when there are none. A failure fails that task's judgements alone."""
    from medbench_core.evaluation.judging.spec import load_judgements
    from orchestration.jobs import JUDGE_JOB

    specs = load_judgements(defs.resources["registry"].models_file)
    if not specs:
        return []
    job = defs.resolve_job_def(JUDGE_JOB)
    failed = []
    for task in tasks:
        if not any(s.judges_task(task) for s in specs):
            continue
        t = time.perf_counter()
        res = job.execute_in_process(instance=instance, partition_key=task, run_config=copy.deepcopy(run_config), raise_on_error=False)
        print(f"[judge] {task:<22} {'ok' if res.success else 'FAILED'} ({time.perf_counter() - t:.1f}s)", flush=True)
        if not res.success:
            failed.append(f"relevance_judgements[{task}]")
            reasons[f"relevance_judgements[{task}]"] = failed_run(f"judge {task}", res)
    return failed


def audit(defs, instance, tasks: list[str], reasons: dict, *, failed_run: SayFailure, run_config: dict, planned: bool = False) -> list[str]:
    """Each task's contamination audit (issue 49: near-duplicates in the other tasks and the declared training
    manifests), stored once per inputs: a second run with nothing changed reads it back. A failure fails that task's audit alone.
    ``planned``: an audit current as stored (:func:`orchestration.plan.current_audits`) is not run again (issue 53)."""
    from orchestration.jobs import AUDIT_JOB
    from orchestration.plan import current_audits

    job = defs.resolve_job_def(AUDIT_JOB)
    failed = []
    current = set()
    if planned:
        t = time.perf_counter()
        current = set(current_audits(instance, defs.resolve_asset_graph(), defs.resources["store"], defs.resources["registry"], tasks))
        if current:
            names = ", ".join(n for n in tasks if n in current)
            print(f"[audit] not audited again: {names}: inputs as audited, materialised in Dagster ({time.perf_counter() - t:.2f}s)", flush=True)
    for task in tasks:
        if task in current:
            continue
        t = time.perf_counter()
        res = job.execute_in_process(instance=instance, partition_key=task, run_config=copy.deepcopy(run_config), raise_on_error=False)
        events = res.get_asset_materialization_events() if res.success else []
        hit = res.success and all(ev.materialization.metadata["cache_hit"].value for ev in events)
        # How the audit was put together: its pieces (one per other task, manifest and itself) computed, swapped from
        # another task's, or reused as stored (issue 51: a task added computes only its own).
        made = {k: n for ev in events if "pieces" in ev.materialization.metadata for k, n in ev.materialization.metadata["pieces"].value.items() if n}
        pieces = f" (pieces: {', '.join(f'{n} {k}' for k, n in made.items())})" if made and not hit else ""
        print(f"[audit] {task:<22} {'ok' if res.success else 'FAILED'}{' (cached)' if hit else ''}{pieces} ({time.perf_counter() - t:.1f}s)", flush=True)
        if not res.success:
            failed.append(f"contamination_audit[{task}]")
            reasons[f"contamination_audit[{task}]"] = failed_run(f"audit {task}", res)
    return failed


def not_applicable(result) -> bool:
    for ev in result.get_asset_materialization_events():
        md = ev.materialization.metadata
        if "applicable" in md and md["applicable"].value is False:
            return True
    return False


def all_cached(result) -> bool:
    """Every asset of the partition was a cache hit, or has no artifact of its own (a fusion's embeddings, a retriever's expansion)."""
    events = result.get_asset_materialization_events()
    if not events:
        return False
    for ev in events:
        md = ev.materialization.metadata
        hit = "cache_hit" in md and md["cache_hit"].value
        if not hit and "reason" not in md:
            return False
    return True


def record_complete_run(
    defs,
    board_result,
    given,
    models: list[str],
    tasks: list[str],
    confirm_logged: Callable[[dict, str], str | None],
    seal: Callable[[dict, dict], dict] | None = None,
) -> None:
    """Write the ledger of this run (:mod:`runtime.ledger`) when it was complete (``given``: its inputs).

    An incomplete run leaves the last complete run's ledger as it was (a refusal changes no file): the
    up-to-date check compares it with the inputs, the Dagster materialisations since and the saved
    leaderboard, so anything this run changed already makes it disagree.

    MLflow is asked first, as the warm path asks it (``confirm_logged(cells, leaderboard run id)``: None when it has them,
    else why not), for this run's FINISHED runs; when it has them
    all, the record holds the store's fingerprint, so that the warm path can skip importing MLflow
    while the store is unwritten (the artifacts were verified as the stages wrote them). ``seal(cells, previous seal)``
    gives the folders the warm path checks by their files' stat (:func:`runtime.verified.seal`)."""
    import hashlib

    from medbench_core.storage import read_manifest
    from runtime.ledger import CompleteRun, last_complete_run, record, store_fingerprint

    if given is None:
        return
    previous = last_complete_run(settings.STATE)
    layout = defs.resources["store"].layout
    events = board_result.get_asset_materialization_events()
    mlflow_run = str(next((e.materialization.metadata["mlflow_run_id"].value for e in events if "mlflow_run_id" in e.materialization.metadata), ""))
    fingerprint = store_fingerprint(settings.default_tracking_uri())
    logged: list[str] = []
    sealed: dict = {}
    try:
        cells = json.loads(layout.leaderboard_file("json").read_text())["cells"]
        why = confirm_logged(cells, mlflow_run)
        if seal is not None:
            sealed = seal(cells, previous.sealed if previous else {})
        logged = sorted({cells[f"{m}/{t}"]["metrics_key"] for m in models for t in tasks if f"{m}/{t}" in cells})
    except (OSError, ValueError, KeyError) as exc:  # a leaderboard that does not read: as the warm path
        why = str(exc)
    if why is not None:
        print(f"[plan] the next run will ask MLflow itself: {why}", flush=True)
        fingerprint = {}
    if fingerprint != store_fingerprint(settings.default_tracking_uri()):
        fingerprint = {}  # written to while MLflow was asked: not the store it answered for
    if not fingerprint:
        logged = []
    record(
        settings.STATE,
        CompleteRun(
            dagster_run_id=board_result.run_id, inputs_key=given.key, sources=given.sources, models=list(models), tasks=list(tasks),
            curated={t: read_manifest(layout.task_dir(t)).get("content_hash", "") for t in tasks},
            leaderboard_sha256=hashlib.sha256(layout.leaderboard_file("md").read_bytes()).hexdigest(), leaderboard_mlflow_run_id=mlflow_run,
            mlflow_store=fingerprint, logged=logged, sealed=sealed,
        ),
    )  # fmt: skip
