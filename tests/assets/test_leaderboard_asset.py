"""The leaderboard asset (assets/reports.py).

On the small operated world (bm25 and bm25-k12 evaluated on two tiny tasks): each cell's stored
metric, its provenance, the reports and the MLflow leaderboard run (reused for the same inputs).
On a fixture world whose metrics artifacts are written here with per-query values chosen by hand
(12 queries: the randomisation test is exact, 2^12 sign patterns <= 10,000 resamples): the CIs,
paired tests and Holm-corrected stars equal scipy called directly, a fusion model (no embeddings
or index of its own) is a cell like any other, and an expanded model sits beside its retriever with
the difference, its paired test and the copied-passage warning of its EXPANSION_GATE.json.
"""

import json
import re
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
import pytest
import yaml
from PIL import Image
from scipy.stats import bootstrap, permutation_test, ttest_rel

from medbench_core.errors import DataError
from medbench_core.retrieval.derived import registry_partition_keys
from medbench_core.retrieval.expansion.contract import GATE_FILE
from medbench_core.retrieval.expansion.spec import load_expansions
from medbench_core.retrieval.model_registry import load_registry
from medbench_core.retrieval.stages import partition_keys
from medbench_core.storage import write_manifest
from medbench_core.taskdata.task import TaskMeta, make_task, save_task
from tests.assets.project import leaderboard
from tests.orchestration.operating_env import BM25, BM25_K12, operated_world, write_models

pytestmark = pytest.mark.slow


def without_trust(md: str) -> str:
    """The leaderboard's Markdown without each cell's '†' mark (Judged@10 low: docs/trust.md)."""
    return re.sub(r" †(?= \|)", "", md)


def leaderboard_runs(resources) -> list:
    mlflow = resources["mlflow"]
    client = mlflow.client()
    exp = client.get_experiment_by_name(resources["registry"].catalog().benchmark + "-leaderboard")
    return client.search_runs([exp.experiment_id], filter_string="tags.`medbench.kind` = 'leaderboard'") if exp else []


