"""``medbench run``: curate every task, evaluate every registered model on every task, print the leaderboard.

Each step is a real Dagster run on the project's instance (DAGSTER_HOME), so the UI shows
them; partitions whose inputs are unchanged are cache hits and finish in a second.

Two phases. *Prepare*: curate the tasks (each with its blocking data contract) and judge them
together (overlap gate). *Evaluate*: every model x usable task.
When a dense or CLIP model has work to do, preparing runs in a second process, started first,
while this one imports Dagster and loads that model (importing torch and reading the weights
take several seconds of one core, the gates as long on the other). Nothing is encoded before the
gates have passed: loading a model reads no task data, and the evaluation assets still refuse a
task whose gate failed. The MLflow store is created here meanwhile, before any run logs to it.
Otherwise, or with ``--serial``, everything runs in this process.

Before either phase, a run whose inputs are unchanged since the last complete run, with every
requested partition still materialised, logged and verified, is answered in one line from the
recorded state without importing Dagster or MLflow (:mod:`medbench_cli.uptodate`; ``--recheck``
runs every step anyway).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from medbench_cli import failures, inprocess
from medbench_cli.common import check_names, describe, leaderboard_run_config, prepare_environment, published_summary, quiet_run_config
from runtime import settings


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="curate every task, evaluate every model on it, print the leaderboard", description=describe(__doc__))
    p.add_argument("--models", help="comma-separated model names (default: every model in models.yaml)")
    p.add_argument("--tasks", help="comma-separated task names (default: every task in tasks.yaml)")
    p.add_argument("--force", action="store_true", help="recompute even when artifacts with the same provenance exist")
    p.add_argument("--serial", action="store_true", help="prepare in this process, without loading a model alongside")
    p.add_argument(
        "--recheck", action="store_true",
        help="run every step even when nothing changed since the last complete run (stored artifacts are still reused)",
    )  # fmt: skip
    p.add_argument(
        "--published", type=Path, metavar="DIR",
        help="a folder of published results (MTEB's results layout or R2MED's result files): shown beside ours in the leaderboard "
        "(default: published_results of tasks.yaml)",
    )  # fmt: skip
    # Internal: the prepare phase as the child process runs it.
    p.add_argument("--prepare-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--log-file", type=Path, help=argparse.SUPPRESS)  # the parent's log, which the child appends to
    p.set_defaults(handler=main, parser=p)


def prepare(defs, instance, tasks: list[str]) -> dict:
    """Model partitions, curated tasks and both gates. Returns usable, gated and failed tasks, and why each failed."""
    from orchestration.jobs import CURATE_JOB, OVERLAP_JOB
    from orchestration.registry_sync import sync_model_partitions

    resources = defs.resources
    sync_model_partitions(instance, resources["registry"])
    curate = defs.resolve_job_def(CURATE_JOB)
    failed: list[str] = []
    reasons: dict[str, str] = {}
    curated: list[str] = []
    kept: dict[str, str] = {}
    for task in tasks:
        t = time.perf_counter()
        before = _content_hash(resources["store"].layout, task)
        res = inprocess.execute(curate, instance, what=f"curate {task}", partition_key=task, run_config=quiet_run_config(), raise_on_error=False)
        print(f"[curate] {task:<22} {'ok' if res.success else 'FAILED'} ({time.perf_counter() - t:.1f}s)", flush=True)
        if res.success:
            curated.append(task)
        else:
            label = f"curated_task[{task}]"
            failed.append(label)
            reasons[label] = _failed(f"curate {task}", res)
            kept[label] = kept_after_failed_curation(resources["store"].layout, task, before)
    t = time.perf_counter()
    if curated:
        res = inprocess.execute(defs.resolve_job_def(OVERLAP_JOB), instance, what="overlap", run_config=quiet_run_config(), raise_on_error=False)
        print(f"[overlap] {len(curated)} tasks judged together ({time.perf_counter() - t:.1f}s)", flush=True)
        if not res.success:
            _failed("overlap", res, quiet=True)  # its verdict is each task's gate, below
    else:  # the curated tasks are those of before: their recorded verdict stands
        print("[overlap] not judged again: no task was curated in this run", flush=True)
    usable: list[str] = []
    gated: dict[str, str] = {}
    store = resources["store"]
    for task in curated:
        reason = store.layout.gate_refusal(task, store.load_task(task).content_hash())
        if reason:
            gated[task] = reason.splitlines()[0][:300]
            print(f"[gate] {task}: refused: {gated[task]}", flush=True)
        else:
            usable.append(task)
    return {"usable": usable, "gated": gated, "failures": failed, "reasons": reasons, "kept": kept, "curated": curated}


def kept_after_failed_curation(layout, task: str, before: str | None) -> str:
    """What a failed curation of ``task`` left, said for the last line: no curated task, the one from
    ``before`` (its content hash then), or a new one, refused by its gate only where a GATE.json records
    that verdict on that content (the check may have failed before writing one: a full disk)."""
    from medbench_core.taskdata.contracts import read_gate

    after = _content_hash(layout, task)
    if after is None:
        return f"no curated {task}"
    if after == before:
        return f"the curated {task} from before"
    gate = read_gate(layout.gate_file(task))
    if gate is not None and gate.get("content_hash") == after and not gate.get("passed"):
        return f"the new curated {task}, refused by its gate ({layout.gate_file(task)})"
    return f"the new curated {task}, with no gate verdict recorded (its data contract is judged again before anything builds on it)"


def _content_hash(layout, task: str) -> str | None:
    """The content hash the curated task's manifest records (None: not curated)."""
    from medbench_core.errors import MedbenchError
    from medbench_core.storage import read_manifest

    try:
        return read_manifest(layout.task_dir(task)).get("content_hash")
    except MedbenchError:
        return None


