"""The analysers per language and script (medbench_core/retrieval/analysis.py): known segmentations, which
language gets which, BM25 through them equal to bm25s with the tokenizer called directly, and the keys."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.analysis import (
    Analyzer,
    analyzer_for,
    char_ngrams,
    fugashi_tokens,
    jieba_tokens,
    make_analyzer,
    words,
)
from medbench_core.retrieval.model_registry import load_registry
from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, partition_keys, retrieve
from medbench_core.taskdata.task import TaskMeta, make_task

ROOT = Path(__file__).resolve().parents[2]
BM25 = {m.name: m for m in load_registry(ROOT / "models.yaml")}["bm25"]
SETTINGS = dataclasses.asdict(BM25.settings)


# --- known segmentations ------------------------------------------------------------------


def test_japanese_is_segmented_by_mecab_with_unidic_lite():
    # MeCab's own tutorial sentence ("sumomo mo momo mo momo no uchi"), segmented as its documentation shows.
    assert fugashi_tokens("すもももももももものうち") == ["すもも", "も", "もも", "も", "もも", "の", "うち"]
    # A name of the ICD-10 package: the full-width comma is not a token, NFKC makes the full-width Ａ an 'a'.
    assert fugashi_tokens("コレラ菌によるコレラ，詳細不明") == ["コレラ", "菌", "に", "よる", "コレラ", "詳細", "不明"]
    assert fugashi_tokens("パラチフスＡ") == ["パラチフス", "a"]


def test_chinese_is_segmented_by_jieba_precise_mode():
    # jieba's README example of the precise mode ("我来到北京清华大学" -> 我/ 来到/ 北京/ 清华大学).
    assert jieba_tokens("我来到北京清华大学") == ["我", "来到", "北京", "清华大学"]
    assert jieba_tokens("霍乱，未特指") == jieba_tokens("霍乱,未特指")  # punctuation is no token, full- or half-width


def test_character_ngrams_of_each_run_of_letters_marks_and_digits():
    assert char_ngrams("abcd e-fg") == ["ab", "bc", "cd", "e", "fg"]
    assert char_ngrams("ABC", 3) == ["abc"]
    # Thai: the vowel signs (category Mn) stay inside the run: ส ว ั ส ด ี -> 5 bigrams.
    assert char_ngrams("สวัสดี") == ["สว", "วั", "ัส", "สด", "ดี"]


def test_snowball_languages_are_bm25s_split_and_pystemmer():
    import bm25s
    import Stemmer

    text = "Καρδιαγγειακή σύφιλη και καρδιακές παθήσεις"
    expected = bm25s.tokenize([text], stopwords=None, stemmer=Stemmer.Stemmer("greek"), return_ids=False, show_progress=False)
    assert analyzer_for("el", SETTINGS).tokenize([text]) == expected
    assert expected[0] != bm25s.tokenize([text], stopwords=None, return_ids=False, show_progress=False)[0]  # the stemmer did something


# --- which language gets which analyser ---------------------------------------------------


def test_each_language_gets_its_analyser():
    assert analyzer_for("en", SETTINGS) == words("en", "english")  # the model's own
    assert analyzer_for(None, SETTINGS) == words("en", "english")
    assert analyzer_for("fr", SETTINGS) == words("fr", "french")  # models.yaml's language_analyzers
    assert analyzer_for("de", SETTINGS) == words("de", "german")  # Snowball + bm25s's German stopwords
    assert analyzer_for("pt_BR", SETTINGS) == words("pt", "portuguese")
    assert analyzer_for("el", SETTINGS) == words(None, "greek")  # bm25s has no Greek stopword list
    assert analyzer_for("ar", SETTINGS) == words(None, "arabic")
    # spaces, no stemmer, and words of one character kept ("u", tumour)
    assert analyzer_for("vi", SETTINGS) == Analyzer("bm25s", (("stemmer", None), ("stopwords", None), ("token_pattern", r"(?u)\b\w+\b")))
    assert analyzer_for("uk", SETTINGS) == words(None, None)  # spaces, no stemmer, bm25s's split
    assert analyzer_for("ja_JP", SETTINGS) == Analyzer("fugashi")
    assert analyzer_for("zh", SETTINGS) == Analyzer("jieba")
    assert analyzer_for("th", SETTINGS) == Analyzer("char_ngram", (("n", 2),))
    assert analyzer_for(None, SETTINGS, fallback="ja") == Analyzer("fugashi")  # a record without language in a Japanese task
    custom = {**SETTINGS, "language_analyzers": {"ja": {"analyzer": "char_ngram", "n": 3}, "de": {"stopwords": None}}}
    assert analyzer_for("ja", custom) == Analyzer("char_ngram", (("n", 3),))
    assert analyzer_for("de", custom) == words(None, "english")  # keys left out come from the model's own, as before


def test_unknown_analysers_and_options_are_refused_naming_the_closest():
    with pytest.raises(DataError, match="unknown analyzer 'jeiba'; did you mean 'jieba'"):
        make_analyzer("jeiba")
    with pytest.raises(DataError, match=r"analyzer fugashi takes no option\(s\) \['n'\]"):
        make_analyzer("fugashi", n=2)
    with pytest.raises(DataError, match="integer n >= 1"):
        make_analyzer("char_ngram", n=0)
    with pytest.raises(DataError, match="language_analyzers.ja: unknown analyzer 'mecab'"):
        BM25.with_settings(language_analyzers={"ja": {"analyzer": "mecab"}}).settings.check("models.yaml: model bm25")


# --- BM25 through the analysers equals bm25s with the tokenizer called directly ------------


def _task(name: str, lang: str, docs: list[str], queries: list[str]):
    corpus = pl.DataFrame({"doc_id": [f"d{i}" for i in range(len(docs))], "text": docs, "language": lang, "licence": "CC0-1.0"})
    qs = pl.DataFrame({"query_id": [f"q{i}" for i in range(len(queries))], "text": queries, "language": lang, "licence": "CC0-1.0"})
    qrels = pl.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(len(queries))],
            "doc_id": [f"d{i}" for i in range(len(queries))],
            "relevance": 1,
        }
    )
    return make_task(TaskMeta(name=name, source="test", licences=("CC0-1.0",), languages=(lang,)), qs, corpus, qrels)


JA_DOCS = [
    "コレラ 腸管感染症",
    "腸チフス及びパラチフス",
    "細菌性赤痢 腸管感染症",
    "サルモネラ感染症",
    "急性灰白髄炎",
    "狂犬病 ウイルス感染症",
]
JA_QUERIES = ["コレラ菌によるコレラ", "パラチフスＡ", "志賀菌による細菌性赤痢", "サルモネラ腸炎"]
ZH_DOCS = [
    "霍乱 肠道传染病",
    "伤寒和副伤寒",
    "志贺菌病 肠道传染病",
    "其他沙门菌感染",
    "急性脊髓灰质炎",
    "狂犬病 病毒感染",
]
ZH_QUERIES = ["霍乱弧菌引起的霍乱", "副伤寒甲", "痢疾志贺菌引起的志贺菌病", "沙门菌肠炎"]


EL_DOCS = [
    "Χολέρα εντερικές λοιμώξεις",
    "Τυφοειδής και παρατυφοειδής πυρετός",
    "Σιγκέλλωση εντερικές λοιμώξεις",
    "Λύσσα",
]
EL_QUERIES = ["Χολέρα οφειλόμενη σε δονάκιο", "Παρατυφοειδής πυρετός Α"]


# Vietnamese names of the ICD-10 package: "u" (tumour) is a word of one character, 487 names hold it.
VI_DOCS = ["U ác của dạ dày", "Viêm dạ dày", "U lành của da", "Bệnh của da"]
VI_QUERIES = ["U dạ dày", "U da"]


def vietnamese_words(text: str) -> list[str]:
    """bm25s's tokenizer with the word pattern that keeps one-character words, called directly."""
    import bm25s

    return bm25s.tokenize([text], stopwords=None, token_pattern=r"(?u)\b\w+\b", return_ids=False, show_progress=False)[0]


