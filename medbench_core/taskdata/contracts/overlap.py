"""The cross-task contract: no query (exact or near-duplicate), concept id or image shared between tasks (:func:`validate_tasks`)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.storage import sha256_file
from medbench_core.taskdata.contracts.gx import Spec, Table, run_tables
from medbench_core.taskdata.contracts.results import (
    ALL_TASKS,
    NEAR_DUPLICATE_THRESHOLD,
    NGRAM_RANGE,
    SHOW_ROWS,
    ContractResult,
    NearDuplicate,
    summarise,
    write_contract,
)
from medbench_core.taskdata.task import Task

_SPACE = re.compile(r"\s+")
# The ASCII punctuation (Unicode category P*) as one translation table: most queries are ASCII, and
# translating them is what the per-character test does, in C (10K queries: seconds of a 100K run).
_ASCII_PUNCTUATION = str.maketrans({c: " " for c in map(chr, range(128)) if unicodedata.category(c).startswith("P")})


def normalise_query(text: str | None) -> str:
    """Query text as compared across tasks: NFKC, case-folded, punctuation to spaces, spaces collapsed."""
    if not text:
        return ""
    s = unicodedata.normalize("NFKC", text).casefold()
    s = unicodedata.normalize("NFKC", s)
    if s.isascii():
        s = s.translate(_ASCII_PUNCTUATION)
    else:
        s = "".join(" " if unicodedata.category(c).startswith("P") else c for c in s)
    return _SPACE.sub(" ", s).strip()


def _query_texts(tasks: Sequence[Task]) -> tuple[list[str], list[str], list[str], list[str]]:
    """task names, query ids, raw texts and normalised texts of every query with text."""
    names, qids, raw, norm = [], [], [], []
    for t in tasks:
        if not {"query_id", "text"} <= set(t.queries.columns):
            continue
        for q, x in t.queries.select("query_id", "text").iter_rows():
            n = normalise_query(x)
            if n:
                names.append(t.name)
                qids.append(str(q))
                raw.append(x)
                norm.append(n)
    return names, qids, raw, norm


def _nearest_other_task(names: list[str], norm: list[str], threshold: float) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, float]]]:
    """Per query: best similarity to a query of another task and its position; pairs >= threshold.

    Pairs whose normalised texts are equal are left out: they are exact overlaps, reported as such.
    """
    n = len(norm)
    best = np.full(n, np.nan)
    arg = np.full(n, -1, dtype=np.int64)
    pairs: list[tuple[int, int, float]] = []
    if n == 0 or len(set(names)) < 2:
        return best, arg, pairs
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(analyzer="char_wb", ngram_range=NGRAM_RANGE, sublinear_tf=True, dtype=np.float32)
    x = vec.fit_transform(norm)
    xt = x.T.tocsr()
    task_ix = np.unique(np.asarray(names), return_inverse=True)[1]
    norm_ix = np.unique(np.asarray(norm), return_inverse=True)[1]
    chunk = 512  # 512 x n float32 dense block: ~10 MB at n = 5k
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        sim = (x[start:stop] @ xt).toarray()
        rows = np.arange(start, stop)
        same = (task_ix[rows][:, None] == task_ix[None, :]) | (norm_ix[rows][:, None] == norm_ix[None, :])
        sim[same] = -1.0
        arg[start:stop] = sim.argmax(axis=1)
        best[start:stop] = sim[np.arange(stop - start), arg[start:stop]]
        for r, c in zip(*np.nonzero(sim >= threshold)):
            if start + r < c:
                pairs.append((int(start + r), int(c), float(sim[r, c])))
    best[best < 0] = np.nan  # no query of another task to compare with
    arg[np.isnan(best)] = -1
    return best, arg, pairs


def near_duplicates(tasks: Sequence[Task], threshold: float = NEAR_DUPLICATE_THRESHOLD) -> list[NearDuplicate]:
    """Pairs of queries from different tasks with char n-gram TF-IDF cosine >= ``threshold``.

    Texts are compared after :func:`normalise_query`; pairs equal after normalisation are exact
    overlaps and are not listed here. Sorted by decreasing similarity.
    """
    names, qids, raw, norm = _query_texts(tasks)
    _, _, pairs = _nearest_other_task(names, norm, threshold)
    out = [NearDuplicate(names[a], qids[a], names[b], qids[b], round(s, 4), raw[a], raw[b]) for a, b, s in pairs]
    return sorted(out, key=lambda d: (-d.similarity, d.task_a, d.query_a, d.task_b, d.query_b))


def _image_hashes(task: Task) -> dict[str, list[str]]:
    """sha256 -> image references of a task; references that do not resolve are the task gate's business."""
    refs: set[str] = set()
    for df in (task.queries, task.corpus):
        if "image" in df.columns:
            refs.update(r for r in df["image"].drop_nulls().to_list())
    out: dict[str, list[str]] = {}
    for ref in sorted(refs):
        try:
            path = task.resolve_image(ref)
            digest = sha256_file(path)
        except (DataError, OSError):
            continue
        out.setdefault(digest, []).append(ref)
    return out