def model_to_warm(specs: list, layout, tasks: list[str], force: bool = False) -> str | None:
    """The first model in evaluation order that loads weights and has a partition to compute.

    Judged on the tasks as curated now (a task not curated yet counts as work) by the one answer
    to "is it done?" (:mod:`medbench_core.status`: every stage that loads the model holds a
    complete artifact at its current key), without Dagster, so that the decision comes before
    its import. A wrong guess costs a model load, never a result: the evaluation decides again.
    """
    from medbench_core.errors import MedbenchError
    from medbench_core.layout import ENCODING_STAGES
    from medbench_core.status import DUE, partition_statuses

    loaders = [s for s in specs if s.plugin.loads_weights and not s.derived]  # built from upstreams: loaded after them
    if not loaders:
        return None
    if force:
        return loaders[0].name
    curated = []
    for task in tasks:
        try:
            stored = layout.load_task(task)
        except MedbenchError:
            return loaders[0].name
        if not layout.gate_refusal(task, stored.content_hash()):
            curated.append(stored)
    for status in partition_statuses(layout, specs, curated, [s.name for s in loaders], stages=ENCODING_STAGES):
        if status.state == DUE:
            return status.model
    return None


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


def _plan(args: argparse.Namespace) -> tuple[list[str], list[str], list, object]:
    """Models (with what they are built from, upstreams first) and tasks to run, validated, with
    the registry's specs and the catalogue."""
    from medbench_core.errors import MedbenchError
    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.taskdata.catalog import load_catalog

    try:
        specs = load_registry(settings.MODELS_FILE)
        catalog = load_catalog(settings.TASKS_FILE)
    except MedbenchError as exc:
        args.parser.error(str(exc))  # exit code 2: a setup error, before any work
    registry = {spec.name: spec for spec in specs}
    models = check_names(args.parser, "model", args.models, list(registry), settings.MODELS_FILE)
    tasks = check_names(args.parser, "task", args.tasks, catalog.names, settings.TASKS_FILE)
    models, added = with_upstreams(models, specs)
    if not args.prepare_only:
        for m, ups in added.items():
            print(f"[plan] {m} is built from {', '.join(ups)}: evaluating {'it' if len(ups) == 1 else 'them'} first", flush=True)
    return models, tasks, specs, catalog