def test_vietnamese_keeps_words_of_one_character():
    import bm25s

    assert analyzer_for("vi", SETTINGS).tokenize(["U ác của dạ dày"]) == [["u", "ác", "của", "dạ", "dày"]]
    assert bm25s.tokenize(["U ác của dạ dày"], stopwords=None, return_ids=False, show_progress=False) == [["ác", "của", "dạ", "dày"]]  # bm25s: no "u"


def test_a_greek_query_stemmed_to_an_empty_token_scores_as_without_it(tmp_path):
    # Greek Snowball stems "ιστού" to "": a query holding it against a corpus where no document does used to
    # fail bm25s's range check (the empty token it adds to its vocabulary has no column). It matches nothing.
    import bm25s

    assert "" in greek_snowball("υποδόριου ιστού")
    task = _task("t_el_empty", "el", EL_DOCS, ["Χολέρα του ιστού"])
    emb, idx, out = (tmp_path / n for n in ("emb", "idx", "run"))
    for d in (emb, idx, out):
        d.mkdir()
    embed_corpus(BM25, task, emb)
    build_corpus_index(BM25, emb, idx)
    ours, _ = retrieve(BM25, task, emb, idx, out, k=len(EL_DOCS))
    bare = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    bare.index([greek_snowball(d) for d in EL_DOCS], show_progress=False)
    want = bare.get_scores([t for t in greek_snowball("Χολέρα του ιστού") if t])
    got = ours.sort("doc_id")
    np.testing.assert_allclose(got["score"].to_numpy(), want[[int(d[1:]) for d in got["doc_id"]]], rtol=0, atol=1e-9)


