"""The drift canary: BM25 re-scored from scratch on the real SciFact train split, checked against its baseline.

Reference value: ../shared/data/README.md gives 0.6964 nDCG@10 for bm25s (Lucene, k1=1.5,
b=0.75, English stopwords + Snowball) + pytrec_eval on this copy of SciFact.
"""

import hashlib
import json
import platform
from importlib import metadata

import dagster as dg
import pytest

from assets.canary import CANARY_CHECK, CANARY_EXPERIMENT, baseline_path, drift, judge
from runtime import settings
from tests.orchestration.operating_env import BM25, QUIET, curate, new_world

PUBLISHED_NDCG10 = 0.6964


def test_drift_compares_each_baseline_metric_with_the_tolerance():
    d = drift({"ndcg_at_10": 0.70, "recall_at_100": 0.90, "map_at_100": 0.5}, {"ndcg_at_10": 0.7005, "recall_at_100": 0.88}, 0.001)
    assert d["ndcg_at_10"]["within"] and d["ndcg_at_10"]["delta"] == pytest.approx(0.0005)
    assert not d["recall_at_100"]["within"] and d["recall_at_100"]["delta"] == pytest.approx(-0.02)
    assert d["map_at_100"] == {"baseline": 0.5, "current": None, "delta": None, "within": False}  # a metric that vanished drifted


def test_a_changed_reference_model_entry_fails_even_with_equal_metrics():
    record = {"model": "bm25", "model_identity": {"settings": {"k1": 1.5}}, "metrics": {"ndcg_at_10": 0.7}, "fingerprint": {"packages": {"numpy": "2"}},
              "lock_hash": "a", "task_content_hash": "t", "recorded_at": "2026-11-01"}  # fmt: skip
    changed = {**record, "model_identity": {"settings": {"k1": 1.2}}, "fingerprint": {"packages": {"numpy": "3"}}, "lock_hash": "b"}
    passed, verdict, md = judge(record, changed, 0.001)
    assert not passed
    assert verdict == "the registry entry of bm25 changed since the baseline; re-record it on purpose (record_baseline: true)"
    assert md["changes_since_baseline"] == "env.pkg.numpy: 2 -> 3; lock_hash: a -> b"


@pytest.mark.slow
def test_the_canary_rescores_scifact_logs_the_fingerprint_and_fails_its_check_on_drift(tmp_path):
    world = new_world(tmp_path / "w", [BM25], real_data=True)
    defs = world.defs()
    resources = world.resources()
    job = defs.resolve_job_def("rescore_canary")

    def canary(instance, **config):
        res = job.execute_in_process(instance=instance, run_config={**QUIET, "ops": {"drift_canary": {"config": {"task": "scifact", **config}}}})
        (check,) = res.get_asset_check_evaluations()
        assert check.check_name == CANARY_CHECK and check.severity == dg.AssetCheckSeverity.ERROR
        return res, check

    with world.instance() as instance:
        curate(world, instance, defs, ["scifact"])

        # First night: no baseline yet, so this run records it; the score is the published one.
        res, check = canary(instance)
        assert check.passed
        md = res.get_asset_materialization_events()[0].materialization.metadata
        assert md["ndcg_at_10"].value == pytest.approx(PUBLISHED_NDCG10, abs=5e-5)
        path = baseline_path(resources["store"], "bm25", "scifact")
        baseline = json.loads(path.read_text())
        assert baseline["metrics"]["ndcg_at_10"] == md["ndcg_at_10"].value
        assert not (world.root / "data" / "artifacts").exists()  # re-scored from scratch, not from the cache
        assert list((world.root / "scratch" / "canary").iterdir()) == []

        client = resources["mlflow"].client()
        (run,) = client.search_runs([client.get_experiment_by_name(CANARY_EXPERIMENT).experiment_id])
        assert run.info.status == "FINISHED" and run.data.tags["medbench.verdict"] == "pass"
        assert run.data.metrics["ndcg_at_10"] == md["ndcg_at_10"].value
        params = run.data.params
        assert params["env.pkg.bm25s"] == metadata.version("bm25s") and params["env.pkg.numpy"] == metadata.version("numpy")
        assert params["env.python"] == platform.python_version() and params["env.gpu"] == "none"
        assert params["lock_hash"] == hashlib.sha256((settings.ROOT / "requirements.lock").read_bytes()).hexdigest()[:16]

        # A baseline 0.01 higher: tonight's 0.6964 is a drift beyond the 0.001 tolerance.
        baseline["metrics"]["ndcg_at_10"] += 0.01
        path.write_text(json.dumps(baseline))
        res, check = canary(instance)
        assert res.success and not check.passed
        assert check.description == f"drift beyond 0.001: ndcg_at_10 {baseline['metrics']['ndcg_at_10']:.4f} -> {md['ndcg_at_10'].value:.4f}"
        assert check.metadata["deltas"].value["ndcg_at_10"]["delta"] == pytest.approx(-0.01)
        drifted = client.search_runs([run.info.experiment_id], filter_string="tags.`medbench.verdict` = 'drift'")
        assert len(drifted) == 1 and drifted[0].data.metrics["drift.ndcg_at_10"] == pytest.approx(-0.01)

        # Re-recording on purpose (after an intended upgrade) makes tonight's values the baseline.
        assert canary(instance, record_baseline=True)[1].passed
        assert json.loads(path.read_text())["metrics"]["ndcg_at_10"] == md["ndcg_at_10"].value
