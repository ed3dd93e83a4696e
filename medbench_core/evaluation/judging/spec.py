"""Judgement entries (the ``judgements:`` section of ``models.yaml``) and their provenance keys.

A judgement entry is one way of grading (query, document) pairs that the human qrels leave
unjudged: a ``source`` either ``generate`` (a local causal LM through transformers, prompted with
UMBRELA's 0-3 grading by default) or ``file`` (judgements made elsewhere, in TREC qrels format or
UMBRELA's JSONL output). Schema of an entry::

    judgements:
      - name: umbrela-qwen                 # a folder name; the leaderboard names the layer by it
        source: generate
        judge: ./models/qwen2.5-0.5b-instruct   # local folder, pkg:<module>, or a hub id (online, pinned revision)
        revision: ""                       # a hub id's commit; a folder is identified by its content hash
        family: ""                         # the judge's model family for the circularity guard (default: its config, card, else name)
        prompt: ""                         # a template file with {query} and {passage}; default prompts/umbrela.txt (UMBRELA)
        system: ""                         # an optional system turn
        decode: constrained                # constrained: the grade token after "##final score: " among the grades; generate: free text, parsed
        max_new_tokens: 32                 # decode: generate only
        batch_size: 8
        dtype: float32
        passage_words: 512                 # each passage cut to its first N words
        grade_map: auto                    # judge grade -> task grade: auto (identity on a 0-3 task; >= 2 relevant on a binary one) or a mapping
        pool: {models: [bm25, all-MiniLM-L6-v2], depth: 10, calibration: 30, seed: 0}
        tasks: []                          # the tasks it judges; default every text task
      - name: umbrela-gpt4o
        source: file
        format: umbrela                    # umbrela (JSONL: query, passage, judgment, result_status[, qid, docid]) | trec (qid Q0 docid grade)
        path: judgements/{task}.jsonl      # relative to models.yaml's folder; {task} is the task's name (task_folders maps it)
        judge: gpt-4o                      # who judged: provenance and the circularity guard
        family: gpt

The pool (:mod:`.pool`) is what a generating judge grades: the unjudged documents in the top
``depth`` of each named model's stored run on the task, plus ``calibration`` human-judged pairs
(sampled with ``seed``, spread over the grades) whose LLM grades are compared with the humans'
(:mod:`.agreement`). A judgement file is read whole; the pairs the humans also judged are its
calibration pairs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError
from medbench_core.provenance import artifact_key
from medbench_core.yaml_file import read_yaml_mapping

SOURCES = ("generate", "file")
FORMATS = ("umbrela", "trec")
DECODES = ("constrained", "generate")
UMBRELA_GRADES = (0, 1, 2, 3)
DEFAULT_POOL = {"models": [], "depth": 10, "calibration": 30, "seed": 0}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\Z")
_GENERATE_ONLY = ("prompt", "system", "decode", "max_new_tokens", "batch_size", "dtype", "passage_words", "revision")
_FILE_ONLY = ("format", "path", "task_folders")


@dataclass(frozen=True)
class JudgementSpec:
    """One entry of the ``judgements:`` section (see the module docstring for the fields)."""

    name: str
    source: str
    judge: str = ""
    revision: str = ""
    family: str = ""
    prompt: str = ""
    system: str = ""
    decode: str = "constrained"
    max_new_tokens: int = 32
    batch_size: int = 8
    dtype: str = "float32"
    passage_words: int = 512
    grades: tuple[int, ...] = UMBRELA_GRADES
    grade_map: Any = "auto"
    pool: dict[str, Any] = field(default_factory=dict)
    tasks: tuple[str, ...] = ()
    format: str = "umbrela"
    path: str = ""
    task_folders: dict[str, str] = field(default_factory=dict)
    base_dir: str = ""  # where models.yaml lives: relative paths resolve here (not part of the identity)

    def __post_init__(self) -> None:
        where = f"judgement {self.name!r}"
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise DataError(f"{where}: use letters, digits, '.', '_', '+' or '-' in the name (it becomes a folder name)")
        if self.source not in SOURCES:
            raise DataError(f"{where}: unknown source {self.source!r}; known: {', '.join(SOURCES)}")
        if not self.judge:
            raise DataError(f"{where}: name the judge ('judge': a model folder or hub id, or who made a judgement file)")
        if self.source == "file":
            if self.format not in FORMATS:
                raise DataError(f"{where}: unknown format {self.format!r}; known: {', '.join(FORMATS)}")
            if not self.path:
                raise DataError(f"{where}: a judgement file needs 'path' (it may hold {{task}})")
        if self.decode not in DECODES:
            raise DataError(f"{where}: unknown decode {self.decode!r}; known: {', '.join(DECODES)}")
        if self.batch_size < 1 or self.max_new_tokens < 1 or self.passage_words < 1:
            raise DataError(f"{where}: batch_size, max_new_tokens and passage_words must be at least 1")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise DataError(f"{where}: dtype {self.dtype!r} unknown; use float32, bfloat16 or float16")
        grades = tuple(self.grades)
        if not grades or any(not isinstance(g, int) or g < 0 or g > 9 for g in grades) or len(set(grades)) != len(grades):
            raise DataError(f"{where}: grades must be distinct single-digit integers, e.g. [0, 1, 2, 3]")
        if self.grade_map != "auto":
            if (
                not isinstance(self.grade_map, dict)
                or set(self.grade_map) != set(grades)
                or not all(isinstance(v, int) and v >= 0 for v in self.grade_map.values())
            ):
                raise DataError(f"{where}: grade_map must be 'auto' or map every grade {list(grades)} to a task grade (an integer >= 0)")
        unknown = sorted(set(self.pool) - set(DEFAULT_POOL))
        if unknown:
            raise DataError(f"{where}: unknown pool setting(s) {unknown}; known: {sorted(DEFAULT_POOL)}")
        p = self.resolved_pool()
        if self.source == "generate" and not p["models"]:
            raise DataError(f"{where}: a generating judge needs 'pool: {{models: [...]}}' (whose runs' unjudged top documents it grades)")
        if p["depth"] < 1 or p["calibration"] < 0:
            raise DataError(f"{where}: pool depth must be at least 1 and calibration at least 0")

    def resolved_pool(self) -> dict[str, Any]:
        """The pool settings, defaults filled in (all of them enter the key)."""
        p = {**DEFAULT_POOL, **self.pool}
        return {"models": [str(m) for m in p["models"] or []], "depth": int(p["depth"]), "calibration": int(p["calibration"]), "seed": int(p["seed"])}

    def judges_task(self, task: str) -> bool:
        return not self.tasks or task in self.tasks

    def resolve_path(self, p: str, *, local: bool = False) -> str:
        """``p`` resolved against the registry's folder when it is a relative local path (``./``, ``../``,
        or any relative path with ``local``); a hub id (``owner/name``) and ``pkg:`` stay as they are."""
        if not p or p.startswith(("hub:", "pkg:")) or Path(p).is_absolute() or not self.base_dir:
            return p
        if local or p.startswith(("./", "../")):
            return str((Path(self.base_dir) / p).resolve())
        return p

    def task_file(self, task: str) -> Path:
        """The judgement file of ``task`` (``{task}`` in ``path`` filled in, through ``task_folders``)."""
        return Path(self.resolve_path(self.path.replace("{task}", self.task_folders.get(task, task)), local=True))

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "base_dir"}


def parse_judgements(entries: Any, where: str | Path, models: list[str] | None = None) -> list[JudgementSpec]:
    """Check and build the ``judgements:`` entries of the registry file ``where``; ``models`` (the
    registered names) checks the pools' models."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise DataError(f"{where}: 'judgements:' must be a list of entries")
    known = {f.name for f in dataclasses.fields(JudgementSpec)} - {"base_dir"}
    out: list[JudgementSpec] = []
    seen: set[str] = set()
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not {"name", "source"} <= set(e):
            raise DataError(f"{where}: judgements[{i}] needs at least 'name' and 'source'")
        name = e["name"]
        unknown = sorted(set(e) - known)
        if unknown:
            import difflib

            near = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            raise DataError(
                f"{where}: judgement {name!r} has unknown field(s) {unknown}" + (f"; did you mean {near[0]!r}?" if near else f"; known: {sorted(known)}")
            )
        wrong = [k for k in (_GENERATE_ONLY if e["source"] == "file" else _FILE_ONLY if e["source"] == "generate" else ()) if k in e]
        if wrong:
            raise DataError(f"{where}: judgement {name!r} (source {e['source']}) does not take {wrong}")
        if name in seen:
            raise DataError(f"{where}: judgement name {name!r} appears twice")
        seen.add(name)
        fields = {**e, "base_dir": str(Path(where).resolve().parent), "revision": str(e.get("revision") or "")}
        for k in ("pool", "task_folders"):
            fields[k] = dict(fields.get(k) or {})
        for k in ("grades", "tasks"):
            if k in fields:
                fields[k] = tuple(fields[k] or ())
        try:
            spec = JudgementSpec(**fields)
        except TypeError as exc:
            raise DataError(f"{where}: judgements[{i}] ({name}): {exc}") from exc
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from exc
        if models is not None:
            missing = [m for m in spec.resolved_pool()["models"] if m not in models]
            if missing:
                raise DataError(f"{where}: judgement {name!r}: pool model(s) {missing} are not entries of 'models:'")
        out.append(spec)
    return out


