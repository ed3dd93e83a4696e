"""The drift canary: the pinned reference model re-scored from scratch every night.

BM25 has no weights and no randomness, so on the same curated task its metrics can only move if
the environment moved (a package upgrade, a platform change, a change in our own scoring code).
Each night the canary encodes, indexes, retrieves and scores again in a scratch folder (never
reusing the artifact cache), logs the metrics and the environment fingerprint (package versions,
lock-file hash, CPU/GPU, git commit) to MLflow, and its check fails when a metric differs from
the recorded baseline by more than the tolerance.

The baseline (data/reports/canary/<model>__<task>.baseline.json, versioned with the benchmark)
is recorded by the first run, or on purpose with ``record_baseline: true`` after an intended
upgrade. A changed registry entry for the reference model fails the check too: the baseline
then belongs to another model.
"""

import json
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg

from assets.stage import CORE_SOURCE_DIGEST
from medbench_core.evaluation.run_record import canary_params, canary_tags, flat_fingerprint
from medbench_core.evaluation.scoring import flat_metrics, score
from medbench_core.layout import STAGES
from medbench_core.provenance import environment_fingerprint
from medbench_core.retrieval.kinds import scoring_packages
from medbench_core.retrieval.kinds.capabilities import scoring_family
from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve
from medbench_core.storage import write_json_atomic
from runtime.resources import ArtifactStoreResource, ComputeResource, MLflowResource, RegistryResource

CANARY_CHECK = "metrics_within_tolerance"
CANARY_EXPERIMENT = "medbench-canary"


class CanaryConfig(dg.Config):
    """Which model on which task, how far a metric may move, and whether to re-record the baseline."""

    model: str = "bm25"
    task: str = "scifact"  # published BM25 nDCG@10 0.696 (../shared/data/README.md)
    tolerance: float = 0.001  # absolute, per metric
    metrics: list[str] = ["ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_100"]
    record_baseline: bool = False


def rescore(spec, task, workdir: Path, device: str = "cpu") -> dict:
    """Encode, index, retrieve (top 100) and score ``task`` with ``spec`` in ``workdir``; returns score()'s result."""
    dirs = {stage: workdir / stage for stage in STAGES}
    for d in dirs.values():
        d.mkdir(parents=True)
    embed_corpus(spec, task, dirs["embeddings"], device=device)
    build_corpus_index(spec, dirs["embeddings"], dirs["index"], use_gpu=False)
    run, _ = retrieve(spec, task, dirs["embeddings"], dirs["index"], dirs["run"], k=100, device=device)
    return score(task, run, dirs["metrics"], family=scoring_family(spec, {spec.name: spec}))


def drift(baseline: dict[str, float], current: dict[str, float], tolerance: float) -> dict[str, dict]:
    """Per baseline metric: baseline, current, delta (current - baseline) and whether |delta| <= tolerance.

    A metric missing from ``current`` counts as drifted.
    """
    out = {}
    for name, base in sorted(baseline.items()):
        cur = current.get(name)
        delta = None if cur is None else cur - base
        out[name] = {"baseline": base, "current": cur, "delta": delta, "within": delta is not None and abs(delta) <= tolerance}
    return out


def baseline_path(store: ArtifactStoreResource, model: str, task: str) -> Path:
    return store.layout.canary_baseline(model, task)


def judge(baseline: dict, record: dict, tolerance: float) -> tuple[bool, str, dict]:
    """Compare tonight's ``record`` with the ``baseline`` record: (passed, verdict, check metadata)."""
    deltas = drift(baseline["metrics"], record["metrics"], tolerance)
    same_model = baseline["model_identity"] == record["model_identity"]
    moved = [f"{m} {d['baseline']:.4f} -> {'missing' if d['current'] is None else format(d['current'], '.4f')}" for m, d in deltas.items() if not d["within"]]
    passed = same_model and not moved
    if not same_model:
        verdict = f"the registry entry of {record['model']} changed since the baseline; re-record it on purpose (record_baseline: true)"
    elif moved:
        verdict = f"drift beyond {tolerance}: {'; '.join(moved)}"
    else:
        verdict = f"all {len(deltas)} metrics within {tolerance} of the baseline"
    now, then = flat_fingerprint(record["fingerprint"]), flat_fingerprint(baseline["fingerprint"])
    changes = [f"{k}: {then.get(k)} -> {v}" for k, v in sorted(now.items()) if then.get(k) != v]
    changes += [f"{k}: {baseline.get(k)} -> {record[k]}" for k in ("lock_hash", "task_content_hash") if baseline.get(k) != record[k]]
    metadata = {
        "baseline_recorded_at": baseline["recorded_at"],
        "deltas": dg.MetadataValue.json(deltas),
        "changes_since_baseline": "; ".join(changes) or "none",
    }
    return passed, verdict, metadata


@dg.asset(
    group_name="monitoring",
    kinds={"mlflow"},
    pool="encode",
    check_specs=[dg.AssetCheckSpec(CANARY_CHECK, asset="drift_canary", description="Reference metrics within tolerance of the recorded baseline.")],
    description="The pinned reference model re-scored from scratch on the reference task, with the environment fingerprint.",
)
def drift_canary(
    context: dg.AssetExecutionContext,
    config: CanaryConfig,
    store: ArtifactStoreResource,
    registry: RegistryResource,
    compute: ComputeResource,
    mlflow: MLflowResource,
) -> dg.MaterializeResult:
    spec = registry.model(config.model)
    task = store.load_task(config.task)
    store.layout.require_gate(task.name, task.content_hash())
    with tempfile.TemporaryDirectory(dir=store.scratch_dir("canary")) as tmp:
        result = rescore(spec, task, Path(tmp), device=compute.torch_device())
    record = {
        "model": spec.name, "task": task.name, "model_identity": spec.identity(), "task_content_hash": task.content_hash(),
        "metrics": {m: float(result["mean"][m]) for m in config.metrics}, "fingerprint": environment_fingerprint(scoring_packages()),
        "lock_hash": registry.lock_hash(), "git_sha": registry.git_sha(), "code_version": CORE_SOURCE_DIGEST,
        "dagster_run_id": context.run_id, "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }  # fmt: skip
    path = baseline_path(store, spec.name, task.name)
    if config.record_baseline or not path.exists():
        write_json_atomic(path, record)
    baseline = json.loads(path.read_text())
    passed, verdict, check_md = judge(baseline, record, config.tolerance)
    run_id, _ = mlflow.log_run(
        CANARY_EXPERIMENT,
        f"canary:{context.run_id}",
        f"canary {spec.name}/{task.name}",
        canary_params(record, config.tolerance),
        {**flat_metrics(result), **{f"drift.{m}": d["delta"] for m, d in check_md["deltas"].data.items() if d["delta"] is not None}},
        canary_tags(passed, context.run_id),
        [],
    )
    return dg.MaterializeResult(
        metadata={
            **record["metrics"],
            "mlflow_run_id": run_id,
            "lock_hash": record["lock_hash"],
            "gpu": record["fingerprint"]["gpu"],
            "baseline": dg.MetadataValue.path(str(path)),
        },
        check_results=[
            dg.AssetCheckResult(check_name=CANARY_CHECK, passed=passed, severity=dg.AssetCheckSeverity.ERROR, metadata=check_md, description=verdict)
        ],
    )
