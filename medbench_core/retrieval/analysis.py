"""Text analysers for lexical retrieval: one per language and script, chosen by a record's language.

An analyser turns texts into token lists (what BM25 counts). They are registered by name, as the
kinds and readers are (:data:`ANALYZERS`); a language picks one by :func:`analyzer_for`:

- ``bm25s``: bm25s's own word split (``(?u)\\b\\w\\w+\\b`` on the lower-cased text), a stopword list
  and a Snowball stemmer (PyStemmer). medbench's English and French analysers, and the default of
  every language PyStemmer has a Snowball algorithm for (:data:`SNOWBALL`: Greek, Arabic, Spanish,
  Portuguese, German, Italian, ...), with bm25s's stopword list where it has one for the language.
  For a language written with spaces that has no Snowball stemmer (:data:`WORD_LANGUAGES`:
  Vietnamese, Ukrainian, ...), the split alone. The split drops words of one character, which a
  language of one-syllable words needs (:data:`ONE_CHARACTER_WORDS`: Vietnamese "u", tumour, 492
  names of the ICD-10 package): there the option ``token_pattern`` is ``(?u)\\b\\w+\\b``, which keeps
  them (Japanese and Chinese keep theirs through their segmenters, other scripts through ``char_ngram``).
- ``fugashi``: Japanese. MeCab through fugashi with the UniDic-lite dictionary (named explicitly,
  so an installed full ``unidic`` does not change the tokens); each morpheme's surface form.
- ``jieba``: Chinese. jieba's precise mode (``cut(text, cut_all=False, HMM=True)``) with its
  bundled dictionary.
- ``char_ngram``: any other script or an unknown language: character n-grams (``n``, default 2)
  of each run of letters, marks and digits; a run shorter than ``n`` is one token.

``fugashi``, ``jieba`` and ``char_ngram`` normalise the text with Unicode NFKC and lower case
first, and keep only tokens holding a letter or a digit (punctuation and spaces are not tokens).

Each analyser has an :meth:`Analyzer.identity` (its name, options and the versions of the
segmenter and dictionary it uses) that keys the BM25 artifacts it produced: changing an analyser,
or upgrading a segmenter's dictionary, re-keys them. Nothing here is imported until a task needs it.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from medbench_core.errors import DataError

# ISO 639-1 code -> PyStemmer's Snowball algorithm. Indic scripts (Hindi, Nepali, Tamil) are left
# to the character n-grams: bm25s's \w split breaks their words at every combining vowel sign.
SNOWBALL: dict[str, str] = {
    "ar": "arabic", "hy": "armenian", "eu": "basque", "ca": "catalan", "cs": "czech", "da": "danish", "nl": "dutch",
    "en": "english", "eo": "esperanto", "et": "estonian", "fi": "finnish", "fr": "french", "de": "german", "el": "greek",
    "hu": "hungarian", "id": "indonesian", "ga": "irish", "it": "italian", "lt": "lithuanian", "no": "norwegian",
    "nb": "norwegian", "fa": "persian", "pl": "polish", "pt": "portuguese", "ro": "romanian", "ru": "russian",
    "sr": "serbian", "es": "spanish", "sv": "swedish", "tr": "turkish", "yi": "yiddish",
}  # fmt: skip
# Languages bm25s has a stopword list for (bm25s.tokenization._infer_stopwords), by their ISO code.
BM25S_STOPWORDS = frozenset({"en", "de", "nl", "fr", "es", "pt", "it", "ru", "sv", "no", "tr", "da"})
# Written with spaces between words, no Snowball stemmer: the word split alone.
WORD_LANGUAGES = frozenset({"vi", "uk", "bg", "be", "mk"})
# Written with spaces, with words of one character that carry meaning: the split keeps them.
ONE_CHARACTER_WORDS = frozenset({"vi"})
ONE_CHARACTER_PATTERN = r"(?u)\b\w+\b"
CHAR_NGRAM_N = 2

_WORD_CHAR = re.compile(r"\w")


def base_language(code: str | None) -> str:
    """``pt_BR`` / ``pt-BR`` / ``PT`` -> ``pt``; ``None`` or ``""`` -> ``""``."""
    return re.split(r"[-_]", (code or "").strip().lower(), maxsplit=1)[0]


def _nfkc_lower(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


# --- the analysers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Analyzer:
    """A registered analyser with its options: ``tokenize`` texts into token lists, ``identity`` for keys."""

    name: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.options)

    def identity(self) -> dict[str, Any]:
        """Name, options and the versions of what segments the text (they enter the artifact keys)."""
        return {"analyzer": self.name, **self.params, **ANALYZERS[self.name].versions()}

    def describe(self) -> str:
        """One line for info.json and MLflow: ``fugashi (fugashi 1.5.2, unidic-lite 1.0.8)``."""
        ident = {k: v for k, v in self.identity().items() if k != "analyzer"}
        return f"{self.name} ({', '.join(f'{k} {v}' for k, v in ident.items())})" if ident else self.name

    def tokenize(self, texts: Iterable[str]) -> list[list[str]]:
        """Token list of each text, in order."""
        return ANALYZERS[self.name].tokenize(list(texts), self.params)


@dataclass(frozen=True)
class Registered:
    """What a registry entry provides: a tokenizer over a list of texts, and the versions it depends on."""

    tokenize: Callable[[list[str], dict[str, Any]], list[list[str]]]
    versions: Callable[[], dict[str, str]]
    options: tuple[str, ...] = ()


def _bm25s_tokenize(texts: list[str], params: dict[str, Any]) -> list[list[str]]:
    from medbench_core.retrieval.bm25_index import _bm25s, _stemmer

    pattern = {"token_pattern": params["token_pattern"]} if params.get("token_pattern") else {}  # else bm25s's own split
    return _bm25s().tokenize(
        texts,
        stopwords=params.get("stopwords"),
        stemmer=_stemmer(params.get("stemmer")),
        return_ids=False,
        show_progress=False,
        **pattern,
    )


@functools.cache
def _fugashi_tagger():
    import os

    import fugashi
    import unidic_lite

    # As fugashi itself finds unidic-lite (fugashi.fugashi.try_import_unidic), named explicitly.
    return fugashi.Tagger(f'-r "{os.path.join(unidic_lite.DICDIR, "mecabrc")}" -d "{unidic_lite.DICDIR}"')


def fugashi_tokens(text: str) -> list[str]:
    """Japanese tokens of one text: NFKC + lower case, MeCab (fugashi, UniDic-lite) surface forms holding a letter or digit."""
    tagger = _fugashi_tagger()
    return [w.surface for w in tagger(_nfkc_lower(text)) if _WORD_CHAR.search(w.surface)]


def _fugashi_tokenize(texts: list[str], params: dict[str, Any]) -> list[list[str]]:
    return [fugashi_tokens(t) for t in texts]


@functools.cache
def _jieba_tokenizer():
    import logging

    import jieba

    logging.getLogger("jieba").setLevel(logging.WARNING)  # it announces loading its dictionary on stderr
    tokenizer = jieba.Tokenizer()
    tokenizer.initialize()
    return tokenizer


def jieba_tokens(text: str) -> list[str]:
    """Chinese tokens of one text: NFKC + lower case, jieba's precise mode (HMM on), tokens holding a letter or digit."""
    return [t for t in _jieba_tokenizer().lcut(_nfkc_lower(text), cut_all=False, HMM=True) if _WORD_CHAR.search(t)]


