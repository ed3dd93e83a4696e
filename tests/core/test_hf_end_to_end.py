"""A catalogued MTEB-format and R2MED-repository task through medbench_core's BM25 pipeline:
nDCG@10 equal to pytrec_eval-terrier on the same run and qrels, and the run equal to bm25s called directly."""

from __future__ import annotations

import pytest
import pytrec_eval
from hf_layouts import DOCS, QRELS, QUERIES, write_mteb_parquet, write_r2med_repo

from medbench_core.evaluation.metrics import run_to_dict
from medbench_core.retrieval.model_registry import model_spec
from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve, score
from medbench_core.taskdata.catalog import build_task, load_catalog

BM25 = model_spec(
    name="bm25", kind="bm25", revision="bm25s-lucene", settings={"k1": 1.5, "b": 0.75, "method": "lucene", "stopwords": "en", "stemmer": "english"}
)
K = 10


def bare_bm25s_run() -> dict[str, dict[str, float]]:
    """The fixture straight from its rows through bm25s, as bm25s' README does it."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    texts = [f"{t} {x}".strip() if t else x for _, t, x in DOCS]
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    judged = sorted({q for q, _, _ in QRELS})
    qtext = {q: t for q, t, _ in QUERIES}
    tokens = bm25s.tokenize([qtext[q] for q in judged], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    return {q: {DOCS[i][0]: float(s) for i, s in zip(range(len(DOCS)), retriever.get_scores(tokens[n]))} for n, q in enumerate(judged)}


@pytest.mark.parametrize(
    "reader, write",
    [("mteb", write_mteb_parquet), ("r2med_repo", write_r2med_repo)],
    ids=["mteb", "r2med_repo"],
)
def test_bm25_through_the_pipeline_equals_pytrec_eval_and_bare_bm25s(tmp_path, reader, write):
    write(tmp_path / "data" / "fixture")
    catalog = tmp_path / "tasks.yaml"
    catalog.write_text(f"tasks:\n  - {{name: fixture, reader: {reader}, path: fixture, research_only: true}}\n")
    task = build_task(load_catalog(catalog).task("fixture"), tmp_path / "data", tmp_path / "work")
    dirs = {n: tmp_path / n for n in ("emb", "idx", "run", "met")}
    for d in dirs.values():
        d.mkdir()
    embed_corpus(BM25, task, dirs["emb"])
    build_corpus_index(BM25, dirs["emb"], dirs["idx"])
    run, _ = retrieve(BM25, task, dirs["emb"], dirs["idx"], dirs["run"], k=K)
    result = score(task, run, dirs["met"])

    qrels = {}
    for q, d, g in QRELS:
        qrels.setdefault(q, {})[d] = g
    ours = run_to_dict(run)
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_10"}).evaluate(ours)
    want = sum(v["ndcg_cut_10"] for v in ref.values()) / len(qrels)
    assert result["mean"]["ndcg_at_10"] == pytest.approx(want, abs=1e-12)
    assert result["mean"]["recall_at_10"] == pytest.approx(sum(v["recall_10"] for v in ref.values()) / len(qrels), abs=1e-12)
    assert 0.5 < want < 1.0  # BM25 finds most of them, not all: the comparison is not trivially 0 or 1

    # The run is bm25s' own: the same float scores, and the same top 10 once ties are ordered by doc id.
    bare = bare_bm25s_run()
    for q, docs in ours.items():
        for d, s in docs.items():
            assert s == bare[q][d], (q, d)
        top = sorted(bare[q].items(), key=lambda kv: (-kv[1], [-ord(c) for c in kv[0]]))[:K]
        assert list(docs) == [d for d, _ in top], q
    # The same metric on bm25s' full score lists, ranked by pytrec_eval itself (score, then doc id
    # descending among ties): independent of medbench's top-k and tie code.
    bare_eval = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(bare)
    assert sum(v["ndcg_cut_10"] for v in bare_eval.values()) / len(qrels) == pytest.approx(want, abs=1e-12)
