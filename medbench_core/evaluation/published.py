"""Published scores beside ours: MTEB's results repository and R2MED's result files, read from a folder.

Two layouts, told apart by their content (both keep their files under a ``results/`` folder):

- **MTEB** (github.com/embeddings-benchmark/results; mteb/results/task_result.py, mteb/cache/result_cache.py
  in mteb 2.26.24): ``results/<org>__<model>/<revision>/<TaskName>.json`` holding ``task_name``,
  ``dataset_revision`` and ``scores: {split: [{hf_subset, main_score, ndcg_at_10, ...}]}``, beside a
  ``model_meta.json`` whose ``name`` and ``revision`` name the model (the folder names otherwise,
  ``__`` read as ``/``). Experiment folders (``<revision>/experiments/``) are not read, as mteb's
  loader skips them by default.
- **R2MED** (github.com/R2MED/R2MED at 62b7074, ``results/``): ``base retriever/<retriever>/<Task>.json``,
  ``gar/<method>/<generator>/<retriever>/<Task>.json`` and ``reranker/<reranker>/<retriever>/top_<k>/<Task>.json``,
  each ``{"dataset_name", "test": {metrics}, ...}``; the metric is spelt ``ndcg_at_10`` or ``NDCG@10``
  depending on the file. The published model is the retriever folder (``bm25``, ``bge``),
  ``<method>/<generator>/<retriever>`` or ``<reranker>/<retriever>/top_<k>``. The first release used
  older task names (Stack-Biology, PMC-Treat, PMCPatients, ...), read as today's (SEED_BENCHMARKS.md).
  R2MED's files record no model or dataset revision.

A medbench model is compared with the published model its mapping names (``models:`` of the
source), or, without one, with the MTEB name its exports carry (its hub id: the same weights).
A medbench task matches the published task named in ``tasks:``, else its MTEB task name, else its
hub dataset's name (``R2MED/Biology`` -> ``Biology``), else its subset, else its own name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.evaluation.markdown_tables import markdown_table

# R2MED's first result files (commit 45cbac5) named tasks as its paper's draft did; renamed in a79bed4.
R2MED_OLD_NAMES = {
    "Stack-Biology": "Biology", "Stack-Bioinformatics": "Bioinformatics", "Stack-Medical": "Medical-Sciences",
    "PMC-Treat": "PMC-Treatment", "PMCPatients": "PMC-Clinical", "IIYiPatients-EN": "IIYi-Clinical",
}  # fmt: skip
_UPPER = {"ndcg": "NDCG", "map": "MAP", "recall": "Recall", "precision": "P"}
SOURCE_FIELDS = ("path", "models", "tasks")

PUBLISHED_SCHEMA: dict[str, pl.DataType] = {
    "model": pl.Utf8, "task": pl.Utf8, "metric": pl.Utf8, "ours": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64,
    "published": pl.Float64, "diff": pl.Float64, "in_ci": pl.Boolean, "status": pl.Utf8, "note": pl.Utf8,
    "published_model": pl.Utf8, "published_task": pl.Utf8, "layout": pl.Utf8, "file": pl.Utf8,
}  # fmt: skip
# status: "reproduced" (published value inside our 95% CI), "outside the CI", or "not compared" (a revision differs).
REPRODUCED, OUTSIDE, NOT_COMPARED = "reproduced", "outside the CI", "not compared"


@dataclass(frozen=True)
class PublishedSource:
    """One folder of published results and how medbench's names map to its names."""

    path: Path
    models: dict[str, str] = field(default_factory=dict)  # medbench model -> published model name
    tasks: dict[str, str] = field(default_factory=dict)  # medbench task -> published task name


@dataclass(frozen=True)
class Published:
    """One published score."""

    model: str
    task: str
    value: float
    model_revision: str | None
    dataset_revision: str | None
    layout: str  # "mteb" or "r2med"
    file: str


