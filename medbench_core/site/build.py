"""Build the leaderboard site into a folder (aside, then swapped in whole): :func:`build_site`."""

from __future__ import annotations

import json
import math
import shlex
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medbench_core.site.contamination import SYMBOL as CONTAMINATION_SYMBOL
from medbench_core.site.contamination import copy_thumbs
from medbench_core.site.gather import AVERAGE, gather
from medbench_core.site.views import CellView, SiteData, TaskView, UiLinks, number, slug

HERE = Path(__file__).resolve().parent
STATIC = ("site.css", "site.js", "favicon.svg", "LICENSE")  # this package's own files, copied as they are
MAX_FILES = 40  # files of a curated task listed one by one (an image task has thousands; its manifest has them all)
UI_SCRIPT = "ui.js"  # where the Dagster and MLflow UIs answer; `medbench ui` serves its own in their place
MARK = "medbench-site"  # the first line of SITE.json: a folder this builder may replace


@dataclass(frozen=True)
class SiteInputs:
    """Where the site reads from. Only ``leaderboard`` (a ``leaderboard.json``) is required; each other input adds
    what it holds and its absence is said on the pages.

    ``data_root``: the project's data folder (curated tasks and artifacts, :class:`medbench_core.layout.Layout`);
    ``catalog`` (tasks.yaml, :class:`medbench_core.taskdata.catalog.Catalog`): column order, benchmark families and
    source files, under ``shared_data``; ``specs`` (models.yaml): kinds, settings, declared training data;
    ``versions_dir``: ``versions/*.json``; ``build``: what built the leaderboard (``git``, ``dagster_run_id``,
    ``mlflow_run_id``, ``built_at``); ``mlflow_runs``: metrics key -> ``{"run_id", "experiment_id"}`` of each
    cell's MLflow run; ``code_versions``: the code's stage versions now (:func:`medbench_core.provenance.code_versions`),
    compared with the released versions'.
    """

    leaderboard: Path
    data_root: Path | None = None
    catalog: Any = None
    shared_data: Path | None = None
    specs: Sequence[Any] = ()
    versions_dir: Path | None = None
    build: Mapping[str, Any] = field(default_factory=dict)
    mlflow_runs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    links: UiLinks = field(default_factory=UiLinks)
    code_versions: Mapping[str, str] = field(default_factory=dict)
    built_from: str = ""  # a digest of what the pages show, kept in SITE.json (:func:`built_from`): the same one is not built again


# --- formatting (the templates' filters) ------------------------------------------------------------


def fmt(v: Any, digits: int = 4) -> str:
    """A value as the pages show it: floats to ``digits`` places, '-' for none, lists joined, mappings as compact JSON."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x, digits) for x in v) if all(not isinstance(x, (dict, list)) for x in v) else json.dumps(v, ensure_ascii=False, default=str)
    if isinstance(v, dict):
        return json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)
    return str(v)


def ci_text(lo: float | None, hi: float | None) -> str:
    return "" if lo is None or hi is None else f"[{lo:.2f}, {hi:.2f}]"


def rank_text(rank: Mapping[str, Any]) -> str:
    if not rank or rank.get("rank") is None:
        return ""
    return f"{rank['rank']} [{rank.get('rank_low')}, {rank.get('rank_high')}]" + (f" {rank['group']}" if rank.get("group") else "")


def extra_text(cell: CellView) -> str:
    """Every further field of a cell, ``name value`` joined: the overview cell's title."""
    return " · ".join(f"{k} {fmt(v)}" for k, v in sorted(cell.extra().items()) if not isinstance(v, (dict, list)))


def columns_of(rows: Sequence[Mapping[str, Any]], drop: Sequence[str] = ()) -> list[str]:
    """The union of the rows' keys, in the order first seen, without ``drop``."""
    out: list[str] = []
    for r in rows:
        out += [k for k in r if k not in out and k not in drop]
    return out