def _jieba_tokenize(texts: list[str], params: dict[str, Any]) -> list[list[str]]:
    return [jieba_tokens(t) for t in texts]


def _is_run_char(c: str) -> bool:
    return unicodedata.category(c)[0] in "LMN"  # letters, marks (vowel signs), numbers


def char_ngrams(text: str, n: int = CHAR_NGRAM_N) -> list[str]:
    """Character ``n``-grams of each run of letters, marks and digits (NFKC, lower case); a shorter run is one token."""
    out: list[str] = []
    run: list[str] = []
    for c in _nfkc_lower(text) + " ":
        if _is_run_char(c):
            run.append(c)
            continue
        if run:
            word = "".join(run)
            out.extend([word] if len(word) <= n else [word[i : i + n] for i in range(len(word) - n + 1)])
            run = []
    return out


def _char_ngram_tokenize(texts: list[str], params: dict[str, Any]) -> list[list[str]]:
    n = int(params.get("n", CHAR_NGRAM_N))
    return [char_ngrams(t, n) for t in texts]


# analyser name -> what it is. Adding one: its tokenizer, its versions, one line here, its tests
# (tests/core/test_analysis.py: known segmentations, and BM25 equal to bm25s with it called directly).
ANALYZERS: dict[str, Registered] = {
    "bm25s": Registered(_bm25s_tokenize, dict, ("stopwords", "stemmer", "token_pattern")),
    "fugashi": Registered(_fugashi_tokenize, lambda: {"fugashi": _version("fugashi"), "unidic-lite": _version("unidic-lite")}),
    "jieba": Registered(_jieba_tokenize, lambda: {"jieba": _version("jieba")}),
    "char_ngram": Registered(_char_ngram_tokenize, dict, ("n",)),
}


