"""What a version file says about each artifact, how a rebuilt file is judged against it, and the file's own checks.

``versions/<tag>.json`` (format 2) is enough to find and rebuild a benchmark version without git
tags: the commit of the code that produced it, the text of ``data.dvc``, the lock hash, the
registry and catalogue as they were, and, in stage order, every artifact of the version::

    {"stage": "embeddings", "model": "bm25", "task": "scifact",
     "path": "artifacts/bm25/scifact/embeddings/<key>", "key": "<key>",
     "files": {"info.json": {"sha256": ..., "size": ..., "rule": "json", "stable_sha256": ...}, ...},
     "upstream": {"task_content_hash": ..., "model_revision": ..., "model_entry": ..., "code_version": ...}}

Each file carries the rule it is compared by when rebuilt (:data:`RULES`): most must be the same
bytes; ``info.json`` files the same JSON apart from their timings; float arrays and FAISS indices
the same bytes where they can, otherwise equal within a tolerance on a few sampled rows (stored
in the file as ``probe``) and their sum; runs, and the metrics computed from them, by the rule of
:mod:`medbench_release.tolerance` (scores within what the vectors' tolerance allows, rankings up to
ties within it, metrics within the bound of those ties); a run keeps the top of a few queries
(``probe``) to be compared with when the published file is not at hand. A version file written
before a rule existed is read with today's rule for the file's name (:func:`effective_rule`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from medbench_core.storage import read_manifest
from medbench_core.yaml_file import load_yaml
from medbench_release.tolerance import ARRAY_TOLERANCE, METRIC_TOLERANCE, faiss_vectors  # noqa: F401 -- the rule's, named here too

FORMAT = 2
# The artifacts of a version, upstream first: a difference in one explains those after it.
ARTIFACT_STAGES = ("curated_task", "embeddings", "index", "run", "metrics")
RULES = {
    "exact": "same sha256",
    "json": "same JSON apart from timings (the keys in VOLATILE_JSON)",
    "array": "same bytes, else same shape and dtype and every sampled value within the tolerance",
    "faiss": "same bytes, else same vectors (sampled rows) within the tolerance",
    "run": (
        "same bytes; else, where the run's vectors were accepted within the tolerance, scores within the τ that follows from it "
        "and rankings up to ties within τ (against the published run when at hand, else its probe, else judged by its metrics); "
        "exact where it has no vectors behind it (BM25) and its inputs are identical; a run built from runs whose ties moved is "
        "judged by its metrics"
    ),
    "metrics": "same bytes, else every metric within 1e-9 of the version's where the run is identical, within the bound of the run's ties where they moved",
    "per_query": (
        "same bytes where the run is identical; where ties moved, each query's values within its tie bound (the published file at hand), "
        "else judged by metrics.json"
    ),
}
VOLATILE_JSON = ("seconds",)  # how long a stage took: never the same twice
PROBE_ROWS = 4  # rows of a 2-D array (elements of a 1-D one: PROBE_ROWS * 16) kept in the version file
PROBE_QUERIES, PROBE_RANKS = 8, 20  # a run's probe: the top PROBE_RANKS documents and scores of PROBE_QUERIES queries
RUN_FILES = ("run.parquet", "run.trec")

_HEX = re.compile(r"^[0-9a-f]+\Z")


# --- files ----------------------------------------------------------------------------------


def file_rule(path: Path) -> str:
    """How a file of an artifact is compared when rebuilt (see :data:`RULES`)."""
    if path.name == "info.json":
        return "json"
    if path.name in ("metrics.json", "per_query.parquet", *RUN_FILES):
        return effective_rule(path.name, "exact")
    if path.suffix == ".faiss":
        return "faiss"
    if path.suffix == ".npy":
        try:
            kind = np.load(path, mmap_mode="r", allow_pickle=False).dtype.kind
        except ValueError:
            return "exact"
        return "array" if kind == "f" else "exact"
    return "exact"


def effective_rule(name: str, recorded: str) -> str:
    """The rule a file is compared by today: runs and their metrics by :mod:`medbench_release.tolerance`, whatever an
    older version file recorded for them (it recorded ``exact``); every other file by its recorded rule."""
    if name in RUN_FILES:
        return "run"
    if name == "per_query.parquet":
        return "per_query"
    if name == "metrics.json":
        return "metrics"
    return recorded


def run_probe(path: Path) -> dict[str, Any]:
    """A run's fingerprint for the version file: the top :data:`PROBE_RANKS` documents and scores of :data:`PROBE_QUERIES`
    evenly spaced queries (scores as float64, exact for float32 ones), so that a rebuild can be compared without the file."""
    import polars as pl

    run = pl.read_parquet(path)
    queries = run.get_column("query_id").cast(pl.Utf8).unique(maintain_order=True).to_list()
    picked = [queries[i] for i in _probe_rows(len(queries), PROBE_QUERIES)]
    top = (
        run.with_columns(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8))
        .filter(pl.col("query_id").is_in(picked) & (pl.col("rank") <= PROBE_RANKS))
        .sort(["query_id", "rank"])
    )
    rows: dict[str, list] = {q: [] for q in picked}
    for q, d, sc in top.select("query_id", "doc_id", pl.col("score").cast(pl.Float64)).iter_rows():
        rows[q].append([d, sc])
    return {"ranks": PROBE_RANKS, "queries": rows}


def stable_json_sha256(path: Path) -> str:
    """sha256 of a JSON file's content without its timings (:data:`VOLATILE_JSON`), keys sorted."""
    obj = json.loads(path.read_text())
    if isinstance(obj, dict):
        obj = {k: v for k, v in obj.items() if k not in VOLATILE_JSON}
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _probe_rows(n: int, wanted: int) -> list[int]:
    return sorted({round(x) for x in np.linspace(0, n - 1, min(n, wanted))}) if n else []


