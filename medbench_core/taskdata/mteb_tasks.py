"""MTEB's own task metadata, read from the ``mteb`` package (pinned in requirements.lock), never copied.

mteb is imported inside the functions (``import mteb`` takes seconds and loads datasets, pandas
and scikit-learn, though not torch), so importing this module costs nothing. Facts used here, as
read in mteb 2.26.24: ``mteb.get_task(name)`` returns a task instance and raises ``KeyError`` for an
unknown name (mteb/get_tasks.py); ``mteb.get_benchmark(name)`` accepts aliases such as
``MTEB(Medical)`` and raises ``KeyError`` (mteb/benchmarks/get_benchmark.py); a task's
``metadata`` (mteb/abstasks/task_metadata.py) holds ``dataset = {path, revision, ...}``,
``eval_splits``, ``eval_langs`` (a list, or a mapping hf_subset -> languages),
``hf_subsets_to_langscripts``, ``main_score``, ``domains``, ``license`` and ``type``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from medbench_core.errors import DataError


@dataclass(frozen=True)
class MtebMatch:
    """What :func:`match_dataset` found for one source dataset: MTEB's task name, or why none."""

    task: str | None
    reason: str = ""


@functools.lru_cache(maxsize=1)
def _by_dataset() -> dict[tuple[str, str], tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]]:
    """(dataset path, revision) -> every MTEB retrieval task on it: (name, eval splits, hf subsets)."""
    import mteb

    out: dict[tuple[str, str], list[tuple[str, tuple[str, ...], tuple[str, ...]]]] = {}
    for t in mteb.get_tasks(task_types=["Retrieval"], exclude_superseded=False):
        md = t.metadata
        out.setdefault((str(md.dataset.get("path")), str(md.revision)), []).append((md.name, tuple(md.eval_splits), tuple(md.hf_subsets)))
    return {k: tuple(v) for k, v in out.items()}


def match_dataset(dataset: str, revision: str, split: str, hf_subset: str = "default") -> MtebMatch:
    """The MTEB retrieval task that reads ``dataset`` at ``revision`` with ``split`` in its eval splits.

    Only a unique match counts: several MTEB tasks on one dataset repository (BRIGHT's, for
    instance) are told apart by their configs, which a medbench task read by files does not
    record, so such a task keeps medbench's name (name the task with ``reader: mteb, task:``).
    """
    if not dataset or not revision:
        return MtebMatch(None, "no hub dataset and revision recorded")
    found = [name for name, splits, subsets in _by_dataset().get((dataset, revision), ()) if split in splits and hf_subset in subsets]
    if len(found) == 1:
        return MtebMatch(found[0])
    if not found:
        return MtebMatch(None, f"no MTEB retrieval task reads {dataset}@{revision[:12]} with split {split!r}")
    return MtebMatch(None, f"{dataset}@{revision[:12]} is read by several MTEB tasks ({', '.join(sorted(found))}); name one with reader: mteb, task:")


def task_metadata(name: str):
    """mteb's ``TaskMetadata`` of the task ``name``; DataError naming the closest names when unknown."""
    import mteb

    try:
        return mteb.get_task(name).metadata
    except KeyError as exc:
        raise DataError(f"MTEB has no task {name!r} (mteb {mteb.__version__}): {exc.args[0] if exc.args else exc}") from None


# --- tasks.yaml entries naming MTEB tasks ----------------------------------------------------
# ``reader: mteb`` with ``task: <MTEB task name>`` (or a list) or ``benchmark: <MTEB benchmark name>``
# (its retrieval tasks). Everything the reader needs comes from mteb's metadata; options given in
# the entry (research_only, licence, split, subsets, name, ...) override or narrow it.
MTEB_KEYS = ("task", "benchmark")
_OWN = {"task", "benchmark", "subsets", "name", "reader"}


def is_mteb_entry(raw: object) -> bool:
    """True for a tasks.yaml entry that names MTEB tasks (``reader: mteb`` with ``task`` or ``benchmark``)."""
    return isinstance(raw, dict) and raw.get("reader") in ("mteb", "hf_retrieval") and any(k in raw for k in MTEB_KEYS)


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def task_slug(name: str) -> str:
    """A lowercase name for an MTEB task name: ``MedXpertQAExam``-style words split, ``Retrieval`` dropped."""
    import re

    s = re.sub(r"([a-z])([A-Z])", r"\1_\2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z]{2,})", r"\1_\2", s)
    s = _slug(s)
    return s[: -len("_retrieval")] if s.endswith("_retrieval") else s


def default_name(md) -> str:
    """medbench's task name for an MTEB task: its hub dataset ``<org>/<name>`` as ``<org>_<name>``
    (``R2MED/MedXpertQA-Exam`` -> ``r2med_medxpertqa_exam``, ``mteb/nfcorpus`` -> ``mteb_nfcorpus``: the names
    R2MED's subsets get in tasks.yaml), with the task's own name added when other MTEB tasks read
    the same dataset (BRIGHT's)."""
    path, revision = str(md.dataset.get("path")), str(md.revision)
    base = _slug(path.replace("/", "_"))
    shared = len(_by_dataset().get((path, revision), ())) > 1
    return f"{base}_{task_slug(md.name)}" if shared or not base else base


