"""The multilingual reports (medbench_core/evaluation/language_tables.py, rendered by multilingual.py) on a hand-made task: per language and
script with CIs, tie-aware and chance values, the one paired gap (pivot minus L, Holm across languages), the
language-balanced aggregate and its rank inversions, and the language variance, each against values worked out
by hand (CIs and p from scipy and stats.py)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats as sst

from medbench_core.evaluation.language_tables import multilingual_tables, query_groups, script_of
from medbench_core.evaluation.multilingual import multilingual_csv, multilingual_markdown, multilingual_mlflow_metrics
from medbench_core.evaluation.reports import Cell, Significance, build_tables, write_leaderboard
from medbench_core.evaluation.stats import paired_permutation

# Task x: concepts c1..c4 queried in English; c1..c4 in French; c1, c2 in Japanese.
QUERIES = pl.DataFrame(
    {
        "query_id": ["en:c1", "en:c2", "en:c3", "en:c4", "fr:c1", "fr:c2", "fr:c3", "fr:c4", "ja:c1", "ja:c2"],
        "language": ["en"] * 4 + ["fr"] * 4 + ["ja"] * 2,
        "concept_ids": [[f"icd10:c{i}"] for i in (1, 2, 3, 4, 1, 2, 3, 4, 1, 2)],
    }
)
QRELS = pl.DataFrame({"query_id": QUERIES["query_id"], "doc_id": [q.split(":")[1] for q in QUERIES["query_id"]], "relevance": 1})
# nDCG@10 per query of model A and B (A: strong in English and French, weak in Japanese; B the other way).
A = [1.0, 1.0, 1.0, 0.5, 0.8, 0.6, 0.9, 0.5, 0.0, 0.1]
B = [0.9, 0.9, 0.9, 0.4, 0.7, 0.5, 0.7, 0.5, 0.9, 0.8]
# A's tie-aware values differ from its trec_eval ones on the Japanese queries only (its scores tie there); chance
# is a property of the task: every query ranks five documents, one relevant.
A_TIE = A[:8] + [0.55, 0.6]
CHANCE = 0.5897


def _cells(tmp_path=None):
    def pq(v, tie=None):
        df = pl.DataFrame({"query_id": QUERIES["query_id"], "ndcg_at_10": v})
        if tie is not None:
            df = df.with_columns(pl.Series("tie_aware.ndcg_at_10", tie), pl.lit(CHANCE).alias("chance.ndcg_at_10"))
        return df

    def metrics(v):
        return {"mean": {"ndcg_at_10": float(np.mean(v))}}

    return [Cell("A", "x", metrics(A), per_query=pq(A, A_TIE)), Cell("B", "x", metrics(B), per_query=pq(B))]


def test_every_table_against_hand_worked_values(tmp_path):
    cells = _cells(tmp_path)
    groups = {
        "x": query_groups(QUERIES, QRELS),
        "mono": query_groups(QUERIES.head(2), QRELS.head(2)),
    }  # one language: left out
    t = multilingual_tables(cells, groups, ["A", "B"], n_resamples=2000, seed=0)

    langs = {(r["model"], r["language"]): r for r in t["languages"].iter_rows(named=True)}
    assert langs[("A", "ja")]["mean"] == pytest.approx(0.05) and langs[("A", "fr")]["mean"] == pytest.approx(0.7)
    ref = sst.bootstrap(
        (np.array(A[4:8]),),
        np.mean,
        n_resamples=2000,
        method="percentile",
        rng=np.random.default_rng(0),
        vectorized=True,
    ).confidence_interval
    assert (langs[("A", "fr")]["ci_low"], langs[("A", "fr")]["ci_high"]) == pytest.approx((ref.low, ref.high), abs=1e-12)
    assert set(t["languages"]["task"]) == {"x"} and langs[("A", "ja")]["script"] == "CJK"

    # Tie-aware means beside the trec_eval ones: ja (0.55 + 0.6) / 2 against 0.05, outside the CI's half width: flagged.
    assert langs[("A", "ja")]["tie_aware"] == pytest.approx(0.575) and langs[("A", "ja")]["tie_flag"]
    assert langs[("A", "fr")]["tie_aware"] == pytest.approx(0.7) and not langs[("A", "fr")]["tie_flag"]
    assert langs[("A", "en")]["chance"] == pytest.approx(CHANCE) and langs[("B", "en")]["chance"] is None  # B's cells carry none here

    gaps = {(r["model"], r["language"]): r for r in t["gaps"].iter_rows(named=True)}
    en, fr, ja = np.array(A[:4]), np.array(A[4:8]), np.array(A[8:])
    assert gaps[("A", "fr")]["pivot"] == "en" and gaps[("A", "fr")]["gap"] == pytest.approx((en - fr).mean()) == pytest.approx(0.175)
    p_fr, p_ja = paired_permutation(en, fr, n_resamples=2000, seed=0), paired_permutation(en[:2], ja, n_resamples=2000, seed=0)
    assert gaps[("A", "fr")]["p_perm"] == p_fr and gaps[("A", "ja")]["p_perm"] == p_ja
    # Holm over the two languages, by hand: the smaller p doubled, the larger at least that.
    low, high = sorted([p_fr, p_ja])
    want_low, want_high = min(1.0, 2 * low), max(min(1.0, 2 * low), min(1.0, high))
    got = {"fr": gaps[("A", "fr")]["p_holm"], "ja": gaps[("A", "ja")]["p_holm"]}
    assert sorted(got.values()) == pytest.approx([want_low, want_high])
    assert got["fr" if p_fr <= p_ja else "ja"] == pytest.approx(want_low)
    assert gaps[("A", "ja")]["n_concepts"] == 2 and gaps[("A", "ja")]["gap"] == pytest.approx(((1.0 - 0.0) + (1.0 - 0.1)) / 2)
    assert gaps[("A", "ja")]["gap_tie_aware"] == pytest.approx(((1.0 - 0.55) + (1.0 - 0.6)) / 2)
    assert gaps[("B", "ja")]["gap_tie_aware"] is None
    # A task that declares French its pivot: French minus English and French minus Japanese.
    by_fr = multilingual_tables(cells, groups, ["A", "B"], n_resamples=2000, seed=0, pivots={"x": "fr"})["gaps"]
    r = by_fr.filter((pl.col("model") == "A") & (pl.col("language") == "en")).row(0, named=True)
    assert (r["pivot"], r["gap"]) == ("fr", pytest.approx(-0.175)) and set(by_fr["language"]) == {"en", "ja"}

    scripts = {(r["model"], r["script"]): r for r in t["scripts"].iter_rows(named=True)}
    assert scripts[("B", "Latin")]["mean"] == pytest.approx(np.mean(B[:8])) and scripts[("B", "Latin")]["languages"] == "en, fr"

    agg = {(r["model"], r["task"]): r for r in t["aggregate"].iter_rows(named=True)}
    # A: plain 0.64, balanced (0.875 + 0.7 + 0.05) / 3 = 0.5417; B: plain 0.72... B leads both: no inversion here.
    assert agg[("A", "x")]["plain"] == pytest.approx(np.mean(A)) and agg[("A", "x")]["balanced"] == pytest.approx((0.875 + 0.7 + 0.05) / 3)
    assert agg[("B", "x")]["balanced"] == pytest.approx((np.mean(B[:4]) + np.mean(B[4:8]) + np.mean(B[8:])) / 3)

    var = {r["model"]: r for r in t["variance"].iter_rows(named=True)}
    # A's nDCG@10 per concept across languages: c1 (1.0, 0.8, 0.0), mean 0.6 -> (0.16 + 0.04 + 0.36) / 3;
    # c2 (1.0, 0.6, 0.1), mean 1.7/3; c3 (1.0, 0.9) -> 0.0025; c4 (0.5, 0.5) -> 0.
    m2 = 1.7 / 3
    c2 = ((1.0 - m2) ** 2 + (0.6 - m2) ** 2 + (0.1 - m2) ** 2) / 3
    assert var["A"]["n_concepts"] == 4 and var["A"]["n_languages"] == pytest.approx(10 / 4)
    assert var["A"]["mean_language_variance"] == pytest.approx(((0.16 + 0.04 + 0.36) / 3 + c2 + 0.0025 + 0) / 4, abs=1e-12)

    md = multilingual_markdown(t, n_resamples=2000)
    assert "| A | x | 0.8750 [" in md and "ja (CJK)" in md and "p=" in md and "Rank inversions (plain mean vs language-balanced): none" in md
    assert "· tie-aware 0.5750 ⚑" in md and "| *chance* | x | *0.5897* | *0.5897* | *0.5897* |" in md and "p_Holm=" in md
    assert "Rank variance" not in md and "Language variance" in md
    keys = multilingual_mlflow_metrics(t)
    assert keys["multilingual/x/A/gap.fr"] == pytest.approx(0.175) and "multilingual/x/B/script.CJK.ci_low" in keys
    assert keys["multilingual/x/A/language.ja.tie_aware"] == pytest.approx(0.575) and "multilingual/x/A/gap.ja.p_holm" in keys
    assert "languages,A,x,ja,mean,0.05" in multilingual_csv(t)


def test_a_model_first_by_the_plain_mean_and_second_by_the_balanced_one_is_an_inversion(tmp_path):
    # C: many good English queries, bad Japanese; D: the other way round, fewer queries where it is good.
    q = pl.DataFrame(
        {
            "query_id": [f"en:{i}" for i in range(8)] + ["ja:0", "ja:1"],
            "language": ["en"] * 8 + ["ja"] * 2,
            "concept_ids": [[str(i)] for i in [*range(8), 0, 1]],
        }
    )
    c = Cell("C", "y", {}, per_query=pl.DataFrame({"query_id": q["query_id"], "ndcg_at_10": [0.9] * 8 + [0.0, 0.0]}))
    d = Cell("D", "y", {}, per_query=pl.DataFrame({"query_id": q["query_id"], "ndcg_at_10": [0.6] * 8 + [0.9, 0.9]}))
    t = multilingual_tables(
        [c, d],
        {"y": query_groups(q, pl.DataFrame(schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "relevance": pl.Int32}))},
        ["C", "D"],
        n_resamples=1000,
    )
    # plain: C 0.72 > D 0.66; balanced: C 0.45 < D 0.75.
    assert t["inversions"].rows() == [("y", "C", "D", pytest.approx(0.06), pytest.approx(-0.30))]
    assert "y: C above D by the plain mean (+0.0600), below by the balanced (-0.3000)" in multilingual_markdown(t, n_resamples=1000)


def test_the_leaderboard_prints_the_section_and_writes_multilingual_csv(tmp_path):
    cells = _cells(tmp_path)
    out = tmp_path / "reports"
    out.mkdir()
    tables = build_tables(cells, ["A", "B"], ["x"], Significance("A", n_resamples=1000), query_groups={"x": query_groups(QUERIES, QRELS)})
    written = write_leaderboard(tables, out)
    assert "## Multilingual" in written["markdown"] and "multilingual.csv" in written["files"] and (out / "multilingual.csv").is_file()
    import json

    doc = json.loads((out / "leaderboard.json").read_text())
    assert {r["language"] for r in doc["multilingual"]["gaps"]} == {"fr", "ja"}
    assert "cross_lingual_gap" not in doc and "best language" not in written["markdown"]  # one gap table: pivot minus L
    again = write_leaderboard(build_tables(cells, ["A", "B"], ["x"], Significance("A", n_resamples=1000)), out)  # no multilingual task: no section, no file
    assert "## Multilingual" not in again["markdown"] and not (out / "multilingual.csv").exists()
    assert script_of("pt_BR") == "Latin" and script_of("el") == "Greek" and script_of("xx") == "other"
