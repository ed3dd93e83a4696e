"""Cross-encoder reranking with a seeded random-weight BERT cross-encoder saved as a local folder.

Its scores mean nothing, which is the point: the reranked run must carry exactly the scores that
sentence-transformers' ``CrossEncoder(folder).predict(pairs)`` gives when called directly on the
same (query text, document text) pairs, and rank by them (ties by doc id descending).
"""

from pathlib import Path

import polars as pl
import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.derived import build_derived_run, load_upstream_run
from medbench_core.retrieval.fuse_rerank import rerank
from medbench_core.retrieval.kinds.cross_encoder import load_cross_encoder
from medbench_core.retrieval.kinds.stage_inputs import UpstreamRun
from medbench_core.retrieval.model_registry import ModelSpec, model_spec
from medbench_core.retrieval.ranking import RUN_SCHEMA
from medbench_core.taskdata.task import TaskMeta, make_task

pytestmark = pytest.mark.model

QUERIES = {"q1": "aspirin lowers the risk of heart attack", "q2": "vitamin d and bone density in older adults"}
DOCS = {
    "d1": ("Aspirin", "Low-dose aspirin reduced myocardial infarction in a randomised trial."),
    "d2": ("", "Vitamin D supplements did not change bone mineral density."),
    "d3": ("Statins", "Statins lower LDL cholesterol."),
    "d4": ("Falls", "Exercise prevents falls in older adults."),
    "d5": ("", "Heart attack symptoms differ between men and women."),
}


@pytest.fixture(scope="module")
def task():
    return make_task(
        TaskMeta(name="tiny", source="test"),
        pl.DataFrame({"query_id": list(QUERIES), "text": list(QUERIES.values()), "language": ["en", "en"]}),
        pl.DataFrame({"doc_id": list(DOCS), "title": [t for t, _ in DOCS.values()], "text": [x for _, x in DOCS.values()], "language": ["en"] * 5}),
        pl.DataFrame({"query_id": ["q1", "q2"], "doc_id": ["d1", "d2"], "relevance": [1, 1]}),
    )


@pytest.fixture(scope="module")
def upstream():
    """A BM25-like upstream run, k = 4 per query (ranks 1-4 by score)."""
    rows = [
        ("q1", "d5", 3.0, 1),
        ("q1", "d3", 2.0, 2),
        ("q1", "d1", 1.5, 3),
        ("q1", "d4", 0.1, 4),
        ("q2", "d4", 2.5, 1),
        ("q2", "d2", 2.4, 2),
        ("q2", "d1", 0.3, 3),
        ("q2", "d3", 0.2, 4),
    ]
    return pl.DataFrame(rows, schema=RUN_SCHEMA, orient="row")


def spec(folder: Path, depth: int = 3) -> ModelSpec:
    return model_spec(name="tiny-ce", kind="cross-encoder", path=str(folder), rerank={"upstream": "bm25", "depth": depth}, batch_size=2)


def doc_text(d: str) -> str:
    title, text = DOCS[d]
    return f"{title} {text}".strip()


def test_rerank_scores_equal_cross_encoder_called_directly(tiny_cross_encoder_dir, task, upstream):
    from sentence_transformers import CrossEncoder

    depth = 3
    out = rerank(upstream, task, load_cross_encoder(spec(tiny_cross_encoder_dir)), depth, upstream_k=4, batch_size=2)
    assert out.schema == pl.Schema(RUN_SCHEMA)
    # The same pairs, in the same order and batches, through sentence-transformers directly.
    top = upstream.filter(pl.col("rank") <= depth)
    pairs = [(QUERIES[q], doc_text(d)) for q, d in top.select("query_id", "doc_id").iter_rows()]
    direct = CrossEncoder(str(tiny_cross_encoder_dir)).predict(pairs, batch_size=2).tolist()
    want_all = dict(zip(top.select("query_id", "doc_id").iter_rows(), direct))
    for q in ("q1", "q2"):
        want = {d: s for (qq, d), s in want_all.items() if qq == q}
        got = out.filter(pl.col("query_id") == q)
        assert set(got["doc_id"]) == set(want)  # only the top `depth` of the upstream run
        assert dict(zip(got["doc_id"], got["score"])) == want  # bit for bit
        order = sorted(want, key=lambda d: (want[d], d), reverse=True)
        assert got["doc_id"].to_list() == order and got["rank"].to_list() == [1, 2, 3]
    # The random head really reorders something: the result is not the upstream order.
    assert out["doc_id"].to_list() != upstream.filter(pl.col("rank") <= depth)["doc_id"].to_list()


def test_depth_beyond_upstream_k_names_the_entry(tiny_cross_encoder_dir, task, upstream, tmp_path):
    with pytest.raises(DataError, match=r"model tiny-ce: rerank depth 5 is deeper than upstream run 'bm25' \(k=4\)"):
        build_derived_run(spec(tiny_cross_encoder_dir, depth=5), task, {"bm25": UpstreamRun(upstream, k=4, key="abc")}, tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing stored


def test_missing_upstream_names_the_entry(tiny_cross_encoder_dir, task, tmp_path):
    with pytest.raises(DataError, match=r"model tiny-ce: no run of upstream model\(s\) \['bm25'\] on task tiny"):
        build_derived_run(spec(tiny_cross_encoder_dir), task, {}, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_build_derived_run_writes_a_run_folder(tiny_cross_encoder_dir, task, upstream, tmp_path):
    run, info = build_derived_run(spec(tiny_cross_encoder_dir), task, {"bm25": UpstreamRun(upstream, k=4, key="abc")}, tmp_path, k=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["info.json", "run.parquet", "run.trec"]
    assert info["upstream"] == {"bm25": "abc"} and info["rerank"] == {"upstream": "bm25", "depth": 3}
    assert run.height == 4 and run["rank"].max() == 2  # k=2 cuts the reranked top 3
    assert pl.read_parquet(tmp_path / "run.parquet").equals(run)
    first = (tmp_path / "run.trec").read_text().splitlines()[0].split()
    assert first[:4] == ["q1", "Q0", run["doc_id"][0], "1"] and first[5] == "medbench-tiny-ce"
    again = load_upstream_run(tmp_path, key="xyz")
    assert again.k == 2 and again.key == "xyz" and again.run.equals(run)


def test_query_without_text_is_refused(tiny_cross_encoder_dir, upstream):
    t = make_task(
        TaskMeta(name="img", source="test"),
        pl.DataFrame({"query_id": ["q1", "q2"], "text": [None, "x"]}),
        pl.DataFrame({"doc_id": list(DOCS), "text": ["a"] * 5}),
        pl.DataFrame({"query_id": ["q1"], "doc_id": ["d1"], "relevance": [1]}),
    )
    with pytest.raises(DataError, match=r"1 query\(ies\) of task img have no text \(e.g. \['q1'\]\)"):
        rerank(upstream, t, object(), 2, upstream_k=4)
