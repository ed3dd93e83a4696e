"""Task.doc_text() joins title and text with polars, yet gives Python's strings: the same joins and
Python's own str.strip(), whose whitespace polars's default strip_chars() does not quite share."""

from __future__ import annotations

import sys

import polars as pl

from medbench_core.taskdata.task import PY_WHITESPACE, DocTexts

TITLES = [None, "", " ", "T", "\x1c", "a\u3000", None, " x ", "\x1f\x1f", "é", "\t"]
TEXTS = ["b", None, " ", "", "c\x1d", None, None, " y\x85", "\u2028", "", "\x1e"]


def test_python_whitespace_is_every_code_point_python_strips():
    assert PY_WHITESPACE == "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())


def test_joined_as_python_joined_them_and_blank_documents_found_without_the_strings():
    corpus = pl.DataFrame({"doc_id": [f"d{i}" for i in range(len(TITLES))], "title": TITLES, "text": TEXTS})
    want = [(f"{t} {x}" if t else (x or "")).strip() for t, x in zip(corpus["title"].fill_null(""), corpus["text"].fill_null(""))]
    texts = DocTexts(corpus)
    assert list(texts) == want and texts[7] == "x   y" and texts[4] == "c"
    assert texts.empty().to_list() == [not t for t in want]
    assert sum(texts.empty()) == 5  # polars's default strip_chars() would keep "\x1f\x1f" and "\x1e": two fewer