def answered(specs: list, catalog, models: list[str], tasks: list[str], t0: float, force: bool = False, published: Path | None = None) -> tuple[object, bool]:
    """The inputs to record after this run (None: not recordable), and whether the last
    complete run already answered the request, said with its leaderboard (:mod:`medbench_cli.uptodate`;
    with ``published``, the leaderboard alone is rebuilt first to show those scores beside ours)."""
    from medbench_cli import uptodate

    given = None
    try:
        given = uptodate.inputs(specs, catalog, tasks)
        if force:
            return given, False
        done = uptodate.check(specs, catalog, models, tasks, given)
    except uptodate.Undecided as exc:
        print(f"[plan] evaluating: {exc}", flush=True)
        return given, False
    print(
        f"[up to date] nothing changed since Dagster run {done.run_id[:8]}: {done.partitions} partitions on {done.tasks} tasks "
        f"materialised, logged to MLflow and verified against their manifests; nothing to run (--force recomputes)",
        flush=True,
    )
    if published is not None and not rebuild_leaderboard(published).success:
        raise failures.Refusal("the leaderboard with the published scores beside it failed to build", kept="the saved leaderboard as it was")
    show_leaderboard(done.leaderboard, settings.default_tracking_uri())
    print(f"total {time.perf_counter() - t0:.1f}s")
    return given, True


def refuse_a_corrupt_store() -> None:
    """Refuse to run against a local MLflow store that SQLite finds damaged (issue 29.4): nothing is run or
    written into it; the last line names the file and what SQLite said (:mod:`runtime.store_integrity`)."""
    from runtime.store_integrity import CorruptStore, verify_store

    try:
        verify_store(settings.default_tracking_uri())
    except CorruptStore as exc:
        raise failures.Refusal(
            str(exc), kept="nothing was run or written (data/, the saved leaderboard and the store as they were)",
            todo=f"restore {exc.path} from a backup, or move it aside and rerun (a new store is created and every partition logged into it)",
        ) from exc  # fmt: skip


def record_complete_run(defs, board_result, given, models: list[str], tasks: list[str], experiment: str) -> None:
    """Write the ledger of this run (:mod:`runtime.ledger`) when it was complete (``given``: its inputs).

    An incomplete run leaves the last complete run's ledger as it was (a refusal changes no file): the
    up-to-date check compares it with the inputs, the Dagster materialisations since and the saved
    leaderboard, so anything this run changed already makes it disagree.

    MLflow is asked first, as the warm path asks it, for this run's FINISHED runs; when it has them
    all, the record holds the store's fingerprint, so that the warm path can skip importing MLflow
    while the store is unwritten (the artifacts were verified as the stages wrote them)."""
    import hashlib
    import json

    from medbench_cli import uptodate
    from medbench_core.storage import read_manifest
    from runtime.ledger import CompleteRun, record, store_fingerprint

    if given is None:
        return
    layout = defs.resources["store"].layout
    mlflow_run = str(next(
        (e.materialization.metadata["mlflow_run_id"].value for e in board_result.get_asset_materialization_events() if "mlflow_run_id" in e.materialization.metadata),
        "",
    ))  # fmt: skip
    fingerprint = store_fingerprint(settings.default_tracking_uri())
    try:
        cells = json.loads(layout.leaderboard_file("json").read_text())["cells"]
        uptodate.confirm_logged(experiment, uptodate.requested_cells(cells, models, tasks), mlflow_run)
    except (uptodate.Undecided, OSError, ValueError, KeyError) as exc:  # a leaderboard that does not read: as the warm path
        print(f"[plan] the next run will ask MLflow itself: {exc}", flush=True)
        fingerprint = {}
    if fingerprint != store_fingerprint(settings.default_tracking_uri()):
        fingerprint = {}  # written to while MLflow was asked: not the store it answered for
    record(
        settings.STATE,
        CompleteRun(
            dagster_run_id=board_result.run_id, inputs_key=given.key, sources=given.sources, models=list(models), tasks=list(tasks),
            curated={t: read_manifest(layout.task_dir(t)).get("content_hash", "") for t in tasks},
            leaderboard_sha256=hashlib.sha256(layout.leaderboard_file("md").read_bytes()).hexdigest(), leaderboard_mlflow_run_id=mlflow_run,
            mlflow_store=fingerprint,
        ),
    )  # fmt: skip


