"""The leaderboard's stale-cell policy (medbench_core/evaluation/stale.py) on hand-made artifact trees.

One task t1 (two queries), one model bm25. Its metrics artifacts hold hand-chosen means: 0.75 for the
good evaluation of an earlier entry (the previous leaderboard's cell), 0.5 at the current keys. Each
case states what the board must show: the value or '-', and the exact reason it is marked stale.
"""

import json

import polars as pl
import pytest

from medbench_core.evaluation.reports import UNCONFIRMED, Cell
from medbench_core.evaluation.stale import (
    earlier_cell,
    lost_to_corrupt_artifacts,
    saved_cells,
    task_cells,
    task_stale,
    unconfirmed_reason,
    with_stale,
)
from medbench_core.layout import Layout
from medbench_core.retrieval.derived import registry_partition_keys
from medbench_core.retrieval.model_registry import load_registry
from medbench_core.storage import write_manifest
from medbench_core.taskdata.catalog import TaskEntry
from medbench_core.taskdata.task import TaskMeta, make_task

BM25 = {
    "name": "bm25",
    "kind": "bm25",
    "revision": "bm25s-lucene",
    "settings": {"k1": 1.5, "b": 0.75, "method": "lucene", "stopwords": "en", "stemmer": "english"},
}
OLD_KEY = "0123456789abcdef0123"  # the metrics key of bm25's earlier entry, evaluated well before
RERUN = "(`medbench run --models bm25 --tasks t1`)"
INPUTS_CHANGED = f"bm25's inputs (its models.yaml entry, weights, upstreams or code) changed since it was computed, and it was not recomputed {RERUN}"


def make(n_docs: int = 2):
    return make_task(
        TaskMeta(name="t1", source="test", languages=("en",)),
        pl.DataFrame({"query_id": ["a", "b"], "text": ["query a", "query b"], "language": ["en", "en"]}),
        pl.DataFrame({"doc_id": [f"d{i}" for i in range(n_docs)], "text": ["x"] * n_docs}),
        pl.DataFrame({"query_id": ["a", "b"], "doc_id": ["d0", "d1"], "relevance": [1, 1]}),
    )


@pytest.fixture()
def board(tmp_path):
    (tmp_path / "models.yaml").write_text(json.dumps({"models": [BM25]}))
    specs = load_registry(tmp_path / "models.yaml")
    task = make()
    keys = registry_partition_keys(specs, task, names=["bm25"], expansions=[], online=False)["bm25"]
    return Layout(tmp_path / "data"), specs, task, keys


def store_metrics(layout: Layout, key: str, mean: float):
    folder = layout.artifact_dir("bm25", "t1", "metrics", key)
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"mean": {"ndcg_at_10": mean}}))
    write_manifest(folder, ["metrics.json"])
    return folder


def previous(task, **extra) -> dict:
    """The saved leaderboard's provenance of bm25/t1: its good evaluation at OLD_KEY."""
    return {"bm25/t1": {"metrics_key": OLD_KEY, "task_content_hash": task.content_hash(), "model_revision": "bm25s-lucene", **extra}}


def test_a_never_evaluated_cell_shows_nothing_and_is_not_stale(board):
    layout, specs, task, _ = board
    cells, copies = task_cells(layout, specs, task, [])
    assert [(c.model, c.task, c.metrics, c.value(), c.stale, c.applicable) for c in cells] == [("bm25", "t1", None, None, "", True)]
    assert copies == {}
    # The saved leaderboard had no cell for it either, or one without a metrics key.
    assert earlier_cell(layout, specs[0], task, None, "test").metrics is None
    assert earlier_cell(layout, specs[0], task, {"run_key": "x"}, "test").metrics is None
    # Nothing to lose when nothing was shown.
    assert lost_to_corrupt_artifacts(layout, {}, cells) == []


def test_the_current_result_shows_its_value_with_its_provenance_and_the_task_s_staleness(board):
    layout, specs, task, keys = board
    store_metrics(layout, keys["metrics"], 0.5)
    (cell,), _ = task_cells(layout, specs, task, [])
    assert cell.value() == 0.5 and cell.stale == ""
    assert (cell.provenance["metrics_key"], cell.provenance["run_key"], cell.provenance["index_key"]) == (keys["metrics"], keys["run"], keys["index"])
    assert cell.provenance["task_content_hash"] == task.content_hash()
    (cell,), _ = task_cells(layout, specs, task, [], stale="task t1: its source changed")
    assert (cell.value(), cell.stale) == (0.5, "task t1: its source changed")


