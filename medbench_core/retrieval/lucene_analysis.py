"""Lucene's English analysis as pyserini's ``get_lucene_analyzer()`` builds it, in Python.

pyserini's default (``get_lucene_analyzer(language="en", stemming=True, stemmer="porter",
stopwords=True)``) is Anserini's ``DefaultEnglishAnalyzer.newStemmingInstance("porter")``:

1. ``StandardTokenizer``: the word boundaries of Unicode's UAX#29 as Lucene 9's JFlex grammar
   (``StandardTokenizerImpl.jflex``, ``%unicode 9``) writes them; only runs of letters, digits,
   South-East-Asian script, single ideographs and hiragana, and emoji sequences become tokens;
   a token longer than 255 UTF-16 units is cut into pieces of at most 255 (the scanner's buffer);
2. ``EnglishPossessiveFilter``: a trailing ``'s`` (``'``, ``’`` or ``＇`` before ``s``/``S``) is removed;
3. ``LowerCaseFilter``: each code point's simple lower case (``Character.toLowerCase``);
4. ``StopFilter`` with ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (33 words, :data:`STOPWORDS`);
5. ``PorterStemFilter``: Martin Porter's reference stemmer on Java's UTF-16 units
   (:func:`medbench_core.retrieval.porter_stemmer.porter_stem`).

Empty terms are dropped (Anserini's ``AnalyzerUtils``). ``tests/core/test_lucene_bm25.py``
checks every step against pyserini's analyser running in a JVM, token for token, on the bundled
corpora and on every 61st code point of Unicode (and the ends of each range Lucene reads otherwise, below) in fifteen contexts.

The character classes come from the ``regex`` package's Unicode properties (a newer Unicode than
Lucene's 9.0), corrected by the code points that Lucene 9.9 reads otherwise (``lucene9`` in
lucene_classes.json, found by sweeping every code point through Lucene).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from medbench_core.retrieval.porter_stemmer import porter_stem

STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they this to was will with".split()
)  # Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET
MAX_TOKEN_UNITS = 255  # StandardTokenizer's default max token length, in UTF-16 code units
_POSSESSIVE_QUOTES = ("'", "\u2019", "\uff07")

# Lucene's grammar reads Unicode 9.0 (and emoji data of 11.0): the code points that its
# StandardTokenizer reads otherwise than today's Unicode properties say, with the class it reads
# them in, are listed under "lucene9" in lucene_classes.json (ranges, inclusive): 21,373 code points,
# mostly assigned since Unicode 9.0 ("other": no token; U+202F NARROW NO-BREAK SPACE a connector, as
# Unicode 9 had it; 781 pictographs that Lucene's emoji 11 data calls Extended_Pictographic and the
# regex package's does not: "emoji"), found by sweeping every code point in
# fifteen contexts through Lucene 9.9 (tests/core/test_lucene_bm25.py re-checks a sample).
_TABLE = "lucene_classes.json"
LUCENE9_CLASSES = ("other", "extend", "midnum", "sa", "han", "connector", "emoji")


@functools.cache
def _table() -> dict:
    import json
    from pathlib import Path

    return json.loads((Path(__file__).with_name(_TABLE)).read_text(encoding="utf-8"))


def _ranges(ranges: Iterable[Iterable[int]]) -> str:
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)


def _cls(body: str, name: str = "") -> str:
    """A character class of today's properties ``body`` less the code points Lucene reads otherwise, plus those it reads as ``name``."""
    import regex

    lucene9 = _table()["lucene9"]
    # subtract only the overridden code points the class holds today (a short class compiles fast)
    today = regex.compile(f"[{body}]", regex.V1)
    held = [[c, c] for rs in lucene9.values() for a, b in rs for c in range(a, b + 1) if today.match(chr(c))]
    minus = _ranges(_merge(held))
    plus = _ranges(lucene9.get(name, ()))
    cls = f"[[{body}]--[{minus}]]" if minus else f"[{body}]"
    return f"[{cls}{plus}]" if plus else cls


