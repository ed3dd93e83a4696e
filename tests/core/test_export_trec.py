"""An export writes each cell's TREC run: copied from run.trec, or written from run.parquet in blocks."""

import polars as pl

from medbench_core.evaluation.exports import export
from medbench_core.evaluation.reports import Cell
from medbench_core.retrieval import ranking


def test_a_cell_with_only_run_parquet_exports_the_trec_lines_write_trec_gives(tmp_path, monkeypatch):
    monkeypatch.setattr(ranking, "TREC_BLOCK", 3)  # several blocks: the file is their concatenation
    run = pl.DataFrame({"query_id": ["q1"] * 4 + ["q2"] * 3, "doc_id": [f"d{i}" for i in range(7)],
                        "score": [2.5, 1.0 / 3, 0.25, 0.125, 9.0, 1e-17, -0.5], "rank": [1, 2, 3, 4, 1, 2, 3]})  # fmt: skip
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run.write_parquet(run_dir / "run.parquet")
    cell = Cell("bm25", "scifact", metrics={"mean": {"ndcg_at_10": 0.5}, "n_queries": 2},
                per_query=pl.DataFrame({"query_id": ["q1", "q2"], "ndcg_at_10": [0.5, 0.5]}), model_revision="x", run_dir=run_dir)  # fmt: skip
    index = export([cell], tmp_path / "out")
    assert index["trec"] == ["trec/bm25/scifact.trec"]
    text = (tmp_path / "out" / "trec" / "bm25" / "scifact.trec").read_text()
    assert text == ranking.write_trec(run, "medbench-bm25")
    assert text.splitlines()[1] == "q1 Q0 d1 2 0.3333333333333333 medbench-bm25"
    assert [p.name for p in (tmp_path / "out" / "trec" / "bm25").iterdir()] == ["scifact.trec"]  # no temporary file left
