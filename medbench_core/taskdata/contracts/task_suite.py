"""The per-task contract: schema, referential integrity and licences of one curated task (:func:`validate_task`)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from medbench_core.errors import DataError
from medbench_core.taskdata.contracts.gx import CHUNK_ROWS, Spec, Table, column_values, is_int_column, pandas_dtype, record_ids, run_tables
from medbench_core.taskdata.contracts.results import (
    ID_COLUMNS,
    TABLE_FILES,
    TABLE_SCHEMAS,
    ContractResult,
    summarise,
    write_contract,
)
from medbench_core.taskdata.licences import DEFAULT_POLICY, LicencePolicy, normalise_licence
from medbench_core.taskdata.task import MODALITIES, Task, has_text


def _image_checker(task: Task):
    """ref -> 'ok' or the reason it is refused; cached because many records share an image."""
    from medbench_core.taskdata.images import load_image

    cache: dict[str, str] = {}

    def check(ref: str | None) -> str | None:
        if ref is None:
            return None
        if ref not in cache:
            try:
                path = task.resolve_image(ref)
                load_image(path, ref)
                cache[ref] = "ok"
            except DataError as exc:
                cache[ref] = str(exc)
        return cache[ref]

    return check


def _has_content(df: pl.DataFrame, table: str) -> pl.Series:
    """Per row: non-empty text or title (after ``str.strip``) or an image; ``CHUNK_ROWS`` rows of Python strings at a time.

    Text columns of the declared type are judged by polars, stripped of Python's whitespace: the same verdicts."""
    texts = [c for c in (("text", "title") if table == "corpus" else ("text",)) if c in df.columns]
    if texts and all(df.schema[c] == pl.Utf8 for c in texts) and ("image" not in df.columns or df.schema["image"] in (pl.Utf8, pl.Null)):
        present = [has_text(df[c]) for c in texts]
        if "image" in df.columns:
            present.append(df["image"].is_not_null())
        return pl.DataFrame(present).select(pl.any_horizontal(pl.all()).alias("has_content")).to_series()
    out: list[bool] = []
    for start in range(0, df.height, CHUNK_ROWS):
        part = df.slice(start, CHUNK_ROWS)
        texts = column_values(part, "text")
        titles = column_values(part, "title") if table == "corpus" else [None] * part.height
        images = column_values(part, "image")
        out.extend(bool((x or "").strip() or (t or "").strip()) or im is not None for x, t, im in zip(texts, titles, images))
    return pl.Series(out, dtype=pl.Boolean)


def _canonical_licences(df: pl.DataFrame) -> pl.Series:
    """:func:`normalise_licence` of every row's licence (null stays null), computed once per distinct value."""
    if df.schema["licence"] != pl.Utf8:  # a mistyped column: its values as strings, row by row
        return pl.Series([None if v is None else normalise_licence(v) for v in column_values(df, "licence")], dtype=pl.Utf8)
    distinct = df["licence"].drop_nulls().unique().to_list()
    return df["licence"].replace_strict(distinct, [normalise_licence(v) for v in distinct], default=None, return_dtype=pl.Utf8)


def _schema_specs(df: pl.DataFrame, table: str) -> list[Spec]:
    file = TABLE_FILES[table]
    specs = [Spec("ExpectTableRowCountToBeBetween", {"min_value": 1}, "integrity", f"{file} has at least one row")]
    for col, dtype in TABLE_SCHEMAS[table].items():
        specs.append(Spec("ExpectColumnToExist", {"column": col}, "schema", f"column {col!r} is present"))
        if col in df.columns:
            want = pandas_dtype(dtype)
            specs.append(Spec("ExpectColumnTypeToBe", {"column": col, "type_": want}, "schema", f"column {col!r} has type {dtype} ({want} in pandas)"))
    for col in ID_COLUMNS[table]:
        if col in df.columns:
            specs.append(Spec("ExpectColumnValuesToNotBeNull", {"column": col}, "schema", f"every row has a {col}", show_values=False))
    return specs