def _merge(ranges: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and out[-1][1] >= a - 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


@functools.cache
def _patterns():
    """(token pattern, emoji pattern in POSIX longest-match mode, chars that may start an emoji token, chars where word and emoji overlap)."""
    import regex

    # Lucene's ExtFmtZwj: Format, Extend and ZWJ (the emoji modifiers included, as Lucene 9.9 reads them)
    fmt = _cls(r"\p{WB=Format}\p{WB=Extend}\p{WB=ZWJ}", "extend")
    ext = f"{fmt}*"
    ext_sans_ps = f"[{fmt}--[\\uFE0E\\uFE0F]]*"
    ahletter = _cls(r"\p{WB=ALetter}\p{WB=Hebrew_Letter}")
    hebrew = _cls(r"\p{WB=Hebrew_Letter}")
    numeric = _cls(r"\p{WB=Numeric}[\p{Blk=HalfAndFullForms}&&\p{Nd}]")
    katakana = _cls(r"\p{WB=Katakana}")
    midletter = _cls(r"\p{WB=MidLetter}\p{WB=MidNumLet}\p{WB=Single_Quote}")
    midnum = _cls(r"\p{WB=MidNum}\p{WB=MidNumLet}\p{WB=Single_Quote}", "midnum")
    enl = _cls(r"\p{WB=ExtendNumLet}", "connector")
    sq, dq = _cls(r"\p{WB=Single_Quote}"), _cls(r"\p{WB=Double_Quote}")
    han, hira = _cls(r"\p{Script=Han}", "han"), _cls(r"\p{Script=Hiragana}")
    sa = _cls(r"\p{LB=SA}", "sa")
    ri = _cls(r"\p{WB=Regional_Indicator}")
    zwj = r"\u200D"

    AH, HE, NU, KA = f"{ahletter}{ext}", f"{hebrew}{ext}", f"{numeric}{ext}", f"{katakana}{ext}"
    ML, MN, EN = f"{midletter}{ext}", f"{midnum}{ext}", f"{enl}{ext}"
    SQ, DQ = f"{sq}{ext}", f"{dq}{ext}"
    seg = f"(?:{KA}(?:(?:{EN})*{KA})*|(?:{HE}(?:{SQ}|{DQ}{HE})|{NU}(?:(?:(?:{EN})*|{MN}){NU})*|{AH}(?:(?:(?:{EN})*|{ML}){AH})*)+)"
    word = f"(?:{EN})*{seg}(?:(?:{EN})+{seg})*(?:{EN})*"

    keycap_base = "[0-9#*]"
    accidental = "[\u00a9\u00ae\u2122\u3030\u303d]"
    rkam = f"[{ri}{keycap_base}{accidental}\\p{{Emoji_Modifier}}]"
    emoji_char = _cls(f"\\p{{Extended_Pictographic}}[\\p{{Emoji}}--{rkam}]", "emoji")
    emod, ebase = _cls(r"\p{Emoji_Modifier}"), _cls(r"\p{Emoji_Modifier_Base}")
    seq = f"(?:{zwj}*{emoji_char}{ext_sans_ps}\\uFE0F?|(?:{zwj}*{ebase}{ext_sans_ps})?{emod}{ext_sans_ps})"
    emoji = f"{seq}(?:(?:{zwj}{seq})*|[\\U000E0020-\\U000E007E]+\\U000E007F)|{keycap_base}{ext_sans_ps}\\uFE0F?\\u20E3{ext_sans_ps}|(?:{ri}{ext}){{2}}"
    # POSIX mode: the longest match at a position, as JFlex takes it (a backtracking regex returns
    # the first it finds, which the Hebrew and emoji rules make shorter at times)
    token = regex.compile(f"(?p){word}|(?:{sa}{ext})+|{han}{ext}|{hira}{ext}|{emoji}", regex.V1)
    emoji_posix = regex.compile(f"(?p)(?:{emoji})", regex.V1)
    word_only = regex.compile(word, regex.V1)
    # an emoji token starts with one of these (digits, '#' and '*' start one only as a keycap,
    # which the word rule always matches as far: see _scan)
    emoji_start = regex.compile(f"[{zwj}{emoji_char}{ebase}{emod}{ri}]", regex.V1)
    both = regex.compile(f"[{ahletter}{numeric}{katakana}{enl}&&[{emoji_char}{ebase}{emod}]]", regex.V1)
    return token, emoji_posix, word_only, emoji_start, both


def _units(s: str) -> int:
    """Length in UTF-16 code units (Java's String.length())."""
    return len(s) + sum(1 for ch in s if ord(ch) > 0xFFFF)


def _window_end(text: str, start: int) -> int:
    """End (code points) of the 255-unit window from ``start``; a surrogate pair is never split."""
    units, i = 0, start
    while i < len(text):
        units += 2 if ord(text[i]) > 0xFFFF else 1
        if units > MAX_TOKEN_UNITS:
            break
        i += 1
    return i


# --- the fast path ---------------------------------------------------------------------------
# On BMP text made only of letters (neither Hebrew nor katakana), digits, connectors ("_"), the
# middle punctuation of words and numbers and plain "other" characters (no combining mark,
# ideograph, kana, South-East-Asian script, regional indicator or emoji), Lucene's word rule
# reduces to: a run of letters, digits and connectors holding at least one letter or digit, where
# a MidLetter joins two letters and a MidNum two digits. The classes are stored in lucene_classes.json (computed
# from the ``regex`` package's Unicode properties by tests/core/test_lucene_bm25.py's ``class_table``, which
# checks the stored table against it); texts with any other character take the full grammar (:func:`_patterns`).
FAST_CLASSES = ("letter", "digit", "connector", "midletter", "midnum", "extend", "special")


@functools.cache
def _fast():
    """(pattern of a character outside the fast path, the fast token pattern)."""
    import re

    table = _table()

    def cls(*names: str) -> str:
        """The BMP part of the classes ``names`` (the fast path takes BMP text only)."""
        rs = sorted((a, min(b, 0xFFFF)) for name in names for a, b in table[name] if a <= 0xFFFF)
        return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in rs)

    letter, digit = cls("letter"), cls("digit")
    bridge = f"(?:(?<=[{letter}])[{cls('midletter')}](?=[{letter}])|(?<=[{digit}])[{cls('midnum')}](?=[{digit}]))"
    # at least one letter or digit (a connector alone is no word: Lucene's WORD rule needs a segment);
    # a MidLetter joins two letters, a MidNum two digits (each class a single BMP charset: re's fast loop)
    token = re.compile(f"[{cls('connector')}]*[{letter}{digit}][{cls('letter', 'digit', 'connector')}]*(?:{bridge}[{cls('letter', 'digit', 'connector')}]+)*")
    # the fast path holds for BMP text without combining marks (they attach to any character) and
    # without the characters of the other rules (ideographs, kana, emoji ...)
    outside = re.compile(f"[{cls('special', 'extend')}\\U00010000-\\U0010ffff]")
    return outside, token


