"""Kind ``bm25``: bm25s with Lucene scoring by default, stopwords and a Snowball stemmer (PyStemmer).

Its "embedding" is the sparse bm25s index of the corpus; it needs no FAISS index. Every record is
analysed by its language's analyser (:mod:`medbench_core.retrieval.analysis`): the one
``language_analyzers`` names for it, else the model's own ``stopwords``/``stemmer`` for English,
else the language's default (Japanese: fugashi + UniDic-lite; Chinese: jieba; a Snowball stemmer
where PyStemmer has one; character bigrams for any other script). A task all of whose records get
the analyser the kind used before analysers were registered (its one language's stopwords and
stemmer) is analysed and keyed exactly as before; any other task's analysers enter its embeddings
key (:meth:`BM25Kind.analysis_identity`). Ties are ordered by doc id
(:mod:`medbench_core.retrieval.ranking`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.retriever_base import RetrieverKind
from medbench_core.retrieval.kinds.settings import KindSettings
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.kinds.stage_inputs import StoredCorpus
from medbench_core.taskdata.task import Task

METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")  # bm25s's variants


@dataclass(frozen=True)
class BM25Settings(KindSettings):
    """``k1``, ``b``, ``method`` (a bm25s variant), ``stopwords`` (a language code or a list),
    ``stemmer`` (a PyStemmer algorithm, or null for none), ``language_analyzers``
    (``{lang: {stopwords: .., stemmer: ..}}``, or ``{lang: {analyzer: NAME, ..its options}}`` for a
    registered analyser: ``bm25s``, ``fugashi``, ``jieba``, ``char_ngram`` with ``n``)."""

    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    stopwords: str | list | None = "en"
    stemmer: str | None = "english"
    language_analyzers: dict = field(default_factory=dict)

    CHOICES = {"method": METHODS}
    HINTS = {"max_length": "BM25 indexes every token of a document", "long_text": "BM25 indexes every token of a document"}

    def check(self, where: str) -> None:
        if self.k1 < 0 or not 0.0 <= self.b <= 1.0:
            raise DataError(f"{where}: BM25 needs k1 >= 0 and 0 <= b <= 1, not k1={self.k1}, b={self.b}")
        from medbench_core.retrieval.analysis import make_analyzer

        for lang, analyzer in self.language_analyzers.items():
            if isinstance(analyzer, dict) and "analyzer" in analyzer:
                options = {k: v for k, v in analyzer.items() if k != "analyzer"}
                make_analyzer(str(analyzer["analyzer"]), f"{where}: language_analyzers.{lang}", **options)
                continue
            if not isinstance(analyzer, dict) or set(analyzer) - {"stopwords", "stemmer"}:
                raise DataError(
                    f"{where}: language_analyzers.{lang} takes 'stopwords' and 'stemmer', "
                    f"or 'analyzer' (a registered analyser) and its options, not {analyzer!r}"
                )
        if self.stemmer:
            _check_stemmer(self.stemmer, where)
        for analyzer in self.language_analyzers.values():
            if analyzer.get("stemmer"):
                _check_stemmer(analyzer["stemmer"], where)


def _check_stemmer(name: str, where: str) -> None:
    import Stemmer

    if name not in Stemmer.algorithms():
        raise DataError(f"{where}: stemmer {name!r} unknown; PyStemmer has {', '.join(sorted(Stemmer.algorithms()))}")


def task_language(task: Task) -> str | None:
    """The task's one language, or None when its records mix languages."""
    langs = set(task.queries["language"].drop_nulls().to_list()) | set(task.corpus["language"].drop_nulls().to_list())
    return langs.pop() if len(langs) == 1 else None


