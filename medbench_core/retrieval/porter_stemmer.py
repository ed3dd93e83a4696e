"""Lucene's ``PorterStemmer``: Martin Porter's stemmer on Java's UTF-16 units, the last step of the English analysis.

Martin Porter's algorithm (Program 14, 1980) with the two changes of his reference implementation that Lucene's
PorterStemmer carries ("bli" -> "ble" for "abli" -> "able", and "logi" -> "log"), on words of any characters: a
letter other than a, e, i, o, u and y counts as a consonant. Words of at most two characters are left alone.
:mod:`medbench_core.retrieval.lucene_analysis` applies it to each term; ``tests/core/test_lucene_bm25.py`` checks it on
the examples of Porter's paper by hand and, through the whole analysis, against pyserini's analyser.
"""

from __future__ import annotations

_VOWELS = frozenset("aeiou")


class _Word:
    """The reference implementation's state: buffer ``b`` (a list), ``k`` the word's last index, ``j`` a stem end."""

    __slots__ = ("b", "k", "j")

    def __init__(self, w: str) -> None:
        self.b, self.k, self.j = list(w), len(w) - 1, 0

    def cons(self, i: int) -> bool:
        ch = self.b[i]
        if ch in _VOWELS:
            return False
        if ch == "y":
            return i == 0 or not self.cons(i - 1)
        return True

    def m(self) -> int:
        """The measure of ``b[0..j]``: how many vowel-consonant sequences it has."""
        n, i, j = 0, 0, self.j
        while True:
            if i > j:
                return n
            if not self.cons(i):
                break
            i += 1
        i += 1
        while True:
            while True:
                if i > j:
                    return n
                if self.cons(i):
                    break
                i += 1
            i += 1
            n += 1
            while True:
                if i > j:
                    return n
                if not self.cons(i):
                    break
                i += 1
            i += 1

    def vowel_in_stem(self) -> bool:
        return any(not self.cons(i) for i in range(self.j + 1))

    def double_c(self, j: int) -> bool:
        return j >= 1 and self.b[j] == self.b[j - 1] and self.cons(j)

    def cvc(self, i: int) -> bool:
        if i < 2 or not self.cons(i) or self.cons(i - 1) or not self.cons(i - 2):
            return False
        return self.b[i] not in ("w", "x", "y")

    def ends(self, s: str) -> bool:
        n = len(s)
        if n > self.k + 1 or "".join(self.b[self.k - n + 1 : self.k + 1]) != s:
            return False
        self.j = self.k - n
        return True

    def setto(self, s: str) -> None:
        j = self.j
        self.b[j + 1 : j + 1 + len(s)] = list(s)  # writes over the buffer, as the reference does
        self.k = j + len(s)

    def r(self, s: str) -> None:
        if self.m() > 0:
            self.setto(s)

    def step1ab(self) -> None:
        if self.b[self.k] == "s":
            if self.ends("sses"):
                self.k -= 2
            elif self.ends("ies"):
                self.setto("i")
            elif self.b[self.k - 1] != "s":
                self.k -= 1
        if self.ends("eed"):
            if self.m() > 0:
                self.k -= 1
        elif (self.ends("ed") or self.ends("ing")) and self.vowel_in_stem():
            self.k = self.j
            if self.ends("at"):
                self.setto("ate")
            elif self.ends("bl"):
                self.setto("ble")
            elif self.ends("iz"):
                self.setto("ize")
            elif self.double_c(self.k):
                if self.b[self.k] not in ("l", "s", "z"):
                    self.k -= 1
            elif self.m() == 1 and self.cvc(self.k):
                self.setto("e")

    def step1c(self) -> None:
        if self.ends("y") and self.vowel_in_stem():
            self.b[self.k] = "i"

    def step23(self, table: dict, offset: int) -> None:
        if self.k - offset < 0:
            return
        for suffix, repl in table.get(self.b[self.k - offset], ()):
            if self.ends(suffix):
                self.r(repl)
                return

    def step4(self) -> None:
        if self.k == 0:
            return
        for suffix in _STEP4.get(self.b[self.k - 1], ()):
            if self.ends(suffix):
                if suffix == "ion" and not (self.j >= 0 and self.b[self.j] in ("s", "t")):
                    continue
                break
        else:
            return
        if self.m() > 1:
            self.k = self.j

    def step5(self) -> None:
        self.j = self.k
        if self.b[self.k] == "e":
            a = self.m()
            if a > 1 or (a == 1 and not self.cvc(self.k - 1)):
                self.k -= 1
        if self.b[self.k] == "l" and self.double_c(self.k) and self.m() > 1:
            self.k -= 1


_STEP2 = {
    "a": (("ational", "ate"), ("tional", "tion")),
    "c": (("enci", "ence"), ("anci", "ance")),
    "e": (("izer", "ize"),),
    "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")),
    "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
    "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
    "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
    "g": (("logi", "log"),),
}
_STEP3 = {
    "e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
    "i": (("iciti", "ic"),),
    "l": (("ical", "ic"), ("ful", "")),
    "s": (("ness", ""),),
}
_STEP4 = {
    "a": ("al",),
    "c": ("ance", "ence"),
    "e": ("er",),
    "i": ("ic",),
    "l": ("able", "ible"),
    "n": ("ant", "ement", "ment", "ent"),
    "o": ("ion", "ou"),
    "s": ("ism",),
    "t": ("ate", "iti"),
    "u": ("ous",),
    "v": ("ive",),
    "z": ("ize",),
}


def _utf16_units(word: str) -> str:
    """``word`` as Java holds it: a letter outside the Basic Multilingual Plane as its two surrogates."""
    return "".join(c if ord(c) <= 0xFFFF else chr(0xD800 + ((ord(c) - 0x10000) >> 10)) + chr(0xDC00 + ((ord(c) - 0x10000) & 0x3FF)) for c in word)


def porter_stem(word: str) -> str:
    """Porter's stem of a lower-cased ``word``, as Lucene's ``PorterStemmer`` gives it.

    Lucene stems a ``char[]``: Java's UTF-16 code units, so a letter outside the Basic
    Multilingual Plane (mathematical letters, Deseret, Gothic, emoji) is two consonants to the
    measure, counts twice in the length and is cut by a rule as two units; the word is stemmed
    so here and its surrogates joined again after (a pair the rules cut in half stays a lone surrogate, as in Java).
    """
    wide = any(ord(c) > 0xFFFF for c in word)
    if wide:
        word = _utf16_units(word)
    if len(word) <= 2:
        return _from_units(word) if wide else word
    z = _Word(word)
    z.step1ab()
    if z.k > 0:
        z.step1c()
        z.step23(_STEP2, 1)
        z.step23(_STEP3, 0)
        z.step4()
        z.step5()
    out = "".join(z.b[: z.k + 1])
    return _from_units(out) if wide else out


def _from_units(units: str) -> str:
    """UTF-16 units back to code points (surrogate pairs joined; a lone surrogate kept)."""
    return units.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
