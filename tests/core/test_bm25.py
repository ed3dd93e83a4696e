"""medbench's BM25 equals bm25s called directly, and reproduces the published SciFact figure."""

import dataclasses
import json
from pathlib import Path

import pytest
import pytrec_eval

from medbench_core.evaluation.metrics import evaluate, qrels_to_dict, run_to_dict
from medbench_core.retrieval import bm25_index
from medbench_core.retrieval.model_registry import load_registry
from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve
from medbench_core.taskdata.catalog import build_task, load_catalog

ROOT = Path(__file__).resolve().parents[2]
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
K = 100


def bare_bm25s_scifact():
    """SciFact train straight from the BEIR files through bm25s, as its README does it."""
    import bm25s
    import Stemmer

    docs = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").read_text().splitlines() if line.strip()]
    queries = {json.loads(line)["_id"]: json.loads(line)["text"] for line in (SCIFACT / "queries.jsonl").read_text().splitlines() if line.strip()}
    qrels: dict[str, dict[str, int]] = {}
    for row in (SCIFACT / "qrels" / "train.tsv").read_text().splitlines()[1:]:
        q, d, s = row.split("\t")
        qrels.setdefault(q, {})[d] = int(s)
    doc_ids = [str(d["_id"]) for d in docs]
    texts = [(d.get("title", "") + " " + d.get("text", "")).strip() for d in docs]
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    qids = sorted(qrels)
    q_tokens = bm25s.tokenize([queries[q] for q in qids], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    idx, scores = retriever.retrieve(q_tokens, k=K, show_progress=False, n_threads=1)
    run = {q: {doc_ids[i]: float(s) for i, s in zip(idx[n], scores[n])} for n, q in enumerate(qids)}
    return qrels, run


@pytest.fixture(scope="module")
def scifact_runs(tmp_path_factory):
    """medbench's run the way the assets make it: the registry's bm25 entry through the pipeline
    stages (index saved, loaded back, searched), and the bare run."""
    task = build_task(load_catalog(ROOT / "tasks.yaml").task("scifact"), ROOT.parent / "shared" / "data", tmp_path_factory.mktemp("s"))
    spec = {m.name: m for m in load_registry(ROOT / "models.yaml")}["bm25"]
    emb, idx, out = (tmp_path_factory.mktemp(n) for n in ("emb", "idx", "run"))
    embed_corpus(spec, task, emb)
    build_corpus_index(spec, emb, idx)
    ours, _ = retrieve(spec, task, emb, idx, out, k=K)
    return qrels_to_dict(task.qrels), ours, *bare_bm25s_scifact()


def tie_groups(ranked: list[tuple[str, float]]) -> list[tuple[float, list[str]]]:
    """Consecutive documents with exactly equal scores, in rank order."""
    groups: list[tuple[float, list[str]]] = []
    for d, s in ranked:
        if groups and groups[-1][0] == s:
            groups[-1][1].append(d)
        else:
            groups.append((s, [d]))
    return groups


@pytest.mark.slow
def test_same_scores_and_ranking_as_bare_bm25s(scifact_runs):
    _, ours, _, bare = scifact_runs
    by_query: dict[str, list[tuple[str, float]]] = {}
    for q, d, s in ours.sort("query_id", "rank").select("query_id", "doc_id", "score").iter_rows():
        by_query.setdefault(q, []).append((d, s))
    assert set(by_query) == set(bare) and len(bare) == 809
    n_ties = 0
    for q, theirs in bare.items():
        mine = by_query[q]
        # The very same float32 score for every (query, doc) that both retrieved.
        for d, s in mine:
            if d in theirs:
                assert s == theirs[d], (q, d)
        # Same ranking modulo tie order: the same groups of equal scores, with the same
        # documents in each, except the group cut by k where either may keep different ties.
        g_mine = tie_groups(mine)
        g_bare = tie_groups(sorted(theirs.items(), key=lambda kv: kv[1], reverse=True))
        assert [s for s, _ in g_mine] == [s for s, _ in g_bare], q
        for (_, a), (_, b) in zip(g_mine[:-1], g_bare[:-1]):
            assert sorted(a) == sorted(b), q
            # Within a tie, medbench orders by doc id descending, as trec_eval does.
            assert a == sorted(a, reverse=True), q
            n_ties += len(a) > 1
        assert len(g_mine[-1][1]) == len(g_bare[-1][1]), q
    assert n_ties > 0  # the tie rule was exercised on real data


@pytest.mark.slow
def test_scifact_ndcg_at_10_is_the_published_figure(scifact_runs):
    qrels, ours, bare_qrels, bare = scifact_runs
    assert qrels == bare_qrels
    mine = evaluate(qrels, run_to_dict(ours)).mean["ndcg_at_10"]
    ref = pytrec_eval.RelevanceEvaluator(bare_qrels, {"ndcg_cut_10"}).evaluate(bare)
    theirs = sum(v["ndcg_cut_10"] for v in ref.values()) / len(bare_qrels)
    # ../shared/data/README.md: bare bm25s + pytrec_eval give 0.6964 on this copy.
    assert mine == pytest.approx(0.6964, abs=0.0005)
    assert theirs == pytest.approx(0.6964, abs=0.0005)
    assert mine == pytest.approx(theirs, abs=1e-4)


def test_registry_bm25_settings_are_the_published_ones():
    spec = {m.name: m for m in load_registry(ROOT / "models.yaml")}["bm25"]
    assert bm25_index.bm25_settings(dataclasses.asdict(spec.settings)) == {"k1": 1.5, "b": 0.75, "method": "lucene", "stopwords": "en", "stemmer": "english"}


def test_ties_by_doc_id_and_stopword_only_queries():
    docs = ["aspirin fever", "aspirin fever", "gout in the toe", "the and of"]
    ids = ["d1", "d3", "d2", "d0"]
    retriever = bm25_index.fit(docs)
    run = bm25_index.search(retriever, ["q1", "q2"], ["Aspirin for fevers?", "the of and"], ids, 3)
    q1 = run.filter(run["query_id"] == "q1")
    # d1 and d3 hold the same text: equal scores, ordered by doc id descending (trec_eval's rule).
    assert q1["doc_id"].to_list()[:2] == ["d3", "d1"]
    assert q1["score"][0] == q1["score"][1] > 0
    assert q1["rank"].to_list() == [1, 2, 3]
    # A query of stopwords only matches nothing: every score 0, ranked by doc id descending.
    q2 = run.filter(run["query_id"] == "q2")
    assert q2["doc_id"].to_list() == ["d3", "d2", "d1"] and q2["score"].to_list() == [0.0, 0.0, 0.0]


_SAVE_INDEX = """
import sys
from pathlib import Path
from medbench_core.retrieval import bm25_index
docs = ["Aspirin lowers the risk of a second heart attack.", "Statins reduce LDL cholesterol.", "Gout is caused by uric acid crystals.",
        "Vitamin D supplements did not reduce fractures.", "Exercise lowers resting blood pressure and cholesterol."]
bm25_index.save(bm25_index.fit(docs), Path(sys.argv[1]))
"""


def test_the_saved_index_is_the_same_bytes_whatever_the_hash_seed(tmp_path):
    """bm25s numbers its vocabulary in a set's order, which follows the process's hash seed; ours is sorted.

    Two builds in processes with other seeds give byte-identical files (a rebuilt benchmark
    version compares them by sha256), and the same scores as bm25s's own numbering.
    """
    import hashlib
    import os
    import subprocess
    import sys

    digests = []
    for seed in ("1", "2", "3"):
        out = tmp_path / seed
        out.mkdir()
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-c", _SAVE_INDEX, str(out)], env=env, check=True)
        digests.append({f: hashlib.sha256((out / f).read_bytes()).hexdigest() for f in bm25_index.FILES})
    assert digests[0] == digests[1] == digests[2]
    vocab = json.loads((tmp_path / "1" / "vocab.index.json").read_text())
    assert list(vocab) == sorted(t for t in vocab if t) + [""]  # sorted tokens, bm25s's empty token last

    import bm25s

    docs = ["aspirin fever", "gout in the toe", "aspirin for gout", "fever and chills"]
    theirs = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    theirs.index(bm25_index.tokenize(docs, bm25_index.DEFAULTS), show_progress=False)
    ours = bm25_index.fit(docs)
    for query in (["aspirin"], ["gout", "fever"], ["chill"]):
        assert ours.get_scores(query).tolist() == theirs.get_scores(query).tolist()
