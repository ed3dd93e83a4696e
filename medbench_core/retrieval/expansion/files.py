"""Published expansions: R2MED's layout or a plain ``{id, expansion}`` file, local or on the hub.

R2MED (``<task>/<method>/<generator>/query_with_hydoc.jsonl``): one JSON object per line with
``id``, ``text`` (the query) and ``hy_doc`` (the generated text). Plain JSONL: ``id`` (or
``query_id``) and ``expansion``. Parquet: columns ``query_id`` (or ``id``) and ``expansion``.

A file is refused whole, naming file, line (Parquet: row) and id, when a line is malformed,
has no id, names a query the task does not have, repeats an id, has no text, or when a query
of the task has no expansion. Nothing is returned, so nothing is stored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.expansion.frame import expansion_frame
from medbench_core.retrieval.expansion.spec import DEFAULT_FILES, ExpansionSpec, file_identity
from medbench_core.taskdata.task import Task
from medbench_core.storage import sha256_file

SHOW = 10  # problems named in one error


def relative_file(spec: ExpansionSpec, task: str) -> str:
    """The file of ``task`` inside the expansion's root, ``{task}``/``{method}``/``{generator}`` filled in."""
    template = spec.file or DEFAULT_FILES[spec.format]
    folder = spec.task_folders.get(task, task)
    return template.replace("{task}", folder).replace("{method}", spec.method).replace("{generator}", spec.generator)


def locate_file(spec: ExpansionSpec, task: str, *, online: bool = False) -> Path:
    """Local path of the expansion file of ``task``; a hub dataset is downloaded at its pinned revision.

    A hub dataset is read only with ``online=True`` (the orchestration's online switch) and a
    revision; medbench_core reads no environment variable to decide it.
    """
    rel = relative_file(spec, task)
    if spec.path.startswith("hub:"):
        repo = spec.path[4:]
        if not spec.revision:
            raise DataError(f"expansion {spec.name}: hub dataset {repo!r} needs a pinned 'revision'")
        if not online:
            raise DataError(f"expansion {spec.name}: {rel} is in hub dataset {repo!r}; reading it needs online=True (or download it and give a local path)")
        from huggingface_hub import hf_hub_download

        try:
            return Path(hf_hub_download(repo, rel, repo_type="dataset", revision=spec.revision))
        except Exception as exc:  # the hub client raises many kinds; all mean "not readable"
            raise DataError(f"expansion {spec.name}: cannot download {rel} from {repo}@{spec.revision} ({exc})") from exc
    path = Path(spec.resolve_path(spec.path, local=True)) / rel
    if not path.is_file():
        raise DataError(f"expansion {spec.name}: {path} not found (layout: {spec.file or DEFAULT_FILES[spec.format]} under {spec.path})")
    return path


def _text_field(spec: ExpansionSpec) -> str:
    return "hy_doc" if spec.format == "r2med" else "expansion"


def _norm(s: str) -> str:
    return " ".join(str(s).split())


def _records(spec: ExpansionSpec, path: Path) -> list[tuple[str, dict[str, Any] | None, str | None]]:
    """``(where, record, problem)`` per line or row; ``where`` is ``file:line`` or ``file:row N``."""
    out: list[tuple[str, dict[str, Any] | None, str | None]] = []
    if spec.format == "parquet":
        try:
            df = pl.read_parquet(path)
        except Exception as exc:  # polars/pyarrow raise several types for a broken file
            raise DataError(f"{path}: not a readable Parquet file ({exc})") from exc
        id_col = "query_id" if "query_id" in df.columns else "id" if "id" in df.columns else None
        if id_col is None or "expansion" not in df.columns:
            raise DataError(f"{path}: needs columns 'query_id' (or 'id') and 'expansion'; found {df.columns}")
        for i, row in enumerate(df.select(id_col, "expansion").iter_rows()):
            out.append((f"{path}:row {i}", {"id": row[0], "expansion": row[1]}, None))
        return out
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            where = f"{path}:{lineno}"
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                out.append((where, None, f"malformed JSON ({exc.msg} at column {exc.colno})"))
                continue
            if not isinstance(obj, dict):
                out.append((where, None, f"expected a JSON object, got {type(obj).__name__}"))
                continue
            out.append((where, obj, None))
    return out


def read_expansion_file(spec: ExpansionSpec, task: Task, path: str | Path) -> pl.DataFrame:
    """The expansions in ``path`` for ``task``, as an expansion frame (see module docstring for refusals)."""
    path = Path(path)
    field = _text_field(spec)
    query_text = dict(task.queries.select("query_id", "text").iter_rows())
    problems: list[str] = []
    first_line: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    for where, obj, problem in _records(spec, path):
        if problem:
            problems.append(f"{where}: {problem}")
            continue
        assert obj is not None
        raw_id = obj.get("id", obj.get("query_id", obj.get("_id")))
        if raw_id is None or str(raw_id).strip() == "":
            problems.append(f"{where}: record has no 'id'")
            continue
        qid = str(raw_id)
        if qid not in query_text:
            problems.append(f"{where}: id {qid} is not a query of task {task.name}")
            continue
        if qid in first_line:
            pos = first_line[qid][len(str(path)) + 1 :]
            problems.append(f"{where}: id {qid} appears again (first at {'line ' + pos if pos.isdigit() else pos})")
            continue
        first_line[qid] = where
        text = obj.get(field)
        if not isinstance(text, str) or not text.strip():
            problems.append(f"{where}: id {qid} has an empty or missing {field!r}")
            continue
        if spec.format == "r2med" and "text" in obj and _norm(obj["text"]) != _norm(query_text[qid] or ""):
            problems.append(f"{where}: id {qid}: its 'text' is not the query of task {task.name} (is task_folders right?)")
            continue
        rows.append({"query_id": qid, "raw": text})
    missing = [q for q in query_text if q not in first_line]
    if missing:
        problems.append(f"{path}: {len(missing)} query id(s) of task {task.name} have no expansion, e.g. {', '.join(missing[:SHOW])}")
    if problems:
        more = f"\n... and {len(problems) - SHOW} more" if len(problems) > SHOW else ""
        raise DataError(f"expansion {spec.name} x {task.name}: {len(problems)} problem(s), nothing stored:\n" + "\n".join(problems[:SHOW]) + more)
    frame = expansion_frame(rows, spec.reasoning)
    empty = frame.filter(pl.col("answer") == "")["query_id"].to_list()
    if empty:
        where = {q: first_line[q] for q in empty}
        raise DataError(
            f"expansion {spec.name} x {task.name}: {len(empty)} expansion(s) have reasoning but no answer after </think>, nothing stored: "
            + "; ".join(f"{where[q]}: id {q}" for q in empty[:SHOW])
        )
    return frame


def read_published(spec: ExpansionSpec, task: Task, *, online: bool = False) -> tuple[pl.DataFrame, dict[str, Any], dict[str, Any]]:
    """Read the published expansion of ``task``: ``(frame, identity, info)``.

    ``identity`` (for :func:`~medbench_core.retrieval.expansion.spec.expansion_key`) holds the file's
    sha256, not its location.
    """
    path = locate_file(spec, task.name, online=online)
    frame = read_expansion_file(spec, task, path)
    digest = sha256_file(path)
    identity = file_identity(spec, file_sha256=digest, task_folder=spec.task_folders.get(task.name, task.name))
    info = {"source": "file", "file": str(path), "file_sha256": digest, "n_queries": frame.height, "generator": spec.generator, "method": spec.method}
    return frame, identity, info