def parse_sources(block: Any, base: str | Path, where: str) -> list[PublishedSource]:
    """The ``published_results:`` block of tasks.yaml: a folder, ``{path, models, tasks}``, or a list of those.

    Relative paths are read from ``base`` (the shared data folder, as the tasks' own paths).
    """
    if block is None:
        return []
    items = block if isinstance(block, list) else [block]
    out = []
    for i, item in enumerate(items):
        at = f"{where}: published_results" + (f"[{i}]" if isinstance(block, list) else "")
        if isinstance(item, str):
            item = {"path": item}
        if not isinstance(item, dict) or not item.get("path"):
            raise DataError(f"{at}: give a folder, or a mapping with 'path' (and optional 'models', 'tasks')")
        unknown = sorted(set(item) - set(SOURCE_FIELDS))
        if unknown:
            raise DataError(f"{at}: unknown field(s) {unknown}; known: {list(SOURCE_FIELDS)}")
        for key in ("models", "tasks"):
            m = item.get(key) or {}
            if not isinstance(m, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in m.items()):
                raise DataError(f"{at}: '{key}' maps medbench names to published names (strings), e.g. {{bge: BAAI/bge-large-en-v1.5}}")
        path = Path(str(item["path"])).expanduser()
        out.append(PublishedSource(path if path.is_absolute() else Path(base) / path, dict(item.get("models") or {}), dict(item.get("tasks") or {})))
    return out


def load_sources(tasks_file: str | Path, base: str | Path, override: str | Path | None = None) -> list[PublishedSource]:
    """The sources of tasks.yaml's ``published_results:``; ``override`` (``--published DIR``) replaces
    their folder (keeping the first source's mappings), or is the one source when tasks.yaml names none."""
    from medbench_core.yaml_file import read_yaml_mapping

    sources = parse_sources(read_yaml_mapping(Path(tasks_file), "task catalogue").get("published_results"), base, str(tasks_file))
    if override:
        first = sources[0] if sources else PublishedSource(Path(override))
        return [PublishedSource(Path(override), first.models, first.tasks)]
    return sources


def _metric_value(scores: Mapping[str, Any], metric: str) -> float | None:
    """``metric`` from a flat metric dict, under MTEB's spelling or R2MED's upper-case one (``NDCG@10``)."""
    if metric in scores:
        return float(scores[metric])
    name, _, k = metric.partition("_at_")
    upper = f"{_UPPER.get(name, name)}@{k}"
    return float(scores[upper]) if k and upper in scores else None


def _mteb_entry(doc: Mapping[str, Any], split: str, hf_subset: str) -> Mapping[str, Any] | None:
    scores = doc.get("scores") or {}
    entries = scores.get(split) if split in scores else (next(iter(scores.values())) if len(scores) == 1 else None)
    if not entries:
        return None
    for e in entries:
        if e.get("hf_subset") == hf_subset:
            return e
    return entries[0] if len(entries) == 1 else None


def _r2med_model(doc: Mapping[str, Any], rel: tuple[str, ...]) -> str:
    """The published model of an R2MED result file, from its fields (its folders when they lack them)."""
    if "gar_method" in doc:
        return f"{doc['gar_method']}/{doc.get('gar_llm')}/{doc.get('retriever_name')}"
    if "reranker_name" in doc:
        return f"{doc['reranker_name']}/{doc.get('retriever_name')}/top_{doc.get('topk')}"
    if "model_name" in doc:
        return str(doc["model_name"])
    return "/".join(rel[1:-1]) or rel[0]