def greek_snowball(text: str) -> list[str]:
    """bm25s's split and PyStemmer's Greek Snowball, called directly."""
    import bm25s
    import Stemmer

    return bm25s.tokenize([text], stopwords=None, stemmer=Stemmer.Stemmer("greek"), return_ids=False, show_progress=False)[0]


@pytest.mark.parametrize(
    "lang,docs,queries,tokenizer",
    [
        ("ja", JA_DOCS, JA_QUERIES, fugashi_tokens),
        ("zh", ZH_DOCS, ZH_QUERIES, jieba_tokens),
        ("th", ["สวัสดี ครับ", "ลาก่อน"], ["สวัสดี"], char_ngrams),
        ("el", EL_DOCS, EL_QUERIES, lambda t: greek_snowball(t)),
        ("vi", VI_DOCS, VI_QUERIES, vietnamese_words),
    ],
)
def test_bm25_scores_equal_bm25s_with_the_named_tokenizer_called_directly(tmp_path, lang, docs, queries, tokenizer):
    import bm25s

    task = _task(f"t_{lang}", lang, docs, queries)
    emb, idx, out = (tmp_path / n for n in ("emb", "idx", "run"))
    for d in (emb, idx, out):
        d.mkdir()
    info = embed_corpus(BM25, task, emb)
    assert set(info["analyzers"]) == {lang}
    build_corpus_index(BM25, emb, idx)
    ours, _ = retrieve(BM25, task, emb, idx, out, k=len(docs))

    bare = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    bare.index([tokenizer(d) for d in docs], show_progress=False)
    for q, text in enumerate(queries):
        scores = bare.get_scores(tokenizer(text))
        got = ours.filter(pl.col("query_id") == f"q{q}").sort("doc_id")
        np.testing.assert_allclose(got["score"].to_numpy(), scores[[int(d[1:]) for d in got["doc_id"]]], rtol=0, atol=1e-9)
        assert got.height == len(docs)
    if lang == "vi":  # the point of the pattern: "u" (tumour) tells the tumour of the stomach from its inflammation
        assert ours.filter(pl.col("rank") == 1).sort("query_id")["doc_id"].to_list() == ["d0", "d2"]
    if lang in ("ja", "zh"):  # the point of the analyser: bm25s's own split keeps a run of kanji/hanzi as one token
        assert ours.filter(pl.col("rank") == 1).sort("query_id")["doc_id"].to_list()[:1] == ["d0"]
        split = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
        split.index(bm25s.tokenize(docs, stopwords=None, show_progress=False), show_progress=False)
        assert not split.get_scores(bm25s.tokenize(queries[:1], stopwords=None, return_ids=False, show_progress=False)[0]).any()


def test_the_analyser_keys_the_artifacts_and_english_tasks_keep_their_keys():
    ja = _task("t_ja", "ja", JA_DOCS, JA_QUERIES)
    en = _task("t_en", "en", ["cholera", "typhoid fever"], ["cholera due to vibrio"])
    plugin = BM25.plugin
    assert plugin.analysis_identity(BM25, en) is None  # analysed as before: the key is the one it always had
    fr = _task("t_fr", "fr", ["choléra", "fièvre typhoïde"], ["choléra dû au vibrion"])
    assert plugin.analysis_identity(BM25, fr) is None  # FrenchMedMCQA's: models.yaml's language_analyzers.fr, as before
    ident = plugin.analysis_identity(BM25, ja)
    assert ident["ja"]["analyzer"] == "fugashi" and ident["ja"]["unidic-lite"] == "1.0.8"
    base = partition_keys(BM25, ja)
    other = BM25.with_settings(language_analyzers={**SETTINGS["language_analyzers"], "ja": {"analyzer": "char_ngram"}})
    assert partition_keys(other, ja)["embeddings"] != base["embeddings"]
    assert partition_keys(other, en) != partition_keys(BM25, en)  # the settings changed (as before analysers)
    assert plugin.run_params(BM25, ja)["analyzers"].startswith("ja: fugashi (fugashi ")
    assert "analyzers" not in plugin.run_params(BM25, en)
