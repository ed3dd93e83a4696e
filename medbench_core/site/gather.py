"""What the site shows, read from the saved leaderboard and the stored provenance into plain values.

The leaderboard's JSON is read as data: its known sections (table, stats, ranks, trust, cells, stale)
are placed where they belong, and every other per-cell or per-task field it carries (a chance floor,
a tie-aware figure, a contamination mark: whatever later stages add) is shown as it is, under its own
name, rather than dropped. Files the site cannot find (an export without the data folder, a task no
longer curated) leave a line saying so, never a failure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from medbench_core.errors import MedbenchError
from medbench_core.site.views import CellView, ModelView, SiteData, TaskView, number, slug

# Sections of leaderboard.json placed by the pages themselves; any other top-level field is shown as it is.
KNOWN_SECTIONS = frozenset(
    {"benchmark", "metric", "significance", "table", "stats", "ranks", "breakdowns", "cross_lingual_gap", "expanded", "multilingual", "plots", "stale",
     "trust", "cells", "published", "floors", "contamination"}
)  # fmt: skip
# Keys of a floors row (leaderboard.json's floors.cells) that its stats row says already.
FLOOR_SAME = frozenset({"model", "task", "metric", "trec_eval", "ci_half_width"})
RANK_FIELDS = ("rank", "rank_low", "rank_high", "group", "n_models")
AVERAGE = "average"  # the task name of the average's rows in the rank table (medbench_core.evaluation.reports)


def read_board(path: Path) -> dict[str, Any]:
    from medbench_core.errors import DataError

    if not path.is_file():
        raise DataError(f"no leaderboard at {path}; run `medbench run` first")
    try:
        board = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a leaderboard JSON ({exc}); `medbench leaderboard --rebuild` writes it again") from exc
    if not isinstance(board, dict) or not isinstance(board.get("table"), list):
        raise DataError(f"{path}: no 'table' list; it is not a leaderboard.json that medbench wrote")
    return board


def board_models(board: Mapping[str, Any]) -> list[str]:
    return [str(r["model"]) for r in board["table"]]


def board_tasks(board: Mapping[str, Any], order: Sequence[str] = ()) -> list[str]:
    """The task columns of the table: in ``order`` (the catalogue's) where it names them, then as the rank table and the
    stats list them (the leaderboard's own column order; the JSON's rows have their keys sorted), then the rest sorted."""
    names: set[str] = set()
    for r in board["table"]:
        names |= {k for k in r if k not in ("model", "average", "averaged_over")}
    for r in board["table"]:
        names |= {t for t in str(r.get("averaged_over") or "").split(", ") if t}
    seen = [t for t in order if t in names]
    for section in ("ranks", "stats"):
        for r in board.get(section) or []:
            t = r.get("task")
            if t in names and t not in seen:
                seen.append(t)
    return seen + sorted(names - set(seen))


def chance_of(task: str, metric: str, rows: Sequence[Mapping[str, Any]], board: Mapping[str, Any]) -> tuple[float | None, str]:
    """The task's chance floor for ``metric`` where the leaderboard data has one, and the field it came from.

    Looked for, in order: the report writer's ``floors.chance`` (issue 45); a top-level field whose name holds ``chance`` mapping the task to a number or to
    ``{metric: number}``; then a field of the task's stats rows named ``chance``, ``chance_<metric>``,
    ``chance.<metric>`` or ``chance_<...>`` (not a chance-corrected figure)."""
    floors = board.get("floors")
    if isinstance(floors, Mapping) and floors.get("metric", metric) == metric and isinstance(floors.get("chance"), Mapping):
        got = number(floors["chance"].get(task))  # the report writer's own (medbench_core.evaluation.floors.chance_by_task)
        if got is not None:
            return got, "floors.chance"
    for key, v in board.items():
        if "chance" in key.lower() and isinstance(v, Mapping) and task in v:
            got = v[task]
            if isinstance(got, Mapping):
                got = got.get(metric, got.get("mean"))
            if number(got) is not None:
                return number(got), key
    names = ["chance", f"chance_{metric}", f"chance.{metric}", f"{metric}_chance"]
    for r in rows:
        for k in names + sorted(k for k in r if "chance" in k.lower() and "corrected" not in k.lower() and k not in names):
            if number(r.get(k)) is not None:
                return number(r[k]), k
    return None, ""


# --- stored provenance ----------------------------------------------------------------------------


def _json(path: Path) -> dict[str, Any]:
    try:
        got = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return got if isinstance(got, dict) else {}


def task_view(name: str, data_root: Path | None, catalog: Any, shared_data: Path | None, benchmark: str) -> TaskView:
    """A task's description, manifest, gates and source files, as stored (each part absent when it is not there)."""
    view = TaskView(name, slug(name))
    entry = None
    if catalog is not None:
        entry = next((t for t in catalog.tasks if t.name == name), None)
    if entry is not None:
        view.entry = {"reader": entry.reader, "path": entry.path, "research_only": entry.research_only, **{k: v for k, v in entry.options.items()}}
    if data_root is None:
        view.notes.append("the data folder was not given: no task description, manifest or contract results")
    else:
        folder = Path(data_root) / "tasks" / name
        stored = _json(folder / "task.json")
        view.meta = dict(stored.get("meta") or {})
        view.content_hash = str(stored.get("content_hash") or "")
        view.manifest = _json(folder / "MANIFEST.json")
        view.gate = _json(folder / "GATE.json")
        view.contract = _json(folder / "gate" / "contract.json")
        if not view.meta:
            view.notes.append(f"no curated task at {folder} (not curated here, or removed since)")
    view.families = families(view.meta, view.entry, benchmark)
    if entry is not None and shared_data is not None and entry.path:
        view.source_files, view.source_note = source_files(Path(shared_data), entry.path)
    elif entry is None:
        view.source_note = "not in the catalogue (tasks.yaml) given: its source files are not listed"
    return view


def families(meta: Mapping[str, Any], entry: Mapping[str, Any], benchmark: str) -> list[str]:
    """The benchmark families a task belongs to: M3Retrieve (its reader or dataset), R2MED (its dataset or MTEB name),
    multilingual (any language but English), else the user's own benchmark (tasks.yaml's ``benchmark``)."""
    said = " ".join(str(x) for x in (entry.get("reader"), entry.get("dataset"), meta.get("dataset"), meta.get("mteb_task"), meta.get("source"))).lower()
    out = []
    if "m3retrieve" in said:
        out.append("M3Retrieve")
    if "r2med" in said:
        out.append("R2MED")
    languages = [str(x) for x in meta.get("languages") or []]
    if languages and set(languages) != {"en"}:
        out.append("multilingual")
    return out or [benchmark or "own"]


MAX_SOURCE_FILES = 40  # listed one by one; beyond that, a count (the manifest's digest covers them all)


def source_files(shared: Path, path: str) -> tuple[list[dict[str, Any]], str]:
    """The task's source files under the shared data folder with their sizes and sha256 (noted hashes are reused)."""
    from medbench_core.storage import sha256_noting

    src = Path(path) if Path(path).is_absolute() else shared / path
    if not src.exists():
        return [], f"{src}: not on this machine (a pulled release, or a source removed after curating)"
    files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
    out = []
    for p in files[:MAX_SOURCE_FILES]:
        try:
            out.append({"file": p.name if p == src else str(p.relative_to(src)), "size": p.stat().st_size, "sha256": sha256_noting(p)})
        except OSError as exc:
            out.append({"file": str(p), "size": None, "sha256": f"unreadable: {exc}"})
    more = f"; {len(files) - MAX_SOURCE_FILES} more file(s) not listed" if len(files) > MAX_SOURCE_FILES else ""
    return out, f"{src} ({len(files)} file(s){more})"


def load_cell_artifacts(cell: CellView, data_root: Path | None) -> None:
    """The cell's metrics.json and per_query.parquet, verified against the artifact's manifest."""
    key = cell.provenance.get("metrics_key")
    if data_root is None or not key:
        return
    from medbench_core.storage import verify_manifest

    folder = Path(data_root) / "artifacts" / cell.model / cell.task / "metrics" / str(key)
    try:
        verify_manifest(folder, ["metrics.json"])
        cell.metrics = json.loads((folder / "metrics.json").read_text())
        if (folder / "per_query.parquet").is_file():
            import polars as pl

            verify_manifest(folder, ["per_query.parquet"])
            cell.per_query = pl.read_parquet(folder / "per_query.parquet")
    except (MedbenchError, OSError, ValueError) as exc:
        cell.artifact_note = f"{folder}: {exc}"


def training_data(spec: Any) -> tuple[list[str], str]:
    """The training datasets a model declares: the ``datasets:`` of its model card (README.md front matter) in its
    local folder, package or offline hub snapshot; ([], why) when it declares none or its card is not here."""
    from medbench_core.retrieval.kinds.derived_base import is_derived

    if not getattr(spec, "path", "") or is_derived(spec):
        return [], "no weights of its own (a derived model or a lexical one): no training data to declare"
    try:
        from medbench_core.retrieval.weights import model_folder

        folder = model_folder(spec, online=False)
    except (MedbenchError, OSError, ValueError) as exc:
        return [], f"its weights are not on this machine ({str(exc).splitlines()[0][:200]})"
    card = Path(folder) / "README.md"
    if not card.is_file():
        return [], f"{folder} has no model card (README.md)"
    text = card.read_text(errors="replace")
    match = re.match(r"\A---\s*\n(.*?)\n---\s*\n", text, re.S)
    if not match:
        return [], f"{card}: no metadata block"
    try:
        import yaml

        meta = yaml.safe_load(match.group(1)) or {}
    except Exception:  # a card's metadata that does not parse declares nothing we can show
        return [], f"{card}: its metadata does not parse"
    declared = meta.get("datasets") if isinstance(meta, dict) else None
    if isinstance(declared, str):
        declared = [declared]
    if not declared:
        return [], f"{card} declares no datasets"
    return [str(d) for d in declared], str(card)


def model_view(name: str, spec: Any, cells: Sequence[CellView]) -> ModelView:
    view = ModelView(name, slug(name))
    revisions = sorted({str(c.provenance.get("model_revision")) for c in cells if c.provenance.get("model_revision")})
    view.revision = ", ".join(revisions)
    if spec is None:
        view.training_source = "not in the registry (models.yaml) given"
        return view
    view.registered = True
    view.kind = spec.kind
    view.entry = spec.to_entry()
    view.upstream = list(spec.upstream)
    view.revision = view.revision or spec.revision
    view.training_data, view.training_source = training_data(spec)
    return view


# --- all of it -----------------------------------------------------------------------------------


def gather(inputs: Any) -> SiteData:
    """The :class:`SiteData` of :class:`medbench_core.site.build.SiteInputs`."""
    from medbench_core.evaluation.plots import METRIC_LABELS
    from medbench_core.site.contamination import contamination_view

    board = read_board(Path(inputs.leaderboard))
    metric = str(board.get("metric") or "ndcg_at_10")
    sig = board.get("significance") or {}
    baseline = str(sig.get("baseline") or "")
    catalog = inputs.catalog
    models = board_models(board)
    tasks = board_tasks(board, [t.name for t in catalog.tasks] if catalog is not None else ())
    averaged = {str(r["model"]): [t for t in str(r.get("averaged_over") or "").split(", ") if t] for r in board["table"]}
    rows = {str(r["model"]): r for r in board["table"]}
    stats = {(r.get("model"), r.get("task")): r for r in board.get("stats") or [] if r.get("metric", metric) == metric}
    trust = {(r.get("model"), r.get("task")): r for r in (board.get("trust") or {}).get("cells") or [] if r.get("metric", metric) == metric}
    ranks = {(r.get("model"), r.get("task")): r for r in board.get("ranks") or []}
    # Each cell's floors (tie-aware, chance, chance-corrected: medbench_core.evaluation.floors) join its stats row,
    # so its title and its task's table of figures show them by name.
    floors = board.get("floors") if isinstance(board.get("floors"), Mapping) else {}
    floor_cells = {(r.get("model"), r.get("task")): r for r in floors.get("cells") or [] if r.get("metric", metric) == metric}
    provenance = board.get("cells") or {}
    stale = board.get("stale") or {}
    runs = dict(inputs.mlflow_runs or {})
    cells: dict[tuple[str, str], CellView] = {}
    data_root = Path(inputs.data_root) if inputs.data_root else None
    for m in models:
        for t in tasks:
            st = dict(stats.get((m, t)) or {})
            for k, v in (floor_cells.get((m, t)) or {}).items():
                if k not in FLOOR_SAME and v is not None:
                    st.setdefault(k, v)
            value = number(st.get("mean"))
            if value is None:
                value = number(rows[m].get(t))
            cell = CellView(
                m, t, value=value, applicable=t in averaged.get(m, tasks), ci_low=number(st.get("ci_low")), ci_high=number(st.get("ci_high")),
                significant=bool(st.get("significant")), stats=st, trust=dict(trust.get((m, t)) or {}),
                rank={k: v for k, v in (ranks.get((m, t)) or {}).items() if k in RANK_FIELDS},
                provenance=dict(provenance.get(f"{m}/{t}") or {}), stale=str(stale.get(f"{m}/{t}") or ""),
            )  # fmt: skip
            load_cell_artifacts(cell, data_root)
            if cell.metrics is not None and value is not None:
                mean = number((cell.metrics.get("mean") or {}).get(metric))
                cell.value = mean if mean is not None else value
            key = cell.provenance.get("metrics_key")
            if key and key in runs:
                cell.mlflow = dict(runs[key])
            cells[(m, t)] = cell
    views = []
    for t in tasks:
        view = task_view(t, data_root, catalog, inputs.shared_data, str(board.get("benchmark") or ""))
        view.chance, view.chance_field = chance_of(t, metric, [stats[(m, t)] for m in models if (m, t) in stats], board)
        views.append(view)
    specs = {s.name: s for s in inputs.specs or ()}
    model_views = [model_view(m, specs.get(m), [cells[(m, t)] for t in tasks]) for m in models]
    average_rank_tasks: list[str] = []
    ranked = [r["model"] for r in board.get("ranks") or [] if r.get("task") == AVERAGE]
    if ranked:
        average_rank_tasks = averaged.get(ranked[0], [])
    return SiteData(
        board=board, metric=metric, label=METRIC_LABELS.get(metric, metric), baseline=baseline, models=model_views, tasks=views, cells=cells,
        averaged_over=averaged, average_rank_tasks=average_rank_tasks,
        average_ranks={str(m): {k: r[k] for k in RANK_FIELDS if k in r} for (m, t), r in ranks.items() if t == AVERAGE},
        build=dict(inputs.build or {}), links=inputs.links,
        other_sections={k: v for k, v in board.items() if k not in KNOWN_SECTIONS}, contamination=contamination_view(board, data_root),
    )  # fmt: skip