def load_judgements(path: str | Path) -> list[JudgementSpec]:
    """The ``judgements:`` section of the registry file ``path`` (empty when there is none)."""
    path = Path(path)
    doc = read_yaml_mapping(path, "model registry")
    models = [m.get("name") for m in doc.get("models") or [] if isinstance(m, dict)]
    return parse_judgements(doc.get("judgements"), path, models)


def find_judgement(specs: list[JudgementSpec], name: str) -> JudgementSpec:
    for s in specs:
        if s.name == name:
            return s
    raise DataError(f"judgement {name!r} is not in the registry's 'judgements:' section; known: {[s.name for s in specs]}")


# --- grades -------------------------------------------------------------------------------------


def grade_mapping(spec: JudgementSpec, top_grade: int) -> dict[int, int]:
    """Judge grade -> task grade. ``auto``: on a task graded 0..3 (or more) the grades as they are,
    clipped to the task's top; on a binary task (top grade 1) relevant from UMBRELA's 2 up ("has some
    answer"), as TREC RAG 2024 binarises UMBRELA's grades (trec_eval -l 2); otherwise the judge's
    scale stretched onto the task's, rounding down: UMBRELA's 0-3 onto a 0-2 task is 0, 1 -> 0;
    2 -> 1; 3 -> 2 ("related" not relevant, "some answer" partly, "exact answer" fully; docs/trust.md)."""
    if spec.grade_map != "auto":
        return {int(k): int(v) for k, v in spec.grade_map.items()}
    grades = sorted(spec.grades)
    top = max(grades)
    if top_grade >= top:
        return {g: g for g in grades}
    if top_grade == 1:
        cut = 2 if top >= 3 else top
        return {g: int(g >= cut) for g in grades}
    return {g: (g * top_grade) // top for g in grades}


# --- provenance ---------------------------------------------------------------------------------


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def judge_identity(spec: JudgementSpec, *, revision: str, prompt: str) -> dict[str, Any]:
    """What decides a generating judge's grade of one pair, besides the pair's texts (the pair cache's key)."""
    return {
        "judge": spec.judge, "revision": revision, "prompt": prompt, "system": spec.system, "decode": spec.decode,
        "max_new_tokens": spec.max_new_tokens if spec.decode == "generate" else None, "grades": list(spec.grades),
        # Left padding and the dtype move the last bits of the logits: both enter the identity.
        "batch_size": spec.batch_size, "dtype": spec.dtype, "passage_words": spec.passage_words,
    }  # fmt: skip


def generation_identity(spec: JudgementSpec, *, revision: str, prompt: str, pool_runs: dict[str, str], top_grade: int) -> dict[str, Any]:
    """What decides a generated judgement artifact: the judge's identity, the pool (its settings and
    the run key of each pool model) and the grade mapping."""
    return {
        "source": "generate", **judge_identity(spec, revision=revision, prompt=prompt),
        "pool": spec.resolved_pool(), "pool_runs": dict(sorted(pool_runs.items())), "grade_map": grade_mapping(spec, top_grade),
    }  # fmt: skip


def file_identity(spec: JudgementSpec, *, file_sha256: str, top_grade: int) -> dict[str, Any]:
    """What decides a judgement file's artifact: its bytes (not where it is), format, judge and grade mapping."""
    return {"source": "file", "format": spec.format, "judge": spec.judge, "file_sha256": file_sha256, "grades": list(spec.grades),
            "grade_map": grade_mapping(spec, top_grade)}  # fmt: skip


def judgement_key(task_hash: str, identity: dict[str, Any], code: str) -> str:
    """Provenance key of one judgement x task artifact (its folder's name); the entry's name is left out."""
    return artifact_key(stage="judgements", task=task_hash, judgements=identity, code=code)
