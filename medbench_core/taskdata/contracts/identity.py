"""No query is its own relevant document: the identity contract of multilingual tasks (issue 45).

A query whose text is its relevant document's title (or text) is a string lookup, not retrieval:
the bundled ICD-10 tasks once paired every English query with a document titled by the very same
name, and "English minus L" subtracted a cross-lingual score from an exact-match one. So, for every
positive (query, document) judgment of a task this contract covers (:func:`applies`), the query
must not

- **equal** the document's title or text after :func:`~medbench_core.taskdata.contracts.overlap.normalise_query`
  (Unicode NFKC, case-folded, punctuation to spaces, spaces collapsed: NFKC + casefold and more), nor
- **near-duplicate** it: the cosine of the two strings' character 3-5-gram TF-IDF vectors (within word
  boundaries, sublinear tf; the measure the cross-task overlap contract uses for near-duplicate queries,
  its vocabulary and idf fitted on the judged queries and fields together) reaches :data:`IDENTITY_THRESHOLD`.

:func:`relevant_similarity` gives, per query, the largest cosine over its relevant documents' titles
and texts and whether one equals it; readers use it to hold a query out before a task is written (the
GNU Health reader at :data:`~medbench_core.taskdata.readers.gnuhealth_split.GUARD`, below the threshold,
so that refitting the idf on the final task cannot take a kept query over it) and the task gate
judges the written task with it (:func:`medbench_core.taskdata.contracts.task_suite.validate_task`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from medbench_core.taskdata.contracts.results import NEAR_DUPLICATE_THRESHOLD, NGRAM_RANGE

IDENTITY_THRESHOLD = NEAR_DUPLICATE_THRESHOLD  # 0.9: what the overlap contract calls a near duplicate
ENGLISH = "en"


def applies(task) -> bool:
    """Whether the identity contract judges ``task``: its queries or documents are in two or more languages,
    or its queries in a language other than English (the multilingual axes, monolingual ones included).

    English-only tasks are left out: their queries are claims and questions, and judging every pair of a
    1.2M-document corpus would cost the gate minutes for a failure nobody has seen there.
    """
    langs: set[str] = set()
    for df in (task.queries, task.corpus):
        if "language" in df.columns:
            langs |= {str(x).split("_")[0].split("-")[0].lower() for x in df["language"].drop_nulls().unique().to_list()}
    query_langs = set()
    if "language" in task.queries.columns:
        query_langs = {str(x).split("_")[0].split("-")[0].lower() for x in task.queries["language"].drop_nulls().unique().to_list()}
    return len(langs) >= 2 or bool(query_langs - {ENGLISH})


def pair_similarity(queries: Sequence[str], documents: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(equal, cosine) of each pair ``queries[i]``, ``documents[i]`` (see the module docstring).

    Texts are normalised first; an empty side is neither equal nor similar (cosine 0). The TF-IDF
    vocabulary and idf are fitted on the distinct normalised texts of both sides.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer

    from medbench_core.taskdata.contracts.overlap import normalise_query

    if len(queries) != len(documents):
        raise ValueError(f"pair_similarity: {len(queries)} queries and {len(documents)} documents; pass one document per query")
    q = [normalise_query(x) for x in queries]
    d = [normalise_query(x) for x in documents]
    n = len(q)
    equal = np.array([bool(a) and a == b for a, b in zip(q, d)], dtype=bool)
    cosine = np.zeros(n, dtype=np.float64)
    filled = [i for i in range(n) if q[i] and d[i]]
    if not filled:
        return equal, cosine
    distinct = sorted({q[i] for i in filled} | {d[i] for i in filled})
    vec = TfidfVectorizer(analyzer="char_wb", ngram_range=NGRAM_RANGE, sublinear_tf=True, dtype=np.float64)
    try:
        vec.fit(distinct)
    except ValueError:  # no n-gram at all (texts of spaces): nothing is similar
        return equal, cosine
    a, b = vec.transform([q[i] for i in filled]), vec.transform([d[i] for i in filled])
    cosine[filled] = np.asarray(a.multiply(b).sum(axis=1)).ravel()
    cosine[equal] = 1.0
    return equal, np.clip(cosine, 0.0, 1.0)


def relevant_similarity(task) -> pl.DataFrame:
    """Per query of ``task`` with text: (query_id, equal, similarity, doc_id, field) of its closest relevant document field.

    ``equal``: the query equals (after normalisation) the title or text of a document judged relevant
    to it; ``similarity``: the largest cosine over those titles and texts, ``doc_id`` and ``field``
    (``title`` or ``text``) where it was reached. A query without a relevant document or text gets
    ``equal`` False and ``similarity`` 0.
    """
    schema = {"query_id": pl.Utf8, "equal": pl.Boolean, "similarity": pl.Float64, "doc_id": pl.Utf8, "field": pl.Utf8}
    if not {"query_id", "text"} <= set(task.queries.columns) or not {"query_id", "doc_id", "relevance"} <= set(task.qrels.columns):
        return pl.DataFrame(schema=schema)
    queries = task.queries.select(pl.col("query_id").cast(pl.Utf8), pl.col("text").cast(pl.Utf8).alias("q"))
    fields = [c for c in ("title", "text") if c in task.corpus.columns]
    docs = task.corpus.select(pl.col("doc_id").cast(pl.Utf8), *[pl.col(c).cast(pl.Utf8) for c in fields])
    pairs = (
        task.qrels.filter(pl.col("relevance") > 0)
        .select(pl.col("query_id").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8))
        .join(queries, on="query_id", how="inner")
        .join(docs, on="doc_id", how="inner")
    )
    long = pl.concat(
        [pairs.select("query_id", "doc_id", "q", pl.col(c).alias("d"), pl.lit(c).alias("field")) for c in fields]
        or [pl.DataFrame(schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "q": pl.Utf8, "d": pl.Utf8, "field": pl.Utf8})]
    ).filter(pl.col("d").is_not_null() & pl.col("q").is_not_null())
    equal, cosine = pair_similarity(long["q"].to_list(), long["d"].to_list())
    scored = long.select("query_id", "doc_id", "field").with_columns(pl.Series("equal", equal), pl.Series("similarity", cosine))
    best = (
        scored.sort(["query_id", "similarity", "doc_id", "field"], descending=[False, True, False, False])
        .group_by("query_id", maintain_order=True)
        .agg(pl.col("equal").any(), pl.col("similarity").first(), pl.col("doc_id").first(), pl.col("field").first())
    )
    out = queries.select("query_id").join(best, on="query_id", how="left", maintain_order="left")
    return out.with_columns(pl.col("equal").fill_null(False), pl.col("similarity").fill_null(0.0)).select(list(schema))
