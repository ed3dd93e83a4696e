"""Kind ``tfidf`` (medbench_core/retrieval/kinds/tfidf.py): its runs through medbench's stages equal
scikit-learn's ``TfidfVectorizer`` and ``cosine_similarity`` called directly, ranked by the tie rule
(equal scores by doc id, descending); candidate sets, byte-identical stored corpus, refused settings."""

from __future__ import annotations

import polars as pl
import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.model_registry import model_spec
from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve
from medbench_core.taskdata.task import TaskMeta, make_task

DOCS = {
    "d1": "Low-dose aspirin reduced myocardial infarction in older adults.",
    "d2": "Vitamin D supplements did not change bone mineral density.",
    "d3": "Statins lower LDL cholesterol and the risk of stroke.",
    "d4": "Aspirin and statins: aspirin prevents infarction, statins prevent stroke.",
    "d5": "Heart attack symptoms differ between men and women.",
    "d6": "Gout is an arthritis caused by uric acid crystals.",
    "d7": "Gout is an arthritis caused by uric acid crystals.",  # d6's twin: equal scores, ordered by doc id
    "d8": "Metformin lowers blood glucose in type 2 diabetes.",
}
QUERIES = {"q1": "does aspirin prevent heart attacks and infarction", "q2": "bone density and vitamin d", "q3": "what causes gout", "q4": "zzz unseen words"}


def task(candidates: dict[str, list[str]] | None = None):
    return make_task(
        TaskMeta(name="tiny", source="test"),
        pl.DataFrame({"query_id": list(QUERIES), "text": list(QUERIES.values()), "language": ["en"] * len(QUERIES)}),
        pl.DataFrame({"doc_id": list(DOCS), "text": list(DOCS.values()), "language": ["en"] * len(DOCS)}),
        pl.DataFrame({"query_id": ["q1", "q2", "q3"], "doc_id": ["d1", "d2", "d6"], "relevance": [1, 1, 1]}),
        candidates=None
        if candidates is None
        else pl.DataFrame([(q, d) for q, ds in candidates.items() for d in ds], schema=["query_id", "doc_id"], orient="row"),
    )


def run_of(spec, t, tmp_path, k):
    dirs = {s: tmp_path / s for s in ("embeddings", "index", "run")}
    for d in dirs.values():
        d.mkdir()
    embed_corpus(spec, t, dirs["embeddings"])
    build_corpus_index(spec, dirs["embeddings"], dirs["index"])
    run, _ = retrieve(spec, t, dirs["embeddings"], dirs["index"], dirs["run"], k=k)
    return run, dirs


