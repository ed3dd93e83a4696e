"""The ``<record>`` elements of a Tryton data file (``data/*.xml`` of a Tryton module), each with its line.

Read with the standard library's expat, not lxml (issue 50 asked for lxml, which is in the lock): lxml 6.1.3
(libxml2 2.14.6) numbers every element past line 65,535 one line too far. On GNU Health's
``data/diseases.xml`` (86,508 lines, 14,416 records) all 3,495 records from line 65,536 on get
``sourceline`` = their line + 1 (record W027 at line 65,536 is given 65,537), the 10,921 before it
their own line (measured 2026-12-07). The report names each unused record by its line, so lxml would
change the curated tasks' notes; expat's ``CurrentLineNumber`` is exact throughout, for elements and
for errors alike. A DOCTYPE (entities) is refused: Tryton's data files have none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from medbench_core.errors import DataError


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
