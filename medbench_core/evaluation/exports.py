"""Exports of stored results: MTEB's results layout (one JSON per model x task, loaded by mteb itself) and TREC runs."""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.evaluation.plots import file_name
from medbench_core.evaluation.reports import Cell
from medbench_core.retrieval.kinds.derived_base import is_derived
from medbench_core.taskdata.mteb_tasks import LANGUAGE_SCRIPTS

NO_REVISION = "no_revision_available"  # mteb's folder for a model without a revision (ResultCache)


def mteb_models(specs: Iterable[Any], revisions: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """``model_meta.json`` of every registered model, as mteb's ``ModelMeta`` validates it (mteb 2.26.24).

    A model read from a hub id is named by that id (``BAAI/bge-large-en-v1.5``), as MTEB's
    results name it; other models (BM25, local folders, derived models) are ``medbench/<entry>``
    (mteb requires an ``org/name``). When several entries share one hub id (the same weights with
    other settings), the entry named like the id's last part keeps the id and the others are
    ``medbench/<entry>`` with ``adapted_from`` the id. ``revisions``: model -> the revision its
    cells were computed at (the hub commit, a folder's hash, BM25's version); a derived model has none.
    """
    from medbench_core.hub import is_repo_id

    specs = list(specs)
    trained = training_datasets(specs)
    by_name = {s.name: s for s in specs}
    hub = {s.name: s.path for s in specs if not is_derived(s) and is_repo_id(s.path)}
    claims: dict[str, list[str]] = {}
    for name, path in hub.items():
        claims.setdefault(path, []).append(name)
    out = {}
    for s in specs:
        path = hub.get(s.name, "")
        owners = claims.get(path, [])
        own_id = bool(path) and (len(owners) == 1 or s.name == path.rsplit("/", 1)[-1])
        revision = (revisions or {}).get(s.name) or None
        meta = s.plugin.mteb_meta(s, by_name)  # the kind says what it is (mteb's allowed framework and model-type values)
        if meta["open_weights"] is None and path:
            meta["open_weights"] = True
        out[s.name] = {
            "name": path if own_id else f"medbench/{s.name}",
            "revision": revision,
            "release_date": None,
            "languages": None,
            "n_parameters": meta["n_parameters"],
            "memory_usage_mb": None,
            "max_tokens": meta["max_tokens"],
            "embed_dim": None,
            "license": None,
            "open_weights": meta["open_weights"],
            "public_training_code": None,
            "public_training_data": None,
            "framework": list(meta["framework"]),
            "similarity_fn_name": meta["similarity_fn_name"],
            "use_instructions": meta["use_instructions"],
            "training_datasets": trained.get(s.name),
            "loader": None,
            "reference": f"https://huggingface.co/{path}" if path else None,
            "adapted_from": path if path and not own_id else None,
            "modalities": list(meta["modalities"]),
            "model_type": list(meta["model_type"]),
        }
    return out


def training_datasets(specs: list[Any]) -> dict[str, list[str] | None]:
    """Each model's ``training_datasets`` as MTEB's ``ModelMeta`` holds them: the dataset names it (and its upstreams)
    declare (medbench_core.evaluation.contamination.declared: mteb's own names where it came from mteb), sorted; None
    when a model of its lineage declares nothing (MTEB's "unknown"). A manifest of texts or images has no name MTEB knows."""
    from medbench_core.evaluation.contamination.declared import declarations

    if not any(s.training_data is not None and s.training_data.declared for s in specs):
        return {}
    return {m: sorted(d.names) if d.known else None for m, d in declarations(specs).items()}


def default_model_meta(model: str, revision: str) -> dict[str, Any]:
    """``model_meta.json`` of a model the registry no longer lists: its name and revision, nothing claimed."""
    return {
        "name": f"medbench/{model}", "revision": revision or None, "release_date": None, "languages": None, "n_parameters": None,
        "memory_usage_mb": None, "max_tokens": None, "embed_dim": None, "license": None, "open_weights": None,
        "public_training_code": None, "public_training_data": None, "framework": [], "similarity_fn_name": None,
        "use_instructions": None, "training_datasets": None, "loader": None,
    }  # fmt: skip


def mteb_task_names(cells: Iterable[Cell]) -> dict[str, dict[str, Any]]:
    """Task -> ``{"mteb_task": MTEB's name or None, "reason": why not, "hf_subset", "languages"}``.

    A task read as an MTEB task (``reader: mteb, task:``) is that task. A task read from a hub
    dataset is the MTEB retrieval task that reads the same dataset at the same revision with the
    same split, when exactly one does (:func:`medbench_core.taskdata.mteb_tasks.match_dataset`).
    Every other task keeps medbench's name. mteb is imported only when some task has a hub dataset.
    """
    from medbench_core.hub import is_commit_sha, is_repo_id

    out: dict[str, dict[str, Any]] = {}
    for c in cells:
        if c.task in out:
            continue
        if c.mteb_task:
            out[c.task] = {"mteb_task": c.mteb_task, "reason": "read as the MTEB task", "hf_subset": c.subset or "default"}
        elif is_repo_id(c.dataset) and is_commit_sha(c.task_revision):
            from medbench_core.taskdata.mteb_tasks import match_dataset

            found = match_dataset(c.dataset, c.task_revision, c.split)
            out[c.task] = {"mteb_task": found.task, "reason": "same hub dataset, revision and split" if found.task else found.reason, "hf_subset": "default"}
        else:
            out[c.task] = {"mteb_task": None, "reason": "not read from a hub dataset (a local or bundled source)", "hf_subset": "default"}
    for info in out.values():
        if info["mteb_task"]:
            from medbench_core.taskdata.mteb_tasks import task_metadata

            md = task_metadata(info["mteb_task"])
            info["languages"] = list(md.hf_subsets_to_langscripts.get(info["hf_subset"], []))
            info["main_score"] = md.main_score
    return out


def mteb_result(
    cell: Cell, code_version: str = "", *, task_name: str | None = None, hf_subset: str = "default", languages: list[str] | None = None
) -> dict[str, Any]:
    """The cell as mteb's ``TaskResult`` JSON (mteb/results/task_result.py), one subset.

    ``task_name``: MTEB's name of the task (default: medbench's). ``dataset_revision`` is the
    source dataset's revision when the task records one (a hub commit sha, or ``sha256:`` of a
    local folder's files), else the curated task's content hash; ``mteb_version`` is null because
    mteb did not compute these numbers (``medbench`` records what did; mteb loads the file all the
    same); ``kg_co2_emissions`` is null (not measured). Scores carry every metric of metrics.json
    under MTEB's names (``ndcg_at_10``, ...) and ``main_score`` = the task's main metric, except bpref and
    condensed nDCG@10 where some query's qrels hold no judged non-relevant document: there they are the
    mean over the queries that hold one (``queries_with_judged_nonrelevant`` says how many), and left out
    when none does (docs/trust.md).
    ``languages`` default to the task's, written as MTEB does (``eng-Latn``).
    """
    if cell.metrics is None:
        raise DataError(f"{cell.model} x {cell.task}: no metrics to export; evaluate it first")
    mean = {k: float(v) for k, v in sorted(cell.metrics.get("mean", {}).items())}
    if cell.main_metric not in mean:
        raise DataError(f"{cell.model} x {cell.task}: metrics.json has no {cell.main_metric} (the task's main metric)")
    if languages is None:
        languages = [LANGUAGE_SCRIPTS.get(lang, lang) for lang in (cell.languages or ())]
    nonrel = (cell.metrics.get("holes") or {}).get("judged_nonrelevant")
    if nonrel and nonrel.get("queries_without"):  # bpref and condensed nDCG say nothing on those queries: their mean over the others
        for m, v in (nonrel.get("mean") or {}).items():
            mean.pop(m, None)
            if v is not None:
                mean[m] = float(v)
        mean["queries_with_judged_nonrelevant"] = float(nonrel["queries_with"])
    scores = {**mean, "main_score": mean[cell.main_metric], "hf_subset": hf_subset, "languages": list(languages)}
    return {
        "dataset_revision": cell.task_revision,
        "task_name": task_name or cell.task,
        "mteb_version": None,
        "scores": {cell.split: [scores]},
        "evaluation_time": cell.seconds,
        "kg_co2_emissions": None,
        "medbench": {
            "model": cell.model,
            "task": cell.task,
            "model_revision": cell.model_revision,
            "code_version": code_version,
            "n_queries": cell.metrics.get("n_queries"),
            "research_only": cell.research_only,
            "provenance": cell.provenance,
            **({"stale": cell.stale} if cell.stale else {}),  # the value is from before its inputs changed
        },
    }


def export(
    cells: Iterable[Cell],
    out_dir: str | Path,
    *,
    code_version: str = "",
    models: Mapping[str, Mapping[str, Any]] | None = None,
    tasks: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Write every evaluated cell as MTEB results JSON and as a TREC run under ``out_dir``.

    Layout, that of MTEB's results repository (``mteb.ResultCache(out_dir).load_results()`` reads it):
    ``results/<org>__<model>/<revision>/<task>.json`` beside ``model_meta.json``; TREC runs under
    ``trec/<model>/<task>.trec``; ``index.json`` lists what was written, each model's and task's
    MTEB name, and the tasks that kept medbench's name with the reason. ``models``: medbench
    model -> its ``model_meta.json`` (:func:`mteb_models`; default ``medbench/<model>``);
    ``tasks``: :func:`mteb_task_names` (computed when not given). Cells without metrics (not
    evaluated, not applicable) are skipped and listed. Returns the index.
    """
    from medbench_core.storage import write_json_atomic, write_with

    cells = list(cells)
    out = Path(out_dir)
    names = dict(tasks) if tasks is not None else mteb_task_names([c for c in cells if c.metrics is not None and c.applicable])
    index: dict[str, Any] = {"results": [], "trec": [], "skipped": [], "models": {}, "tasks": {}}
    metas: dict[tuple[str, str], dict[str, Any]] = {}
    for c in cells:
        if c.metrics is None or not c.applicable:
            index["skipped"].append({"model": c.model, "task": c.task, "reason": "not applicable" if not c.applicable else "not evaluated"})
            continue
        meta = dict((models or {}).get(c.model) or default_model_meta(c.model, c.model_revision))
        meta["revision"] = c.model_revision or None
        info = names.get(c.task) or {"mteb_task": None, "reason": "unknown task", "hf_subset": "default"}
        task_name = info["mteb_task"]
        if task_name and info.get("main_score") and info["main_score"] not in (c.metrics.get("mean") or {}):
            info = {**info, "mteb_task": None, "reason": f"MTEB's main score {info['main_score']} is not among medbench's metrics"}
            task_name = None
        index["tasks"][c.task] = {"mteb_task": task_name, **({} if task_name else {"kept_medbench_name": True}), "reason": info["reason"]}
        index["models"][c.model] = meta["name"]
        rev = file_name(c.model_revision) if c.model_revision else NO_REVISION
        folder = out / "results" / file_name(meta["name"]) / rev
        path = folder / f"{file_name(task_name or c.task)}.json"
        if path.exists():
            raise DataError(f"{path}: two cells export to the same file ({c.model} x {c.task} and an earlier one); give the models distinct names")
        write_json_atomic(path, mteb_result(c, code_version, task_name=task_name, hf_subset=info.get("hf_subset", "default"), languages=info.get("languages")))
        index["results"].append(str(path.relative_to(out)))
        metas[(meta["name"], rev)] = meta
        if c.run_dir is not None:
            trec = out / "trec" / file_name(c.model) / f"{file_name(c.task)}.trec"
            src = Path(c.run_dir) / "run.trec"
            if src.exists():
                trec.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, trec)
            elif (Path(c.run_dir) / "run.parquet").exists():
                from medbench_core.retrieval.ranking import write_trec_file

                run = pl.read_parquet(Path(c.run_dir) / "run.parquet")
                write_with(trec, lambda tmp, run=run, tag=f"medbench-{c.model}": write_trec_file(run, tmp, tag))
            else:
                raise DataError(f"{c.run_dir}: neither run.trec nor run.parquet for {c.model} x {c.task}")
            index["trec"].append(str(trec.relative_to(out)))
    for (name, rev), meta in sorted(metas.items()):
        write_json_atomic(out / "results" / file_name(name) / rev / "model_meta.json", meta)
    write_json_atomic(out / "index.json", index)
    return index


# --- the leaderboard bundle ---------------------------------------------------------------
