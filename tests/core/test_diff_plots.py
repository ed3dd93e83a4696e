"""One difference plot per model x task, drawn when its inputs change (issue 53; reports.py's draw_plots).

``diff/<task>/<model>.png`` is the model's per-query differences from the baseline on the task. It is keyed
(medbench_core/evaluation/reuse.py, the statistics' mechanism) by the two models' per-query scores, their names,
the task, the metric and the plots' code: a leaderboard with one model more draws that model's plots only and
copies every other one from the last leaderboard, byte for byte; new scores of a model draw its plot on that task,
new scores of the baseline (or another baseline) draw the plots of the tasks they are on. The draw function is
counted by replacing it in reports.py with a wrapper around it.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from PIL import Image

from medbench_core.evaluation import reports
from medbench_core.evaluation.plots import diff_plot_size
from medbench_core.evaluation.reports import Cell, Significance, build_tables, write_leaderboard
from medbench_core.evaluation.reuse import Results, reusing

SIZES = {"t1": 20, "t2": 8}
MODELS = ["bm25", "dense", "sparse", "late"]


def per_query(model: str, task: str, changed: frozenset[tuple[str, str]] = frozenset()) -> pl.DataFrame:
    rng = np.random.default_rng([MODELS.index(model), SIZES[task]])
    values = rng.choice([0.0, 0.25, 0.5, 1.0], size=SIZES[task])
    if (model, task) in changed:  # one query's score moved: new per-query scores, the same query ids
        values[0] = 1.0 - values[0] if values[0] != 0.5 else 0.25
    return pl.DataFrame({"query_id": [f"q{i:03d}" for i in range(SIZES[task])], "ndcg_at_10": values})


def cells(models: list[str], changed: frozenset[tuple[str, str]]) -> list[Cell]:
    out = []
    for m in models:
        for t in SIZES:
            pq = per_query(m, t, changed)
            out.append(Cell(m, t, metrics={"mean": {"ndcg_at_10": float(pq["ndcg_at_10"].mean())}}, per_query=pq))
    return out


@pytest.fixture
def drawn(monkeypatch) -> list[tuple[str, str]]:
    """(task, model) of every difference plot drawn, in order: reports.py's draw function, counted."""
    calls: list[tuple[str, str]] = []
    draw = reports.diff_plot_png

    def counted(per_query, baseline, path, *, task, metric="ndcg_at_10"):
        (model,) = [m for m in per_query if m != baseline]
        calls.append((task, model))
        return draw(per_query, baseline, path, task=task, metric=metric)

    monkeypatch.setattr(reports, "diff_plot_png", counted)
    return calls


def build(out, store, models: list[str], *, baseline: str = "bm25", changed: frozenset[tuple[str, str]] = frozenset()) -> dict[str, bytes]:
    """The leaderboard of ``models`` written over ``out`` (the last one), reusing what ``store`` holds, as the asset does;
    returns the difference plots' bytes by their path under diff/."""
    results = Results.load(store)
    sig = Significance(baseline, n_resamples=1000)
    with reusing(results):
        written = write_leaderboard(build_tables(cells(models, changed), models, list(SIZES), sig), out)
    results.save(store)
    files = {str(p.relative_to(out / "diff")): p.read_bytes() for p in sorted((out / "diff").rglob("*")) if p.is_file()}
    assert sorted(f for f in written["files"] if f.startswith("diff/")) == sorted(f"diff/{f}" for f in files)  # what it says it wrote
    return files


def test_one_model_more_draws_its_own_plots_only_and_copies_the_others_byte_for_byte(tmp_path, drawn):
    out, store = tmp_path / "reports", tmp_path / "stats_results.json"
    three = build(out, store, MODELS[:3])
    assert drawn == [("t1", "dense"), ("t1", "sparse"), ("t2", "dense"), ("t2", "sparse")]
    assert sorted(three) == ["t1/dense.png", "t1/sparse.png", "t2/dense.png", "t2/sparse.png"]  # none for the baseline
    with Image.open(out / "diff" / "t1" / "dense.png") as im:
        assert im.size == diff_plot_size(1) == (800, 300)  # one panel: the model against the baseline

    drawn.clear()
    four = build(out, store, MODELS)
    assert drawn == [("t1", "late"), ("t2", "late")]  # the new model's plots, nothing else
    assert {f: four[f] for f in three} == three  # the others are the last leaderboard's bytes
    assert sorted(four) == sorted([*three, "t1/late.png", "t2/late.png"])
    # What was copied is what drawing it would give: the same bytes as a leaderboard built with nothing stored.
    drawn.clear()
    assert build(tmp_path / "fresh", tmp_path / "none.json", MODELS) == four and len(drawn) == 6

    # Nothing changed: nothing drawn. A model taken off the board leaves no plot behind.
    drawn.clear()
    assert build(out, store, MODELS) == four and drawn == []
    without = build(out, store, ["bm25", "dense", "late"])
    assert drawn == [] and without == {f: four[f] for f in ("t1/dense.png", "t1/late.png", "t2/dense.png", "t2/late.png")}
    assert not (out / "diff" / "t1" / "sparse.png").exists()


def test_new_scores_or_another_baseline_draw_the_plots_they_are_in(tmp_path, drawn):
    out, store = tmp_path / "reports", tmp_path / "stats_results.json"
    before = build(out, store, MODELS[:3])

    drawn.clear()
    after = build(out, store, MODELS[:3], changed=frozenset({("dense", "t1")}))  # dense's scores on t1 changed
    assert drawn == [("t1", "dense")]
    assert after["t1/dense.png"] != before["t1/dense.png"] and {f: after[f] for f in before if f != "t1/dense.png"} == {
        f: v for f, v in before.items() if f != "t1/dense.png"
    }

    drawn.clear()
    changed = frozenset({("dense", "t1"), ("bm25", "t2")})  # and the baseline's on t2: both plots on t2
    again = build(out, store, MODELS[:3], changed=changed)
    assert drawn == [("t2", "dense"), ("t2", "sparse")]
    assert again["t2/dense.png"] != after["t2/dense.png"] and again["t2/sparse.png"] != after["t2/sparse.png"]
    assert again["t1/dense.png"] == after["t1/dense.png"] and again["t1/sparse.png"] == after["t1/sparse.png"]

    drawn.clear()
    other = build(out, store, MODELS[:3], baseline="dense", changed=changed)  # another baseline: every plot is another one
    assert drawn == [("t1", "bm25"), ("t1", "sparse"), ("t2", "bm25"), ("t2", "sparse")]
    assert sorted(other) == ["t1/bm25.png", "t1/sparse.png", "t2/bm25.png", "t2/sparse.png"]
    assert other["t1/sparse.png"] != again["t1/sparse.png"]  # sparse against dense, not against bm25


def test_a_plot_file_that_is_not_the_recorded_bytes_is_drawn_again(tmp_path, drawn):
    out, store = tmp_path / "reports", tmp_path / "stats_results.json"
    first = build(out, store, MODELS[:3])
    (out / "diff" / "t2" / "sparse.png").write_bytes(b"not a plot")
    drawn.clear()
    assert build(out, store, MODELS[:3]) == first and drawn == [("t2", "sparse")]
