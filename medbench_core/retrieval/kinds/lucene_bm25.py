"""Kind ``lucene-bm25``: R2MED's BM25, formula for formula (:mod:`medbench_core.retrieval.lucene_bm25_index`).

pyserini's Lucene English analysis (ported: :mod:`medbench_core.retrieval.lucene_analysis`) and
gensim's ``LuceneBM25Model`` weights on the documents and on the query's bag of words, scored by
their dot product, as R2MED's ``eval_BM25.py`` (lines 58-85 at 62b7074). Settings: ``k1`` (0.9)
and ``b`` (0.4), R2MED's. Its "embedding" is the weighted sparse index of the corpus; it needs
no FAISS index. The top k kept are R2MED's (its stable sort keeps, of documents tied at the cut,
the first in the corpus: an empty query keeps the corpus's first k); ties among them are ordered
by doc id as trec_eval orders them.

An expansion meets it as R2MED's ``load_retrieval_data`` (eval_BM25.py lines 124-133) builds the
query **string**: ``replace`` is the expansion alone; ``concat`` with ``repeat_query: r`` is
``query * r + " " + expansion`` (the copies of the query are joined with no space, as Python's
``text * 2`` joins them: the last word of one copy and the first of the next become one token).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.retriever_base import RetrieverKind
from medbench_core.retrieval.kinds.settings import KindSettings
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.kinds.stage_inputs import StoredCorpus
from medbench_core.taskdata.task import Task


@dataclass(frozen=True)
class LuceneBM25Settings(KindSettings):
    """``k1`` and ``b`` of gensim's LuceneBM25Model (R2MED's 0.9 and 0.4)."""

    k1: float = 0.9
    b: float = 0.4

    HINTS = {
        "max_length": "BM25 indexes every token of a document",
        "long_text": "BM25 indexes every token of a document",
        "stopwords": "the analyser is Lucene's English one (33 stopwords), as R2MED's",
        "stemmer": "the analyser is Lucene's English one (Porter), as R2MED's",
    }

    def check(self, where: str) -> None:
        if self.k1 < 0 or not 0.0 <= self.b <= 1.0:
            raise DataError(f"{where}: BM25 needs k1 >= 0 and 0 <= b <= 1, not k1={self.k1}, b={self.b}")


def lucene_doc_texts(task: Task) -> Any:
    """The documents as R2MED's analyser reads them: ``task.doc_text()`` with U+202F kept at the ends.

    R2MED analyses ``e['text']`` as it is (eval_BM25.py l.108-112). medbench's joined text is
    stripped of Python's white space; every such character but one is a separator to Lucene's
    StandardTokenizer, so cutting it changes no token. The one is U+202F NARROW NO-BREAK SPACE, a
    connector in Lucene's Unicode 9 (``"\u202fword"`` is one token, ``\u202fword``): it is kept.
    """
    from medbench_core.taskdata.task import PY_WHITESPACE

    return task.doc_text(strip=PY_WHITESPACE.replace("\u202f", ""))


def expanded_query_texts(queries: list[str], expansions: list[str], combine: Any) -> list[str]:
    """R2MED's BM25 query string of each expanded query (eval_BM25.py lines 128-133)."""
    if combine.mode == "replace":
        return list(expansions)
    if combine.mode != "concat":
        raise DataError(f"BM25 cannot combine by {combine.mode!r}")
    return [q * combine.repeat_query + " " + e for q, e in zip(queries, expansions)]


class LuceneBM25Kind(RetrieverKind):
    name = "lucene-bm25"
    packages = ("regex", "scipy")  # Lucene's analysers (retrieval/lucene_analysis.py) and its sparse scoring
    Settings = LuceneBM25Settings
    # 2: of documents tied at the k-th place, the first in the corpus are kept (R2MED's stable sort), not the last by doc id;
    #    a document's U+202F at either end is kept (a connector to Lucene), as R2MED's raw text keeps it
    version = "2"
    no_path_reason = "BM25 has no weights"
    expansion_family = "lexical"

    def instructs_expansion(self, spec: ModelSpec) -> bool:
        """False: no instruction: its queries are words (:class:`~.capabilities.Expandable`)."""
        return False

    def revision(self, spec: ModelSpec) -> str:
        return spec.revision or "lucene-bm25"

    def index_identity(self, spec: ModelSpec) -> Any:
        return "lucene-bm25"

    def long_text_params(self, spec: ModelSpec, model: Any = None) -> dict[str, Any]:
        return {"long_text": "whole"}  # BM25 indexes every token of a document

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        return {**super().mteb_meta(spec, registry), "model_type": ["sparse"], "n_parameters": 0, "open_weights": True}

    def embed_corpus(self, spec: ModelSpec, task: Task, out: Path, *, model: Any, progress: bool, available: Any) -> dict[str, Any]:
        from medbench_core.retrieval import lucene_bm25_index

        s = spec.settings
        index = lucene_bm25_index.fit(lucene_doc_texts(task), k1=s.k1, b=s.b, progress=progress, n_docs=task.corpus.height)
        files = lucene_bm25_index.save(index, out)
        return {
            "representation": "lucene-bm25-sparse", "n_docs": index.n_docs, "n_terms": len(index.vocab), "avgdl": index.avgdl,
            "settings": {"k1": s.k1, "b": s.b, "analyzer": "lucene-english-porter"}, **self.long_text_params(spec), "files": files,
        }  # fmt: skip

    def build_index(self, spec: ModelSpec, emb_dir: Path, out: Path, *, use_gpu: bool | None, progress: bool | None, available: Any) -> dict[str, Any]:
        return {"type": "lucene-bm25-sparse", "built_on": "cpu", "files": []}

    def represent_queries(self, spec: ModelSpec, task: Task, model: Any, *, prompt: tuple[str, str] | None, expansion: Any = None) -> list[list[str]]:
        """The analysed terms of each query: its own text, or R2MED's string of query and expansion (module docstring)."""
        from medbench_core.retrieval.lucene_analysis import EnglishAnalyzer

        texts = task.queries["text"].fill_null("").to_list()
        if expansion is not None:
            expansions, combine = expansion
            texts = expanded_query_texts(texts, expansions, combine)
        analyzer = EnglishAnalyzer()
        return [analyzer.analyze(t) for t in texts]

    def search(self, spec: ModelSpec, task: Task, corpus: StoredCorpus, queries: Any, k: int, *, pools: Any, progress: bool) -> pl.DataFrame:
        from medbench_core.retrieval import lucene_bm25_index

        index = lucene_bm25_index.load(corpus.embeddings)
        return lucene_bm25_index.search_terms(
            index, task.queries["query_id"].to_list(), queries, task.corpus["doc_id"].to_list(), k, candidates=pools, progress=progress
        )


KIND = LuceneBM25Kind()
