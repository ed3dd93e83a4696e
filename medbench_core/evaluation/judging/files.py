"""Judgements made elsewhere: TREC qrels or UMBRELA's JSONL output, read for one task.

- ``trec``: ``<query id> <iteration> <doc id> <grade>`` per line, whitespace-separated (trec_eval's
  qrels; UMBRELA writes its modified qrels so: ``write_modified_qrel`` in
  ``src/umbrela/utils/common_utils.py`` of github.com/castorini/umbrela at 16cba3e). A negative
  grade is trec_eval's "in the pool, unjudged" (``form_res_rels.c``): read as no grade (kept, counted
  with the unparsed), never as a judged non-relevant pair.
- ``umbrela``: one JSON object per line as UMBRELA's judge writes them (``prepare_judgments``, same
  file): ``query`` and ``passage`` (the texts it judged), ``judgment`` (0-3), ``result_status``
  (1 parsed, 0 when UMBRELA fell back to 0), and ``prediction``, ``prompt``, ``model``. UMBRELA's
  records carry no ids, so a record is matched to the task by its texts: the query by its text, the
  passage by the document's text, or its title and text (whitespace normalised); a record may
  also name ``qid``/``docid`` (or ``query_id``/``doc_id``) directly. A ``result_status`` of 0
  is read as *unparsed* (no grade), not as UMBRELA's fallback 0.

A file is refused whole, naming file, line and id, when a line is malformed, names a query or
document the task does not have (or a passage matching none, or several, of its documents),
judges a pair twice, or holds a grade outside the entry's ``grades``. Nothing is returned, so
nothing is stored.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from medbench_core.errors import DataError

SHOW = 10
FILE_SCHEMA: dict[str, pl.DataType] = {"query_id": pl.Utf8, "doc_id": pl.Utf8, "judge_grade": pl.Int64, "raw": pl.Utf8}


def _norm(s: str | None) -> str:
    return " ".join(str(s or "").split())


def read_judgement_file(spec, task, path: str | Path) -> pl.DataFrame:
    """The judgements of ``path`` for ``task`` (:data:`FILE_SCHEMA`; ``judge_grade`` null: unparsed)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"judgement {spec.name}: {path} not found (path: {spec.path})")
    rows, problems = (_read_trec if spec.format == "trec" else _read_umbrela)(spec, task, path)
    seen: dict[tuple[str, str], str] = {}
    for where, r in rows:
        pair = (r["query_id"], r["doc_id"])
        if pair in seen:
            problems.append(f"{where}: pair ({pair[0]}, {pair[1]}) judged again (first at {seen[pair]})")
        else:
            seen[pair] = where
    if problems:
        more = f"\n... and {len(problems) - SHOW} more" if len(problems) > SHOW else ""
        raise DataError(f"judgement {spec.name} x {task.name}: {len(problems)} problem(s) in {path}, nothing stored:\n" + "\n".join(problems[:SHOW]) + more)
    if not rows:
        raise DataError(f"judgement {spec.name} x {task.name}: {path} holds no judgement")
    return pl.DataFrame([r for _, r in rows], schema=FILE_SCHEMA, orient="row")


def _ids(task) -> tuple[set[str], set[str]]:
    return set(task.queries["query_id"].cast(pl.Utf8).to_list()), set(task.corpus["doc_id"].cast(pl.Utf8).to_list())


def _grade(value, spec, where: str, problems: list[str]) -> int | None:
    try:
        g = int(value)
        if str(value).strip() not in (str(g), f"{g}.0") and not isinstance(value, int):
            raise ValueError
    except (TypeError, ValueError):
        problems.append(f"{where}: grade {value!r} is not an integer")
        return None
    if g not in spec.grades:
        problems.append(f"{where}: grade {g} is not one of the judge's grades {list(spec.grades)}")
        return None
    return g


def _read_trec(spec, task, path: Path):
    queries, docs = _ids(task)
    rows, problems = [], []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            where = f"{path}:{lineno}"
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 4:
                problems.append(f"{where}: expected 4 fields (query id, iteration, doc id, grade), got {len(parts)}")
                continue
            q, _, d, grade = parts
            if q not in queries:
                problems.append(f"{where}: query {q} is not a query of task {task.name}")
                continue
            if d not in docs:
                problems.append(f"{where}: document {d} is not in task {task.name}'s corpus")
                continue
            if grade.lstrip("-").isdigit() and int(grade) < 0:  # trec_eval: in the pool, unjudged: no grade, like an unparsed reply
                rows.append((where, {"query_id": q, "doc_id": d, "judge_grade": None, "raw": line.strip()}))
                continue
            g = _grade(grade, spec, where, problems)
            if g is not None:
                rows.append((where, {"query_id": q, "doc_id": d, "judge_grade": g, "raw": line.strip()}))
    return rows, problems


def _read_umbrela(spec, task, path: Path):
    queries, docs = _ids(task)
    by_query: dict[str, list[str]] = {}
    for q, t in zip(task.queries["query_id"].cast(pl.Utf8).to_list(), task.queries["text"].fill_null("").to_list()):
        by_query.setdefault(_norm(t), []).append(q)
    by_passage: dict[str, set[str]] = {}
    titles = task.corpus["title"].fill_null("").to_list() if "title" in task.corpus.columns else [""] * task.corpus.height
    for d, text, title, full in zip(task.corpus["doc_id"].cast(pl.Utf8).to_list(), task.corpus["text"].fill_null("").to_list(), titles, task.doc_text()):
        for variant in {_norm(text), _norm(full), _norm(f"{title} {text}")}:
            if variant:
                by_passage.setdefault(variant, set()).add(d)
    rows, problems = [], []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            where = f"{path}:{lineno}"
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})")
                continue
            if not isinstance(obj, dict):
                problems.append(f"{where}: expected a JSON object, got {type(obj).__name__}")
                continue
            q = obj.get("qid", obj.get("query_id"))
            d = obj.get("docid", obj.get("doc_id"))
            if q is None:
                found = by_query.get(_norm(obj.get("query")), [])
                if len(found) != 1:
                    problems.append(
                        f"{where}: its 'query' matches {'no' if not found else len(found)} query of task {task.name}"
                        + (f" ({found[:3]})" if found else "")
                        + "; give 'qid'"
                    )
                    continue
                q = found[0]
            if d is None:
                found_d = sorted(by_passage.get(_norm(obj.get("passage")), set()))
                if len(found_d) != 1:
                    problems.append(
                        f"{where}: its 'passage' matches {'no' if not found_d else len(found_d)} document of task {task.name}"
                        + (f" ({found_d[:3]})" if found_d else "")
                        + "; give 'docid'"
                    )
                    continue
                d = found_d[0]
            q, d = str(q), str(d)
            if q not in queries:
                problems.append(f"{where}: query {q} is not a query of task {task.name}")
                continue
            if d not in docs:
                problems.append(f"{where}: document {d} is not in task {task.name}'s corpus")
                continue
            raw = str(obj.get("prediction") or "")
            if "judgment" not in obj:
                problems.append(f"{where}: ({q}, {d}) has no 'judgment'")
                continue
            if obj.get("result_status", 1) in (0, "0", False):  # UMBRELA could not parse the reply and wrote 0: no grade
                rows.append((where, {"query_id": q, "doc_id": d, "judge_grade": None, "raw": raw}))
                continue
            g = _grade(obj["judgment"], spec, f"{where}: ({q}, {d})", problems)
            if g is not None:
                rows.append((where, {"query_id": q, "doc_id": d, "judge_grade": g, "raw": raw}))
    return rows, problems