def _record_table(
    task: Task, table: str, policy: LicencePolicy, research_only: bool, check_image, qrels_holes: str = "refuse", identity: pl.DataFrame | None = None
) -> Table:
    """queries or corpus, with derived columns for content, images and licences; a query's judged and
    positive documents (blocking unless ``qrels_holes`` is ``mark``: then reported as warnings)."""
    df = task.queries if table == "queries" else task.corpus
    key = ID_COLUMNS[table][0]
    specs = _schema_specs(df, table)
    if key in df.columns:
        specs.append(Spec("ExpectColumnValuesToBeUnique", {"column": key}, "schema", f"{key} is unique"))
    what = "query" if table == "queries" else "document"
    specs.append(
        Spec(
            "ExpectColumnValuesToBeInSet",
            {"column": "has_content", "value_set": [True]},
            "schema",
            f"every {what} has non-empty text or an image",
            show_values=False,
        )
    )
    derived: dict[str, pl.Series] = {"has_content": _has_content(df, table)}
    if "image" in df.columns:
        derived["image_check"] = pl.Series(
            [check_image(r) for start in range(0, df.height, CHUNK_ROWS) for r in column_values(df.slice(start, CHUNK_ROWS), "image")], dtype=pl.Utf8
        )
        specs.append(
            Spec(
                "ExpectColumnValuesToBeInSet",
                {"column": "image_check", "value_set": ["ok"]},
                "schema",
                "every image reference resolves to a readable image inside the task's image folder",
            )
        )
    if "modality" in df.columns:
        specs.append(
            Spec("ExpectColumnValuesToBeInSet", {"column": "modality", "value_set": list(MODALITIES)}, "schema", f"modality is one of {list(MODALITIES)}")
        )
    if "licence" in df.columns:
        specs.append(
            Spec(
                "ExpectColumnValuesToNotBeNull",
                {"column": "licence"},
                "licence",
                "every record carries a licence ('unknown' when the source states none)",
                show_values=False,
            )
        )
        derived["licence_canonical"] = _canonical_licences(df)
        allowed = sorted(policy.allowed(research_only))
        scope = "allowlist + unknown/NC/ND (research-only task)" if research_only else "licence allowlist"
        specs.append(Spec("ExpectColumnValuesToBeInSet", {"column": "licence_canonical", "value_set": allowed}, "licence", f"every licence is in the {scope}"))
    if table == "queries" and key in df.columns:
        qids = df[key].to_list()
        if "query_id" in task.qrels.columns and is_int_column(task.qrels, "relevance"):
            refuse = qrels_holes != "mark"
            judged = task.qrels.group_by("query_id").len()
            n_judged = dict(zip(judged["query_id"].to_list(), judged["len"].to_list()))
            derived["judgments"] = pl.Series([n_judged.get(q, 0) for q in qids], dtype=pl.Int64)
            # A query nobody judged is left out of every mean (metrics score the judged queries): a hole in the data.
            specs.append(
                Spec(
                    "ExpectColumnValuesToBeBetween",
                    {"column": "judgments", "min_value": 1},
                    "holes",
                    "every query has at least one judged document in qrels.parquet (a query without any is not scored)",
                    blocking=refuse,
                    show_values=False,
                )
            )
            pos = task.qrels.filter(pl.col("relevance") > 0).group_by("query_id").len()
            n_pos = dict(zip(pos["query_id"].to_list(), pos["len"].to_list()))
            derived["positive_judgments"] = pl.Series([n_pos.get(q, 0) for q in qids], dtype=pl.Int64)
            specs.append(
                Spec(
                    "ExpectColumnValuesToBeBetween",
                    {"column": "positive_judgments", "min_value": 1},
                    "integrity",
                    "every query has at least one positive judgment in qrels.parquet",
                    blocking=refuse,
                    show_values=False,
                )
            )
        if task.candidates is not None and "query_id" in task.candidates.columns:
            pools = task.candidates.group_by("query_id").len()
            n_cand = dict(zip(pools["query_id"].to_list(), pools["len"].to_list()))
            derived["candidates"] = pl.Series([n_cand.get(q, 0) for q in qids], dtype=pl.Int64)
            specs.append(
                Spec(
                    "ExpectColumnValuesToBeBetween",
                    {"column": "candidates", "min_value": 1},
                    "integrity",
                    "every query has a non-empty candidate pool in candidates.parquet",
                    show_values=False,
                )
            )
    if table == "queries" and key in df.columns and identity is not None:
        specs += _identity_specs(task, identity, derived)
    frame = df.with_columns(record_ids(df, table), *[s.alias(n) for n, s in derived.items()])
    return Table(table, TABLE_FILES[table], frame, specs)


def _identity(task: Task) -> pl.DataFrame | None:
    """:func:`~medbench_core.taskdata.contracts.identity.relevant_similarity` of a task the identity contract
    covers; None for any other (or one whose columns are mistyped: its schema expectations say which)."""
    from medbench_core.taskdata.contracts.identity import applies, relevant_similarity

    if not {"query_id", "text"} <= set(task.queries.columns):
        return None
    try:
        return relevant_similarity(task) if applies(task) else None
    except (pl.exceptions.PolarsError, TypeError):
        return None


