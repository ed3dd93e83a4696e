"""The leaderboard's statistics reused between builds (issue 53; medbench_core/evaluation/stats.py, ``Results``).

A leaderboard with one model more computes that model's CIs, its tests against the baseline and
its pairs only; every other value comes from the last build, and the reports are the very bytes a
build from nothing writes (Holm's correction runs again over all the p-values).
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from medbench_core.evaluation.reports import Cell, Significance, write_leaderboard
from medbench_core.evaluation.stats import (
    Results,
    bootstrap_cis,
    paired_permutation,
    paired_ttest,
    reusing,
    stratified_permutation,
)

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
            out.append(Cell(m, t, metrics={"mean": {"ndcg_at_10": float(pq["ndcg_at_10"].mean())}}, per_query=pq))
    return out


def build(models: list[str], out, results: Results | None = None) -> dict[str, bytes]:
    sig = Significance("bm25")
    if results is None:
        write_leaderboard(cells(models), models, list(SIZES), sig, out)
    else:
        with reusing(results):
            write_leaderboard(cells(models), models, list(SIZES), sig, out)
    return {p.name: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_one_model_more_computes_its_cells_and_pairs_only_and_writes_the_same_bytes(tmp_path):
    store = tmp_path / "stats_results.json"
    first = Results()
    build(MODELS[:3], tmp_path / "three", first)
    first.save(store)
    # Three models on two tasks: a CI per cell (6), a t-test and a randomisation test per model against bm25
    # per task (2 x 2 x 2 = 8), every pair per task and for the average (3 x 3 = 9).
    assert (first.computed, first.hits) == (6 + 8 + 9, 0)

    again = Results.load(store)
    incremental = build(MODELS, tmp_path / "incremental", again)
    # The fourth model: its CIs (2), its two tests per task (4), its pairs with the three others per task and for the average (9).
    assert again.computed == 2 + 4 + 9
    assert again.hits == first.computed  # everything the three-model board computed, taken as it was
    assert incremental == build(MODELS, tmp_path / "from_nothing")  # the same bytes as a build with nothing stored
    stats = pl.read_csv(tmp_path / "incremental" / "stats.csv")
    assert stats.filter(pl.col("model") != "bm25")["p_holm"].null_count() == 0  # Holm over three comparisons per task again

    # Saved, it holds what the last board used: a build with nothing new computes nothing.
    again.save(store)
    same = Results.load(store)
    assert build(MODELS, tmp_path / "same", same) == incremental and same.computed == 0


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


def test_a_file_of_other_code_or_unreadable_counts_as_empty(tmp_path):
    x = np.linspace(0, 1, 50)
    stored = Results()
    with reusing(stored):
        bootstrap_cis([x])
    stored.save(tmp_path / "r.json")
    doc = json.loads((tmp_path / "r.json").read_text())
    (key,) = doc["entries"]
    doc["entries"][key] = [0.0, 0.0]  # a wrong value under another code version must never be read
    doc["code"] = "0" * 16
    (tmp_path / "other.json").write_text(json.dumps(doc))
    (tmp_path / "broken.json").write_text('{"format": 1, "code"')
    for name in ("other.json", "broken.json", "absent.json"):
        results = Results.load(tmp_path / name)
        with reusing(results):
            assert bootstrap_cis([x]) == bootstrap_cis([x])
        assert results.hits == 1 and results.computed == 1, name