def test_the_leaderboard_shows_each_cells_stored_metric_its_provenance_and_logs_one_mlflow_run(tmp_path_factory, tmp_path):
    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    never = {**BM25, "name": "bm25-b05", "settings": {**BM25["settings"], "b": 0.5}}  # registered, never evaluated
    write_models(world.models_file, [BM25, BM25_K12, never])
    resources = world.resources()
    with world.instance() as instance:
        res = dg.materialize([leaderboard], resources=resources, instance=instance)
    md = res.asset_materializations_for_node("leaderboard")[0].metadata
    reports = world.root / "data" / "reports"
    saved = json.loads((reports / "leaderboard.json").read_text())
    store, registry = resources["store"], resources["registry"]
    expected = {}
    for model in ("bm25", "bm25-k12"):
        for task in ("scifact", "liveqa_medquad"):
            keys = partition_keys(registry.model(model), store.load_task(task))
            metrics = json.loads((store.artifact_dir(model, task, "metrics", keys["metrics"]) / "metrics.json").read_text())
            expected[(model, task)] = round(metrics["mean"]["ndcg_at_10"], 4)
            cell = saved["cells"][f"{model}/{task}"]
            assert cell["metrics_key"] == keys["metrics"] and cell["run_key"] == keys["run"]
            # The bundled-style tasks record no source revision; BM25 reads whole documents.
            assert cell["dataset_revision"] is None and cell["long_text"] == "whole"
    assert expected[("bm25", "scifact")] == 1.0  # three claims, each with its one abstract ranked first
    assert md["cells_filled"].value == 4 and set(saved["cells"]) == {f"{m}/{t}" for m, t in expected}
    rows = {r["model"]: r for r in saved["table"]}
    assert {(m, t): rows[m][t] for m, t in expected} == expected
    assert rows["bm25-b05"]["scifact"] is None and rows["bm25-b05"]["liveqa_medquad"] is None
    full = (reports / "leaderboard.md").read_text()
    # What each cell rests on (issues 33, 46): 5 documents ranked, 1 judged (J@10 0.20, marked: the main table's
    # cell carries the mark only). The lowest nDCG@10 over the 2^4 completions of the 4 unjudged abstracts (all
    # ranked 2-5): the one at rank 5 relevant, (1 + 1/log2 6) / (1 + 1/log2 3) = 0.8503; no completion beats 1.
    assert "| bm25 | 1.0000 [1.00, 1.00] † |" in full
    assert "| bm25 | scifact | 1.0000 | [0.8503, 1.0000] | 0.20 † |" in full
    board = without_trust(full)
    # Every query of both tasks scores 1 for both models: CIs collapse to the mean, no difference is significant.
    assert "| bm25 | 1.0000 [1.00, 1.00] | 1.0000 [1.00, 1.00] | 1.0000 |" in board
    assert "| bm25-k12 | 1.0000 [1.00, 1.00] | 1.0000 [1.00, 1.00] | 1.0000 |" in board
    assert "| bm25-b05 | - | - | - |" in board
    assert (
        "*: differs from bm25 (paired randomisation test, Holm-Bonferroni across the task's models, p < 0.05; two-sided, 10000 sign-flip resamples, seed 0)"
        in board
    )
    assert (
        (reports / "leaderboard.csv")
        .read_text()
        .splitlines()[0]
        .startswith("model,scifact,liveqa_medquad,average,averaged_over,rank,rank_low,rank_high,group,judged_at_10.scifact,")
    )
    # Equal on every query: in every resample they tie for first, and no test separates them (one group).
    assert "| bm25 | 1 [1, 1] a | 1 [1, 1] a | 1 [1, 1] a |" in board and "| bm25-k12 | 1 [1, 1] a | 1 [1, 1] a | 1 [1, 1] a |" in board
    assert "| bm25-b05 | - | - | - |" in board.split("Rank by nDCG@10")[1]
    stats = pl.read_csv(reports / "stats.csv")
    assert stats.filter(pl.col("model") == "bm25-k12")["p_perm"].to_list() == [1.0, 1.0] and not stats["significant"].any()
    assert saved["significance"]["baseline"] == "bm25" and saved["significance"]["resamples"] == 10000 and saved["significance"]["seed"] == 0
    with Image.open(reports / "heatmap.png") as im:
        assert im.format == "PNG" and im.size == (260 + 120 * 2, 140 + 40 * 3)
    # One difference plot per model x task against the baseline (none for bm25 itself, none for bm25-b05: no result).
    assert sorted(str(p.relative_to(reports / "diff")) for p in (reports / "diff").rglob("*.png")) == ["liveqa_medquad/bm25-k12.png", "scifact/bm25-k12.png"]
    # The Markdown and the plots are in the asset's metadata (what the Dagster UI shows).
    assert md["leaderboard"].value.startswith("nDCG@10 at a glance") and md["heatmap"].value == str(reports / "heatmap.png")
    assert md["diff_scifact"].value == str(reports / "diff" / "scifact") and md["baseline"].value == "bm25"  # the task's folder
    assert f"- diff/scifact: [bm25-k12]({(reports / 'diff' / 'scifact' / 'bm25-k12.png').resolve().as_uri()})" in md["plots"].value
    # The same as pages beside it (medbench_core.site, tests/core/test_site.py): every cell, linked to its own MLflow run.
    assert md["site"].value == str(reports / "site" / "index.html")
    index = (reports / "site" / "index.html").read_text()
    client = resources["mlflow"].client()
    for m, t in expected:
        (run,) = client.search_runs([client.get_experiment_by_name("medbench-test").experiment_id],
                                    filter_string=f"tags.`medbench.run_key` = '{saved['cells'][f'{m}/{t}']['metrics_key']}'")  # fmt: skip
        assert f"/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}" in index
    assert "bm25-b05" in index and (reports / "site" / "models" / "bm25-b05.html").is_file()

    # One MLflow run holds the reports and the significance table ...
    runs = leaderboard_runs(resources)  # the world's own build (two models) and this one (three)
    (run,) = [r for r in runs if r.info.run_id == md["mlflow_run_id"].value]
    assert run.data.tags["medbench.kind"] == "leaderboard" and len(runs) == 2
    client = resources["mlflow"].client()
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    names |= {a.path for t in ("scifact", "liveqa_medquad") for a in client.list_artifacts(run.info.run_id, f"diff/{t}")}
    assert {"heatmap.png", "leaderboard.md", "leaderboard.json", "stats.csv", "diff/scifact/bm25-k12.png", "diff/liveqa_medquad/bm25-k12.png"} <= names
    assert run.data.metrics["scifact/bm25-k12/p_perm"] == 1.0 and run.data.metrics["scifact/bm25-k12/significant"] == 0.0
    assert run.data.params["significance.baseline"] == "bm25"
    assert run.data.metrics["average/bm25-k12/rank_high"] == 1.0 and run.data.params["groups.scifact"] == "bm25: a; bm25-k12: a"
    # Each cell's contamination mark (docs/contamination.md, issue 49): these models declare no training data, so unknown (never
    # zero-shot); no query near-duplicated: share 0, and the decontaminated score is nDCG@10 over all 3 claims, each 1.
    assert saved["cells"]["bm25/scifact"]["contamination"]["mark"] == "unknown" and run.data.metrics["scifact/bm25/zero_shot"] == 0.0
    cell_run = resources["mlflow"].finished_run("medbench-test", saved["cells"]["bm25/scifact"]["metrics_key"])
    assert cell_run.data.tags["medbench.contamination"] == "unknown" and cell_run.data.tags["medbench.near_dup_share"] == "0.0"
    assert cell_run.data.tags["medbench.decontaminated"] == "ndcg_at_10 1.0 [1.0, 1.0] n=3"
    # Tags only: a cell's run keeps the metrics scoring logged (a release records them, reproduce recomputes them).
    assert not any(k.startswith(("contamination", "decontaminated")) for k in cell_run.data.metrics)
    # ... and the same inputs reuse it.
    with world.instance() as instance:
        again_res = dg.materialize([leaderboard], resources=resources, instance=instance)
    again = again_res.asset_materializations_for_node("leaderboard")[0].metadata
    assert again["mlflow_run_reused"].value is True and again["mlflow_run_id"].value == run.info.run_id
    assert len(leaderboard_runs(resources)) == 2
    # The same leaderboard saved again does not build its pages again: they still name the Dagster run that built them.
    assert again["site"].value == md["site"].value and again["site_bytes"].value == md["site_bytes"].value
    assert (reports / "site" / "index.html").read_text() == index and res.run_id[:8] in index and again_res.run_id[:8] not in index


