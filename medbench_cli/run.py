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
import sys
import time
from pathlib import Path

from medbench_cli import failures, inprocess
from medbench_cli.common import check_names, describe, leaderboard_run_config, prepare_environment, published_summary, quiet_run_config
from orchestration import preparation, run_steps
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
    models, added = run_steps.with_upstreams(models, specs)
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
    uptodate.keep(done)  # what it verified afresh (a copied state), so that the next run need not
    print(
        f"[up to date] nothing changed since Dagster run {done.run_id[:8]}: {done.partitions} partitions on {done.tasks} tasks "
        f"materialised, logged to MLflow and verified against their manifests; nothing to run (--force recomputes)",
        flush=True,
    )
    if published is not None and not rebuild_leaderboard(published).success:
        raise failures.Refusal("the leaderboard with the published scores beside it failed to build", kept="the saved leaderboard as it was")
    show_leaderboard(done.leaderboard, settings.default_tracking_uri())
    print(f"total {time.perf_counter() - t0:.1f}s")
    show_site()
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
    """The ledger of this run when it was complete (:func:`orchestration.run_steps.record_complete_run`), MLflow
    asked as the warm path asks it (:mod:`medbench_cli.uptodate`)."""
    from medbench_cli import uptodate
    from orchestration import run_steps

    def confirm_logged(cells: dict, mlflow_run: str) -> str | None:
        try:
            uptodate.confirm_logged(experiment, uptodate.requested_cells(cells, models, tasks), mlflow_run)
        except uptodate.Undecided as exc:
            return str(exc)
        return None

    def seal(cells: dict, previous: dict) -> dict:
        return uptodate.seal(defs.resources["store"].layout, defs.resources["registry"].models(), cells, models, tasks, previous)

    run_steps.record_complete_run(defs, board_result, given, models, tasks, confirm_logged, seal)


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


def show_site() -> None:
    """Where the leaderboard's pages are (written beside it by the leaderboard asset) and where `medbench ui` serves them."""
    from medbench_cli.ui import site_address, site_dir

    index = site_dir() / "index.html"
    if index.is_file():
        print(f"site: {index} (open it in a browser: no server needed)")
        print(f"serve it: medbench ui -> {site_address()} (beside the Dagster and MLflow UIs)", flush=True)


def prepare_command(args: argparse.Namespace, report: Path) -> list[str]:
    """The command line of the child process that prepares (:class:`orchestration.preparation.Preparation`)."""
    cmd = [sys.executable, "-m", "medbench_cli", "run", "--prepare-only", "--report", str(report), "--log-file", str(failures.log().path)]
    if failures.log().verbose:
        cmd.append("--verbose")
    if args.tasks:
        cmd += ["--tasks", args.tasks]
    if args.recheck or args.force:  # every task curated again
        cmd.append("--recheck")
    return cmd


def main(args: argparse.Namespace) -> int:
    from medbench_core.progress import want_progress

    t0 = time.perf_counter()
    models, tasks, specs, catalog = _plan(args)  # a usage or configuration error exits 2 here, before anything is written
    prepare_environment()
    # Decided once: bars in an interactive terminal, none in CI or when stderr goes to a log.
    progress = want_progress(sys.stderr.isatty(), os.environ)
    # How the steps run a job in this process and say a failure (orchestration.preparation, orchestration.run_steps).
    steps = {"execute": inprocess.execute, "failed_run": _failed, "run_config": quiet_run_config()}
    if not args.prepare_only:
        refuse_a_corrupt_store()  # before the warm path answers from it, and before --force writes into it
    given, done = (None, False) if args.prepare_only else answered(specs, catalog, models, tasks, t0, args.force or args.recheck, args.published)
    if done:
        return 0
    model = None
    if not (args.serial or args.prepare_only):
        from medbench_core.layout import Layout

        by_name = {s.name: s for s in specs}
        model = preparation.model_to_warm([by_name[m] for m in models], Layout(settings.DATA), tasks, args.force)
    # With a model to load, the child prepares (and creates a new instance's storage) while this
    # process imports Dagster and loads the model; it opens the instance after the child is done.
    child = preparation.Preparation(lambda report: prepare_command(args, report), inprocess.GRACE_SECONDS) if model else None
    try:
        import dagster as dg

        from orchestration.definitions import build_definitions

        defs = build_definitions()
        if args.prepare_only:
            prepared = preparation.prepare(defs, dg.DagsterInstance.get(), tasks, recheck=args.recheck, **steps)
            if args.report:
                args.report.write_text(json.dumps(prepared))
            return 1 if prepared["failures"] else 0
        if child is None:
            defs.resources["mlflow"].ensure_store(open_now=False)  # opened by MLflow when the first metrics are logged
            prepared = preparation.prepare(defs, dg.DagsterInstance.get(), tasks, recheck=args.recheck or args.force, **steps)
        else:
            try:
                seconds = preparation.warm_up(defs, model, progress)
                print(f"[warm-up] {model} loaded while the tasks are prepared ({seconds:.1f}s)", flush=True)
            except Exception as exc:  # its partitions fail with the full error, in Dagster
                print(f"[warm-up] {model} could not be loaded: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}", flush=True)
            defs.resources["mlflow"].ensure_store(open_now=False)  # once, before any parallel work (RELIABILITY.md)
            prepared = child.result()
            if prepared is None:
                raise failures.Refusal(
                    f"preparing the tasks failed (exit {child.process.returncode}) before it wrote its report (its error is above)",
                    todo="--serial prepares in this process",
                )
    finally:
        if child is not None:
            child.close()
    instance = dg.DagsterInstance.get()
    # What killed commands left (runs of dead processes, their pool slots, partial writes) is reclaimed before evaluating.
    inprocess.recover(instance, defs.resources["store"].layout.root, defs.resources["mlflow"], catalog.benchmark)
    reasons = dict(prepared.get("reasons") or {})
    planned = None
    if not (args.force or args.recheck):  # which partitions are new or stale, from what is stored: the others are not visited
        from medbench_cli import uptodate

        planned = run_steps.plan(defs, instance, models, prepared["usable"], lambda keys: uptodate.logged_keys(catalog.benchmark, keys))
    failed = prepared["failures"] + run_steps.evaluate(defs, instance, models, prepared["usable"], args.force, progress, reasons, planned=planned, **steps)
    failed += run_steps.judge(defs, instance, prepared["usable"], reasons, failed_run=_failed, run_config=steps["run_config"])
    failed += run_steps.audit(defs, instance, prepared["usable"], reasons, failed_run=_failed, run_config=steps["run_config"], planned=planned is not None)
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
    show_site()
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
    tasks = [f[f.index("[") + 1 : -1] for f in failed if f.startswith(("curated_task[", "gate[", "relevance_judgements[", "contamination_audit["))]
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


def _failed(title: str, result, quiet: bool = False) -> str:
    """Why a Dagster run failed, in the words of its first failed step: printed under the step's
    ``[curate]``/``[evaluate]`` line (unless ``quiet``), with every error's stack trace in the log."""
    reason = failures.step_error(result) or f"Dagster run {result.run_id} failed (its events are in the Dagster UI)"
    if not quiet:
        for line in reason.splitlines():
            print(f"           {line}", flush=True)
    failures.record(title, result)
    return reason