def reference(t, params: dict, k: int, pools: dict[str, list[str]] | None = None) -> dict[str, list[tuple[str, float]]]:
    """scikit-learn called directly: fit on the documents, cosine of each query with each document; top k by
    score, equal scores by doc id descending (trec_eval's order)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    vec = TfidfVectorizer(**params)
    docs = vec.fit_transform(list(t.doc_text()))
    scores = cosine_similarity(vec.transform(t.queries["text"].to_list()), docs)
    doc_ids = t.corpus["doc_id"].to_list()
    out = {}
    for qid, row in zip(t.queries["query_id"].to_list(), scores):
        pairs = [(d, float(s)) for d, s in zip(doc_ids, row) if pools is None or d in pools[qid]]
        pairs.sort(key=lambda p: p[0], reverse=True)  # stable sorts: by id descending, then by score
        pairs.sort(key=lambda p: -round(p[1], 12))
        out[qid] = pairs[:k]
    return out


def as_lists(run: pl.DataFrame) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    for q, d, s, r in run.select("query_id", "doc_id", "score", "rank").iter_rows():
        assert r == len(out.setdefault(q, [])) + 1
        out[q].append((d, s))
    return out


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"sublinear_tf": True, "ngram_range": [1, 2], "stop_words": "english"},
        {"analyzer": "char_wb", "ngram_range": [2, 4], "smooth_idf": False, "min_df": 2},
    ],
)
def test_the_run_equals_scikit_learn_called_directly(tmp_path, settings):
    spec = model_spec(name="tfidf", kind="tfidf", settings=settings)
    t = task()
    run, _ = run_of(spec, t, tmp_path, k=5)
    params = {**settings, **({"ngram_range": tuple(settings["ngram_range"])} if "ngram_range" in settings else {})}
    got, want = as_lists(run), reference(t, params, 5)
    assert list(got) == list(QUERIES)  # queries in the task's order, each with its top 5
    for q in QUERIES:
        assert [d for d, _ in got[q]] == [d for d, _ in want[q]], q
        assert [s for _, s in got[q]] == pytest.approx([s for _, s in want[q]], abs=1e-9)
    if not settings:  # worked out by hand: d6 and d7 are one text, so one score, and d7 ranks first; unseen words score 0
        assert [d for d, _ in got["q3"][:2]] == ["d7", "d6"] and got["q3"][0][1] == got["q3"][1][1] > 0
        assert {s for _, s in got["q4"]} == {0.0} and [d for d, _ in got["q4"]] == ["d8", "d7", "d6", "d5", "d4"]


def test_each_query_ranks_only_its_candidate_set(tmp_path):
    pools = {"q1": ["d2", "d4", "d5"], "q2": ["d1", "d2"], "q3": ["d3", "d6", "d8"], "q4": ["d1"]}
    spec = model_spec(name="tfidf", kind="tfidf")
    t = task(pools)
    run, _ = run_of(spec, t, tmp_path, k=10)
    got, want = as_lists(run), reference(t, {}, 10, pools)
    for q in QUERIES:
        assert [d for d, _ in got[q]] == [d for d, _ in want[q]] and len(got[q]) == len(pools[q])
        assert [s for _, s in got[q]] == pytest.approx([s for _, s in want[q]], abs=1e-9)


def test_the_stored_corpus_is_the_same_bytes_each_time(tmp_path):
    spec = model_spec(name="tfidf", kind="tfidf", settings={"ngram_range": [1, 2]})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, a = run_of(spec, task(), tmp_path / "a", k=3)
    _, b = run_of(spec, task(), tmp_path / "b", k=3)
    files = sorted(p.name for p in a["embeddings"].iterdir() if p.name != "info.json")
    assert files == ["data.npy", "doc_ids.json", "idf.npy", "indices.npy", "indptr.npy", "vocabulary.json"]
    assert all((a["embeddings"] / f).read_bytes() == (b["embeddings"] / f).read_bytes() for f in files)
    assert sorted(p.name for p in a["index"].iterdir()) == ["info.json"]  # no separate index


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"stopwords": "english"}, r"unknown setting 'stopwords' for kind tfidf: TfidfVectorizer's setting is stop_words"),
        ({"ngram_range": [2, 1]}, r"ngram_range must be \[min_n, max_n\] with 1 <= min_n <= max_n, not \[2, 1\]"),
        ({"max_df": 1.5}, r"max_df is a share of the documents in \(0, 1\], not 1.5"),
        ({"min_df": 0.5}, r"setting 'min_df' must be int, not 0.5"),
        ({"analyzer": "chars"}, r"analyzer 'chars' unknown; use one of word, char, char_wb"),
    ],
)
def test_a_wrong_setting_is_refused_naming_it(settings, message):
    with pytest.raises(DataError, match=message):
        model_spec(name="tfidf", kind="tfidf", settings=settings)


def test_a_corpus_with_no_term_left_is_refused_naming_the_model_and_the_task(tmp_path):
    spec = model_spec(name="tf", kind="tfidf", settings={"min_df": 5, "stop_words": "english"})  # no other word is in 5 of the 8 documents
    with pytest.raises(DataError, match=r"model tf: TF-IDF cannot fit task tiny's corpus: .*no terms remain"):
        run_of(spec, task(), tmp_path, k=3)