def leading(first: Mapping[str, Any], rest: Mapping[str, Any]) -> dict[str, Any]:
    """``first``'s fields, then those of ``rest`` it does not have: a row whose first columns are given."""
    return {**first, **{k: v for k, v in rest.items() if k not in first}}


def command(model: str, task: str | None = None) -> str:
    """The command that computes the cell (or every cell of the model) again, from its stored inputs."""
    return "medbench run --models " + shlex.quote(model) + (" --tasks " + shlex.quote(task) if task else "") + " --force"


# --- what the overview computes (the page's script does the same in the browser) -------------------


def common_tasks(site: SiteData, models: Sequence[str], tasks: Sequence[str]) -> list[str]:
    """The tasks (of ``tasks``) every one of ``models`` can read."""
    return [t for t in tasks if all(site.cell(m, t).applicable for m in models)]


def average(site: SiteData, model: str, tasks: Sequence[str]) -> float | None:
    """The mean of the model's figures over ``tasks``; None when one of them has no figure (or there are none)."""
    vals = [site.cell(model, t).value for t in tasks]
    if not vals or any(v is None for v in vals):
        return None
    return sum(vals) / len(vals)


# --- the pages -------------------------------------------------------------------------------------


def _env(bytecode_cache=None):
    """The site's jinja environment; its compiled templates kept between processes (``bytecode_cache``, default
    :func:`medbench_core.storage.template_cache.bytecode_cache`; False: none)."""
    import jinja2

    from medbench_core.storage.template_cache import bytecode_cache as default_cache

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every string is escaped unless a template marks it safe (none does with data)
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.do"],
        bytecode_cache=(default_cache() if bytecode_cache is None else bytecode_cache) or None,
    )
    env.filters.update(fmt=fmt, ci=ci_text, rank=rank_text, slug=slug, tojson_attr=lambda v: json.dumps(v, ensure_ascii=False))
    env.globals.update(leading=leading, command=command, extra_text=extra_text, columns_of=columns_of, number=number, shlex_quote=shlex.quote)
    return env


@dataclass
class Written:
    files: list[str] = field(default_factory=list)
    bytes: int = 0

    def text(self, root: Path, rel: str, text: str) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode("utf-8")
        path.write_bytes(data)
        self.files.append(rel)
        self.bytes += len(data)


def task_plots(site: SiteData, task: TaskView, out: Path, written: Written) -> dict[str, Any]:
    """The task's plots and their CSV files; what the task page links to."""
    from medbench_core.site import plots

    folder = f"plots/{task.slug}"
    got: dict[str, Any] = {"means": None, "per_query_csv": None, "scatter": []}
    rows = []
    for m in site.models:
        c = site.cell(m.name, task.name)
        if c.value is not None:
            rows.append({"model": m.name, "mean": c.value, "ci_low": c.ci_low, "ci_high": c.ci_high, "significant": c.significant, **c.rank})
    if rows:
        written.text(out, f"{folder}/means.svg", plots.means_svg(rows, task=task.name, label=site.label, baseline=site.baseline, chance=task.chance))
        written.text(out, f"{folder}/means.csv", plots.means_csv(rows, task.chance))
        got["means"] = (f"{folder}/means.svg", f"{folder}/means.csv")
    frames = {m.name: site.cell(m.name, task.name).per_query for m in site.models if site.cell(m.name, task.name).applicable}
    order, values = plots.per_query_table({k: v for k, v in frames.items() if v is not None}, site.metric)
    if not values:
        return got
    names = [m.name for m in site.models if m.name in values]
    written.text(out, f"{folder}/per_query.csv", plots.csv_text(["query_id", *names], [[q, *[values[n].get(q) for n in names]] for q in order]))
    got["per_query_csv"] = f"{folder}/per_query.csv"
    base = values.get(site.baseline)
    if base is None:
        return got
    for n in names:
        if n == site.baseline:
            continue
        common = [q for q in order if q in base and q in values[n]]
        a, b = [base[q] for q in common], [values[n][q] for q in common]
        rel = f"{folder}/vs-{slug(n)}.svg"
        written.text(out, rel, plots.scatter_svg(a, b, task=task.name, model=n, baseline=site.baseline, label=site.label))
        w, lo, ties = plots.wins(a, b)
        got["scatter"].append({"model": n, "svg": rel, "wins": w, "losses": lo, "ties": ties, "n": len(common)})
    return got


