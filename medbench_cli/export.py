"""``medbench export --to DIR``: the saved leaderboard and the metrics behind each of its cells, as one folder.

DIR/leaderboard.{md,csv,json} and DIR/results/<model>/<task>/{metrics.json, per_query.parquet},
with a sha256 MANIFEST.json over every file. Each metrics artifact is verified against its own
manifest before it is copied; the folder is built aside and swapped in whole. DIR must not exist,
or hold an earlier export (which is replaced). Nothing is computed: run ``medbench run`` first.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from medbench_cli.common import describe
from runtime import settings

MARK = "medbench-export"
METRIC_FILES = ("metrics.json", "per_query.parquet")


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="copy the leaderboard and the metrics behind it into a folder, with a sha256 manifest", description=describe(__doc__))
    p.add_argument("--to", required=True, type=Path, metavar="DIR", help="the folder to write (new, or an earlier export)")
    p.set_defaults(handler=main)


def export(data_root: Path, dest: Path) -> int:
    """Write the export of the project at ``data_root`` to ``dest``; returns the number of cells."""
    from medbench_core.errors import DataError
    from medbench_core.layout import Layout
    from medbench_core.storage import MANIFEST, read_manifest, replace_dir_atomic, verify_manifest, write_manifest

    layout = Layout(data_root)
    board = layout.leaderboard_file("json")
    if not board.is_file():
        raise DataError(f"no leaderboard at {board}; run `medbench run` first")
    if dest.exists() and any(dest.iterdir()):
        if not (dest / MANIFEST).is_file() or read_manifest(dest).get("kind") != MARK:
            raise DataError(f"{dest} exists and is not an earlier medbench export; name a new folder")
    saved = json.loads(board.read_text())
    cells = []
    for cell, prov in sorted(saved["cells"].items()):
        model, task = cell.split("/", 1)
        source = layout.artifact_dir(model, task, "metrics", prov["metrics_key"])
        verify_manifest(source, list(METRIC_FILES))
        cells.append((model, task, source))

    def build(tmp: Path) -> None:
        files = []
        for suffix in ("md", "csv", "json"):
            shutil.copyfile(layout.leaderboard_file(suffix), tmp / f"leaderboard.{suffix}")
            files.append(f"leaderboard.{suffix}")
        for model, task, source in cells:
            (tmp / "results" / model / task).mkdir(parents=True)
            for name in METRIC_FILES:
                shutil.copyfile(source / name, tmp / "results" / model / task / name)
                files.append(f"results/{model}/{task}/{name}")
        write_manifest(tmp, files, {"kind": MARK, "benchmark": saved.get("benchmark"), "metric": saved.get("metric"), "cells": saved["cells"]})

    dest.parent.mkdir(parents=True, exist_ok=True)
    replace_dir_atomic(dest, build)
    return len(cells)


def main(args: argparse.Namespace) -> int:
    from medbench_core.errors import MedbenchError

    try:
        n = export(settings.DATA, args.to.resolve())
    except MedbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"exported the leaderboard and {n} cells' metrics to {args.to} (MANIFEST.json lists every file's sha256)")
    return 0
