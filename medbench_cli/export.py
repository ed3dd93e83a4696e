"""``medbench export --to DIR``: the saved leaderboard, the metrics behind each of its cells, and each cell
as an MTEB results JSON and a TREC run, in one folder. ``medbench export --site DIR``: the leaderboard as a
static site (medbench_core.site: overview, task, model and versions pages, SVG plots with their CSV; no
server and no network needed to read it), built from the saved leaderboard and the stored provenance,
the same pages every ``medbench run`` writes beside the leaderboard (<data>/reports/site).

DIR/leaderboard.{md,csv,json}, stats.csv, heatmap.png, multilingual.csv (when a task is multilingual),
diff/<task>/<model>.png, trust/<model>.png (the reports as saved);
DIR/metrics/<model>/<task>/{metrics.json, per_query.parquet}; DIR/results/<org>__<model>/<revision>/<task>.json
(+ model_meta.json: MTEB's results-repository layout, which ``mteb.ResultCache(DIR).load_results()`` reads;
MTEB's task and model names where there are some) and DIR/trec/<model>/<task>.trec
(medbench_core.evaluation.exports.export, index.json lists them, and which tasks kept medbench's name and
why); a sha256 MANIFEST.json over every file. Each
metrics and run artifact is verified against its own manifest before it is read; the folder is built
aside and swapped in whole. DIR must not exist, or hold an earlier export, which is replaced only
when it holds nothing but the files its MANIFEST names, as they were written: anything else (a
file of the user's, an edited export file, a link, an empty folder) is named and the export refused
(exit 2), DIR left as it was. Nothing is computed: run ``medbench run`` first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from pathlib import Path

from medbench_cli.common import describe
from medbench_core.errors import DataError
from runtime import settings

MARK = "medbench-export"
METRIC_FILES = ("metrics.json", "per_query.parquet")
REPORT_FILES = ("stats.csv", "heatmap.png", "multilingual.csv")  # beside leaderboard.{md,csv,json}, when the leaderboard wrote them


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export", help="write the leaderboard, each cell's metrics, MTEB results JSON and TREC runs into a folder, with a sha256 manifest",
        description=describe(__doc__),
    )  # fmt: skip
    p.add_argument("--to", type=Path, metavar="DIR", help="the folder to write (new, or an earlier export)")
    p.add_argument("--site", type=Path, metavar="DIR", help="write the leaderboard's static site into DIR (new, or an earlier site); open DIR/index.html")
    p.set_defaults(handler=main, parser=p)


class NotAnExport(DataError):
    """DIR names a folder this command would clobber: a usage error (exit 2)."""


def not_exported(dest: Path, manifest: dict) -> list[str]:
    """What ``dest`` holds besides the files an earlier export's ``manifest`` names with the bytes it wrote them with:
    other files (``name``), those files changed since (``name (changed since it was exported)``), links, empty folders."""
    import hashlib
    import os

    from medbench_core.storage import MANIFEST

    listed = manifest.get("files") or {}
    out = []
    for dirpath, dirs, files in os.walk(dest):
        here = Path(dirpath)
        rel_dir = here.relative_to(dest)
        out += [f"{(rel_dir / d).as_posix()} (a link)" for d in sorted(dirs) if (here / d).is_symlink()]
        dirs[:] = sorted(d for d in dirs if not (here / d).is_symlink())
        if not dirs and not files and here != dest:
            out.append(f"{rel_dir.as_posix()}/ (an empty folder)")
        for name in sorted(files):
            rel = (rel_dir / name).as_posix()
            p = here / name
            if rel == MANIFEST and here == dest:
                continue
            if p.is_symlink():
                out.append(f"{rel} (a link)")
            elif rel not in listed:
                out.append(rel)
            elif p.stat().st_size != listed[rel].get("size") or hashlib.sha256(p.read_bytes()).hexdigest() != listed[rel].get("sha256"):
                out.append(f"{rel} (changed since it was exported)")
    return out


def export(data_root: Path, dest: Path, models_file: Path | None = None) -> int:
    """Write the export of the project at ``data_root`` to ``dest``; returns the number of cells.

    ``models_file`` (default the project's models.yaml) names each model as MTEB's results do.
    """
    from medbench_core.evaluation.exports import export as export_results
    from medbench_core.evaluation.exports import mteb_models, mteb_task_names
    from medbench_core.evaluation.reports import STALE_KEY, load_cell
    from medbench_core.layout import Layout
    from medbench_core.provenance import stage_version
    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.storage import MANIFEST, read_manifest, replace_dir_atomic, verify_manifest, write_manifest

    layout = Layout(data_root)
    board = layout.leaderboard_file("json")
    if not board.is_file():
        raise DataError(f"no leaderboard at {board}; run `medbench run` first")
    if dest.exists() and any(dest.iterdir()):
        if not (dest / MANIFEST).is_file() or read_manifest(dest).get("kind") != MARK:
            raise NotAnExport(f"{dest} exists and is not an earlier medbench export; name a new folder")
        others = not_exported(dest, read_manifest(dest))
        if others:
            raise NotAnExport(
                f"{dest} holds {len(others)} thing(s) the earlier export there did not write: {', '.join(others[:5])}"
                + (f", ... ({len(others) - 5} more)" if len(others) > 5 else "")
                + "; an export replaces only the files its MANIFEST.json names: move them out, or export to a new folder"
            )
    saved = json.loads(board.read_text())
    cells, sources = [], []
    tasks: dict = {}
    for name, prov in sorted(saved["cells"].items()):
        model, task = name.split("/", 1)
        if "run_key" not in prov:
            raise DataError(f"{board}: cell {name} names no run; it was saved by an older medbench: `medbench leaderboard --rebuild` first")
        source = layout.artifact_dir(model, task, "metrics", prov["metrics_key"])
        run = layout.artifact_dir(model, task, "run", prov["run_key"])
        verify_manifest(source, list(METRIC_FILES))
        verify_manifest(run)
        if task not in tasks:
            tasks[task] = layout.load_task(task)
        cell = load_cell(model, tasks[task], metrics_dir=source, run_dir=run, model_revision=prov.get("model_revision", ""),
                         split=prov.get("split") or "test", provenance={k: v for k, v in prov.items() if k != STALE_KEY})  # fmt: skip
        cells.append(dataclasses.replace(cell, stale=prov.get(STALE_KEY, "")))
        sources.append((model, task, source))
    models_file = models_file or settings.MODELS_FILE
    specs = load_registry(models_file) if models_file.is_file() else []
    metas = mteb_models(specs, {c.model: c.model_revision for c in cells})
    names = mteb_task_names(cells)
    reports = [f for f in REPORT_FILES if (layout.reports_dir() / f).is_file()]
    # The plots leaderboard.json lists: diff/<task>/<model>.png (each model against the baseline), trust/<model>.png (what each cell rests on)
    plots = [f for kind in ("diff", "trust") for f in (saved.get("plots") or {}).get(kind) or [] if f.startswith(f"{kind}/") and ".." not in Path(f).parts]

    def build(tmp: Path) -> None:
        for suffix in ("md", "csv", "json"):
            shutil.copyfile(layout.leaderboard_file(suffix), tmp / f"leaderboard.{suffix}")
        for f in reports:
            shutil.copyfile(layout.reports_dir() / f, tmp / f)
        for f in plots:
            if (layout.reports_dir() / f).is_file():
                (tmp / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(layout.reports_dir() / f, tmp / f)
        for model, task, source in sources:
            (tmp / "metrics" / model / task).mkdir(parents=True)
            for name in METRIC_FILES:
                shutil.copyfile(source / name, tmp / "metrics" / model / task / name)
        index = export_results(cells, tmp, code_version=stage_version("reports"), models=metas, tasks=names)
        files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
        mteb = {"models": index["models"], "tasks": index["tasks"],
                "not_mteb_tasks": sorted(t for t, v in index["tasks"].items() if not v["mteb_task"]),
                # each cell's trained-on-task / zero-shot / unknown mark (MTEB's results format has no field for it; model_meta.json
                # carries the training_datasets MTEB's zero-shot figure reads)
                **({"contamination": saved["contamination"]} if saved.get("contamination") else {})}  # fmt: skip
        write_manifest(tmp, files, {"kind": MARK, "benchmark": saved.get("benchmark"), "metric": saved.get("metric"), "cells": saved["cells"], "mteb": mteb})

    dest.parent.mkdir(parents=True, exist_ok=True)
    replace_dir_atomic(dest, build)
    return len(cells)


def site_inputs(data_root: Path):
    """What the site is built from in this checkout: the saved leaderboard, the data folder, tasks.yaml and models.yaml (when
    they read), the released versions, the last complete run (when it wrote this leaderboard) and each cell's MLflow run."""
    import hashlib

    from medbench_core.errors import MedbenchError
    from medbench_core.layout import Layout
    from medbench_core.provenance import code_versions, git_sha
    from medbench_core.retrieval.model_registry import load_registry
    from medbench_core.site import SiteInputs, UiLinks
    from medbench_core.taskdata.catalog import load_catalog
    from runtime.ledger import last_complete_run

    layout = Layout(data_root)
    catalog, specs = None, []
    try:
        catalog = load_catalog(settings.TASKS_FILE)
    except MedbenchError:
        pass  # the pages say what they do not know
    try:
        specs = load_registry(settings.MODELS_FILE)
    except MedbenchError:
        pass
    build = {"git": git_sha(settings.ROOT)}
    done = last_complete_run(settings.STATE)
    md = layout.leaderboard_file("md")
    if done is not None and md.is_file() and hashlib.sha256(md.read_bytes()).hexdigest() == done.leaderboard_sha256:
        build |= {"dagster_run_id": done.dagster_run_id, "mlflow_run_id": done.leaderboard_mlflow_run_id}
    board = layout.leaderboard_file("json")
    return SiteInputs(
        leaderboard=board, data_root=data_root, catalog=catalog, shared_data=settings.SHARED / "data", specs=specs,
        versions_dir=settings.ROOT / "versions", build=build, mlflow_runs=mlflow_runs(board), code_versions=code_versions(),
        links=UiLinks(dagster=f"http://127.0.0.1:{settings.UI_PORT}"),  # the metrics asset's name as UiLinks has it (tested): no Dagster import
    )  # fmt: skip


def mlflow_runs(board: Path) -> dict:
    """Metrics key -> the cell's MLflow run, from the project's tracking store ({} when it has none yet)."""
    try:
        benchmark = json.loads(board.read_text()).get("benchmark")
    except (OSError, ValueError):
        return {}
    uri = settings.default_tracking_uri()
    if not benchmark or (uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).is_file()):
        return {}
    from runtime.mlflow_store import MLflowResource

    return MLflowResource(tracking_uri=uri).finished_runs_by_key(benchmark)