def task_tables(site: SiteData, task: str) -> dict[str, Any]:
    """The task page's generic tables: every metric name of its cells' metrics.json, and each cell's stats and trust rows
    (every field they carry, whatever it is), model first."""
    names: list[str] = []
    stat_rows, trust_rows = [], []
    for m in site.models:
        c = site.cell(m.name, task)
        names += [k for k in (c.metrics or {}).get("mean", {}) if k not in names]
        if c.stats:
            stat_rows.append({"model": m.name, **{k: v for k, v in c.stats.items() if k != "model"}})
        if c.trust:
            trust_rows.append({"model": m.name, **{k: v for k, v in c.trust.items() if k != "model"}})
    return {"metric_names": names, "stat_rows": stat_rows, "trust_rows": trust_rows}


def breakdowns(site: SiteData, task: str) -> dict[str, dict[str, Any]]:
    """By kind (tier, language, discipline, ... whatever metrics.json holds): the groups and model -> group -> metrics."""
    out: dict[str, dict[str, Any]] = {}
    for m in site.models:
        c = site.cell(m.name, task)
        for kind, groups in ((c.metrics or {}).get("breakdowns") or {}).items():
            entry = out.setdefault(kind, {"groups": [], "rows": {}})
            for g, vals in sorted(groups.items()):
                if g not in entry["groups"]:
                    entry["groups"].append(g)
                entry["rows"].setdefault(m.name, {})[g] = vals
    for entry in out.values():
        entry["groups"].sort()
    return out


SECTIONS_PLACED = ("table", "stats", "ranks", "cells", "stale", "plots", "significance", "benchmark", "metric", "breakdowns")


def task_sections(site: SiteData, task: str) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """What the leaderboard holds for ``task`` beyond the sections the task page draws itself, by section name: rows of
    its lists of rows with a ``task`` field (the multilingual tables, expanded models, the cross-lingual gap, published
    scores, whatever a later stage adds) and the entry of any mapping keyed by task name (the judgement layers, a
    chance floor or a mark per task). Breakdowns are drawn from metrics.json, with every metric; trust has its section."""
    rows: dict[str, list[dict[str, Any]]] = {}
    fields: dict[str, Any] = {}

    def walk(name: str, value: Any) -> None:
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            got = [r for r in value if r.get("task") == task]
            if got:
                rows[name] = got
        elif isinstance(value, dict):
            if task in value:
                fields[name] = value[task]
                return
            for k, v in value.items():
                walk(f"{name} / {k}", v)

    for key in sorted(site.board):
        if key == "trust":
            walk("trust / layers", (site.board["trust"] or {}).get("layers"))
        elif key not in SECTIONS_PLACED:
            walk(key, site.board[key])
    return rows, fields


