"""The leaderboard's site against the leaderboard's Markdown, on the saved run of this checkout (BENCHMARKS.md).

    scripts/demo                       # once: the bundled run, its leaderboard and its site under data/
    python bench/bench_site.py [--pairs 5] [--json bench/out/site.json]

Both sides start from what the stages stored (each cell's metrics.json and per_query.parquet, verified
against their manifests, as ``medbench export`` reads them) and write into a temporary folder, in
interleaved rounds (bench/paired.py, ABBA order):

- **markdown**: ``reports.write_leaderboard``, the step that writes ``leaderboard.md`` (and its CSV, JSON,
  stats, heatmap and plots: the Markdown cannot be written without its tests, ranks and trust tables),
  with the multilingual section's query groups, as the leaderboard asset calls it;
- **site**: ``medbench_core.site.build_site`` from that ``leaderboard.json`` and the stored provenance
  (task manifests, gates, contracts, source files, models.yaml, versions/*.json), as the asset calls it
  after the Markdown. Each cell's MLflow run is looked up once, before the rounds: the asset's one search
  of the experiment is not the builder's work.

Printed: the site's size (bytes, files, the largest), the ratio site / markdown (CPU and wall, median and
range) and each side's seconds, with the load. The issue's targets: under 5 MB, under 10 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import paired  # noqa: E402


def stored_cells(data: Path, board: dict):
    """The saved leaderboard's cells, read from the stored artifacts (verified), and the multilingual tasks' query groups."""
    from medbench_core.evaluation.multilingual import query_groups
    from medbench_core.evaluation.reports import STALE_KEY, Cell, load_cell
    from medbench_core.layout import Layout
    from medbench_core.storage import verify_manifest

    layout = Layout(data)
    models = [r["model"] for r in board["table"]]
    tasks = [t for t in board["table"][0] if t not in ("model", "average", "averaged_over")]
    readable = {r["model"]: set(r["averaged_over"].split(", ")) for r in board["table"]}
    loaded, cells, groups = {}, [], {}
    for t in tasks:
        loaded[t] = layout.load_task(t)
        if loaded[t].queries["language"].drop_nulls().n_unique() >= 2:
            groups[t] = query_groups(loaded[t].queries, loaded[t].qrels)
    for m in models:
        for t in tasks:
            prov = board["cells"].get(f"{m}/{t}")
            if prov is None:
                cells.append(Cell(m, t, applicable=t in readable[m], research_only=bool(loaded[t].meta.research_only)))
                continue
            metrics = layout.artifact_dir(m, t, "metrics", prov["metrics_key"])
            verify_manifest(metrics)
            cells.append(load_cell(m, loaded[t], metrics_dir=metrics, model_revision=prov.get("model_revision", ""), split=prov.get("split") or "test",
                                   provenance={k: v for k, v in prov.items() if k != STALE_KEY}))  # fmt: skip
    return cells, models, [t for t in tasks], groups


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    paired.add_arguments(p)
    p.add_argument("--json", type=Path, help="write the figures here too")
    args = p.parse_args()

    from medbench_cli.export import site_inputs
    from medbench_core.evaluation.reports import Significance, build_tables, write_leaderboard
    from medbench_core.site import build_site
    from runtime import settings

    print(paired.header("bench_site: the leaderboard's site against its Markdown"))
    data = settings.DATA
    saved = data / "reports" / "leaderboard.json"
    if not saved.is_file():
        sys.exit(f"no leaderboard at {saved}: run scripts/demo first")
    board = json.loads(saved.read_text())
    cells, models, tasks, groups = stored_cells(data, board)
    sig = Significance(board["significance"]["baseline"], board["metric"])
    research_only = sorted({c.task for c in cells if c.research_only})
    inputs = site_inputs(data)  # catalogue, registry, the last run, each cell's MLflow run: read once
    tmp = Path(tempfile.mkdtemp(prefix="bench-site-"))
    try:
        reports = tmp / "reports"
        extra = {"benchmark": board.get("benchmark"), "cells": board["cells"]}

        def markdown():
            return write_leaderboard(build_tables(cells, models, tasks, sig, research_only=research_only, query_groups=groups), reports, extra_json=extra)

        markdown()  # the site side reads this leaderboard.json
        import dataclasses

        inputs = dataclasses.replace(inputs, leaderboard=reports / "leaderboard.json")

        def site():
            return build_site(tmp / "site", inputs)

        m = paired.measure({"markdown": lambda: paired.call(markdown), "site": lambda: paired.call(site)}, pairs=args.pairs)
        out = m.samples["site"][-1].value
        sizes = sorted(((tmp / "site" / f).stat().st_size, f) for f in out["files"])
        print(f"site: {out['bytes']} bytes ({out['bytes'] / 1e6:.2f} MB) in {len(out['files'])} files; largest: "
              + ", ".join(f"{f} {b / 1e3:.0f} kB" for b, f in sizes[-3:]))  # fmt: skip
        print(f"{len(models)} models x {len(tasks)} tasks, {sum(c.metrics is not None for c in cells)} cells with a figure")
        print(m.table([("site / markdown", "site", "markdown")]))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            r_cpu, r_wall = m.ratio("site", "markdown", "cpu"), m.ratio("site", "markdown", "wall")
            args.json.write_text(json.dumps({
                "bytes": out["bytes"], "files": len(out["files"]), "site_seconds_wall": m.seconds("site", "wall"),
                "markdown_seconds_wall": m.seconds("markdown", "wall"), "ratio_cpu": [r_cpu.median, r_cpu.low, r_cpu.high],
                "ratio_wall": [r_wall.median, r_wall.low, r_wall.high], "n": r_cpu.n, "load": m.load(), "started": m.started,
            }, indent=1))  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