def make_analyzer(name: str, where: str = "analyzer", **options: Any) -> Analyzer:
    """The registered analyser ``name`` with ``options`` (unknown names and options are refused)."""
    from medbench_core.taskdata.readers.base import closest

    if name not in ANALYZERS:
        raise DataError(f"{where}: unknown analyzer {name!r}{closest(name, tuple(ANALYZERS))} (analyzers: {', '.join(sorted(ANALYZERS))})")
    extra = sorted(set(options) - set(ANALYZERS[name].options))
    if extra:
        known = ", ".join(ANALYZERS[name].options) or "none"
        raise DataError(f"{where}: analyzer {name} takes no option(s) {extra} (its options: {known})")
    if name == "char_ngram" and not (isinstance(options.get("n", CHAR_NGRAM_N), int) and options.get("n", CHAR_NGRAM_N) >= 1):
        raise DataError(f"{where}: analyzer char_ngram needs an integer n >= 1, not {options.get('n')!r}")
    return Analyzer(name, tuple(sorted(options.items())))


def words(stopwords: Any, stemmer: str | None) -> Analyzer:
    """The ``bm25s`` analyser with a stopword list (a language code, a list, or None) and a Snowball stemmer (or None)."""
    return Analyzer(
        "bm25s",
        (
            ("stemmer", stemmer or None),
            ("stopwords", tuple(stopwords) if isinstance(stopwords, (list, tuple)) else stopwords),
        ),
    )


def default_analyzer(language: str) -> Analyzer:
    """The analyser a language gets when the model's settings name none for it (see the module docstring)."""
    lang = base_language(language)
    if lang == "ja":
        return Analyzer("fugashi")
    if lang == "zh":
        return Analyzer("jieba")
    if lang in SNOWBALL:
        return words(lang if lang in BM25S_STOPWORDS else None, SNOWBALL[lang])
    if lang in ONE_CHARACTER_WORDS:
        return Analyzer("bm25s", (("stemmer", None), ("stopwords", None), ("token_pattern", ONE_CHARACTER_PATTERN)))
    if lang in WORD_LANGUAGES:
        return words(None, None)
    return Analyzer("char_ngram", (("n", CHAR_NGRAM_N),))


def analyzer_for(language: str | None, settings: Mapping[str, Any], fallback: str | None = None) -> Analyzer:
    """The analyser of records in ``language`` under a BM25 model's ``settings``.

    1. ``language_analyzers`` names one for the language (by its code as written, else its base
       code): ``{stopwords, stemmer}`` is the ``bm25s`` analyser, each key it leaves out taken from
       the model's own ``stopwords``/``stemmer`` (as before analysers were registered);
       ``{analyzer: NAME, ...options}`` a registered one.
    2. English, or a record without a language (``fallback``: the task's one language, if it has
       one): the model's own ``stopwords`` and ``stemmer``.
    3. Otherwise the language's default (:func:`default_analyzer`).
    """
    from medbench_core.retrieval.bm25_index import DEFAULTS

    top = {k: settings.get(k, DEFAULTS[k]) for k in ("stopwords", "stemmer")}
    if not language:
        if fallback:
            return analyzer_for(fallback, settings)
        return words(top["stopwords"], top["stemmer"])
    per = settings.get("language_analyzers") or {}
    configured = per.get(language, per.get(base_language(language)))
    if configured:
        configured = dict(configured)
        if "analyzer" in configured:
            return make_analyzer(configured.pop("analyzer"), f"language_analyzers.{language}", **configured)
        merged = {**top, **{k: v for k, v in configured.items() if k in ("stopwords", "stemmer")}}
        return words(merged["stopwords"], merged["stemmer"])
    if base_language(language) == "en":
        return words(top["stopwords"], top["stemmer"])
    return default_analyzer(language)


def tokenize_by_language(texts: list[str], languages: list[str | None], analyzers: Mapping[str | None, Analyzer]) -> list[list[str]]:
    """Each text tokenized by the analyser of its language (``analyzers``: language -> analyser), in order."""
    out: list[list[str] | None] = [None] * len(texts)
    groups: dict[str | None, list[int]] = {}
    for i, lang in enumerate(languages):
        groups.setdefault(lang, []).append(i)
    for lang, rows in groups.items():
        for i, tokens in zip(rows, analyzers[lang].tokenize([texts[i] for i in rows])):
            out[i] = list(tokens)
    return out  # type: ignore[return-value]