def rebuild_leaderboard(published: Path | None = None):
    """The build_leaderboard job alone, from the stored metrics (``medbench leaderboard --rebuild``); its Dagster result."""
    import dagster as dg

    from orchestration.definitions import build_definitions
    from orchestration.jobs import LEADERBOARD_JOB

    defs = build_definitions()
    defs.resources["mlflow"].ensure_store()  # the leaderboard is logged as an MLflow run
    return inprocess.execute(
        defs.resolve_job_def(LEADERBOARD_JOB),
        dg.DagsterInstance.get(),
        what="the leaderboard",
        run_config=leaderboard_run_config(published),
        raise_on_error=False,
    )


def show_leaderboard(board: Path, tracking_uri: str) -> None:
    """The saved leaderboard, as every run ends: its markdown, where it is and where MLflow is."""
    print()
    print(board.read_text())
    line = published_summary(board)
    if line:
        print(f"[published] {line}")
    print(f"saved to {board} (and .csv, .json); MLflow: {tracking_uri}")


def warm_up(defs, model: str, progress: bool = False) -> float:
    """Load ``model``'s encoder into this process's cache, as the evaluation assets will ask for it (same ``progress``)."""
    t = time.perf_counter()
    defs.resources["compute"].encoder(defs.resources["registry"].model(model), progress)
    return time.perf_counter() - t