def read_published(folder: str | Path, tasks: Iterable[str], *, metric: str = "ndcg_at_10", split: str = "test") -> dict[tuple[str, str], list[Published]]:
    """Every published ``metric`` under ``folder`` for the published task names ``tasks``: (model, task) -> scores.

    A model may have several (one per revision folder of MTEB's repository). MTEB scores come from
    ``split`` (or the file's only split) and the ``default`` subset (or the only one). Only files
    named after one of ``tasks`` are opened (the MTEB repository holds ~100,000 files). Raises
    DataError, naming the file, on a file that is neither layout.
    """
    root = Path(folder)
    if not root.is_dir():
        raise DataError(f"published results {root}: not a folder")
    wanted = set(tasks)
    stems = wanted | {old for old, new in R2MED_OLD_NAMES.items() if new in wanted}
    out: dict[tuple[str, str], list[Published]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "experiments" and not d.startswith("."))
        for name in sorted(filenames):
            stem, ext = os.path.splitext(name)
            if ext != ".json" or stem not in stems:
                continue
            path = Path(dirpath) / name
            try:
                doc = json.loads(path.read_bytes().decode("utf-8"))
            except (OSError, ValueError, RecursionError) as exc:  # ValueError: JSON or UTF-8; RecursionError: nested too deep
                raise DataError(f"{path}: not a JSON result file ({exc})") from None
            if isinstance(doc, dict) and "task_name" in doc and "scores" in doc:  # MTEB
                task = str(doc["task_name"])
                entry = _mteb_entry(doc, split, "default")
                value = _metric_value(entry, metric) if entry else None
                meta_file = path.parent / "model_meta.json"
                meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
                model = str(meta.get("name") or path.parent.parent.name.replace("__", "/"))
                rev = meta.get("revision") if meta_file.is_file() else path.parent.name
                item = Published(model, task, value, None if rev in (None, "", "no_revision_available") else str(rev),
                                 doc.get("dataset_revision"), "mteb", str(path))  # fmt: skip
            elif isinstance(doc, dict) and "dataset_name" in doc and isinstance(doc.get("test"), dict):  # R2MED
                task = R2MED_OLD_NAMES.get(str(doc["dataset_name"]), str(doc["dataset_name"]))
                rel = path.relative_to(root).parts
                rel = rel[rel.index("results") + 1 :] if "results" in rel[:-1] else rel
                item = Published(_r2med_model(doc, rel), task, _metric_value(doc["test"], metric), None, None, "r2med", str(path))
            else:
                raise DataError(f"{path}: neither an MTEB result (task_name, scores) nor an R2MED result (dataset_name, test)")
            if item.value is None or task not in wanted:
                continue
            out.setdefault((item.model, task), []).append(item)
    return out


def _best(candidates: list[Published], model_revision: str, dataset_revision: str) -> Published:
    """The published score at our revisions when there is one (model and dataset, else dataset), else the first."""
    for ok in (lambda p: p.model_revision == model_revision and p.dataset_revision == dataset_revision, lambda p: p.dataset_revision == dataset_revision):
        for p in candidates:
            if ok(p):
                return p
    return candidates[0]


def task_names(cell: Any, source: PublishedSource, mteb_tasks: Mapping[str, str] | None = None) -> list[str]:
    """The published names a medbench task may have, in order of preference (see the module docstring).

    ``mteb_tasks``: task -> its MTEB name when the cell does not carry one (a task read from the hub
    dataset an MTEB task reads: :func:`medbench_core.evaluation.exports.mteb_task_names`)."""
    names = [
        source.tasks.get(cell.task, ""),
        getattr(cell, "mteb_task", "") or (mteb_tasks or {}).get(cell.task, ""),
        (getattr(cell, "dataset", "") or "").rsplit("/", 1)[-1] if "/" in (getattr(cell, "dataset", "") or "") else "",
        getattr(cell, "subset", ""),
        cell.task,
    ]
    return list(dict.fromkeys(n for n in names if n))


