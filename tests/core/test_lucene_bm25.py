"""Kind ``lucene-bm25`` against the libraries R2MED's eval_BM25.py calls (lines 58-85 at 62b7074).

- the analyser, token for token, against pyserini 1.6.0's ``Analyzer(get_lucene_analyzer())`` in a
  JVM (tests/core/pyserini_reference.py): every document and query of the bundled SciFact and
  LiveQA-MedQuAD, hand-picked hard strings and random strings over every class of Lucene's grammar;
- the scores, bit for bit, against gensim 4.4's ``LuceneBM25Model`` + ``SparseMatrixSimilarity``
  as R2MED's code builds them, on both bundled corpora;
- hand-worked values that need neither library: Porter's own examples, the 255-unit cut.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from medbench_core.retrieval import lucene_analysis as la
from medbench_core.retrieval import lucene_bm25
from tests.core import pyserini_reference as ref

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def bundled(name: str) -> tuple[list[str], list[str]]:
    """(document texts as medbench joins them: title + " " + text, query texts) of a bundled BEIR folder."""
    docs = [json.loads(line) for line in (SHARED / name / "corpus.jsonl").open()]
    queries = [json.loads(line)["text"] for line in (SHARED / name / "queries.jsonl").open()]
    return [(f"{d.get('title') or ''} {d.get('text') or ''}").strip() for d in docs], queries


# --- by hand, no JVM -------------------------------------------------------------------------


def test_porter_examples_of_porters_paper_and_lucenes_departures():
    # Porter (1980), steps 1a-5b; "bli" -> "ble" and "logi" -> "log" are the reference code's (and Lucene's)
    pairs = {
        "caresses": "caress", "ponies": "poni", "ties": "ti", "caress": "caress", "cats": "cat", "feed": "feed", "agreed": "agre",
        "plastered": "plaster", "motoring": "motor", "sing": "sing", "conflated": "conflat", "troubled": "troubl", "sized": "size",
        "hopping": "hop", "tanned": "tan", "falling": "fall", "hissing": "hiss", "fizzed": "fizz", "failing": "fail", "filing": "file",
        "happy": "happi", "sky": "sky", "relational": "relat", "conditional": "condit", "digitizer": "digit", "vietnamization": "vietnam",
        "callousness": "callous", "electrical": "electr", "adjustable": "adjust", "homologous": "homolog", "generalization": "gener",
        "oscillators": "oscil", "controll": "control", "roll": "roll", "analogousli": "analog", "conformabli": "conform", "radicalli": "radic",
        "analogi": "analog", "a": "a", "is": "is",
    }  # fmt: skip
    assert {w: la.porter_stem(w) for w in pairs} == pairs


def test_analyser_steps_by_hand():
    an = la.EnglishAnalyzer()
    # possessive 's removed before lower case; the 33 stopwords; "weren't" is one token (MidLetter)
    assert an.analyze("The patient's BRCA1-associated tumours weren't 3.5mm; e.g. U.S.A.") == [
        "patient",
        "brca1",
        "associ",
        "tumour",
        "weren't",
        "3.5mm",
        "e.g",
        "u.s.a",
    ]
    # Java's simple lower case: no final sigma, dotted I -> i
    assert an.analyze("ΟΔΥΣΣΕΥΣ İstanbul") == ["οδυσσευσ", "istanbul"]
    # a connector alone is no word; letters and digits joined by "_" are one
    assert la.tokenize("}_{ a_1 _x_ 1,000.5 a.1") == ["a_1", "_x_", "1,000.5", "a", "1"]
    # over 255 UTF-16 units: cut into pieces of 255 (the scanner's buffer)
    assert [len(t) for t in la.tokenize("a" * 600)] == [255, 255, 90]
    assert [len(t) for t in la.tokenize("𝑥" * 200)] == [127, 73]  # two units each; a pair is never split


# --- against pyserini in a JVM ----------------------------------------------------------------

HARD = [
    "The patient's BRCA1-associated tumours weren't 3.5mm; e.g. U.S.A. ©2020 ™ 😀👍🏻 x² ½",
    "Σίσυφος İstanbul ĲSSEL straße ǅemal ＡＢＣ１２３ ｶﾀｶﾅ カタカナ ひらがな 漢字々 한국어 ไทยภาษา",
    "e\u0301 a\u00adb a\u200db 1\u20e3 #\u20e3 *\ufe0f\u20e3 🇬🇧🇫🇷 👨\u200d👩\u200d👧 ℹ\ufe0f Ⓜ️x 🅰bc 🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",
    "א'ב \"א\"ב\" 1'000 a'b 'quoted' don’t rock＇s ＇s ’s O'Neil's 3:30 a:b a·b 1.2.3 1..2 a..b __init__ x_ _1",
    "http://example.org/a?b=c&d=e user@mail.com C++ C# .NET 9/11 24/7 10-20 -5 +3 A&B α-helix β2 μg/kg ±0.5 ≥10 IL-6 TNF-α p53",
    "\u3005\u303b \U00016fe3 \U0001d400\U0001d401 \U00020000\U00020001 ﷺ ٣٤٥ ۱۲۳ १२३ ١٬٢٣٤",
    "x" * 254 + "'s " + "y" * 256 + " " + "1" * 300 + " " + ("ab." * 120),
]


@pytest.mark.slow
def test_tokenizer_equals_lucenes_standard_tokenizer_on_hard_and_random_strings():
    lucene = ref.standard_tokenizer()
    for text in HARD:
        assert la.tokenize(text) == lucene(text), text
    # random strings over a pool holding every class of Lucene's grammar (and plain punctuation)
    pool = list("aZé1_.,:;'\"-/ \n\t") + list("\u05d0\u05d1\u30a2\u30ab\u3042\u4e00\u3005\u0e01\u0e31\ud55c\u0301\u00ad\u200d\ufe0f\u20e3\uff11\u00b7\u2019\u00a9\u2139") + [
        "\U0001f600", "\U0001f44d", "\U0001f3fb", "\U0001f1ec", "\U0001f1e7", "\U000e0067", "\U000e007f", "\U0001d400", "#", "*",
    ]  # fmt: skip
    rng = random.Random(0)
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(3000)]
    joined = " \n ".join(texts)
    if la.tokenize(joined) != lucene(joined):
        bad = [t for t in texts if la.tokenize(t) != lucene(t)]
        assert bad == [], [(t, la.tokenize(t), lucene(t)) for t in bad[:5]]


def _probes(ch: str) -> str:
    return f"a{ch}a 1{ch}1 {ch} {ch}{ch} a{ch} {ch}a 1{ch} {ch}1 ア{ch}ア א{ch}א 一{ch}一 ก{ch}ก _{ch}_ b{ch}"


@pytest.mark.slow
def test_tokenizer_equals_lucene_code_point_by_code_point():
    """Every 61st code point of Unicode and the first and last of each range Lucene reads otherwise
    than today's Unicode (lucene_classes.json), each in fifteen contexts (the sweep that found those
    ranges probed every code point so)."""
    lucene = ref.standard_tokenizer()
    ranges = [r for rs in la._table()["lucene9"].values() for r in rs]
    cps = sorted({c for c in range(0, 0x110000, 61) if not 0xD800 <= c <= 0xDFFF} | {c for r in ranges for c in r})
    for start in range(0, len(cps), 256):
        chunk = cps[start : start + 256]
        text = " \n ".join(_probes(chr(c)) for c in chunk)
        if la.tokenize(text) != lucene(text):
            bad = [hex(c) for c in chunk if la.tokenize(_probes(chr(c))) != lucene(_probes(chr(c)))]
            assert bad == []


@pytest.mark.slow
def test_fast_path_table_is_the_regex_packages_unicode_properties():
    assert la.class_table() == la._table()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["scifact", "liveqa_medquad"])
def test_analyser_equals_pyserinis_on_every_bundled_document_and_query(name):
    docs, queries = bundled(name)
    pyserini = ref.analyzer()
    ours = la.EnglishAnalyzer()
    lucene = ref.standard_tokenizer()
    texts = docs + queries
    assert [la.tokenize(t) for t in texts] == [lucene(t) for t in texts]
    assert [ours.analyze(t) for t in texts] == [pyserini.analyze(t) for t in texts]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["scifact", "liveqa_medquad"])
def test_scores_equal_r2meds_pyserini_and_gensim_bit_for_bit(name):
    docs, queries = bundled(name)
    queries = queries[:150]
    expected = np.asarray(ref.r2med_bm25(docs, queries), dtype=np.float32)  # SparseMatrixSimilarity's float32
    index = lucene_bm25.fit(docs)
    analyzer = la.EnglishAnalyzer()
    got = np.stack([index.scores(analyzer.analyze(q)) for q in queries])
    assert got.dtype == np.float32
    assert np.array_equal(got, expected)


def test_index_files_are_the_same_bytes_for_the_same_corpus(tmp_path):
    docs = ["Aspirin lowers the risk of myocardial infarction.", "Statins lower LDL cholesterol.", "", "the of and"]
    paths = []
    for i in range(2):
        files = lucene_bm25.save(lucene_bm25.fit(docs), tmp_path / str(i))
        paths.append({f: (tmp_path / str(i) / f).read_bytes() for f in files})
    assert paths[0] == paths[1]
    index = lucene_bm25.load(tmp_path / "0")
    # gensim's term ids: by first document, alphabetically within it
    assert index.vocab == ["aspirin", "infarct", "lower", "myocardi", "risk", "cholesterol", "ldl", "statin"]
    # by hand: N = 4 documents, 9 terms (5 + 4 + 0 + 0: "the", "of", "and" are stopwords), avgdl 2.25;
    # "lower" is in two (df 2): idf = ln 5 - ln 2.5; the query "lower" has one known term
    idf = np.log(5.0) - np.log(2.5)
    w0 = idf * (1 / (1 + 0.9 * (1 - 0.4 + 0.4 * 5 / 2.25)))
    w1 = idf * (1 / (1 + 0.9 * (1 - 0.4 + 0.4 * 4 / 2.25)))
    q = idf * (1 / (1 + 0.9 * (1 - 0.4 + 0.4 * 1 / 2.25)))
    np.testing.assert_allclose(index.scores(["lower"]), [w0 * q, w1 * q, 0, 0], rtol=1e-6)
