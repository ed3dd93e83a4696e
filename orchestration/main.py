"""The main job: curate every task, evaluate every registered model on every task, print the leaderboard.

    python -m orchestration.main [--models a,b] [--tasks x,y] [--force]

Each step is a real Dagster run on the project's instance (DAGSTER_HOME), so the UI shows
them; partitions whose inputs are unchanged are cache hits and finish in a second.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

from orchestration import settings


def _prepare_environment() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not os.environ.get("DAGSTER_HOME"):
        home = settings.STATE / "dagster_home"
        home.mkdir(parents=True, exist_ok=True)
        (home / "dagster.yaml").write_text((settings.ROOT / "dagster.yaml").read_text())
        os.environ["DAGSTER_HOME"] = str(home)
    warnings.filterwarnings("ignore")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestration.main", description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated model names (default: every model in models.yaml)")
    parser.add_argument("--tasks", help="comma-separated task names (default: every task in tasks.yaml)")
    parser.add_argument("--force", action="store_true", help="recompute even when artifacts with the same provenance exist")
    args = parser.parse_args(argv)
    _prepare_environment()

    import dagster as dg

    from orchestration.definitions import defs
    from orchestration.partitions import partition_key
    from orchestration.registry_sync import sync_model_partitions

    t0 = time.perf_counter()
    instance = dg.DagsterInstance.get()
    resources = defs.resources
    resources["mlflow"].ensure_store()
    registry = resources["registry"]
    models = [m.name for m in registry.models()]
    tasks = registry.catalog().names
    if args.models:
        models = [m for m in args.models.split(",") if m]
    if args.tasks:
        tasks = [t for t in args.tasks.split(",") if t]
    sync_model_partitions(instance, registry)
    quiet = {"loggers": {"console": {"config": {"log_level": os.environ.get("MEDBENCH_LOG_LEVEL", "WARNING")}}}}
    run_config: dict = dict(quiet)
    if args.force:
        run_config["ops"] = {a: {"config": {"force": True}} for a in ("corpus_embeddings", "corpus_index", "retrieval_run", "task_metrics")}

    curate = defs.resolve_job_def("curate_tasks")
    evaluate = defs.resolve_job_def("evaluate_partition")
    failures: list[str] = []
    gated: list[str] = []
    usable: list[str] = []
    curated: list[str] = []
    for task in tasks:
        t = time.perf_counter()
        res = curate.execute_in_process(instance=instance, partition_key=task, run_config=quiet, raise_on_error=False)
        print(f"[curate] {task:<22} {'ok' if res.success else 'FAILED'} ({time.perf_counter() - t:.1f}s)", flush=True)
        if res.success:
            curated.append(task)
        else:
            failures.append(f"curated_task[{task}]")
    t = time.perf_counter()
    defs.resolve_job_def("check_overlap").execute_in_process(instance=instance, run_config=quiet, raise_on_error=False)
    print(f"[overlap] {len(curated)} tasks judged together ({time.perf_counter() - t:.1f}s)", flush=True)
    for task in curated:
        reason = _gate_refusal(resources["store"], task)
        if reason:
            gated.append(task)
            print(f"[gate] {task}: refused: {reason.splitlines()[0][:300]}", flush=True)
        else:
            usable.append(task)
    for model in models:
        for task in usable:
            t = time.perf_counter()
            res = evaluate.execute_in_process(instance=instance, partition_key=partition_key(model, task), run_config=run_config, raise_on_error=False)
            hits = _cache_hits(res)
            status = "ok" if res.success else "FAILED"
            note = " (cached)" if hits == 4 else " (n/a: model cannot read this task)" if _not_applicable(res) else ""
            print(f"[evaluate] {model:<24} x {task:<22} {status}{note} ({time.perf_counter() - t:.1f}s)", flush=True)
            if not res.success:
                failures.append(f"{model}|{task}")
    defs.resolve_job_def("build_leaderboard").execute_in_process(instance=instance, run_config=quiet, raise_on_error=True)
    board = resources["store"].reports_dir() / "leaderboard.md"
    print()
    print(board.read_text())
    print(f"saved to {board} (and .csv, .json); MLflow: {resources['mlflow'].tracking_uri}")
    if gated:
        print(f"tasks refused by their data contract (see GATE.json): {', '.join(gated)}")
    print(f"total {time.perf_counter() - t0:.1f}s")
    if failures:
        print(f"FAILED: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


def _gate_refusal(store, task: str) -> str | None:
    from medbench_core.contracts import gate_refusal, overlap_gate_path

    content_hash = store.load_task(task).content_hash()
    return gate_refusal(store.task_dir(task), content_hash, overlap_gate=overlap_gate_path(store.root_path / "tasks"))


def _not_applicable(result) -> bool:
    for ev in result.get_asset_materialization_events():
        md = ev.materialization.metadata
        if "applicable" in md and md["applicable"].value is False:
            return True
    return False


def _cache_hits(result) -> int:
    n = 0
    for ev in result.get_asset_materialization_events():
        md = ev.materialization.metadata
        if "cache_hit" in md and md["cache_hit"].value:
            n += 1
    return n


if __name__ == "__main__":
    sys.exit(main())