class BM25Kind(RetrieverKind):
    name = "bm25"
    packages = ("bm25s", "PyStemmer", "jieba", "fugashi", "unidic-lite")  # the analysers of retrieval/analysis.py segment ja and zh
    Settings = BM25Settings
    version = "1"
    no_path_reason = "BM25 has no weights"
    expansion_family = "lexical"

    def instructs_expansion(self, spec: ModelSpec) -> bool:
        """False: no instruction: its queries are words (:class:`~.capabilities.Expandable`)."""
        return False

    def revision(self, spec: ModelSpec) -> str:
        return spec.revision or "bm25s"

    def index_identity(self, spec: ModelSpec) -> Any:
        return "bm25s"

    def analyzer(self, spec: ModelSpec, task: Task) -> dict[str, Any]:
        """The effective bm25s settings on ``task`` (its language's analyzer when the settings give one)."""
        from medbench_core.retrieval import bm25_index

        return bm25_index.bm25_settings(asdict(spec.settings), task_language(task))

    def analyzers(self, spec: ModelSpec, task: Task) -> dict[str | None, Any]:
        """Language -> :class:`~medbench_core.retrieval.analysis.Analyzer` for every language of ``task``'s records (None: records without one)."""
        from medbench_core.retrieval.analysis import analyzer_for

        settings = asdict(spec.settings)
        one = task_language(task)
        langs = set(task.queries["language"].unique().to_list()) | set(task.corpus["language"].unique().to_list())
        return {lang: analyzer_for(lang, settings, fallback=one) for lang in sorted(langs, key=lambda x: x or "")}

    def analysis_identity(self, spec: ModelSpec, task: Task) -> dict[str, Any] | None:
        """None when every record of ``task`` gets the analyser the kind used before analysers were
        registered (the task's one language's ``stopwords`` and ``stemmer``): its keys and outputs
        stay what they were. Otherwise language -> analyser identity (name, options, segmenter and
        dictionary versions), which enters the embeddings key: a changed analyser re-keys."""
        from medbench_core.retrieval.analysis import words

        analyzers = self.analyzers(spec, task)
        before = self.analyzer(spec, task)
        if all(a == words(before["stopwords"], before["stemmer"]) for a in analyzers.values()):
            return None
        return {str(lang or ""): a.identity() for lang, a in analyzers.items()}

    def run_params(self, spec: ModelSpec, task: Task) -> dict[str, str]:
        out = super().run_params(spec, task)
        if self.analysis_identity(spec, task) is not None:
            out["analyzers"] = "; ".join(f"{lang or '(none)'}: {a.describe()}" for lang, a in self.analyzers(spec, task).items())
        return out

    def long_text_params(self, spec: ModelSpec, model: Any = None) -> dict[str, Any]:
        return {"long_text": "whole"}  # BM25 indexes every token of a document

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        return {**super().mteb_meta(spec, registry), "model_type": ["sparse"], "n_parameters": 0, "open_weights": True}

    def embed_corpus(self, spec: ModelSpec, task: Task, out: Path, *, model: Any, progress: bool, available: Any) -> dict[str, Any]:
        from medbench_core.retrieval import bm25_index

        analyzer = self.analyzer(spec, task)
        if self.analysis_identity(spec, task) is None:
            files = bm25_index.save(bm25_index.fit(task.doc_text(), analyzer, progress=progress), out)
            return {"representation": "bm25s-sparse", "n_docs": task.corpus.height, "settings": analyzer, **self.long_text_params(spec), "files": files}
        from medbench_core.retrieval.analysis import tokenize_by_language

        analyzers = self.analyzers(spec, task)
        tokens = tokenize_by_language(list(task.doc_text()), task.corpus["language"].to_list(), analyzers)
        files = bm25_index.save(bm25_index.fit_tokens(tokens, analyzer, progress=progress), out)
        scoring = {k: analyzer[k] for k in ("k1", "b", "method")}
        described = {str(lang or ""): a.describe() for lang, a in analyzers.items()}
        return {
            "representation": "bm25s-sparse",
            "n_docs": task.corpus.height,
            "settings": scoring,
            "analyzers": described,
            **self.long_text_params(spec),
            "files": files,
        }

    def build_index(self, spec: ModelSpec, emb_dir: Path, out: Path, *, use_gpu: bool | None, progress: bool | None, available: Any) -> dict[str, Any]:
        return {"type": "bm25s-sparse", "built_on": "cpu", "files": []}

    def represent_queries(self, spec: ModelSpec, task: Task, model: Any, *, prompt: tuple[str, str] | None, expansion: Any = None) -> list[list[str]]:
        """Token lists: the queries' own, or an expansion combined with them (:func:`~medbench_core.retrieval.expansion.combine.bm25_query_tokens`)."""
        from medbench_core.retrieval import bm25_index

        analyzer = self.analyzer(spec, task)
        texts = task.queries["text"].fill_null("").to_list()
        if self.analysis_identity(spec, task) is not None:
            return self._analysed_queries(spec, task, texts, expansion)
        if expansion is None:
            return [list(t) for t in bm25_index.tokenize(texts, analyzer)]
        from medbench_core.retrieval.expansion.combine import bm25_query_tokens

        expansions, combine = expansion
        return bm25_query_tokens(texts, expansions, combine, analyzer)

    def _analysed_queries(self, spec: ModelSpec, task: Task, texts: list[str], expansion: Any) -> list[list[str]]:
        """Each query (and its expansion) tokenized by its language's analyser; an expansion combined as
        :func:`~medbench_core.retrieval.expansion.combine.bm25_query_tokens` combines them."""
        from medbench_core.retrieval.analysis import tokenize_by_language

        analyzers = self.analyzers(spec, task)
        langs = task.queries["language"].to_list()
        queries = tokenize_by_language(texts, langs, analyzers)
        if expansion is None:
            return queries
        expansions, combine = expansion
        expanded = tokenize_by_language(list(expansions), langs, analyzers)
        if combine.mode == "replace":
            return expanded
        if combine.mode != "concat":
            raise DataError(f"BM25 cannot combine by {combine.mode!r}")
        return [q * combine.repeat_query + e for q, e in zip(queries, expanded)]

    def search(self, spec: ModelSpec, task: Task, corpus: StoredCorpus, queries: Any, k: int, *, pools: Any, progress: bool) -> pl.DataFrame:
        from medbench_core.retrieval import bm25_index

        index = bm25_index.load(corpus.embeddings)
        query_ids, doc_ids = task.queries["query_id"].to_list(), task.corpus["doc_id"].to_list()
        return bm25_index.search_tokens(index, query_ids, queries, doc_ids, k, candidates=pools, progress=progress)


KIND = BM25Kind()