IMAGE_DUPLICATES = ("ignore", "mark", "refuse")  # tasks.yaml test_image_duplicates: the exact-pixel check across test splits


def test_image_table(tasks: Sequence[Task], splits: dict[str, str], blocking: bool) -> Table:
    """Every (task, split) group's distinct decoded-pixel digests (:mod:`medbench_core.taskdata.image_hashes`): one
    digest in two groups is the same image in two test splits of the version, whatever its file's format or metadata.
    A split comes from an image id's ``<split>_`` prefix (PneumoniaMNIST's val and test), else the task's split."""
    from medbench_core.taskdata.image_hashes import hash_file

    groups: dict[tuple[str, str, str], str] = {}
    for t in tasks:
        for df, key in ((t.queries, "query_id"), (t.corpus, "doc_id")):
            if "image" not in df.columns:
                continue
            for rid, ref in df.select(key, "image").drop_nulls("image").iter_rows():
                head = str(rid).split("_", 1)[0].lower()
                split = head if "_" in str(rid) and head in ("train", "val", "valid", "dev", "test") else splits.get(t.name, "test")
                try:
                    digest = hash_file(t.resolve_image(ref), f"task {t.name} {rid}").pixels
                except (DataError, OSError):
                    continue  # an unreadable image is its own task gate's business
                groups.setdefault((t.name, split, digest), f"{t.name}[{split}]:{rid}")
    frame = pl.DataFrame(
        {"record_id": list(groups.values()), "pixel_sha256": [d for (_, _, d) in groups]}, schema={"record_id": pl.Utf8, "pixel_sha256": pl.Utf8}
    )
    return Table(
        "test_split_images",
        "images of every task, decoded",
        frame,
        [
            Spec(
                "ExpectColumnValuesToBeUnique",
                {"column": "pixel_sha256"},
                "overlap",
                "no image (its decoded pixels) in two test splits of the version",
                blocking=blocking,
            )
        ],  # fmt: skip
    )


def _cross_tables(tasks: Sequence[Task], threshold: float, fail_on_near_duplicates: bool) -> tuple[list[Table], list[NearDuplicate]]:
    S = Spec
    task_frame = pl.DataFrame(
        {
            "record_id": [t.name for t in tasks],
            "task": [t.name for t in tasks],
            "queries": [t.queries.height for t in tasks],
        },
        schema={"record_id": pl.Utf8, "task": pl.Utf8, "queries": pl.Int64},
    )
    tables = [
        Table(
            "tasks",
            "task list",
            task_frame,
            [
                S("ExpectTableRowCountToBeBetween", {"min_value": 1}, "integrity", "at least one task to compare"),
                S("ExpectColumnValuesToBeUnique", {"column": "task"}, "integrity", "task names are unique"),
            ],
        )
    ]

    names, qids, raw, norm = _query_texts(tasks)
    # One row per (task, normalised text) so a query repeated inside one task is not an overlap.
    grouped: dict[tuple[str, str], list[str]] = {}
    for t, q, n in zip(names, qids, norm):
        grouped.setdefault((t, n), []).append(q)
    shared = pl.DataFrame(
        {
            "record_id": [f"{t}:{','.join(qs[:3])}{'...' if len(qs) > 3 else ''}" for (t, _), qs in grouped.items()],
            "normalised_query": [n for (_, n) in grouped],
        },
        schema={"record_id": pl.Utf8, "normalised_query": pl.Utf8},
    )
    tables.append(
        Table(
            "shared_queries",
            "queries.parquet of every task",
            shared,
            [
                S(
                    "ExpectColumnValuesToBeUnique",
                    {"column": "normalised_query"},
                    "overlap",
                    "no query text shared between tasks (after NFKC, case folding, punctuation and whitespace normalisation)",
                )
            ],
        )
    )

    best, arg, pairs = _nearest_other_task(names, norm, threshold)
    near = pl.DataFrame(
        {
            "record_id": [f"{names[i]}:{qids[i]} ~ {names[arg[i]]}:{qids[arg[i]]}" if arg[i] >= 0 else f"{names[i]}:{qids[i]}" for i in range(len(names))],
            "max_cross_task_similarity": [None if np.isnan(b) else round(float(b), 4) for b in best],
        },
        schema={"record_id": pl.Utf8, "max_cross_task_similarity": pl.Float64},
    )
    tables.append(
        Table(
            "near_duplicate_queries",
            "queries.parquet of every task",
            near,
            [
                S(
                    "ExpectColumnValuesToBeBetween",
                    {"column": "max_cross_task_similarity", "max_value": threshold, "strict_max": True},
                    "overlap",
                    f"no query has a near-duplicate in another task (char {NGRAM_RANGE[0]}-{NGRAM_RANGE[1]}-gram TF-IDF cosine < {threshold})",
                    blocking=fail_on_near_duplicates,
                )
            ],
        )
    )
    dups = [NearDuplicate(names[a], qids[a], names[b], qids[b], round(s, 4), raw[a], raw[b]) for a, b, s in pairs]
    dups.sort(key=lambda d: (-d.similarity, d.task_a, d.query_a, d.task_b, d.query_b))

    concepts: dict[tuple[str, str], list[str]] = {}
    for t in tasks:
        for df, key in ((t.queries, "query_id"), (t.corpus, "doc_id")):
            if {key, "concept_ids"} <= set(df.columns):
                for rid, cids in df.select(key, "concept_ids").iter_rows():
                    for c in cids or []:
                        if c:
                            concepts.setdefault((t.name, c), []).append(str(rid))
    tables.append(
        Table(
            "shared_concepts",
            "queries.parquet and corpus.parquet of every task",
            pl.DataFrame(
                {
                    "record_id": [f"{t}:{','.join(ids[:3])}{'...' if len(ids) > 3 else ''}" for (t, _), ids in concepts.items()],
                    "concept_id": [c for (_, c) in concepts],
                },
                schema={"record_id": pl.Utf8, "concept_id": pl.Utf8},
            ),
            [S("ExpectColumnValuesToBeUnique", {"column": "concept_id"}, "overlap", "no concept id shared between tasks")],
        )
    )

    images: list[tuple[str, str]] = []
    shas: list[str] = []
    for t in tasks:
        for digest, refs in _image_hashes(t).items():
            images.append((t.name, refs[0] + (f" (+{len(refs) - 1} same bytes)" if len(refs) > 1 else "")))
            shas.append(digest)
    tables.append(
        Table(
            "shared_images",
            "images of every task",
            pl.DataFrame(
                {"record_id": [f"{t}:{r}" for t, r in images], "image_sha256": shas},
                schema={"record_id": pl.Utf8, "image_sha256": pl.Utf8},
            ),
            [S("ExpectColumnValuesToBeUnique", {"column": "image_sha256"}, "overlap", "no image (sha256 of its bytes) shared between tasks")],
        )
    )
    return tables, dups