@pytest.mark.parametrize("baseline", ["bm25-missing", None], ids=["named", "default-bm25-absent"])
def test_a_baseline_not_in_the_registry_is_refused_naming_models_yaml_and_nothing_is_stored(tmp_path_factory, tmp_path, baseline):
    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    reports = world.root / "data" / "reports"
    for f in reports.glob("leaderboard.*"):
        f.unlink()
    before = {p: p.read_bytes() for p in reports.rglob("*") if p.is_file()}
    runs = len(leaderboard_runs(world.resources()))
    world.models_file.write_text(yaml.safe_dump({"models": [BM25_K12], **({"baseline": baseline} if baseline else {})}))
    with world.instance() as instance, pytest.raises(DataError, match=rf"{world.models_file}: baseline 'bm25(-missing)?' is not a registered model"):
        dg.materialize([leaderboard], resources=world.resources(), instance=instance)
    assert {p: p.read_bytes() for p in reports.rglob("*") if p.is_file()} == before
    assert len(leaderboard_runs(world.resources())) == runs


def test_values_whose_inputs_changed_are_kept_marked_stale_and_corrupt_artifacts_refused(tmp_path_factory, tmp_path):
    """Issue 24.3: the leaderboard never shows a number it cannot stand behind."""
    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    resources = world.resources()
    reports = world.root / "data" / "reports"

    def build() -> dict:
        with world.instance() as instance:
            res = dg.materialize([leaderboard], resources=resources, instance=instance)
        return res.asset_materializations_for_node("leaderboard")[0].metadata

    first = build()
    assert first["stale_cells"].value == 0 and json.loads((reports / "leaderboard.json").read_text())["stale"] == {}
    fresh = {p.name: p.read_bytes() for p in reports.glob("leaderboard.*")}

    # bm25-k12's settings change and it is not re-evaluated: its old values stay, marked, and a new model shows '-'.
    # liveqa_medquad's source changes and it is not curated again: its cells are marked too.
    write_models(
        world.models_file,
        [BM25, {**BM25_K12, "settings": {**BM25_K12["settings"], "k1": 1.1}}, {**BM25, "name": "bm25-new", "settings": {**BM25["settings"], "b": 0.5}}],
    )
    corpus = world.shared / "lq" / "corpus.jsonl"
    corpus.write_bytes(corpus.read_bytes() + b'{"_id": "a9", "text": "new answer"}\n')
    md = build()
    saved = json.loads((reports / "leaderboard.json").read_text())
    changed_model = "bm25-k12's inputs (its models.yaml entry, weights, upstreams or code) changed since it was computed, and it was not recomputed"
    changed_task = (
        f"task liveqa_medquad: its source files ({world.shared / 'lq'}) changed since it was curated, "
        "and it has not been curated again (`medbench run --tasks liveqa_medquad`)"
    )
    assert saved["stale"] == {
        "bm25/liveqa_medquad": changed_task,
        "bm25-k12/scifact": f"{changed_model} (`medbench run --models bm25-k12 --tasks scifact`)",
        "bm25-k12/liveqa_medquad": f"{changed_task}; {changed_model} (`medbench run --models bm25-k12 --tasks liveqa_medquad`)",
    }
    assert md["stale_cells"].value == 3 and md["mlflow_run_reused"].value is False
    assert saved["cells"]["bm25-k12/scifact"]["metrics_key"] == json.loads(fresh["leaderboard.json"])["cells"]["bm25-k12/scifact"]["metrics_key"]
    board = without_trust((reports / "leaderboard.md").read_text())
    assert "| bm25 | 1.0000 [1.00, 1.00] | 1.0000 [1.00, 1.00] (stale) | 1.0000 (stale) |" in board
    assert "| bm25-k12 | 1.0000 [1.00, 1.00] (stale) | 1.0000 [1.00, 1.00] (stale) | 1.0000 (stale) |" in board
    assert "| bm25-new | - | - | - |" in board and f"- bm25 x liveqa_medquad: {changed_task}" in board
    csv = pl.read_csv(reports / "leaderboard.csv")
    assert csv.columns[-1] == "stale" and csv["stale"].to_list() == [
        f"liveqa_medquad: {changed_task}",
        "; ".join(f"{t}: {saved['stale'][f'bm25-k12/{t}']}" for t in ("liveqa_medquad", "scifact")),
        None,
    ]
    run = resources["mlflow"].client().get_run(md["mlflow_run_id"].value)
    assert run.data.tags["medbench.stale"].startswith(f"bm25/liveqa_medquad: {changed_task}; bm25-k12/liveqa_medquad: ")
    assert run.data.metrics["scifact/bm25-k12/stale"] == 1.0 and "scifact/bm25/stale" not in run.data.metrics

    # The inputs as they were: nothing is stale, the reports are those of before, the first MLflow run is reused.
    write_models(world.models_file, [BM25, BM25_K12])
    corpus.write_bytes(corpus.read_bytes().rsplit(b'{"_id": "a9"', 1)[0])
    again = build()
    assert {p.name: p.read_bytes() for p in reports.glob("leaderboard.*")} == fresh
    assert again["mlflow_run_reused"].value is True and again["mlflow_run_id"].value == first["mlflow_run_id"].value

    # A metrics.json edited by hand: the asset fails naming it; the saved reports and MLflow are left as they were.
    metrics = Path(resources["store"].artifact_dir("bm25", "scifact", "metrics", json.loads(fresh["leaderboard.json"])["cells"]["bm25/scifact"]["metrics_key"]))
    (metrics / "metrics.json").write_text((metrics / "metrics.json").read_text().replace("1.0", "0.5", 1))
    runs = len(leaderboard_runs(resources))
    with world.instance() as instance, pytest.raises(DataError) as err:
        dg.materialize([leaderboard], resources=resources, instance=instance)
    assert str(err.value).startswith(
        f"the saved leaderboard {reports / 'leaderboard.md'} was not replaced: it would lose 1 cell(s) to artifacts that fail their manifest:\n"
    )
    assert str(err.value).splitlines()[1].startswith(f"bm25 x scifact: {metrics / 'metrics.json'}: sha256 ")
    assert str(err.value).endswith(": corrupted: rematerialise task_metrics[bm25|scifact] (`medbench run --models bm25 --tasks scifact`)")
    assert {p.name: p.read_bytes() for p in reports.glob("leaderboard.*")} == fresh and len(leaderboard_runs(resources)) == runs