class _Preparation:
    """The prepare phase in a child process, started before this process imports Dagster."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="medbench-prepare-")
        self.report = Path(self._tmp.name) / "report.json"
        cmd = [sys.executable, "-m", "medbench_cli", "run", "--prepare-only", "--report", str(self.report), "--log-file", str(failures.log().path)]
        if failures.log().verbose:
            cmd.append("--verbose")
        if args.tasks:
            cmd += ["--tasks", args.tasks]
        self.process = subprocess.Popen(cmd, env=os.environ.copy())

    def result(self) -> dict:
        code = self.process.wait()
        if not self.report.exists():
            raise failures.Refusal(
                f"preparing the tasks failed (exit {code}) before it wrote its report (its error is above)", todo="--serial prepares in this process"
            )
        return json.loads(self.report.read_text())

    def close(self) -> None:
        if self.process.poll() is None:  # this command is stopping: the child stops too, finishing what it writes
            self.process.terminate()
            try:
                self.process.wait(timeout=inprocess.GRACE_SECONDS + 10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._tmp.cleanup()


def stage_run_config(force: bool, progress: bool) -> dict:
    """The evaluation job's run config: quiet Dagster logs, and each partition asset's ``force`` and ``progress``."""
    from assets.stage import PARTITION_ASSETS

    run_config: dict = quiet_run_config()
    knobs = {k: v for k, v in (("force", force), ("progress", progress)) if v}
    if knobs:
        run_config["ops"] = {a: {"config": knobs} for a in PARTITION_ASSETS}
    return run_config


def evaluate(defs, instance, models: list[str], tasks: list[str], force: bool, progress: bool = False, reasons: dict | None = None) -> list[str]:
    """Every model x task partition, in that order (one encoder is kept loaded at a time).

    ``models`` come upstreams first, so a fusion or reranker runs after the runs it is built
    from; a partition whose upstream failed fails alone, saying which upstream and what to run.
    ``progress``: bars on stderr for encoding, index building and search (see :func:`main`).
    ``reasons`` receives each failed partition's error (``model|task`` -> text).
    """
    from medbench_core.memory import give_back_free_memory
    from orchestration.jobs import EVALUATE_JOB
    from runtime.partitions import partition_key

    run_config = stage_run_config(force, progress)
    reasons = {} if reasons is None else reasons
    job = defs.resolve_job_def(EVALUATE_JOB)
    failed: list[str] = []
    for model in models:
        for task in tasks:
            t = time.perf_counter()
            give_back_free_memory()  # what curation, the gates or the last partition freed: not the base of this one's peak
            res = inprocess.execute(
                job, instance, what=f"evaluate {model} x {task}", partition_key=partition_key(model, task), run_config=run_config, raise_on_error=False
            )
            status = "ok" if res.success else "FAILED"
            note = "" if not res.success else " (n/a: model cannot read this task)" if _not_applicable(res) else " (cached)" if _all_cached(res) else ""
            print(f"[evaluate] {model:<24} x {task:<22} {status}{note} ({time.perf_counter() - t:.1f}s)", flush=True)
            if not res.success:
                failed.append(f"{model}|{task}")
                reasons[f"{model}|{task}"] = _failed(f"evaluate {model} x {task}", res)
    return failed


def judge(defs, instance, tasks: list[str], reasons: dict) -> list[str]:
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
        res = job.execute_in_process(instance=instance, partition_key=task, run_config=quiet_run_config(), raise_on_error=False)
        print(f"[judge] {task:<22} {'ok' if res.success else 'FAILED'} ({time.perf_counter() - t:.1f}s)", flush=True)
        if not res.success:
            failed.append(f"relevance_judgements[{task}]")
            reasons[f"relevance_judgements[{task}]"] = _failed(f"judge {task}", res)
    return failed


def main(args: argparse.Namespace) -> int:
    from medbench_core.progress import want_progress

    prepare_environment()
    t0 = time.perf_counter()
    # Decided once: bars in an interactive terminal, none in CI or when stderr goes to a log.
    progress = want_progress(sys.stderr.isatty(), os.environ)
    models, tasks, specs, catalog = _plan(args)
    if not args.prepare_only:
        refuse_a_corrupt_store()  # before the warm path answers from it, and before --force writes into it
    given, done = (None, False) if args.prepare_only else answered(specs, catalog, models, tasks, t0, args.force or args.recheck, args.published)
    if done:
        return 0
    model = None
    if not (args.serial or args.prepare_only):
        from medbench_core.layout import Layout

        by_name = {s.name: s for s in specs}
        model = model_to_warm([by_name[m] for m in models], Layout(settings.DATA), tasks, args.force)
    # With a model to load, the child prepares (and creates a new instance's storage) while this
    # process imports Dagster and loads the model; it opens the instance after the child is done.
    preparation = _Preparation(args) if model else None
    try:
        import dagster as dg

        from orchestration.definitions import build_definitions

        defs = build_definitions()
        if args.prepare_only:
            prepared = prepare(defs, dg.DagsterInstance.get(), tasks)
            if args.report:
                args.report.write_text(json.dumps(prepared))
            return 1 if prepared["failures"] else 0
        if preparation is None:
            defs.resources["mlflow"].ensure_store()
            prepared = prepare(defs, dg.DagsterInstance.get(), tasks)
        else:
            try:
                seconds = warm_up(defs, model, progress)
                print(f"[warm-up] {model} loaded while the tasks are prepared ({seconds:.1f}s)", flush=True)
            except Exception as exc:  # its partitions fail with the full error, in Dagster
                print(f"[warm-up] {model} could not be loaded: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}", flush=True)
            defs.resources["mlflow"].ensure_store()  # once, before any parallel work (RELIABILITY.md)
            prepared = preparation.result()
    finally:
        if preparation is not None:
            preparation.close()
    instance = dg.DagsterInstance.get()
    # What killed commands left (runs of dead processes, their pool slots, partial writes) is reclaimed before evaluating.
    inprocess.recover(instance, defs.resources["store"].layout.root, defs.resources["mlflow"], catalog.benchmark)
    reasons = dict(prepared.get("reasons") or {})
    failed = prepared["failures"] + evaluate(defs, instance, models, prepared["usable"], args.force, progress, reasons)
    failed += judge(defs, instance, prepared["usable"], reasons)
    for task, why in prepared["gated"].items():
        failed.append(f"gate[{task}]")
        reasons[f"gate[{task}]"] = why
    from orchestration.jobs import LEADERBOARD_JOB

    board = defs.resources["store"].layout.leaderboard_file("md")
    # Nothing curated, evaluated or left behind by a failed curation: the saved reports are those of this state.
    unchanged = not prepared["curated"] and all(k.startswith("no curated") for k in (prepared.get("kept") or {}).values())
    res = None
    if unchanged and board.is_file():
        print("[leaderboard] not rebuilt: nothing was curated or evaluated in this run", flush=True)
    else:
        res = inprocess.execute(
            defs.resolve_job_def(LEADERBOARD_JOB), instance, what="the leaderboard", run_config=leaderboard_run_config(args.published), raise_on_error=False
        )
    if res is None or res.success:
        # A complete run records what it read and wrote, so that the next one can say at once that nothing changed.
        complete = res is not None and not (failed or prepared["gated"])
        record_complete_run(defs, res, given if complete else None, models, tasks, catalog.benchmark)
        show_leaderboard(board, defs.resources["mlflow"].tracking_uri)
    else:
        record_complete_run(defs, res, None, models, tasks, catalog.benchmark)
        print("[leaderboard] FAILED", flush=True)
        failed.append("leaderboard")
        reasons["leaderboard"] = _failed("leaderboard", res)
    if prepared["gated"]:
        print(f"tasks refused by their data contract (see GATE.json): {', '.join(prepared['gated'])}")
    print(f"total {time.perf_counter() - t0:.1f}s", flush=True)
    if failed:
        raise failures.Refusal(*summary(failed, reasons, prepared.get("kept") or {}, defs.resources["store"].layout, args))
    return 0


def summary(failed: list[str], reasons: dict[str, str], said: dict[str, str], layout, args: argparse.Namespace) -> tuple[str, str, str]:
    """The last line of a run that failed: what failed and why (the first line of each reason),
    what was kept (``said``: label -> what a failed curation left), and the command that reruns what failed."""
    from medbench_core.evaluation.reports import STALE_KEY

    def first(label: str) -> str:
        """The reason's first two lines (a gate's verdict and its first failing expectation), in one."""
        text = [line.strip() for line in (reasons.get(label) or "").strip().splitlines() if line.strip()]
        why = " ".join(text[:2])[:600] + (f" (+{len(text) - 2} more line(s) above)" if len(text) > 2 else "")
        if why.startswith("curated_task: "):
            why = why.split(": ", 1)[1]  # the step's name repeats the label
        return f"{label}: {why}" if why else label

    what = ("FAILED: " if len(failed) == 1 else f"FAILED ({len(failed)}): ") + "; ".join(first(f) for f in failed)
    tasks = [f[f.index("[") + 1 : -1] for f in failed if f.startswith(("curated_task[", "gate[", "relevance_judgements["))]
    pairs = [f.split("|", 1) for f in failed if "|" in f]
    kept = [said[f] for f in failed if f in said]
    stale = {}
    if "leaderboard" in failed:
        kept.append("the saved leaderboard as it was")
    else:
        try:
            stale = json.loads(layout.leaderboard_file("json").read_text()).get(STALE_KEY) or {}
        except (OSError, ValueError):
            pass
    kept.append("every other artifact")
    kept_text = (
        "kept: "
        + ", ".join(kept)
        + (f" (the leaderboard marks {len(stale)} cell(s) stale: {', '.join(sorted(stale)[:6])}{', ...' if len(stale) > 6 else ''})" if stale else "")
    )
    rerun_tasks = list(dict.fromkeys(tasks + [t for _, t in pairs]))
    rerun_models = list(dict.fromkeys(m for m, _ in pairs))
    cmd = "medbench run" + (f" --models {','.join(rerun_models)}" if rerun_models else f" --models {args.models}" if args.models else "")
    cmd += f" --tasks {','.join(rerun_tasks)}" if rerun_tasks else f" --tasks {args.tasks}" if args.tasks else ""
    return what, kept_text, f"fix {'it' if len(failed) == 1 else 'them'}, then: {cmd}"


def _not_applicable(result) -> bool:
    for ev in result.get_asset_materialization_events():
        md = ev.materialization.metadata
        if "applicable" in md and md["applicable"].value is False:
            return True
    return False


def _all_cached(result) -> bool:
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


def _failed(title: str, result, quiet: bool = False) -> str:
    """Why a Dagster run failed, in the words of its first failed step: printed under the step's
    ``[curate]``/``[evaluate]`` line (unless ``quiet``), with every error's stack trace in the log."""
    reason = failures.step_error(result) or f"Dagster run {result.run_id} failed (its events are in the Dagster UI)"
    if not quiet:
        for line in reason.splitlines():
            print(f"           {line}", flush=True)
    failures.record(title, result)
    return reason
