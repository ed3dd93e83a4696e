"""The GNU Health ICD-10 package read into concepts: each active code with its English name and its usable names
in each language, the category titles, and a report row for every record that cannot be a query (file, line,
code, language, reason). The reasons and the task families built on it: :mod:`medbench_core.taskdata.readers.gnuhealth_icd`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError
from medbench_core.taskdata.readers.common import refuse_unmapped
from medbench_core.taskdata.readers.gettext_po import read_po
from medbench_core.taskdata.readers.gnuhealth_wheel import Package
from medbench_core.taskdata.readers.tryton_xml import read_tryton_xml

LICENCE = "unknown"
DISCIPLINE = "icd10"
DISEASE_FIELDS = frozenset({"name", "code", "category", "active"})  # the fields of a gnuhealth.pathology record
_CODE = re.compile(r"^[A-Z][0-9]{2}(\.[0-9A-Z]{1,2})?\Z")
_PATHOLOGY = "model:gnuhealth.pathology,name:"
_CATEGORY = "model:gnuhealth.pathology.category,name:"


@dataclass
class Concept:
    code: str
    record_id: str
    unit: str  # the three-character code
    block: str  # category id
    chapter: str
    line: int
    english: str  # the English name (its record's title, even where it cannot be a query)
    names: dict[str, str] = field(default_factory=dict)  # language -> usable name (a query)


@dataclass
class Icd:
    """The package read: active concepts with their usable names, category titles, the report rows, the licence statements."""

    concepts: dict[str, Concept]  # code -> concept
    titles: dict[str, dict[str, str]]  # category id -> language -> title
    chapter_number: dict[str, int]  # chapter id -> its number (1 = I)
    report: list[dict[str, Any]]
    lineage: tuple[str, ...]
    version: str


def report_row(file: str, line: int, code: str, language: str, reason: str, note: str = "") -> dict[str, Any]:
    return {"file": file, "line": line, "code": code, "language": language, "reason": reason, "note": note}


def base_locale(locale: str) -> str:
    return locale.split("_")[0].lower()


def read_package(source: str | Path, languages: Iterable[str] | None = None) -> Icd:
    """Read every file the tasks use, refusing a malformed one and listing every record not used (see the module docstring).

    ``languages`` (base codes): the catalogues read; None reads every one the package has.
    """
    from medbench_core.taskdata.contracts.overlap import normalise_query  # numpy: not at the catalogue's import

    pkg = Package(source)
    report: list[dict[str, Any]] = []
    dwhere = pkg.where("data/diseases.xml")
    cwhere = pkg.where("data/disease_categories.xml")
    categories = {r.id: r for r in read_tryton_xml(pkg.text("data/disease_categories.xml"), cwhere) if r.model == "gnuhealth.pathology.category"}
    titles: dict[str, dict[str, str]] = {}
    parent: dict[str, str] = {}
    for rec in categories.values():
        if "name" not in rec.fields or not rec.fields["name"][0]:
            raise DataError(f"{cwhere}:{rec.line}: category {rec.id} has no name")
        titles[rec.id] = {"en": rec.fields["name"][0]}
        parent[rec.id] = (rec.fields.get("parent") or ("", ""))[1] or ""
    # Chapters: the categories under the root (the one category without a parent), in file order.
    chapters = sorted((c for c, p in parent.items() if p and parent.get(p) == ""), key=lambda c: categories[c].line)
    chapter_number = {c: i + 1 for i, c in enumerate(chapters)}

    concepts: dict[str, Concept] = {}
    by_id: dict[str, Concept] = {}
    inactive: dict[str, int] = {}
    english: dict[str, list[Concept]] = {}
    for rec in read_tryton_xml(pkg.text("data/diseases.xml"), dwhere):
        if rec.model != "gnuhealth.pathology":
            continue
        name, code = rec.fields.get("name", ("", None))[0], rec.fields.get("code", ("", None))[0]
        block = (rec.fields.get("category") or ("", None))[1] or ""
        if not code or not _CODE.match(code):
            raise DataError(f"{dwhere}:{rec.line}: record {rec.id}: code {code!r} is not an ICD-10 code (A00, A00.0)")
        if not name:
            texts = {k: v[0] for k, v in rec.fields.items()}
            refuse_unmapped(texts, DISEASE_FIELDS, f"{dwhere}:{rec.line}: record {rec.id}", "no name")
            raise DataError(f"{dwhere}:{rec.line}: record {rec.id} (code {code}) has no name")
        # A record's category is a block (its parent a chapter), or a chapter itself (U codes: chapter XXII).
        chapter = block if block in chapter_number else parent.get(block, "")
        if chapter not in chapter_number:
            raise DataError(f"{dwhere}:{rec.line}: record {rec.id} (code {code}): category {block!r} is neither a block nor a chapter of {cwhere}")
        if code in concepts or rec.id in by_id or rec.id in inactive:
            raise DataError(f"{dwhere}:{rec.line}: code {code} (record {rec.id}) appears twice")
        if (rec.fields.get("active") or ("True",))[0] == "False":
            inactive[rec.id] = rec.line
            report.append(report_row(dwhere, rec.line, code, "en", "inactive", "active is False: GNU Health hides the record"))
            continue
        c = Concept(code, rec.id, code[:3], block, chapter, rec.line, name, {"en": name})
        concepts[code] = by_id[rec.id] = c
        english.setdefault(name, []).append(c)
    _drop_duplicates(english, "en", dwhere, report)

    wanted = None if languages is None else {base_locale(lang) for lang in languages}
    for locale in pkg.locales():
        lang = base_locale(locale)
        if wanted is not None and lang not in wanted:
            continue
        pwhere = pkg.where(f"locale/{locale}.po")
        names: dict[str, list[tuple[Concept, int]]] = {}
        seen: dict[str, int] = {}
        for e in read_po(pkg.text(f"locale/{locale}.po"), pwhere):
            if e.msgctxt in seen:
                raise DataError(f"{pwhere}:{e.line}: {e.msgctxt!r} appears twice (first at line {seen[e.msgctxt]})")
            seen[e.msgctxt] = e.line
            if e.msgctxt.startswith(_CATEGORY):
                cid = e.msgctxt[len(_CATEGORY) :]
                if cid in titles and e.msgstr.strip() and not e.fuzzy and e.msgid == titles[cid]["en"]:
                    titles[cid][lang] = e.msgstr.strip()
                continue
            if not e.msgctxt.startswith(_PATHOLOGY):
                continue
            rid = e.msgctxt[len(_PATHOLOGY) :]
            c = by_id.get(rid)
            if c is None:
                if rid not in inactive:
                    report.append(report_row(pwhere, e.line, rid, lang, "unknown_code", "no record of diseases.xml has this id"))
                continue
            if not e.msgstr.strip():
                report.append(report_row(pwhere, e.line, c.code, lang, "untranslated"))
            elif e.fuzzy:
                report.append(report_row(pwhere, e.line, c.code, lang, "fuzzy", "flagged fuzzy: gettext and Tryton do not use it"))
            elif e.msgid != c.english:
                report.append(report_row(pwhere, e.line, c.code, lang, "stale", f"msgid {e.msgid[:60]!r} is not the English name"))
            else:
                text = e.msgstr.strip()
                names.setdefault(text, []).append((c, e.line))
        for text, items in names.items():
            if len(items) > 1:
                for c, line in items:
                    others = ", ".join(o.code for o, _ in items if o is not c)
                    report.append(report_row(pwhere, line, c.code, lang, "duplicate_name", f"{text[:40]!r} also names {others}"))
                continue
            c, line = items[0]
            if normalise_query(text) == normalise_query(c.english):  # English text: counted as English, not as a name in lang
                report.append(report_row(pwhere, line, c.code, lang, "same_as_english", "the English name: no query or document title in this language"))
                continue
            c.names[lang] = text
    meta = pkg.metadata()
    version = (re.search(r"^Version: (.+)$", meta, re.MULTILINE) or [None, "?"])[1]
    return Icd(concepts, titles, chapter_number, report, licence_lineage(pkg, meta), version)


def _drop_duplicates(english: dict[str, list[Concept]], lang: str, where: str, report: list[dict[str, Any]]) -> None:
    """A name held by several active codes names none of them: no query; each code keeps its record."""
    for name, items in english.items():
        if len(items) > 1:
            for c in items:
                del c.names["en"]  # its record keeps the name (c.english); it is no English query
                report.append(
                    report_row(
                        where,
                        c.line,
                        c.code,
                        lang,
                        "duplicate_name",
                        f"{name[:40]!r} also names {', '.join(o.code for o in items if o is not c)}",
                    )
                )


def licence_lineage(pkg: Package, metadata: str) -> tuple[str, ...]:
    """The licence statements of the package, each as the file states it (none is settled)."""
    out = []
    m = re.search(r"^License-Expression: (.+)$", metadata, re.MULTILINE)
    out.append(f"wheel METADATA: License-Expression: {m.group(1).strip()}" if m else "wheel METADATA: no License-Expression")
    for member, label in (("README.rst", "README.rst"), ("data/diseases.xml", "data/diseases.xml")):
        try:
            text = pkg.text(member)
        except DataError:
            out.append(f"{label}: not found")
            continue
        m = re.search(r"SPDX-License-Identifier: ([^\s>]+)", text)
        out.append(f"{label}: SPDX-License-Identifier: {m.group(1)}" if m else f"{label}: no SPDX line")
    try:
        who = "World Health Organization" in pkg.text("README.rst")
    except DataError:
        who = False
    out.append("classification: ICD-10, the World Health Organization's International Classification of Diseases" + (" (README.rst names it)" if who else ""))
    return tuple(out)


def document_row(icd: Icd, code: str, lang: str) -> dict[str, Any]:
    """The record of category ``code`` in language ``lang`` (title: its name; text: code, block and chapter titles)."""
    c = icd.concepts[code]
    name = c.english if lang == "en" else c.names.get(lang, "")
    context = [code] + [icd.titles[cat].get(lang, "") for cat in dict.fromkeys((c.block, c.chapter))]
    return {
        "doc_id": code, "title": name, "text": " · ".join(p for p in context if p), "language": lang, "modality": "text",
        "discipline": DISCIPLINE, "concept_ids": [f"icd10:{code}"], "licence": LICENCE,
    }  # fmt: skip
