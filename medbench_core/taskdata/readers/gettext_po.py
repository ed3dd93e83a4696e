"""The entries of a gettext catalogue (``.po``), read with polib.

polib reads the catalogue (keywords, continuation lines, escapes, flags, obsolete ``#~`` entries, the
header) and refuses what it cannot parse with the line. It passes through two things gettext's
``msgfmt`` refuses, which are checked here line by line before: a string that is not quoted
(``msgstr text``: polib would keep its inside, first and last character dropped) and an escape
gettext does not know (``\\q``: polib keeps the backslash). Plural forms are refused: no catalogue
this project reads uses them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from medbench_core.errors import DataError

_STRING_LINE = re.compile(r'^(?:(?P<keyword>[A-Za-z_]+(?:\[\d+\])?)\s+)?(?P<string>"(?:[^"\\]|\\.)*")\s*$')
_ESCAPE = re.compile(r"\\(.)")
_KNOWN_ESCAPES = frozenset('ntrvbf"\\')  # what polib.unescape turns into characters
_KEYWORDS = ("msgctxt", "msgid", "msgstr")


@dataclass(frozen=True)
class PoEntry:
    msgctxt: str
    msgid: str
    msgstr: str
    line: int  # of the entry's first keyword
    fuzzy: bool


# A line that is blank, a comment, or a keyword this reader knows (or none: a continuation) and one quoted string.
_GOOD_LINE = r'[ \t]*(?:#.*|(?:(?:msgctxt|msgid|msgstr)[ \t]+)?"(?:[^"\\\n]|\\.)*"[ \t]*)?\r?$'
_BAD_LINE = re.compile(rf"^(?!{_GOOD_LINE}).*$", re.MULTILINE)


def _check_line(line: str, where: str) -> None:
    """Refuse a string that is not quoted, an unknown escape and a keyword that is not msgctxt, msgid or msgstr."""
    line = line.strip()
    if not line or line.startswith("#"):
        return
    m = _STRING_LINE.match(line)
    if not m:
        raise DataError(f"{where}: expected a quoted string, got {line[:60]!r}")
    if m["keyword"] is not None and m["keyword"] not in _KEYWORDS:
        raise DataError(f"{where}: {m['keyword']!r} is not a keyword this reader knows (msgctxt, msgid, msgstr; plural forms are not used by this package)")
    for e in _ESCAPE.finditer(m["string"][1:-1]):
        if e.group(1) not in _KNOWN_ESCAPES:
            raise DataError(f"{where}: unknown escape \\{e.group(1)} in a gettext string")


def _check_strings(text: str, lines: list[str], where: str) -> None:
    """:func:`_check_line` on the first line of ``text`` that is not a known keyword and a quoted string, and on every line
    with a backslash (one scan of the text finds them: a catalogue of 15,000 entries is checked in a few milliseconds)."""
    bad = _BAD_LINE.search(text.lstrip("\ufeff"))
    if bad:
        lineno = text.lstrip("\ufeff")[: bad.start()].count("\n") + 1
        _check_line(lines[lineno - 1].lstrip("\ufeff"), f"{where}:{lineno}")
        raise DataError(f"{where}:{lineno}: not a gettext line: {bad.group()[:60]!r}")
    if "\\" in text:
        for lineno, line in enumerate(lines, start=1):
            if "\\" in line:
                _check_line(line, f"{where}:{lineno}")


def read_po(text: str, where: str) -> list[PoEntry]:
    """The entries of a gettext catalogue (msgctxt, msgid, msgstr, fuzzy flag, line); obsolete ``#~`` entries skipped.

    The header (empty msgid) is left out; plural forms, a keyword out of place, a string that is
    not quoted or an unknown escape are refused naming ``where`` and the line.
    """
    import polib

    lines = text.splitlines()
    _check_strings(text, lines, where)
    try:
        catalogue = polib.pofile(text)
    except (OSError, ValueError) as exc:  # polib: "Syntax error in po file (line 12)"
        line = re.search(r"line (\d+)", str(exc))
        raise DataError(f"{where}:{line.group(1) if line else '?'}: not a gettext catalogue polib can read ({exc})") from None
    entries = []
    for e in catalogue:
        if e.obsolete or not e.msgid:
            continue
        # polib's linenum is the entry's first line, a comment or flag included; the report names its first keyword.
        first = max(e.linenum, 1)  # 0: the first entry of a catalogue without a header
        while not lines[first - 1].lstrip().startswith(_KEYWORDS):
            first += 1
        entries.append(PoEntry(e.msgctxt or "", e.msgid, e.msgstr, first, e.fuzzy))
    return entries