def _tasks_named(rows: Iterable[str]) -> set[str]:
    out = set()
    for r in rows:
        for part in r.split(" ~ "):
            if ":" in part:
                out.add(part.split(":", 1)[0])
    return out


def validate_tasks(
    tasks: Sequence[Task],
    out_dir: str | Path | None = None,
    *,
    threshold: float = NEAR_DUPLICATE_THRESHOLD,
    fail_on_near_duplicates: bool = True,
    test_image_duplicates: str = "ignore",
    splits: dict[str, str] | None = None,
) -> ContractResult:
    """Run the cross-task overlap suite over ``tasks``.

    Fails when a query (after :func:`normalise_query`), a concept id or an image (sha256) occurs
    in two tasks, and, unless ``fail_on_near_duplicates`` is False (then they are warnings), when
    two queries of different tasks reach ``threshold`` similarity. ``failed_tasks`` names the
    tasks involved in a failure; ``task_hashes`` the content each task had when judged.
    """
    tables, dups = _cross_tables(tasks, threshold, fail_on_near_duplicates)
    if test_image_duplicates != "ignore":  # tasks.yaml test_image_duplicates: mark (a warning) or refuse (blocking)
        tables.append(test_image_table(tasks, dict(splits or {}), blocking=test_image_duplicates == "refuse"))
    outcomes, results_path, docs_path = run_tables(ALL_TASKS, tables, Path(out_dir) if out_dir else None)
    failed_tasks = sorted(_tasks_named(r for o in outcomes if not o.success and o.blocking for r in o.rows))
    extra = []
    if dups:
        shown = "; ".join(
            f"{d.task_a}:{d.query_a} ~ {d.task_b}:{d.query_b} ({d.similarity:.3f}: {d.text_a[:60]!r} / {d.text_b[:60]!r})" for d in dups[:SHOW_ROWS]
        )
        extra.append(f"{len(dups)} near-duplicate pair(s) at cosine >= {threshold}: {shown}")
    if failed_tasks:
        extra.append(f"tasks involved: {', '.join(failed_tasks)}")
    passed, message = summarise(f"{len(tasks)} task(s) [{', '.join(t.name for t in tasks)}]", outcomes, extra)
    hashes: dict[str, str] = {}
    for t in tasks:
        try:
            hashes[t.name] = t.content_hash()
        except (DataError, OSError, pl.exceptions.PolarsError):
            hashes[t.name] = ""  # unhashable task (bad image): its own gate fails; never matches
    result = ContractResult(
        name=ALL_TASKS,
        passed=passed,
        outcomes=tuple(outcomes),
        message=message,
        task_hashes=hashes,
        near_duplicates=tuple(dups),
        failed_tasks=tuple(failed_tasks),
        results_path=results_path,
        data_docs_path=docs_path,
    )
    return write_contract(Path(out_dir) if out_dir else None, result)