def test_a_failed_last_evaluation_after_a_good_one_keeps_the_good_value_marked_stale(board):
    layout, specs, task, _ = board
    store_metrics(layout, OLD_KEY, 0.75)  # bm25's entry changed since; its evaluation at the new keys failed: nothing there
    (cell,), _ = task_cells(layout, specs, task, [], previous=previous(task, stale="said before"))
    assert (cell.value(), cell.stale) == (0.75, INPUTS_CHANGED)
    assert cell.provenance == {"metrics_key": OLD_KEY, "task_content_hash": task.content_hash(), "model_revision": "bm25s-lucene"}  # its old mark dropped
    assert cell.model_revision == "bm25s-lucene"
    # The task was curated again since (another content hash), and that curation is itself not current.
    newer = make(n_docs=3)
    (cell,), _ = task_cells(layout, specs, newer, [], stale="task t1: X", previous=previous(task))
    assert (cell.value(), cell.stale) == (0.75, f"task t1: X; computed on an earlier curated copy of t1, and not recomputed on this one {RERUN}")


def test_a_cell_whose_partition_failed_after_its_metrics_were_written_is_marked_with_that_run_and_error(board):
    layout, specs, task, keys = board
    store_metrics(layout, keys["metrics"], 0.5)
    cells, _ = task_cells(layout, specs, task, [], stale="task t1: X")
    failed = unconfirmed_reason("bm25", "t1", True, "0123456789abcdef", "FAILURE", "task_metrics: OSError: [Errno 28] No space left on device")
    said = (
        f"{UNCONFIRMED} bm25 x t1 failed (Dagster run 01234567: task_metrics: OSError: [Errno 28] No space left on device): "
        f"the value its stored metrics hold is not confirmed {RERUN}"
    )
    assert failed == said
    (cell,) = with_stale(cells, {("bm25", "t1"): failed})
    assert (cell.value(), cell.stale) == (0.5, f"task t1: X; {said}")
    assert with_stale(cells, {("other", "t1"): failed})[0].stale == "task t1: X"
    assert (
        unconfirmed_reason("bm25", "t1", True)
        == f"{UNCONFIRMED} bm25 x t1 failed (its Dagster run): the value its stored metrics hold is not confirmed {RERUN}"
    )
    assert unconfirmed_reason("bm25", "t1", False, "fedcba9876543210", "STARTED") == (
        f"{UNCONFIRMED} bm25 x t1 has not finished (Dagster run fedcba98, started: still running, or its process died): "
        f"the value its stored metrics hold is not confirmed {RERUN}"
    )
    assert "(its Dagster run, unknown: still running" in unconfirmed_reason("bm25", "t1", False)


def test_corrupt_artifacts_are_never_shown_and_refuse_the_new_board_naming_the_partition(board):
    layout, specs, task, _ = board
    folder = store_metrics(layout, OLD_KEY, 0.75)
    (folder / "metrics.json").write_text(json.dumps({"mean": {"ndcg_at_10": 0.99}}))  # edited after its manifest
    saved = previous(task)
    cells, _ = task_cells(layout, specs, task, [], previous=saved)
    assert [(c.metrics, c.stale) for c in cells] == [(None, "")]  # '-', not 0.99 or 0.75
    (lost,) = lost_to_corrupt_artifacts(layout, saved, cells)
    assert lost.startswith("bm25 x t1: ") and str(folder / "metrics.json") in lost
    assert lost.endswith(f": rematerialise task_metrics[bm25|t1] {RERUN}")
    # Not lost: a cell the new board shows, a cell no longer on the board, an artifact removed on purpose.
    shown = [Cell("bm25", "t1", metrics={"mean": {"ndcg_at_10": 0.5}})]
    assert lost_to_corrupt_artifacts(layout, saved, shown) == []
    assert lost_to_corrupt_artifacts(layout, saved, [Cell("other", "t1")]) == []
    assert lost_to_corrupt_artifacts(layout, {"bm25/t1": {"metrics_key": "gone"}}, cells) == []


def test_saved_cells_and_task_staleness_read_what_is_stored(board, tmp_path):
    layout, _, task, _ = board
    assert saved_cells(layout) == {}
    layout.leaderboard_file("json").parent.mkdir(parents=True)
    layout.leaderboard_file("json").write_text("{not json")
    assert saved_cells(layout) == {}
    layout.leaderboard_file("json").write_text(json.dumps({"cells": previous(task)}))
    assert saved_cells(layout) == previous(task)

    entry = TaskEntry(name="t1", reader="beir", path="t1")
    layout.task_dir("t1").mkdir(parents=True)
    write_manifest(layout.task_dir("t1"), [], extra={"inputs": {"entry": "an older entry"}})
    assert task_stale(layout, entry, tmp_path) == (
        "task t1: its entry in tasks.yaml changed since it was curated, and it has not been curated again (`medbench run --tasks t1`)"
    )
    write_manifest(layout.task_dir("t1"), [])  # curated before inputs were recorded: nothing says it changed
    assert task_stale(layout, entry, tmp_path) == ""