def _pack(values: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<")).tobytes()).decode()


def unpack(text: str, dtype: str) -> np.ndarray:
    """The sampled values of a probe (little-endian, in the array's own dtype)."""
    return np.frombuffer(base64.b64decode(text), dtype=np.dtype(dtype).newbyteorder("<"))


def array_probe(arr: np.ndarray) -> dict[str, Any]:
    """A float array's fingerprint: shape, dtype, a few evenly spaced rows (exact values) and the sum."""
    a = np.asarray(arr)
    rows = _probe_rows(a.shape[0] if a.ndim else 0, PROBE_ROWS if a.ndim > 1 else PROBE_ROWS * 16)
    return {
        "shape": list(a.shape),
        "dtype": str(a.dtype),
        "rows": rows,
        "values": _pack(a[rows]) if rows else "",
        "sum": float(a.astype(np.float64).sum()),
    }


def describe_file(path: Path, sha256: str, size: int) -> dict[str, Any]:
    """The version file's entry for one file of an artifact: its hash, size, comparison rule and fingerprint."""
    rule = file_rule(path)
    out: dict[str, Any] = {"sha256": sha256, "size": size, "rule": rule}
    if rule == "json":
        out["stable_sha256"] = stable_json_sha256(path)
    elif rule == "array":
        out["probe"] = array_probe(np.load(path, allow_pickle=False))
    elif rule == "faiss":
        vectors = faiss_vectors(path)
        if vectors is not None:
            out["probe"] = array_probe(vectors)
    elif rule == "run" and path.suffix == ".parquet":
        out["probe"] = run_probe(path)
    return out


def describe_files(folder: Path) -> dict[str, dict[str, Any]]:
    """Every file the folder's manifest lists (the manifest was verified by the caller)."""
    return {name: describe_file(folder / name, e["sha256"], e["size"]) for name, e in sorted(read_manifest(folder)["files"].items())}


# --- provenance -------------------------------------------------------------------------------


def source_digest(shared_data: Path, entry: dict[str, Any]) -> str:
    """:func:`medbench_core.taskdata.catalog.source_files_digest` of the source files a catalogue entry reads, or its hub dataset and revision."""
    if not entry.get("path"):
        return f"hub:{entry.get('dataset', '')}@{entry.get('revision', '')}"
    from medbench_core.taskdata.catalog import source_files_digest

    src = Path(shared_data) / entry["path"]
    if not src.exists():
        return "missing"
    return source_files_digest(src)


def entry_digest(entry: dict[str, Any] | None) -> str:
    """Short sha256 of a registry or catalogue entry (what a user edits in models.yaml / tasks.yaml)."""
    return hashlib.sha256(json.dumps(entry, sort_keys=True, default=str).encode()).hexdigest()[:16] if entry is not None else "absent"


def registry_entries(models_text: str) -> dict[str, dict[str, Any]]:
    """name -> entry of a models.yaml text."""
    doc = load_yaml(models_text, "models.yaml") or {}
    return {str(m["name"]): m for m in doc.get("models") or [] if isinstance(m, dict) and "name" in m}


def catalogue_entries(tasks_text: str) -> dict[str, dict[str, Any]]:
    """task name -> entry (subsets expanded) of a tasks.yaml text."""
    from medbench_core.taskdata.catalog import expand_subsets

    doc = load_yaml(tasks_text, "tasks.yaml") or {}
    out = {}
    for raw in doc.get("tasks") or []:
        if isinstance(raw, dict) and "name" in raw:
            for e in expand_subsets(raw, "tasks.yaml"):
                out[str(e["name"])] = e
    return out


def task_upstream(task_dir: Path, entry: dict[str, Any] | None, shared_data: Path, curation_code: str) -> dict[str, Any]:
    """What a curated task was built from: its source files' digest (as recorded when it was curated, else as the sources are
    now), the dataset revision, the catalogue entry, the code."""
    meta = json.loads((task_dir / "task.json").read_text()).get("meta", {}) if (task_dir / "task.json").exists() else {}
    curated_from = (read_manifest(task_dir).get("inputs") or {}).get("files") if (task_dir / "MANIFEST.json").exists() else None
    if not (isinstance(curated_from, str) and len(curated_from) == 64):
        curated_from = None  # curated before the one source digest was recorded beside the task
    return {
        "source": (entry or {}).get("path") or (entry or {}).get("dataset", ""),
        "source_sha256": curated_from or (source_digest(shared_data, entry) if entry is not None else "unknown"),
        "dataset_revision": meta.get("source_revision", ""),
        "task_entry": entry_digest(entry),
        "code_version": curation_code,
    }


def model_upstream(folder: Path, stage: str, keys: dict[str, str], model_entry: dict[str, Any] | None) -> dict[str, Any]:
    """What a model x task artifact was built from, as its manifest records it, with the upstream stage's key."""
    prov = read_manifest(folder).get("provenance", {})
    order = ("embeddings", "index", "run", "metrics")
    i = order.index(stage)
    up = next((keys.get(s) for s in reversed(order[:i]) if keys.get(s)), None) if i else None
    return {
        "task_content_hash": prov.get("task_content_hash", ""),
        "model_revision": prov.get("model_revision", ""),
        "model_entry": entry_digest(model_entry),
        "code_version": prov.get("code_version", ""),
        "upstream_key": up,
    }


def artifact_record(data_dir: Path, folder: Path, stage: str, *, model: str | None, task: str, key: str, upstream: dict[str, Any]) -> dict[str, Any]:
    return {
        "stage": stage,
        "model": model,
        "task": task,
        "path": str(folder.relative_to(data_dir)),
        "key": key,
        "files": describe_files(folder),
        "upstream": upstream,
    }


def stage_rank(artifact: dict[str, Any]) -> int:
    return ARTIFACT_STAGES.index(artifact["stage"])


def dumps_version(record: dict[str, Any]) -> str:
    """The version file's text: indented, but one line per file of an artifact (a task may hold thousands of images)."""
    files: list[str] = []
    shallow = dict(record)
    shallow["artifacts"] = []
    for a in record.get("artifacts", []):
        entries = {}
        for name, f in a["files"].items():
            entries[name] = f"@@file{len(files)}@@"
            files.append(json.dumps(f, sort_keys=True, separators=(", ", ": ")))
        shallow["artifacts"].append({**a, "files": entries})
    text = json.dumps(shallow, indent=1, default=str)  # the record's own order: what a reader looks for first
    for i, f in enumerate(files):
        text = text.replace(f'"@@file{i}@@"', f, 1)
    return text + "\n"


# --- checks ---------------------------------------------------------------------------------


def dvc_md5(data_dvc_text: str) -> str | None:
    """The md5 of the output ``data`` in a data.dvc text."""
    doc = load_yaml(data_dvc_text, "data.dvc") or {}
    for out in doc.get("outs", []) or []:
        if out.get("path") == "data":
            return str(out.get("md5") or "") or None
    return None


def check_version(record: dict[str, Any], data_dvc_text: str | None = None) -> list[str]:
    """Everything wrong with a version file (empty when well formed and consistent with ``data_dvc_text``).

    Checks the fields a rebuild needs, every artifact's path, key and files, that the artifacts
    come in stage order, that every run's stage keys name an artifact of the version and its
    metrics are numbers, and that the data hash is the one ``data.dvc`` names.
    """
    problems: list[str] = []
    need = ("format", "tag", "benchmark", "data_version", "data_dvc", "code_commit", "lock_hash", "code_versions", "registry", "artifacts", "runs")
    missing = [k for k in need if k not in record]
    if missing:
        return [f"missing field(s): {', '.join(missing)}"]
    if record["format"] != FORMAT:
        problems.append(f"format {record['format']!r}, expected {FORMAT}")
    if not (len(record["code_commit"]) == 40 and _HEX.match(record["code_commit"])):
        problems.append(f"code_commit {record['code_commit']!r} is not a 40-hex git commit")
    if not (len(record["lock_hash"]) == 16 and _HEX.match(record["lock_hash"])):
        problems.append(f"lock_hash {record['lock_hash']!r} is not 16 hex digits")
    if dvc_md5(record["data_dvc"]) != record["data_version"]:
        problems.append(f"data_dvc names {dvc_md5(record['data_dvc'])}, data_version says {record['data_version']}")
    if data_dvc_text is not None and dvc_md5(data_dvc_text) != record["data_version"]:
        problems.append(f"data.dvc names {dvc_md5(data_dvc_text)}, the version file {record['data_version']}")
    for name in ("models.yaml", "tasks.yaml"):
        reg = record["registry"].get(name) or {}
        if hashlib.sha256(str(reg.get("text", "")).encode()).hexdigest() != reg.get("sha256"):
            problems.append(f"registry {name}: text does not hash to its sha256")
    paths: dict[str, dict[str, Any]] = {}
    last = 0
    for i, a in enumerate(record["artifacts"]):
        where = f"artifacts[{i}] ({a.get('stage')} {a.get('model') or ''} {a.get('task')})"
        if a.get("stage") not in ARTIFACT_STAGES:
            problems.append(f"{where}: unknown stage")
            continue
        if stage_rank(a) < last:
            problems.append(f"{where}: out of stage order")
        last = stage_rank(a)
        if not a.get("path") or a["path"].startswith("/") or ".." in Path(a["path"]).parts:
            problems.append(f"{where}: path {a.get('path')!r} is not inside data/")
        if a["stage"] != "curated_task" and not a["path"].endswith("/" + str(a.get("key"))):
            problems.append(f"{where}: path {a['path']} does not end with its key {a.get('key')}")
        if not a.get("files"):
            problems.append(f"{where}: no files")
        for name, f in (a.get("files") or {}).items():
            if not (isinstance(f.get("sha256"), str) and len(f["sha256"]) == 64 and _HEX.match(f["sha256"])) or f.get("rule") not in RULES:
                problems.append(f"{where}: file {name}: needs a sha256 and a rule ({', '.join(RULES)})")
        if not isinstance(a.get("upstream"), dict) or "code_version" not in a["upstream"]:
            problems.append(f"{where}: no upstream provenance")
        paths[a.get("path", "")] = a
    tasks = {a["task"] for a in record["artifacts"] if a.get("stage") == "curated_task"}
    for r in record["runs"]:
        label = f"run {r.get('model')} x {r.get('task')}"
        if r.get("task") not in tasks:
            problems.append(f"{label}: its curated task is not an artifact of the version")
        for stage in r.get("stages") or ():
            key = (r.get("keys") or {}).get(stage)
            if not any(a.get("key") == key and a.get("model") == r.get("model") and a.get("stage") == stage for a in record["artifacts"]):
                problems.append(f"{label}: {stage} key {key} is not an artifact of the version")
        if not {"run", "metrics"} <= set(r.get("stages") or ()):
            problems.append(f"{label}: a run needs its run and metrics artifacts (stages: {r.get('stages')})")
        if not r.get("metrics") or not all(isinstance(v, (int, float)) for v in r["metrics"].values()):
            problems.append(f"{label}: no metrics, or a metric that is not a number")
    return problems
