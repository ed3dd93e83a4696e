"""The task data model: queries, corpus, graded qrels and task metadata, in polars.

Every query and document carries language, modality, discipline, concept ids and a licence.
Images are referenced by a path relative to the task's ``image_root`` (a folder inside the
task's own directory), never by an absolute path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.storage import sha256_file
from medbench_core.taskdata.source_rules import check_reference

MODALITIES = ("text", "image", "both")
UNKNOWN_LICENCE = "unknown"

QUERY_SCHEMA: dict[str, pl.DataType] = {
    "query_id": pl.Utf8,
    "text": pl.Utf8,
    "image": pl.Utf8,
    "language": pl.Utf8,
    "modality": pl.Utf8,
    "discipline": pl.Utf8,
    "concept_ids": pl.List(pl.Utf8),
    "tier": pl.Utf8,
    "licence": pl.Utf8,
}

CORPUS_SCHEMA: dict[str, pl.DataType] = {
    "doc_id": pl.Utf8,
    "title": pl.Utf8,
    "text": pl.Utf8,
    "image": pl.Utf8,
    "language": pl.Utf8,
    "modality": pl.Utf8,
    "discipline": pl.Utf8,
    "concept_ids": pl.List(pl.Utf8),
    "licence": pl.Utf8,
}

QRELS_SCHEMA: dict[str, pl.DataType] = {
    "query_id": pl.Utf8,
    "doc_id": pl.Utf8,
    "relevance": pl.Int32,
}

# A candidate-set task ranks each query only against its own pool.
CANDIDATES_SCHEMA: dict[str, pl.DataType] = {
    "query_id": pl.Utf8,
    "doc_id": pl.Utf8,
}

_KEYS = {"queries": "query_id", "corpus": "doc_id"}
DOC_TEXT_ROWS = 20_000  # rows of a corpus joined into Python strings at a time by Task.doc_text
# What Python's str.strip() removes (every code point whose str.isspace() is true): polars's own
# strip_chars() keeps U+001C..U+001F, which Python strips (tests/core/test_task_scale.py checks the set).
PY_WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


# TaskMeta fields written only when set, so that the content hash (and every artifact key) of a
# task read before they existed stays what it was.
OPTIONAL_META = (
    "dataset", "subset", "task_type", "source_path", "mteb_task", "domains", "licence_lineage", "source_notes", "ignore_identical_ids", "pivot_language",
)  # fmt: skip


@dataclass(frozen=True)
class TaskMeta:
    """What a task is: where it came from, its licences, modalities and main metric.

    ``dataset`` names the source (a hub dataset id, or the catalogue path of a local folder),
    ``source_revision`` the revision read (a hub commit sha, or ``sha256:<16 hex>`` of a local
    folder's files), ``subset`` the subset of a multi-subset dataset and ``task_type`` a task
    family (instruction templates may be chosen by it). ``source_path`` is the absolute path a
    catalogue entry named (a source outside the data folder); empty otherwise. ``mteb_task`` is
    MTEB's name of the task when it was read as one (``reader: mteb, task:``): the name its
    exported results carry; ``domains`` are MTEB's domains of it. ``licence_lineage``: each licence
    statement of the source as it states it, where records carry no settled licence;
    ``source_notes``: what the reader counted and did not use (reason, language, count, first
    place). All are empty for the first six bundled tasks.
    ``ignore_identical_ids``: scoring drops a retrieved document whose id is its query's id
    (:func:`identical_id_pairs`; the reader's default or the entry's option). ``pivot_language``: the
    language of a multilingual task's paired gap, pivot minus each language (empty: English).
    """

    name: str
    source: str
    description: str = ""
    licences: tuple[str, ...] = ()
    query_modality: str = "text"
    doc_modality: str = "text"
    main_metric: str = "ndcg_at_10"
    languages: tuple[str, ...] = ("en",)
    research_only: bool = False
    source_revision: str = ""
    dataset: str = ""
    subset: str = ""
    task_type: str = ""
    source_path: str = ""
    mteb_task: str = ""
    domains: tuple[str, ...] = ()
    licence_lineage: tuple[str, ...] = ()
    source_notes: tuple[str, ...] = ()
    # scoring drops a retrieved document whose id is the query's id: True from every run, "dense" from a
    # dense retriever's run only (R2MED's rule); set only where some query id is also a document id
    # (elsewhere it changes nothing, and the task's content hash stays)
    ignore_identical_ids: bool | str = False
    # the language a multilingual task's paired cross-lingual gap is taken from (pivot minus L); empty: English
    pivot_language: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["licences"] = list(self.licences)
        d["languages"] = list(self.languages)
        d["domains"] = list(self.domains)
        d["licence_lineage"] = list(self.licence_lineage)
        d["source_notes"] = list(self.source_notes)
        for k in OPTIONAL_META:
            if not d[k]:
                del d[k]
        return d

    def provenance(self) -> dict[str, str]:
        """Where the data came from, for MLflow params and leaderboards: only the fields that are set.

        Keys: ``dataset``, ``dataset_revision``, ``subset``, ``task_type``, ``source_path``, ``mteb_task``.
        """
        out = {
            "dataset": self.dataset,
            "dataset_revision": self.source_revision,
            "subset": self.subset,
            "task_type": self.task_type,
            "source_path": self.source_path,
            "mteb_task": self.mteb_task,
        }
        return {k: v for k, v in out.items() if v}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TaskMeta":
        known = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        d["licences"] = tuple(d.get("licences", ()))
        d["languages"] = tuple(d.get("languages", ("en",)))
        d["domains"] = tuple(d.get("domains", ()))
        d["licence_lineage"] = tuple(d.get("licence_lineage", ()))
        d["source_notes"] = tuple(d.get("source_notes", ()))
        return cls(**d)


@dataclass
class Task:
    """A curated retrieval task. ``image_root`` is the folder image references resolve in."""

    meta: TaskMeta
    queries: pl.DataFrame
    corpus: pl.DataFrame
    qrels: pl.DataFrame
    candidates: pl.DataFrame | None = None
    image_root: Path | None = None
    _hash: str | None = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.meta.name

    def content_hash(self) -> str:
        """sha256 over the canonical content: sorted rows of every frame, metadata and image bytes."""
        if self._hash is None:
            self._hash = content_hash(self)
        return self._hash

    def resolve_image(self, ref: str) -> Path:
        """Path of an image reference, refusing any that leaves ``image_root``."""
        if self.image_root is None:
            raise DataError(f"task {self.name}: image {ref!r} referenced but the task has no image folder")
        return resolve_inside(self.image_root, ref, what=f"task {self.name}")

    def doc_text(self, strip: str = PY_WHITESPACE) -> "DocTexts":
        """Text side of every document, title and body joined as MTEB and BEIR do.

        A sequence (length, indexing, iteration, equality with a list) that joins the texts a
        block of rows at a time: iterating over a corpus of a million documents holds one block
        of Python strings, not the corpus twice. ``list(task.doc_text())`` gives them all.
        ``strip``: the characters cut from both ends (Python's ``str.strip`` set by default).
        """
        return DocTexts(self.corpus, strip)


class DocTexts(Sequence[str]):
    """The joined title and text of each row of a corpus frame, made ``DOC_TEXT_ROWS`` rows at a time."""

    def __init__(self, corpus: pl.DataFrame, strip: str = PY_WHITESPACE):
        self._corpus = corpus
        self._strip = strip

    def __len__(self) -> int:
        return self._corpus.height

    def _rows(self, start: int, stop: int) -> list[str]:
        # (f"{title} {text}" if title else text).strip(), Python's strip, joined by polars
        part = self._corpus.slice(start, stop - start)
        title, text = (part[c].cast(pl.Utf8).fill_null("") for c in ("title", "text"))
        joined = pl.select(pl.when(title != "").then(title + " " + text).otherwise(text).str.strip_chars(self._strip)).to_series()
        return joined.to_list()

    def empty(self) -> pl.Series:
        """Per document: its joined text is empty (title and text both blank in Python's sense), without making any string."""
        return ~(has_text(self._corpus["title"]) | has_text(self._corpus["text"]))

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), DOC_TEXT_ROWS):
            yield from self._rows(start, min(start + DOC_TEXT_ROWS, len(self)))

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"document {i} of {len(self)}")
        return self._rows(i, i + 1)[0]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (DocTexts, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"DocTexts({len(self)} documents)"


# One character that Python's str.strip() keeps: a value holding one is not blank.
_NOT_WHITESPACE = "[^" + "".join(f"\\x{{{ord(c):x}}}" for c in PY_WHITESPACE) + "]"


def has_text(values: pl.Series) -> pl.Series:
    """Per value: ``bool((value or "").strip())`` for a string column, by a regular expression (no stripped copy)."""
    return values.cast(pl.Utf8).str.contains(_NOT_WHITESPACE).fill_null(False)


def resolve_inside(root: Path, ref: str, what: str = "") -> Path:
    """Resolve ``ref`` under ``root``; refuse absolute paths, ``..``, symlinks that escape, and a reference
    that is not printable or has a part too long to be a file name (:func:`~medbench_core.taskdata.source_rules.check_reference`)."""
    where = f"{what}: " if what else ""
    if not ref:
        raise DataError(f"{where}empty image reference")
    check_reference(ref, what or f"image folder {root}")  # printable parts that can each be a file name
    p = Path(ref)
    if p.is_absolute():
        raise DataError(f"{where}image {ref!r} is an absolute path; references must be relative to {root}")
    if ".." in p.parts:
        raise DataError(f"{where}image {ref!r} contains '..' and would leave {root}")
    root_real = Path(root).resolve()
    full = Path(root) / p
    if full.is_symlink() or any(q.is_symlink() for q in list(full.parents)[: len(p.parts) - 1]):
        raise DataError(f"{where}image {ref!r} is a symbolic link; links are refused")
    real = full.resolve()
    if root_real != real and root_real not in real.parents:
        raise DataError(f"{where}image {ref!r} resolves to {real}, outside {root_real}")
    return full


def conform(df: pl.DataFrame, schema: dict[str, pl.DataType], what: str) -> pl.DataFrame:
    """Give ``df`` exactly ``schema``'s columns in order, adding missing optional ones as nulls.

    Required columns (ids, and qrels relevance) must be present.
    """
    required = {"query_id", "doc_id", "relevance"} & set(schema)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(f"{what}: missing required column(s) {missing}; found {df.columns}")
    cols = []
    for name, dtype in schema.items():
        if name in df.columns:
            cols.append(pl.col(name).cast(dtype))
        else:
            cols.append(pl.lit(None, dtype=dtype).alias(name))
    return df.select(cols)


DIGEST_ROWS = 20_000  # rows serialised at a time by the content hash


def _frame_digest(df: pl.DataFrame | None, key: list[str]) -> str:
    """sha256 of the frame's rows sorted by ``key``, as NDJSON (stable across Parquet writer versions).

    The rows are serialised ``DIGEST_ROWS`` at a time in sorted order: NDJSON is one line per
    row, so the bytes hashed are those of the whole sorted frame's ``write_ndjson()`` (the digest
    every task has had), without a sorted copy of the frame or its whole text in memory.
    """
    if df is None:
        return "none"
    if len(key) == 1:
        order = df.get_column(key[0]).arg_sort()
    else:
        order = df.select(key).with_row_index("__row").sort(key).get_column("__row")
    h = hashlib.sha256()
    for start in range(0, df.height, DIGEST_ROWS):
        h.update(df[order[start : start + DIGEST_ROWS]].write_ndjson().encode("utf-8"))
    return h.hexdigest()


def content_hash(task: Task) -> str:
    h = hashlib.sha256()
    meta = task.meta.to_dict()
    h.update(json.dumps(meta, sort_keys=True).encode())
    h.update(_frame_digest(task.queries, ["query_id"]).encode())
    h.update(_frame_digest(task.corpus, ["doc_id"]).encode())
    h.update(_frame_digest(task.qrels, ["query_id", "doc_id"]).encode())
    h.update(_frame_digest(task.candidates, ["query_id", "doc_id"]).encode())
    refs = sorted(set(task.queries["image"].drop_nulls().to_list()) | set(task.corpus["image"].drop_nulls().to_list()))
    for ref in refs:
        h.update(ref.encode())
        h.update(sha256_file(task.resolve_image(ref)).encode())
    return h.hexdigest()


def make_task(
    meta: TaskMeta,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    qrels: pl.DataFrame,
    candidates: pl.DataFrame | None = None,
    image_root: Path | None = None,
) -> Task:
    """Build a Task with every frame conformed to its schema."""
    return Task(
        meta=meta,
        queries=conform(queries, QUERY_SCHEMA, f"task {meta.name} queries"),
        corpus=conform(corpus, CORPUS_SCHEMA, f"task {meta.name} corpus"),
        qrels=conform(qrels, QRELS_SCHEMA, f"task {meta.name} qrels"),
        candidates=None if candidates is None else conform(candidates, CANDIDATES_SCHEMA, f"task {meta.name} candidates"),
        image_root=image_root,
    )


def check_referential_integrity(task: Task, *, qrels_holes: str = "refuse") -> None:
    """Raise DataError naming the ids when qrels or candidates point at unknown queries or documents.

    ``qrels_holes: mark`` (a task option, docs/trust.md) lets qrels name documents absent from the
    corpus: they are kept (scored as relevant documents no model can retrieve, as trec_eval scores
    them) and the task's contract reports them; unknown queries are refused either way.
    """
    qids = set(task.queries["query_id"].to_list())
    dids = set(task.corpus["doc_id"].to_list())
    for what, df in (("qrels", task.qrels), ("candidates", task.candidates)):
        if df is None:
            continue
        bad_q = sorted(set(df["query_id"].to_list()) - qids)
        bad_d = sorted(set(df["doc_id"].to_list()) - dids)
        if bad_q:
            raise DataError(f"task {task.name}: {what} name {len(bad_q)} unknown query id(s): {bad_q[:10]}")
        if bad_d and not (what == "qrels" and qrels_holes == "mark"):
            hint = "; set qrels_holes: mark in tasks.yaml to keep them, reported by the task's contract" if what == "qrels" else ""
            raise DataError(f"task {task.name}: {what} name {len(bad_d)} unknown document id(s): {bad_d[:10]}{hint}")
    for what, df, key in (("queries", task.queries, "query_id"), ("corpus", task.corpus, "doc_id")):
        dup = df.filter(pl.col(key).is_duplicated())[key].unique().sort().to_list()
        if dup:
            raise DataError(f"task {task.name}: duplicate {key} in {what}: {dup[:10]}")


# --- Parquet persistence -----------------------------------------------------------------

TASK_FILES = ("queries.parquet", "corpus.parquet", "qrels.parquet", "candidates.parquet", "task.json")


def save_task(task: Task, folder: Path) -> list[str]:
    """Write a task's frames and metadata into ``folder`` (which the caller makes atomic).

    Images are copied under ``folder/images`` so the curated task is self-contained.
    """
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for fname, df in (
        ("queries.parquet", task.queries),
        ("corpus.parquet", task.corpus),
        ("qrels.parquet", task.qrels),
        ("candidates.parquet", task.candidates),
    ):
        if df is None:
            continue
        df.write_parquet(folder / fname, statistics=False)
        names.append(fname)
    refs = sorted(set(task.queries["image"].drop_nulls().to_list()) | set(task.corpus["image"].drop_nulls().to_list()))
    for ref in refs:
        src = task.resolve_image(ref)
        dst = folder / "images" / ref
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        names.append(f"images/{ref}")
    info = {"meta": task.meta.to_dict(), "content_hash": task.content_hash()}
    (folder / "task.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    names.append("task.json")
    return names


def load_task(folder: Path) -> Task:
    """Read a task written by :func:`save_task`; the caller verifies the manifest first."""
    folder = Path(folder)
    path = folder / "task.json"
    if not path.exists():
        raise DataError(f"{path}: not found; materialise the task first")
    info = json.loads(path.read_text())
    cand = folder / "candidates.parquet"
    images = folder / "images"
    task = Task(
        meta=TaskMeta.from_dict(info["meta"]),
        queries=pl.read_parquet(folder / "queries.parquet"),
        corpus=pl.read_parquet(folder / "corpus.parquet"),
        qrels=pl.read_parquet(folder / "qrels.parquet"),
        candidates=pl.read_parquet(cand) if cand.exists() else None,
        image_root=images if images.exists() else None,
    )
    task._hash = info["content_hash"]
    return task


def identical_id_pairs(task: Task) -> dict[str, int]:
    """How many queries share their id with a document of the corpus (a (query, document) pair a
    BEIR-style evaluator drops when retrieved), and how many of those pairs are judged in the qrels."""
    qids = set(task.queries["query_id"].to_list())
    same = qids & set(task.corpus["doc_id"].to_list())
    judged = task.qrels.filter((pl.col("query_id") == pl.col("doc_id")) & (pl.col("relevance") > 0)).height if same else 0
    return {"queries": len(same), "judged_relevant": judged}