def compare_published(
    cells: Iterable[Any],
    stats: pl.DataFrame,
    sources: list[PublishedSource],
    *,
    metric: str = "ndcg_at_10",
    model_names: Mapping[str, str] | None = None,
    mteb_tasks: Mapping[str, str] | None = None,
) -> pl.DataFrame:
    """Each evaluated cell that has a published score: ours with its 95% CI, the published value,
    the difference (ours - published) and whether the published value lies inside our CI.

    ``stats``: the leaderboard's rows (``mean``, ``ci_low``, ``ci_high`` per model x task).
    ``model_names``: medbench model -> its MTEB name (the default published name when a source maps
    none); ``mteb_tasks``: task -> its MTEB name (see :func:`task_names`). When the published file
    records a model revision or a dataset revision that is not ours, the cell is ``not compared``
    and the note says which and both values. The first source with a score for the cell gives it.
    """
    ci = {(r["model"], r["task"]): r for r in stats.filter(pl.col("metric") == metric).iter_rows(named=True)}
    cells = [c for c in cells if (c.model, c.task) in ci]
    rows = []
    for source in sources:
        names = {c.task: task_names(c, source, mteb_tasks) for c in cells}
        found = read_published(source.path, {n for ns in names.values() for n in ns}, metric=metric, split="test")
        for c in cells:
            if any(r["model"] == c.model and r["task"] == c.task for r in rows):
                continue
            published_model = source.models.get(c.model) or (model_names or {}).get(c.model, "")
            candidates = next((found[(published_model, n)] for n in names[c.task] if (published_model, n) in found), None)
            if not candidates:
                continue
            hit = _best(candidates, c.model_revision, c.task_revision)
            r = ci[(c.model, c.task)]
            row = {"model": c.model, "task": c.task, "metric": metric, "ours": r["mean"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                   "published": hit.value, "diff": None, "in_ci": None, "status": NOT_COMPARED, "note": "",
                   "published_model": hit.model, "published_task": hit.task, "layout": hit.layout, "file": hit.file}  # fmt: skip
            differs = []
            if hit.model_revision and c.model_revision and hit.model_revision != c.model_revision:
                differs.append(f"model revision differs (ours {c.model_revision[:12]}, published {hit.model_revision[:12]})")
            if hit.dataset_revision and c.task_revision and hit.dataset_revision != c.task_revision:
                differs.append(f"dataset revision differs (ours {c.task_revision[:12]}, published {hit.dataset_revision[:12]})")
            if differs:
                row["note"] = "; ".join(differs)
            else:
                inside = r["ci_low"] <= hit.value <= r["ci_high"]
                row |= {"diff": r["mean"] - hit.value, "in_ci": inside, "status": REPRODUCED if inside else OUTSIDE}
                if hit.layout == "r2med":
                    row["note"] = "the source records no revisions"
            rows.append(row)
    return pl.DataFrame(rows, schema=PUBLISHED_SCHEMA) if rows else pl.DataFrame(schema=PUBLISHED_SCHEMA)


def summary(rows: pl.DataFrame) -> str:
    """``published scores: 4 cells compared, 3 reproduced (inside our 95% CI), 1 outside; 1 not compared (revisions differ)``."""
    n_rep = rows.filter(pl.col("status") == REPRODUCED).height
    n_out = rows.filter(pl.col("status") == OUTSIDE).height
    n_not = rows.filter(pl.col("status") == NOT_COMPARED).height
    n = n_rep + n_out
    line = f"published scores: {n} cell{'' if n == 1 else 's'} compared, {n_rep} reproduced (inside our 95% CI), {n_out} outside the CI"
    return line + (f"; {n_not} not compared (a model or dataset revision differs)" if n_not else "")


def published_markdown(rows: pl.DataFrame, label: str = "nDCG@10") -> str:
    """The comparison as Markdown: ours with its CI, the published value and where from, the difference, the verdict."""
    body = []
    for r in rows.iter_rows(named=True):
        ours = f"{r['ours']:.4f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
        pub = f"{r['published']:.4f} ({r['published_model']}, {r['published_task']}, {'MTEB results' if r['layout'] == 'mteb' else 'R2MED results'})"
        diff = "-" if r["diff"] is None else f"{r['diff']:+.4f}"
        verdict = {REPRODUCED: "inside our CI: reproduced", OUTSIDE: "outside our CI"}.get(r["status"], f"not compared: {r['note']}")
        if r["status"] != NOT_COMPARED and r["note"]:
            verdict += f" ({r['note']})"
        body.append([r["model"], r["task"], ours, pub, diff, verdict])
    head = ["model", "task", "ours [95% CI]", "published", "difference", "verdict"]
    lines = [f"Published {label} beside ours", "", *markdown_table(head, body)]
    return "\n".join(lines + ["", summary(rows) + "."]) + "\n"