def tokenize(text: str) -> list[str]:
    """``StandardTokenizer``'s tokens of ``text`` (raw case, nothing removed)."""
    special, fast = _fast()
    if special.search(text) is None:
        tokens = fast.findall(text)
        if _short(tokens):
            return tokens  # the usual text: no ideograph, kana, emoji ... and no over-long token
    # No token holds white space (no rule of the grammar takes it, and a combining mark after it
    # belongs to it), so the text is cut there and each piece takes the path it can.
    out: list[str] = []
    for piece in _splitter().split(text):
        if special.search(piece) is None:
            tokens = fast.findall(piece)
            if _short(tokens):
                out.extend(tokens)
                continue
        out.extend(_scan(piece))
    return out


@functools.cache
def _splitter():
    """White space that no rule of Lucene's grammar takes (not U+202F, which Unicode 9 made a connector)."""
    import re

    overridden = {c for rs in _table()["lucene9"].values() for a, b in rs for c in range(a, b + 1)}
    spaces = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and chr(c).isspace() and c not in overridden]
    return re.compile("[" + "".join(re.escape(chr(c)) for c in spaces) + "]+")


def _short(tokens: list[str]) -> bool:
    """No token longer than 255 UTF-16 units (the length test in C first: almost every text passes it)."""
    if not tokens or max(map(len, tokens)) <= MAX_TOKEN_UNITS // 2:
        return True
    return all(len(t) <= MAX_TOKEN_UNITS // 2 or _units(t) <= MAX_TOKEN_UNITS for t in tokens)


def _scan(text: str) -> list[str]:
    """The scanner position by position: the longest match at each start (JFlex), within 255 units."""
    token, emoji_posix, word_only, emoji_start, both = _patterns()
    out: list[str] = []
    pos, n = 0, len(text)
    while pos < n:
        m = token.search(text, pos)
        if m is None:
            break
        start = m.start()
        end_limit = _window_end(text, start)
        m = token.match(text, start, end_limit)
        if m is None:  # cannot happen (the match found fits once cut), but never loop forever
            pos = start + 1
            continue
        end = m.end()
        if emoji_start.match(text, start):
            e = emoji_posix.match(text, start, end_limit)
            ends = [end] + ([e.end()] if e else [])
            if both.match(text, start):
                w = word_only.match(text, start, end_limit)
                ends.append(w.end() if w else start)
            end = max(ends)
        out.append(text[start:end])
        pos = end
    return out


def _lower(token: str) -> str:
    """Java's ``Character.toLowerCase`` per code point: Python's ``str.lower`` but without its two context/special rules."""
    if "\u0130" in token or "\u03a3" in token:
        return "".join("i" if ch == "\u0130" else "\u03c3" if ch == "\u03a3" else ch.lower() for ch in token)
    return token.lower()


def _term(raw: str) -> str:
    """The term ``raw`` (one token) becomes after the filters; ``""`` when it is dropped."""
    if len(raw) >= 2 and raw[-1] in "sS" and raw[-2] in _POSSESSIVE_QUOTES:
        raw = raw[:-2]
    low = _lower(raw)
    if low in STOPWORDS or not low:
        return ""
    return porter_stem(low)


class EnglishAnalyzer:
    """pyserini's ``Analyzer(get_lucene_analyzer())``: :meth:`analyze` a text into its terms.

    Each distinct token is filtered and stemmed once (a cache), so a corpus costs its tokenising
    plus one dictionary look-up per token.
    """

    def __init__(self) -> None:
        self._terms: dict[str, str] = {}

    def term(self, raw: str) -> str:
        """The analysed term of one token (``""``: dropped)."""
        t = self._terms.get(raw)
        if t is None:
            t = self._terms[raw] = _term(raw)
        return t

    def analyze(self, text: str) -> list[str]:
        """The terms of ``text``, in order (pyserini's ``Analyzer.analyze``)."""
        get, term = self._terms.get, self.term
        out = []
        for raw in tokenize(text or ""):
            t = get(raw)
            if t is None:
                t = term(raw)
            if t:
                out.append(t)
        return out