def _language(langscript: str) -> str:
    """``eng-Latn`` -> ``en`` (medbench's ISO 639-1 codes, as the exports map them back); else the ISO 639-3 code."""
    from medbench_core.evaluation.reports import LANGUAGE_SCRIPTS

    back = {v: k for k, v in LANGUAGE_SCRIPTS.items()}
    return back.get(langscript, langscript.split("-")[0])


def entries_for_task(name: str, raw: dict, where: str, prefix: str | None = None) -> list[dict]:
    """The catalogue entries of one MTEB task: one per hf_subset it evaluates (or per ``subsets`` given)."""
    from medbench_core.evaluation.metrics import DEFAULT_METRICS
    from medbench_core.taskdata.licences import UNKNOWN, normalise_licence

    md = task_metadata(name)
    if md.type != "Retrieval":
        raise DataError(f"{where}: MTEB task {name} is a {md.type} task; medbench reads retrieval tasks")
    if md.main_score not in DEFAULT_METRICS:
        raise DataError(f"{where}: MTEB task {name} is scored by {md.main_score}, which medbench does not compute ({', '.join(DEFAULT_METRICS)})")
    split = str(raw.get("split") or md.eval_splits[0])
    if split not in md.eval_splits:
        raise DataError(f"{where}: MTEB task {name} is evaluated on {md.eval_splits}, not split {split!r}")
    langs = md.hf_subsets_to_langscripts
    wanted = raw.get("subsets")
    subsets = list(langs) if wanted is None else [str(s) for s in (wanted if isinstance(wanted, list) else [wanted])]
    unknown = [s for s in subsets if s not in langs]
    if unknown:
        raise DataError(f"{where}: MTEB task {name} has no subset(s) {unknown}; its subsets: {list(langs)}")
    own = default_name(md)
    base = str(raw.get("name") or own) if prefix is None else f"{prefix}_{own}" if prefix else own
    licence = normalise_licence(md.license) if md.license else UNKNOWN
    out = []
    for subset in subsets:
        e: dict = {
            "name": base if subset == "default" or (len(subsets) == 1 and wanted is not None) else f"{base}_{_slug(subset)}",
            "reader": "mteb_task",
            "dataset": str(md.dataset["path"]),
            "revision": str(md.revision),
            "split": split,
            "mteb_task": name,
            "main_metric": md.main_score,
            "domains": list(md.domains or ()),
            "description": f"MTEB {name}: {' '.join(str(md.description).split())}",
        }
        if subset != "default":
            e["subset"] = subset
        if langs.get(subset):
            e["language"] = _language(langs[subset][0])
        if licence != UNKNOWN:
            e["licence"] = licence  # MTEB's; records or the dataset card that state their own win (reader's order)
        e.update({k: v for k, v in raw.items() if k not in _OWN})
        out.append(e)
    return out


def expand_entries(entries: list, where: object) -> list:
    """tasks.yaml's ``tasks:`` with every entry naming MTEB tasks replaced by the entries they stand for.

    ``{reader: mteb, task: R2MEDBiologyRetrieval}`` becomes ``{name: r2med_biology`` (:func:`default_name`), ``reader: mteb,
    dataset: R2MED/Biology, revision: 8b9fec2..., split: test, mteb_task: ..., main_metric: ndcg_at_10,
    domains: [Medical], language: en, licence: CC-BY-4.0, description: ...}``, read from mteb's own
    metadata. ``benchmark: R2MED`` stands for each retrieval task of the benchmark (``name``, if
    given, prefixes their names). Other entries pass through unchanged. mteb is imported only when
    some entry names an MTEB task.
    """
    if not any(is_mteb_entry(e) for e in entries):
        return entries
    out: list = []
    for i, raw in enumerate(entries):
        if not is_mteb_entry(raw):
            out.append(raw)
            continue
        at = f"{where}: tasks[{i}]"
        if "task" in raw and "benchmark" in raw:
            raise DataError(f"{at}: give 'task' or 'benchmark', not both")
        if {"path", "dataset", "revision"} & set(raw):
            raise DataError(
                f"{at}: an MTEB task brings its own dataset and revision (mteb's metadata); drop {sorted({'path', 'dataset', 'revision'} & set(raw))}"
            )
        if "task" in raw:
            names = raw["task"] if isinstance(raw["task"], list) else [raw["task"]]
            if len(names) > 1 and "name" in raw:
                raise DataError(f"{at}: 'name' names one task; with several MTEB tasks leave it out")
            for n in names:
                out += entries_for_task(str(n), raw, at)
        else:
            import mteb

            try:
                bench = mteb.get_benchmark(str(raw["benchmark"]))
            except KeyError as exc:
                raise DataError(f"{at}: MTEB has no benchmark {raw['benchmark']!r} (mteb {mteb.__version__}): {exc.args[0] if exc.args else exc}") from None
            tasks = [t.metadata.name for t in bench.tasks if t.metadata.type == "Retrieval"]
            if not tasks:
                raise DataError(f"{at}: MTEB benchmark {bench.name} has no retrieval task")
            for n in tasks:
                out += entries_for_task(n, {k: v for k, v in raw.items() if k != "name"}, at, prefix=str(raw.get("name") or ""))
    return out