def _identity_line(identity: pl.DataFrame) -> str:
    """What the verdict says of the identity contract: the closest any query comes to its relevant document."""
    from medbench_core.taskdata.contracts.identity import IDENTITY_THRESHOLD

    if identity.height == 0:
        return "identity: no query has a relevant document with text"
    top = identity.sort(["similarity", "query_id"], descending=[True, False]).row(0, named=True)
    equal = int(identity["equal"].sum())
    near = int(((identity["similarity"] >= IDENTITY_THRESHOLD) & ~identity["equal"]).sum())
    return (
        f"identity: {equal} of {identity.height} queries equal a relevant document's title or text, {near} near-duplicate one "
        f"(char 3-5-gram TF-IDF cosine >= {IDENTITY_THRESHOLD}); the closest: {top['query_id']} at {top['similarity']:.3f} "
        f"with the {top['field']} of {top['doc_id']}"
    )


def _identity_specs(task: Task, judged: pl.DataFrame, derived: dict[str, pl.Series]) -> list[Spec]:
    """A multilingual task's queries against their relevant documents (:mod:`medbench_core.taskdata.contracts.identity`):
    none equal to, or a near duplicate of, a relevant document's title or text. Blocking."""
    from medbench_core.taskdata.contracts.identity import IDENTITY_THRESHOLD

    by_id = {r["query_id"]: r for r in judged.iter_rows(named=True)}
    equal, near = [], []
    for q in task.queries["query_id"].cast(pl.Utf8).to_list():
        r = by_id.get(q)
        equal.append(f"equals the {r['field']} of {r['doc_id']}" if r and r["equal"] else "ok")
        near.append(
            f"cosine {r['similarity']:.3f} with the {r['field']} of {r['doc_id']}" if r and not r["equal"] and r["similarity"] >= IDENTITY_THRESHOLD else "ok"
        )
    derived["equals_relevant_document"] = pl.Series(equal, dtype=pl.Utf8)
    derived["near_relevant_document"] = pl.Series(near, dtype=pl.Utf8)
    return [
        Spec(
            "ExpectColumnValuesToBeInSet",
            {"column": "equals_relevant_document", "value_set": ["ok"]},
            "identity",
            "no query equals the title or text of a document judged relevant to it (NFKC, case-folded, punctuation and spaces normalised)",
        ),
        Spec(
            "ExpectColumnValuesToBeInSet",
            {"column": "near_relevant_document", "value_set": ["ok"]},
            "identity",
            f"no query is a near duplicate of a relevant document's title or text (char 3-5-gram TF-IDF cosine below {IDENTITY_THRESHOLD})",
        ),
    ]


def _pair_table(task: Task, table: str, qrels_holes: str = "refuse") -> Table:
    """qrels or candidates: ids must join, no pair twice; qrels positives inside the pool. With
    ``qrels_holes: mark`` a qrels row naming a document absent from the corpus is a warning, not a refusal."""
    df = task.qrels if table == "qrels" else task.candidates
    assert df is not None
    specs = _schema_specs(df, table)
    derived: dict[str, pl.Series] = {}
    if {"query_id", "doc_id"} <= set(df.columns):
        specs.append(
            Spec(
                "ExpectCompoundColumnsToBeUnique",
                {"column_list": ["query_id", "doc_id"]},
                "schema",
                "no (query_id, doc_id) pair appears twice",
                show_values=False,
            )
        )
    for col, side, other in (("query_id", "queries", task.queries), ("doc_id", "corpus", task.corpus)):
        if col in df.columns:
            known = set(other[col].to_list()) if col in other.columns else set()
            derived[f"{col}_known"] = pl.Series([v in known for v in df[col].to_list()], dtype=pl.Boolean)
            absent_docs_marked = table == "qrels" and col == "doc_id" and qrels_holes == "mark"
            specs.append(Spec("ExpectColumnValuesToBeInSet", {"column": f"{col}_known", "value_set": [True]}, "holes" if absent_docs_marked else "integrity",
                              f"every {col} names a row of {TABLE_FILES[side]}", blocking=not absent_docs_marked, show_values=False))  # fmt: skip
    if (
        table == "qrels"
        and task.candidates is not None
        and {"query_id", "doc_id"} <= set(df.columns)
        and is_int_column(df, "relevance")
        and {"query_id", "doc_id"} <= set(task.candidates.columns)
    ):
        pool = set(zip(task.candidates["query_id"].to_list(), task.candidates["doc_id"].to_list()))
        in_pool = [None if (r is None or r <= 0) else (q, d) in pool for q, d, r in df.select("query_id", "doc_id", "relevance").iter_rows()]
        derived["positive_in_pool"] = pl.Series(in_pool, dtype=pl.Boolean)
        specs.append(
            Spec(
                "ExpectColumnValuesToBeInSet",
                {"column": "positive_in_pool", "value_set": [True]},
                "integrity",
                "every positive judgment is inside its query's candidate pool",
                show_values=False,
            )
        )
    if "relevance" in df.columns:
        specs.append(Spec("ExpectColumnValuesToNotBeNull", {"column": "relevance"}, "schema", "every judgment has a relevance", show_values=False))
    frame = df.with_columns(record_ids(df, table), *[s.alias(n) for n, s in derived.items()])
    return Table(table, TABLE_FILES[table], frame, specs)