# --- a fixture world with hand-chosen per-query values ----------------------------------------

QIDS = [f"q{i:02d}" for i in range(12)]
# nDCG@10 per query (a plausible spread; exact values matter only through scipy below).
VALUES = {
    "bm25": [1.0, 0.5, 0.0, 1.0, 0.63, 0.0, 0.5, 1.0, 0.0, 0.39, 1.0, 0.2],
    "bm25-k12": [1.0, 0.5, 0.0, 1.0, 0.63, 0.1, 0.5, 1.0, 0.0, 0.39, 1.0, 0.2],  # one query slightly better: not significant
    "hybrid": [1.0, 1.0, 0.63, 1.0, 1.0, 0.5, 1.0, 1.0, 0.39, 0.63, 1.0, 0.5],  # better on 8 queries, worse on none
    "bm25+hyde": [1.0, 1.0, 1.0, 1.0, 1.0, 0.63, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
}


def write_fixture(root: Path) -> tuple[dict, Path]:
    """Registry, catalogue, a curated task, and a metrics + run artifact per model at its current keys."""
    expansions = root / "expansions_src"
    expansions.mkdir(parents=True)
    (expansions / "fx.jsonl").write_text("".join(json.dumps({"id": q, "expansion": f"passage for {q}"}) + "\n" for q in QIDS))
    models = root / "models.yaml"
    models.write_text(yaml.safe_dump({
        "baseline": "bm25",
        "models": [
            BM25, BM25_K12,
            {"name": "hybrid", "kind": "fusion", "fusion": {"method": "rrf", "runs": ["bm25", "bm25-k12"]}},
            {"name": "bm25+hyde", "kind": "expanded", "retriever": "bm25", "expansion": "hyde-fx"},
        ],
        "expansions": [{"name": "hyde-fx", "method": "hyde", "source": "file", "generator": "gpt4", "path": str(expansions), "format": "jsonl"}],
    }))  # fmt: skip
    (root / "tasks.yaml").write_text(
        "benchmark: fx\ntasks:\n  - {name: fx, reader: beir, path: fx, research_only: true, query_licence: CC-BY-4.0, doc_licence: CC-BY-4.0}\n"
    )
    task = make_task(
        TaskMeta(name="fx", source="fixture", research_only=True, dataset="fixture/fx", source_revision="sha256:0123456789abcdef"),
        pl.DataFrame({"query_id": QIDS, "text": [f"question {q}" for q in QIDS]}),
        pl.DataFrame({"doc_id": [f"d{q}" for q in QIDS], "text": [f"answer {q}" for q in QIDS]}),
        pl.DataFrame({"query_id": QIDS, "doc_id": [f"d{q}" for q in QIDS], "relevance": [1] * len(QIDS)}),
    )
    folder = root / "data" / "tasks" / "fx"
    folder.mkdir(parents=True)
    write_manifest(folder, save_task(task, folder), {"content_hash": task.content_hash(), "task": "fx"})
    specs = load_registry(models)
    keys = registry_partition_keys(specs, task, expansions=load_expansions(models))
    for model, values in VALUES.items():
        met = root / "data" / "artifacts" / model / "fx" / "metrics" / keys[model]["metrics"]
        run = root / "data" / "artifacts" / model / "fx" / "run" / keys[model]["run"]
        for d in (met, run):
            d.mkdir(parents=True)
        pl.DataFrame({"query_id": QIDS, "ndcg_at_10": values}).write_parquet(met / "per_query.parquet")
        (met / "metrics.json").write_text(json.dumps({"mean": {"ndcg_at_10": float(np.mean(values))}, "n_queries": len(QIDS), "breakdowns": {}}))
        write_manifest(met, ["per_query.parquet", "metrics.json"])
        (run / "info.json").write_text(json.dumps({"k": 100, "seconds": 0.5}))
        (run / "run.trec").write_text("".join(f"{q} Q0 d{q} 1 1.0 medbench-{model}\n" for q in QIDS))
        write_manifest(run, ["info.json", "run.trec"])
    # The expansion's recorded verdict: passed, with two expansions copying a relevant passage.
    gate = root / "data" / "expansions" / "hyde-fx" / "fx" / keys["bm25+hyde"]["expansion"]
    gate.mkdir(parents=True)
    (gate / GATE_FILE).write_text(
        json.dumps({"key": keys["bm25+hyde"]["expansion"], "passed": True, "leakage": {"n_copies": 2, "copied_query_ids": ["q02", "q08"]}})
    )
    return keys, models


def exact_perm_p(x, y) -> float:
    d = np.asarray(x) - np.asarray(y)
    res = permutation_test((np.asarray(x), np.asarray(y)), lambda a, b, axis=-1: np.mean(a, axis=axis) - np.mean(b, axis=axis),
                           permutation_type="samples", vectorized=True, n_resamples=10_000, alternative="two-sided",
                           rng=np.random.default_rng(0))  # fmt: skip
    assert len(d) == 12  # 2^12 = 4096 patterns <= 10,000: scipy enumerates them all, the seed does not matter
    return float(res.pvalue)


def test_ci_stars_fusion_and_expanded_models_on_hand_chosen_values(tmp_path):
    from runtime.resources import ArtifactStoreResource, MLflowResource, RegistryResource

    keys, models = write_fixture(tmp_path)
    resources = {
        "store": ArtifactStoreResource(root=str(tmp_path / "data"), shared_data=str(tmp_path), scratch=str(tmp_path / "scratch")),
        "registry": RegistryResource(models_file=str(models), tasks_file=str(tmp_path / "tasks.yaml")),
        "mlflow": MLflowResource(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", artifact_root=str(tmp_path / "mlartifacts")),
    }
    resources["mlflow"].ensure_store()
    res = dg.materialize([leaderboard], resources=resources, instance=dg.DagsterInstance.ephemeral())
    assert res.success
    reports = tmp_path / "data" / "reports"
    saved = json.loads((reports / "leaderboard.json").read_text())
    board = (reports / "leaderboard.md").read_text()
    base = VALUES["bm25"]
    # Paired tests against bm25, by scipy directly; Holm over the three comparisons of the task.
    p = {m: exact_perm_p(VALUES[m], base) for m in ("bm25-k12", "hybrid", "bm25+hyde")}
    order = sorted(p, key=p.get)
    holm, running = {}, 0.0
    for rank, m in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * p[m]))
        holm[m] = running
    stats = {r["model"]: r for r in saved["stats"]}
    for m in p:
        assert stats[m]["p_perm"] == pytest.approx(p[m], abs=1e-12)
        assert stats[m]["p_ttest"] == pytest.approx(ttest_rel(VALUES[m], base).pvalue, abs=1e-12)
        assert stats[m]["p_holm"] == pytest.approx(holm[m], abs=1e-12)
    # hybrid: 8 of 12 differences positive, none negative; the exact two-sided p is 2 x (patterns with a sum
    # at least as large) / 4096, far below 0.05 even after multiplying by 3.
    assert stats["hybrid"]["significant"] and stats["bm25+hyde"]["significant"] and not stats["bm25-k12"]["significant"]
    assert stats["bm25-k12"]["p_perm"] == 1.0  # one non-zero difference: both signs give |mean| the same size
    for m, values in VALUES.items():
        ci = bootstrap((np.asarray(values),), np.mean, n_resamples=10_000, vectorized=True, confidence_level=0.95,
                       method="percentile", rng=np.random.default_rng(0)).confidence_interval  # fmt: skip
        star = " *" if m in ("hybrid", "bm25+hyde") else ""
        assert f"| {m} | {np.mean(values):.4f} [{ci.low:.2f}, {ci.high:.2f}]{star} | {np.mean(values):.4f} |" in board, m
    # The fusion model has no embeddings or index artifact of its own, and is a cell like any other (not n/a).
    assert not (tmp_path / "data" / "artifacts" / "hybrid" / "fx" / "embeddings").exists()
    assert saved["cells"]["hybrid/fx"]["upstream"] == ["bm25", "bm25-k12"] and "n/a" not in board
    # Provenance names the dataset revision and the long-text policy.
    assert saved["cells"]["bm25/fx"]["dataset_revision"] == "sha256:0123456789abcdef" and saved["cells"]["bm25/fx"]["long_text"] == "whole"
    assert saved["cells"]["bm25+hyde/fx"]["expansion_key"] == keys["bm25+hyde"]["expansion"]
    # The expanded model beside bm25: its value, the difference, its own paired test against bm25 (a family of one) and the warning.
    (row,) = saved["expanded"]
    hyde, plain = np.mean(VALUES["bm25+hyde"]), np.mean(base)
    assert row["model"] == "bm25+hyde" and row["retriever"] == "bm25" and row["copies"] == 2
    assert row["value"] == round(hyde, 4) and row["delta"] == round(round(hyde, 4) - round(plain, 4), 4)
    assert row["p_perm"] == pytest.approx(p["bm25+hyde"], abs=1e-12) and row["p_holm"] == pytest.approx(p["bm25+hyde"], abs=1e-12)
    assert (
        f"| bm25+hyde | fx | {round(hyde, 4):.4f} (warning: 2 expansion(s) copy a relevant passage) | bm25 {round(plain, 4):.4f} | {row['delta']:+.4f} * |"
        in board
    )
    # One plot per model compared with bm25 (bm25+hyde's file named bm25_hyde.png), one panel each.
    assert sorted(p.name for p in (reports / "diff" / "fx").iterdir()) == ["bm25-k12.png", "bm25_hyde.png", "hybrid.png"]
    for name in ("bm25-k12.png", "bm25_hyde.png", "hybrid.png"):
        with Image.open(reports / "diff" / "fx" / name) as im:
            assert im.size == (800, 80 + 220)


