"""Published expansions: R2MED's layout or a plain ``{id, expansion}`` file, local or on the hub.

R2MED (``<task>/<method>/<generator>/query_with_hydoc.jsonl``): one JSON object per line with
``id``, ``text`` (the query) and ``hy_doc`` (the generated text). Plain JSONL: ``id`` (or
``query_id``) and ``expansion``. Parquet: columns ``query_id`` (or ``id``) and ``expansion``.

On the hub each R2MED task is its own dataset (``R2MED/Biology``, ...) holding
``<method>/<generator>/query_with_hydoc.jsonl`` (its card's configs ``hyde``, ``query2doc``,
``lamer``, ``search-r1``, one split per generator): ``path: hub:R2MED/{task}`` reads every task
from one entry, each at its pinned revision, from the local hub cache
(``datasets--R2MED--Biology/snapshots/<commit>/hyde/gpt4/query_with_hydoc.jsonl``); only an
online run downloads a missing file.

A file is refused whole, naming file, line (Parquet: row) and id, when a line is malformed,
has no id, names a query the task does not have, repeats an id, has no text, or when a query
of the task has no expansion. Nothing is returned, so nothing is stored.

An **empty** text is R2MED's case apart: an R2MED file's ``hy_doc`` that is an empty (or blank)
string, or a reasoning text whose answer after the marker is empty, is kept and scored as R2MED
scores it, with the empty string (its ``load_retrieval_data``, eval_BM25.py l.124-133 and
eval_retrieval.py l.37-44 at 62b7074, reads ``e["hy_doc"]`` whatever it holds; the query stays in
the mean). They are counted and named (:func:`empty_answers`, the expansion's info and the
expanded run's notes). What R2MED's code fails on is refused: a line without ``hy_doc``
(``KeyError``) or with one that is not a string (``null``: ``text*2 + " " + None`` is a
``TypeError``). The plain formats (``jsonl``, ``parquet``), medbench's own, refuse an empty text
or answer as before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.expansion.frame import expansion_frame
from medbench_core.retrieval.expansion.spec import DEFAULT_FILES, ExpansionSpec, file_identity
from medbench_core.storage import sha256_file
from medbench_core.taskdata.task import Task

SHOW = 10  # problems named in one error


def task_folder(spec: ExpansionSpec, task: str) -> str:
    """The value of ``{task}`` for a medbench task (``task_folders``, else the task's own name)."""
    return spec.task_folders.get(task, task)


def file_template(spec: ExpansionSpec) -> str:
    """``file``, or the format's default; a root that already names the task (``{task}`` in ``path``) has no task folder inside."""
    if spec.file:
        return spec.file
    template = DEFAULT_FILES[spec.format]
    return template.removeprefix("{task}/") if "{task}" in spec.path else template


def relative_file(spec: ExpansionSpec, task: str) -> str:
    """The file of ``task`` inside the expansion's root, ``{task}``/``{method}``/``{generator}`` filled in."""
    return file_template(spec).replace("{task}", task_folder(spec, task)).replace("{method}", spec.method).replace("{generator}", spec.generator)


def hub_location(spec: ExpansionSpec, task: str) -> tuple[str, str]:
    """``(repository, revision)`` of a hub expansion for ``task``: ``{task}`` filled in, the revision of
    that task (``revisions`` by ``{task}`` value or task name), else ``revision``."""
    folder = task_folder(spec, task)
    repo = spec.path[4:].replace("{task}", folder)
    revision = spec.revisions.get(folder) or spec.revisions.get(task) or spec.revision
    if not revision:
        raise DataError(f"expansion {spec.name}: no revision for hub dataset {repo!r} (task {task}); add {folder}: <commit> to 'revisions'")
    return repo, revision


def locate_file(spec: ExpansionSpec, task: str, *, online: bool = False, hub_cache: str | Path | None = None) -> Path:
    """Local path of the expansion file of ``task``.

    A hub dataset is read from the local hub cache (``hub_cache``, default huggingface_hub's) at
    its pinned revision; only with ``online=True`` (the orchestration's online switch) is a
    missing file downloaded. medbench_core reads no environment variable to decide it.
    """
    rel = relative_file(spec, task)
    if spec.path.startswith("hub:"):
        from medbench_core.hub import repo_folder, resolve_revision

        repo, revision = hub_location(spec, task)
        sha = resolve_revision(repo, revision, repo_type="dataset", online=online, cache_dir=hub_cache)
        cached = repo_folder(repo, "dataset", hub_cache) / "snapshots" / sha / rel
        if cached.is_file():
            return cached
        if not online:
            raise DataError(
                f"expansion {spec.name}: {rel} of hub dataset {repo}@{sha} is not in the local hub cache ({cached} missing); "
                f"download it once (hf download {repo} {rel} --repo-type dataset --revision {sha}) or run online (MEDBENCH_ONLINE=1)"
            )
        from huggingface_hub import hf_hub_download

        try:
            return Path(hf_hub_download(repo, rel, repo_type="dataset", revision=sha, cache_dir=hub_cache))
        except Exception as exc:  # the hub client raises many kinds; all mean "not readable"
            raise DataError(f"expansion {spec.name}: cannot download {rel} from {repo}@{sha} ({exc})") from exc
    root = spec.resolve_path(spec.path.replace("{task}", task_folder(spec, task)), local=True)
    path = Path(root) / rel
    if not path.is_file():
        raise DataError(f"expansion {spec.name}: {path} not found (layout: {file_template(spec)} under {spec.path})")
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
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                out.append((where, None, f"not UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1} ({exc.reason}); re-encode the file as UTF-8"))
                continue
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                out.append((where, None, f"malformed JSON ({exc.msg} at column {exc.colno})"))
                continue
            except RecursionError:
                out.append((where, None, "JSON nested deeper than the parser can read (RecursionError)"))
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
        if spec.format == "r2med" and isinstance(text, str):
            pass  # empty or blank too: R2MED scores it as the empty string (module docstring)
        elif not isinstance(text, str) or not text.strip():
            if field not in obj:
                what = "a missing"
            elif text is None:
                what = "a null"
            else:
                what = f"a {type(text).__name__} (not a string)" if not isinstance(text, str) else "an empty"
            problems.append(f"{where}: id {qid} has {what} {field!r}" + (" (R2MED's code fails on it too)" if spec.format == "r2med" else ""))
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
    rule = spec.reasoning_rule()
    frame = expansion_frame(rows, rule)
    empty = empty_answers(frame)
    if empty and spec.format != "r2med":
        where = {q: first_line[q] for q in empty}
        raise DataError(
            f"expansion {spec.name} x {task.name}: {len(empty)} expansion(s) have reasoning but an empty answer (rule {rule!r}), nothing stored: "
            + "; ".join(f"{where[q]}: id {q}" for q in empty[:SHOW])
        )
    return frame


def empty_answers(frame: pl.DataFrame) -> list[str]:
    """Query ids whose answer is empty or blank (scored with the empty string, as R2MED scores them), in frame order."""
    return [q for q, a in frame.select("query_id", "answer").iter_rows() if not (a or "").strip()]


def empty_note(ids: list[str], n_queries: int) -> str:
    """The note a run or an expansion carries about its empty expansions (one line, the first ids named)."""
    more = f" and {len(ids) - SHOW} more" if len(ids) > SHOW else ""
    return (
        f"{len(ids)} of {n_queries} queries have an empty expansion, scored with the empty string as R2MED's code scores them "
        f"(kept in the mean): {', '.join(ids[:SHOW])}{more}"
    )


def read_published(
    spec: ExpansionSpec, task: Task, *, online: bool = False, hub_cache: str | Path | None = None
) -> tuple[pl.DataFrame, dict[str, Any], dict[str, Any]]:
    """Read the published expansion of ``task``: ``(frame, identity, info)``.

    ``identity`` (for :func:`~medbench_core.retrieval.expansion.spec.expansion_key`) holds the file's
    sha256, not its location.
    """
    path = locate_file(spec, task.name, online=online, hub_cache=hub_cache)
    frame = read_expansion_file(spec, task, path)
    digest = sha256_file(path)
    identity = file_identity(spec, file_sha256=digest, task_folder=task_folder(spec, task.name), hub=hub_identity(spec, task.name, online, hub_cache))
    info = {"source": "file", "file": str(path), "file_sha256": digest, "n_queries": frame.height, "generator": spec.generator, "method": spec.method,
            "reasoning": spec.reasoning_rule()}  # fmt: skip
    return frame, identity, info


def hub_identity(spec: ExpansionSpec, task: str, online: bool = False, hub_cache: str | Path | None = None) -> tuple[str, str] | None:
    """``(repository, commit)`` a hub expansion of ``task`` is read from; None for a local one."""
    if not spec.path.startswith("hub:"):
        return None
    from medbench_core.hub import resolve_revision

    repo, revision = hub_location(spec, task)
    return repo, resolve_revision(repo, revision, repo_type="dataset", online=online, cache_dir=hub_cache)