def validate_task(
    task: Task,
    out_dir: str | Path | None = None,
    *,
    policy: LicencePolicy = DEFAULT_POLICY,
    research_only: bool | None = None,
    qrels_holes: str = "refuse",
) -> ContractResult:
    """Run the schema, integrity and licence suites on one task.

    Holes in the qrels (a qrels row naming a document absent from the corpus, a query without any
    judged document or without a positive one) are refused, or with ``qrels_holes="mark"`` (the
    task option) reported as warnings: the task passes and the verdict counts them
    (:func:`medbench_core.taskdata.contracts.holes.qrels_holes_report`).

    ``research_only`` defaults to ``task.meta.research_only``. With ``out_dir`` the GX results,
    the verdict and the data docs are written there (paths on the result). Never raises on bad
    data: the verdict is ``passed`` and ``message`` names the file, rows and values at fault.
    """
    research_only = task.meta.research_only if research_only is None else research_only
    check_image = _image_checker(task)
    if qrels_holes not in ("refuse", "mark"):
        raise ValueError(f"qrels_holes {qrels_holes!r}: use refuse or mark")
    identity = _identity(task)
    tables = [_record_table(task, t, policy, research_only, check_image, qrels_holes, identity) for t in ("queries", "corpus")]
    tables.append(_pair_table(task, "qrels", qrels_holes))
    if task.candidates is not None:
        tables.append(_pair_table(task, "candidates"))
    outcomes, results_path, docs_path = run_tables(task.name, tables, Path(out_dir) if out_dir else None)

    licences: dict[str, int] = {}
    for t in tables[:2]:
        if "licence_canonical" in t.frame.columns:
            for lic, n in t.frame["licence_canonical"].fill_null("null").value_counts().iter_rows():
                licences[lic] = licences.get(lic, 0) + n
    admitted = sorted(lic for lic in licences if lic != "null" and policy.needs_research_only(lic))
    from medbench_core.taskdata.contracts.holes import describe, qrels_holes_report

    holes = qrels_holes_report(task, qrels_holes)
    extra = [describe(holes)] if holes["n_absent_doc_rows"] or holes["n_queries_without_judgment"] or holes["n_queries_without_positive"] else []
    if identity is not None:
        extra.append(_identity_line(identity))
    if research_only:
        extra.append(
            "research-only task: "
            + (
                f"admits licence(s) {', '.join(f'{x} ({licences[x]} records)' for x in admitted)} outside the allowlist"
                if admitted
                else "every licence is also in the allowlist"
            )
        )
    from medbench_core.taskdata.task import identical_id_pairs

    try:
        identical = {**identical_id_pairs(task), "ignored": task.meta.ignore_identical_ids}
    except (pl.exceptions.PolarsError, KeyError):
        identical = {}  # a missing column: the outcomes say which
    if identical.get("queries"):
        extra.append(
            f"{identical['queries']} query id(s) are also document ids ({identical['judged_relevant']} such pair(s) judged relevant); "
            + (
                "scoring drops such a document from a dense retriever's run and keeps it in others (ignore_identical_ids: dense, R2MED's rule)"
                if identical["ignored"] == "dense"
                else "scoring drops such a document when it is retrieved (ignore_identical_ids)"
                if identical["ignored"]
                else "scoring keeps them (ignore_identical_ids: false)"
            )
        )
    passed, message = summarise(f"task {task.name}", outcomes, extra)
    try:
        digest = task.content_hash()
    except (DataError, OSError, pl.exceptions.PolarsError):
        digest = None  # a missing column or an image that cannot be hashed: the outcomes say which
    result = ContractResult(
        name=task.name,
        passed=passed,
        outcomes=tuple(outcomes),
        message=message,
        research_only=research_only,
        content_hash=digest,
        licences=dict(sorted(licences.items())),
        identical_ids=identical,
        results_path=results_path,
        data_docs_path=docs_path,
        holes=holes,
    )
    return write_contract(Path(out_dir) if out_dir else None, result)