def export_site(data_root: Path, dest: Path) -> dict:
    """The leaderboard's static site of the project at ``data_root``, written to ``dest``."""
    from medbench_core.site import build_site

    return build_site(dest, site_inputs(data_root))


def main(args: argparse.Namespace) -> int:
    from medbench_cli.failures import USAGE, Refusal
    from medbench_core.errors import MedbenchError

    if args.to is None and args.site is None:
        args.parser.error("give --to DIR (the export), --site DIR (the static site), or both")
    if args.site is not None:
        existed = args.site.exists()
        try:
            site = export_site(settings.DATA, args.site.resolve())
        except MedbenchError as exc:
            kept = f"{args.site} {'left as it was' if existed else 'not created'} (a site is built aside and swapped in whole)"
            raise Refusal(str(exc), kept=kept, code=USAGE if "is not a medbench site" in str(exc) else 1) from exc
        print(f"wrote the leaderboard's site to {args.site} ({len(site['files'])} files, {site['bytes'] / 1e6:.1f} MB): open {args.site / 'index.html'}")
        if args.to is None:
            return 0
    existed = args.to.exists()
    not_a_folder = next((p for p in (args.to, *args.to.parents) if p.exists() and not p.is_dir()), None)
    if not_a_folder is not None:  # a usage error, said before anything is read or written
        what = f"--to {args.to}: {not_a_folder} is a file, not a folder"
        raise Refusal(what, kept="nothing was written", todo="name a new folder, or an earlier export", code=USAGE)
    try:
        n = export(settings.DATA, args.to.resolve())
    except MedbenchError as exc:
        kept = f"{args.to} {'left as it was' if existed else 'not created'} (an export is built aside and swapped in whole)"
        raise Refusal(str(exc), kept=kept, code=USAGE if isinstance(exc, NotAnExport) else 1) from exc
    stale = json.loads((args.to / "leaderboard.json").read_text()).get("stale") or {}
    if stale:
        print(f"{len(stale)} cell(s) marked stale in the leaderboard and their MTEB results (medbench.stale): {', '.join(sorted(stale))}")
    print(
        f"exported the leaderboard and {n} cells to {args.to}: metrics (metrics/), MTEB results (results/, mteb.ResultCache loads it), "
        "TREC runs (trec/); "
        "MANIFEST.json lists every file's sha256"
    )
    return 0
