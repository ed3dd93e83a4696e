"""What a leaderboard reuses from the last one (issue 53; medbench_core/evaluation/reuse.py, stats.py, reports.py).

A leaderboard with one model more computes that model's CIs, its tests against the baseline and
its pairs only, and draws the plots it changes (its own difference plot on each task, the heatmap,
its own trust plot); every other value and plot comes from the last build, and the reports are the very
bytes a build from nothing writes (Holm's correction runs again over all the p-values).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import polars as pl

from medbench_core.evaluation import reuse
from medbench_core.evaluation.reports import Cell, Significance, build_tables, write_leaderboard
from medbench_core.evaluation.reuse import Results, reusing
from medbench_core.evaluation.stats import bootstrap_cis, paired_permutation, paired_ttest, stratified_permutation

# Task t1 has 300 queries (random sign flips and bootstrap draws), t2 has 12 (every sign pattern enumerated).
SIZES = {"t1": 300, "t2": 12}
MODELS = ["bm25", "dense", "sparse", "late"]


def per_query(model: str, task: str) -> pl.DataFrame:
    rng = np.random.default_rng([MODELS.index(model), SIZES[task]])
    values = rng.choice([0.0, 0.25, 0.5, 1.0], size=SIZES[task])  # ties between models and queries, as nDCG has
    return pl.DataFrame({"query_id": [f"q{i:03d}" for i in range(SIZES[task])], "ndcg_at_10": values})


def cells(models: list[str]) -> list[Cell]:
    out = []
    for m in models:
        for t in SIZES:
            pq = per_query(m, t)
            mean = float(pq["ndcg_at_10"].mean())
            bounds = {"judged_at_10": 0.4 + 0.1 * MODELS.index(m), "ndcg_lower_at_10": mean / 2, "ndcg_upper_at_10": (1 + mean) / 2}
            out.append(Cell(m, t, metrics={"mean": {"ndcg_at_10": mean, **bounds}}, per_query=pq))
    return out


def build(models: list[str], out, results: Results | None = None) -> dict[str, bytes]:
    sig = Significance("bm25")
    if results is None:
        write_leaderboard(build_tables(cells(models), models, list(SIZES), sig), out)
    else:
        with reusing(results):  # the CIs and tests are computed in build_tables, the plots in write_leaderboard: both reuse
            write_leaderboard(build_tables(cells(models), models, list(SIZES), sig), out)
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_one_model_more_computes_its_cells_and_pairs_only_and_writes_the_same_bytes(tmp_path):
    store = tmp_path / "stats_results.json"
    first = Results()
    build(MODELS[:3], tmp_path / "three", first)
    first.save(store)
    # Three models on two tasks: a CI per cell (6), a t-test and a randomisation test per model against bm25
    # per task (2 x 2 x 2 = 8), every pair per task and for the average (3 x 3 = 9); a difference plot per
    # model but the baseline per task (2 x 2), the heatmap and a trust plot per model (3).
    assert (first.computed, first.hits) == (6 + 8 + 9 + 4 + 1 + 3, 0)

    again = Results.load(store)
    shutil.copytree(tmp_path / "three", tmp_path / "incremental")  # the reports folder of the last leaderboard, written over
    incremental = build(MODELS, tmp_path / "incremental", again)
    # The fourth model: its CIs (2), its two tests per task (4), its pairs with the three others per task and
    # for the average (9); the plots it is in: its own difference plot on each task (2), the heatmap and its own trust plot.
    assert again.computed == 2 + 4 + 9 + 2 + 1 + 1
    assert again.hits == 6 + 8 + 9 + 4 + 3  # every statistic of the three-model board, the other models' difference and trust plots
    assert incremental == build(MODELS, tmp_path / "from_nothing")  # the same bytes as a build with nothing stored
    stats = pl.read_csv(tmp_path / "incremental" / "stats.csv")
    assert stats.filter(pl.col("model") != "bm25")["p_holm"].null_count() == 0  # Holm over three comparisons per task again

    # Saved, it holds what the last board used: a build with nothing new computes nothing.
    again.save(store)
    same = Results.load(store)
    assert build(MODELS, tmp_path / "incremental", same) == incremental and same.computed == 0
    # A plot whose file is no longer the bytes recorded is drawn again, not copied.
    (tmp_path / "incremental" / "trust" / "late.png").write_bytes(b"not a plot")
    redrawn = Results.load(store)
    assert build(MODELS, tmp_path / "incremental", redrawn) == incremental and redrawn.computed == 1


def test_a_stored_value_is_the_value_computed_to_the_bit(tmp_path):
    rng = np.random.default_rng(7)
    x, y = rng.random(200), rng.random(200)
    stored = Results()
    with reusing(stored):
        first = (bootstrap_cis([x, y]), paired_permutation(x, y), paired_ttest(x, y), stratified_permutation([x - y, (x - y)[:20]]))
    stored.save(tmp_path / "r.json")
    loaded = Results.load(tmp_path / "r.json")
    with reusing(loaded):
        second = (bootstrap_cis([x, y]), paired_permutation(x, y), paired_ttest(x, y), stratified_permutation([x - y, (x - y)[:20]]))
    assert loaded.computed == 0 and loaded.hits == 5
    fresh = (bootstrap_cis([x, y]), paired_permutation(x, y), paired_ttest(x, y), stratified_permutation([x - y, (x - y)[:20]]))
    assert first == second == fresh
    assert [np.float64(a).tobytes() for a in np.ravel(second[0])] == [np.float64(a).tobytes() for a in np.ravel(fresh[0])]
    # Other inputs are other entries: another seed, one value changed.
    with reusing(loaded):
        paired_permutation(x, y, seed=1)
        z = x.copy()
        z[0] += 1e-12
        bootstrap_cis([z])
    assert loaded.computed == 2


def test_values_of_other_code_are_never_read_and_an_unreadable_file_counts_as_empty(tmp_path, monkeypatch):
    x = np.linspace(0, 1, 50)
    stored = Results()
    with monkeypatch.context() as m:  # as if stats.py were other code: its digest is part of every key
        m.setitem(reuse._CODE, ("stats.py", "scipy_equivalents.py", "resampling.py", "|", "numpy", "scipy"), "0" * 16)
        with reusing(stored):
            bootstrap_cis([x])
    stored.save(tmp_path / "other.json")
    doc = json.loads((tmp_path / "other.json").read_text())
    (key,) = doc["entries"]
    doc["entries"][key] = [0.0, 0.0]  # a wrong value: it must not be what this code reads
    (tmp_path / "other.json").write_text(json.dumps(doc))
    (tmp_path / "broken.json").write_text('{"format": 1, "entries"')
    for name in ("other.json", "broken.json", "absent.json"):
        results = Results.load(tmp_path / name)
        with reusing(results):
            assert bootstrap_cis([x]) == bootstrap_cis([x]) != [(0.0, 0.0)]
        assert results.hits == 1 and results.computed == 1, name