def build_site(out_dir: str | Path, inputs: SiteInputs) -> dict[str, Any]:
    """Write the site into ``out_dir`` (built aside, swapped in whole); returns ``files``, ``bytes`` and ``seconds``.

    ``out_dir`` must not exist, be empty, or hold a site this function wrote (``SITE.json``): any other folder is refused.
    """
    from medbench_core.errors import DataError
    from medbench_core.site.versions import moved_rows, version_table
    from medbench_core.storage import replace_dir_atomic

    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not _is_site(out_dir))):
        raise DataError(f"{out_dir} exists and is not a medbench site (no {out_dir / 'SITE.json'}); name a new folder")
    site = gather(inputs)
    env = _env()
    versions = version_table(site, inputs.versions_dir, inputs.code_versions)
    written = Written()
    tasks = [t.name for t in site.tasks]
    models = [m.name for m in site.models]
    initial = common_tasks(site, models, tasks)
    facets = {
        "modality": sorted({t.modality for t in site.tasks}),
        "language": sorted({lang for t in site.tasks for lang in (t.languages or ["?"])}),
        "licence": sorted({t.licence_class for t in site.tasks}),
        "family": sorted({f for t in site.tasks for f in t.families}),
        "kind": sorted({m.kind or "?" for m in site.models}),
    }
    common = {"site": site, "links": site.links, "ui_script": UI_SCRIPT, "model_names": set(models), "task_names": set(tasks), "max_files": MAX_FILES,
              "contamination_symbol": CONTAMINATION_SYMBOL}  # fmt: skip

    def build(tmp: Path) -> None:
        plots = {t.name: task_plots(site, t, tmp, written) for t in site.tasks}
        averages = {m: average(site, m, initial) for m in models}
        written.text(tmp, "index.html", env.get_template("overview.html.j2").render(
            **common, root="", page="overview", facets=facets, initial=initial, averages=averages, AVERAGE=AVERAGE,
        ))  # fmt: skip
        for t in site.tasks:
            sections = task_sections(site, t.name)
            thumbs = copy_thumbs(site.contamination, t.name, t.slug, tmp)
            written.files += thumbs
            written.bytes += sum((tmp / f).stat().st_size for f in thumbs)
            written.text(tmp, f"tasks/{t.slug}.html", env.get_template("task.html.j2").render(
                **common, root="../", page="task", task=t, plots=plots[t.name], breakdowns=breakdowns(site, t.name),
                sections=sections[0], fields=sections[1], tables=task_tables(site, t.name), thumbs=thumbs,
            ))  # fmt: skip
        for m in site.models:
            written.text(tmp, f"models/{m.slug}.html", env.get_template("model.html.j2").render(**common, root="../", page="model", model=m))
        written.text(tmp, "versions.html", env.get_template("versions.html.j2").render(
            **common, root="", page="versions", versions=versions, moves=moved_rows(versions),
        ))  # fmt: skip
        for name in STATIC:
            shutil.copyfile(HERE / "static" / name, tmp / name)
            written.files.append(name)
            written.bytes += (tmp / name).stat().st_size
        ui = {"dagster": site.links.dagster, "mlflow": site.links.mlflow}
        written.text(tmp, UI_SCRIPT, f"// where the Dagster and MLflow UIs answer (medbench ui serves its own)\nwindow.MEDBENCH_UI = {json.dumps(ui)};\n")
        record = {"kind": MARK, "files": sorted(written.files), **({"built_from": inputs.built_from} if inputs.built_from else {})}
        written.text(tmp, "SITE.json", json.dumps(record, indent=1) + "\n")

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    replace_dir_atomic(out_dir, build)
    return {"files": sorted(written.files), "bytes": written.bytes, "seconds": time.perf_counter() - t0, "index": out_dir / "index.html"}


def _site_record(folder: Path) -> dict[str, Any] | None:
    """The SITE.json of a site this builder wrote in ``folder``; None when there is none."""
    try:
        record = json.loads((folder / "SITE.json").read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("kind") == MARK else None


def built_from(folder: str | Path) -> tuple[str, int]:
    """The ``built_from`` digest of the site in ``folder`` and the bytes of its files; ("", 0) when there is none, or a file is missing."""
    folder = Path(folder)
    record = _site_record(folder)
    try:
        return str(record["built_from"]), sum((folder / f).stat().st_size for f in [*record["files"], "SITE.json"])
    except (OSError, KeyError, TypeError):
        return "", 0


def _is_site(folder: Path) -> bool:
    return _site_record(folder) is not None