def test_published_scores_beside_ours_in_the_leaderboard_in_each_partition_run_and_on_the_command_line(tmp_path_factory, tmp_path):
    from tests.cli.command import medbench

    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    folder = world.shared / "published" / "results" / "base retriever" / "bm25"  # R2MED's layout, relative to the shared data
    folder.mkdir(parents=True)
    for task, value in (("scifact", 1.0), ("liveqa_medquad", 0.5)):
        (folder / f"{task}.json").write_text(json.dumps({"dataset_name": task, "model_name": "bm25", "test": {"ndcg_at_10": value}}))
    tasks_file = world.root / "tasks.yaml"
    tasks_file.write_text(tasks_file.read_text() + "published_results: {path: published, models: {bm25: bm25}}\n")
    resources = world.resources()
    with world.instance() as instance:
        md = dg.materialize([leaderboard], resources=resources, instance=instance).asset_materializations_for_node("leaderboard")[0].metadata
    board = (world.root / "data" / "reports" / "leaderboard.md").read_text()
    # bm25 scores 1 on every query of both tasks (CI [1, 1]): 1.0 lies in it, 0.5 does not; bm25-k12 is mapped to nothing.
    assert (
        "| bm25 | scifact | 1.0000 [1.00, 1.00] | 1.0000 (bm25, scifact, R2MED results) | +0.0000 "
        "| inside our CI: reproduced (the source records no revisions) |" in board
    )
    assert (
        "| bm25 | liveqa_medquad | 1.0000 [1.00, 1.00] | 0.5000 (bm25, liveqa_medquad, R2MED results) | +0.5000 "
        "| outside our CI (the source records no revisions) |" in board
    )
    assert "| bm25-k12 |" not in board.split("Published nDCG@10 beside ours")[1].split("What each cell rests on")[0]
    line = "published scores: 2 cells compared, 1 reproduced (inside our 95% CI), 1 outside the CI"
    saved = json.loads((world.root / "data" / "reports" / "leaderboard.json").read_text())
    assert saved["published"]["summary"] == line
    # A field of each compared cell's own MLflow run, and of the leaderboard's.
    mlflow = resources["mlflow"]
    runs = {t: mlflow.finished_run("medbench-test", saved["cells"][f"bm25/{t}"]["metrics_key"]) for t in ("scifact", "liveqa_medquad")}
    assert {k: v for k, v in runs["scifact"].data.metrics.items() if k.startswith("published")} == {
        "published.ndcg_at_10": 1.0, "published_diff.ndcg_at_10": 0.0, "published_in_ci.ndcg_at_10": 1.0}  # fmt: skip
    assert runs["liveqa_medquad"].data.metrics["published_in_ci.ndcg_at_10"] == 0.0 and runs["liveqa_medquad"].data.metrics["published_diff.ndcg_at_10"] == 0.5
    assert runs["scifact"].data.tags["medbench.published_status"] == "reproduced: the source records no revisions"
    k12 = mlflow.finished_run("medbench-test", saved["cells"]["bm25-k12/scifact"]["metrics_key"])
    assert not any(k.startswith("published") for k in k12.data.metrics)
    board_run = mlflow.client().get_run(md["mlflow_run_id"].value)
    assert board_run.data.metrics["scifact/bm25/published"] == 1.0 and board_run.data.metrics["liveqa_medquad/bm25/published_in_ci"] == 0.0
    assert board_run.data.params["published"] == line

    # The command line: the saved leaderboard says it in one line; --published DIR rebuilds it with another folder.
    env = {
        "MEDBENCH_DATA": str(world.root / "data"),
        "MEDBENCH_MODELS": str(world.models_file),
        "MEDBENCH_TASKS": str(tasks_file),
        "MEDBENCH_STATE": str(world.root / "state"),
        "DAGSTER_HOME": str(world.dagster_home),
        "MLFLOW_TRACKING_URI": f"sqlite:///{world.root / 'mlflow.db'}",
    }
    shown = medbench("leaderboard", env=env)
    assert shown.returncode == 0 and f"[published] {line}" in shown.stdout
    other = tmp_path / "other" / "results" / "base retriever" / "bm25"
    other.mkdir(parents=True)
    (other / "liveqa_medquad.json").write_text(json.dumps({"dataset_name": "liveqa_medquad", "model_name": "bm25", "test": {"NDCG@10": 1.0}}))
    rebuilt = medbench("leaderboard", "--published", str(tmp_path / "other"), env=env, timeout=600)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert "[published] published scores: 1 cell compared, 1 reproduced (inside our 95% CI), 0 outside the CI" in rebuilt.stdout
