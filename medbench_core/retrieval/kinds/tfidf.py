"""Kind ``tfidf``: scikit-learn's ``TfidfVectorizer`` over the corpus, queries ranked by cosine similarity.

The corpus is fitted once (vocabulary, document frequencies) and its L2-normalised TF-IDF matrix
stored; a query is the same vectorizer's ``transform`` (terms outside the corpus vocabulary count
nothing) and its score for a document the dot product of the two unit vectors, which is their
cosine. The stored corpus is ``.npy`` files and JSON (no zip archive: ``scipy.sparse.save_npz``
stamps its entries with the time), so the same corpus gives the same bytes. It needs no separate
index. Text only; it cannot be expanded. Ties are ordered by doc id
(:func:`medbench_core.retrieval.ranking.rank_scores`).

Settings are ``TfidfVectorizer``'s own, with its defaults: ``lowercase``, ``analyzer`` (word,
char, char_wb), ``ngram_range``, ``stop_words`` (null or english), ``min_df`` (a document count),
``max_df`` (a share of the documents), ``max_features``, ``sublinear_tf``, ``smooth_idf``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.retriever_base import RetrieverKind
from medbench_core.retrieval.kinds.settings import KindSettings
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.kinds.stage_inputs import MemoryBudget, Pools, QueryExpansion, QueryPrompt, StoredCorpus
from medbench_core.taskdata.task import Task

FILES = ("vocabulary.json", "idf.npy", "data.npy", "indices.npy", "indptr.npy")


@dataclass(frozen=True)
class TfidfSettings(KindSettings):
    lowercase: bool = True
    analyzer: str = "word"
    ngram_range: list = field(default_factory=lambda: [1, 1])
    stop_words: str | None = None
    min_df: int = 1
    max_df: float = 1.0
    max_features: int | None = None
    sublinear_tf: bool = False
    smooth_idf: bool = True

    CHOICES = {"analyzer": ("word", "char", "char_wb"), "stop_words": (None, "english")}
    HINTS = {
        "stopwords": "TfidfVectorizer's setting is stop_words (null or english)",
        "max_length": "TF-IDF reads every token of a document",
        "long_text": "TF-IDF reads every token of a document",
    }

    def check(self, where: str) -> None:
        lo_hi = self.ngram_range
        if len(lo_hi) != 2 or not all(isinstance(n, int) and not isinstance(n, bool) for n in lo_hi) or not 1 <= lo_hi[0] <= lo_hi[1]:
            raise DataError(f"{where}: ngram_range must be [min_n, max_n] with 1 <= min_n <= max_n, not {lo_hi!r}")
        if self.min_df < 1:
            raise DataError(f"{where}: min_df is a number of documents, at least 1, not {self.min_df}")
        if not 0.0 < self.max_df <= 1.0:
            raise DataError(f"{where}: max_df is a share of the documents in (0, 1], not {self.max_df}")
        if self.max_features is not None and self.max_features < 1:
            raise DataError(f"{where}: max_features must be at least 1 (or null), not {self.max_features}")


def vectorizer(settings: TfidfSettings, vocabulary: dict[str, int] | None = None, idf: np.ndarray | None = None) -> Any:
    """scikit-learn's ``TfidfVectorizer`` with ``settings`` (L2 norm: cosine); fitted when given a stored ``vocabulary`` and ``idf``."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    params = {**asdict(settings), "ngram_range": tuple(settings.ngram_range)}
    vec = TfidfVectorizer(**params, vocabulary=vocabulary, norm="l2", dtype=np.float64)
    if idf is not None:
        vec.idf_ = idf
    return vec


class TfidfKind(RetrieverKind):
    name = "tfidf"
    packages = ("scikit-learn", "scipy")
    Settings = TfidfSettings
    version = "1"
    no_path_reason = "TF-IDF has no weights; it is fitted on each task's corpus"

    def revision(self, spec: ModelSpec) -> str:
        from importlib.metadata import version

        return spec.revision or f"scikit-learn {version('scikit-learn')}"  # its tokenizer and idf are scikit-learn's

    def long_text_params(self, spec: ModelSpec, model: object = None) -> dict[str, Any]:
        return {"long_text": "whole"}  # every token of a document is counted

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        return {**super().mteb_meta(spec, registry), "model_type": ["sparse"], "n_parameters": 0, "open_weights": True, "similarity_fn_name": "cosine"}

    def embed_corpus(self, spec: ModelSpec, task: Task, out: Path, *, model: object, progress: bool, available: MemoryBudget) -> dict[str, object]:
        """The fitted vocabulary (terms in column order) and idf, and the corpus's unit TF-IDF rows as CSR arrays."""
        vec = vectorizer(spec.settings)
        try:
            matrix = vec.fit_transform(task.doc_text()).tocsr()
        except ValueError as exc:  # an empty vocabulary: only stop words, or min_df/max_df pruned every term
            raise DataError(f"model {spec.name}: TF-IDF cannot fit task {task.name}'s corpus: {exc}") from exc
        matrix.sort_indices()
        terms = [t for t, _ in sorted(vec.vocabulary_.items(), key=lambda item: item[1])]
        (out / "vocabulary.json").write_text(json.dumps(terms, ensure_ascii=False))
        for name, array in (("idf", vec.idf_), ("data", matrix.data), ("indices", matrix.indices), ("indptr", matrix.indptr)):
            np.save(out / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
        return {
            "representation": "tfidf-sparse", "n_docs": task.corpus.height, "n_terms": len(terms), "nnz": int(matrix.nnz),
            "settings": self.settings_used(spec), **self.long_text_params(spec), "files": list(FILES),
        }  # fmt: skip

    def settings_used(self, spec: ModelSpec) -> dict[str, Any]:
        """Every setting with its value (the vectorizer's parameters), as info.json records them."""
        return {**asdict(spec.settings), "norm": "l2"}

    def represent_queries(
        self, spec: ModelSpec, task: Task, model: object, *, prompt: QueryPrompt | None, expansion: QueryExpansion | None = None
    ) -> list[str]:
        """The query texts (the vectorizer analyses them in ``search``, with the corpus's vocabulary)."""
        return task.queries["text"].fill_null("").to_list()

    def search(self, spec: ModelSpec, task: Task, corpus: StoredCorpus, queries: list[str], k: int, *, pools: Pools | None, progress: bool) -> pl.DataFrame:
        """Cosine similarity of each query's TF-IDF vector with every document's (its pool's), top ``k``."""
        from scipy import sparse

        from medbench_core.retrieval.ranking import rank_scores

        folder = Path(corpus.embeddings)
        terms = json.loads((folder / "vocabulary.json").read_text())
        arrays = {name: np.load(folder / f"{name}.npy", allow_pickle=False) for name in ("idf", "data", "indices", "indptr")}
        docs = sparse.csr_matrix((arrays["data"], arrays["indices"], arrays["indptr"]), shape=(task.corpus.height, len(terms)))
        vec = vectorizer(spec.settings, {t: i for i, t in enumerate(terms)}, arrays["idf"])
        scores = sparse.csr_matrix(vec.transform(queries)) @ docs.T.tocsc()
        rows = (scores.getrow(i).toarray().ravel() for i in range(len(queries)))
        return rank_scores(task.queries["query_id"].to_list(), task.corpus["doc_id"].to_list(), rows, k, candidates=dict(pools) if pools is not None else None)


KIND = TfidfKind()
