"""Query expansions per model x task (HyDE, Query2Doc, LameR), and their blocking contract.

``query_expansion`` sits between the curated task and ``retrieval_run``: for a model of kind
``expanded`` it reads (published files) or generates (a local causal LM) the expansion of every
query of the task, stored once per expansion x task under ``Layout.expansion_dir`` and keyed by
its provenance (:func:`medbench_core.retrieval.expansion.stage.expansion_stage_key`), so expanded models
sharing an expansion share the artifact. Other models have none (the asset says so).

``expansion_contract`` (blocking) runs the expansion's contract (one expansion per query, no
unknown ids, no empty answer; :mod:`medbench_core.retrieval.expansion.contract`), records the verdict in
``EXPANSION_GATE.json`` (the expanded run refuses an expansion whose gate failed, in later runs
too) and logs one MLflow run per expansion x task: params, tokens generated, seconds, tokens/s,
leakage figures and a sample of expansions. An expansion copying a relevant passage is a warning.
"""

import json

import dagster as dg

from assets.stage import (
    EXPANSION_ASSET,
    EXPANSION_STAGE,
    RetrievalConfig,
    fails_at_once,
    no_artifact_result,
    no_expansion,
    open_partition,
    provenance_metadata,
)
from medbench_core.errors import DataError
from medbench_core.evaluation.run_record import DAGSTER_RUN_TAG
from medbench_core.provenance import stage_version
from medbench_core.retrieval.derived import load_upstream_run
from medbench_core.retrieval.expansion.contract import GATE_FILE, record_expansion_gate, validate_expansion
from medbench_core.retrieval.expansion.frame import load_expansion, store_expansion
from medbench_core.retrieval.expansion.report import expansion_mlflow_metrics, expansion_mlflow_params
from medbench_core.retrieval.expansion.stage import build_expansion
from medbench_core.retrieval.kinds.capabilities import expansion_name
from medbench_core.retrieval.stages import DEFAULT_K
from medbench_core.storage import is_complete, write_json_atomic
from runtime.partitions import Partitions, model_of_partition, split_key, task_of_partition
from runtime.resources import dagster_run_alive

QUERY_EXPANSION = dg.AssetKey(EXPANSION_ASSET)
EXPANSION_CHECK = "expansion_contract"
EXPERIMENT_SUFFIX = "-expansions"  # MLflow experiment of the expansion runs: "<benchmark>-expansions"
GATE_DIR = "gate"  # GX results, data docs, leakage and the logged sample, beside the artifact's files


def expand(context: dg.AssetExecutionContext, config: RetrievalConfig) -> dg.MaterializeResult:
    """Read or generate the partition's expansion unless a complete one exists for its key."""
    with fails_at_once():  # a bad published file is refused at once, naming file, line and id
        return _expand(context, config)


def _expand(context: dg.AssetExecutionContext, config: RetrievalConfig) -> dg.MaterializeResult:
    r = context.resources
    model, task = split_key(context.partition_key)
    spec = r.registry.model(model)
    if not expansion_name(spec):  # most partitions: say so at once, with one constant data version
        skip = no_expansion(model)
        return dg.MaterializeResult(
            metadata={"model": model, "task": task, "applicable": skip.applicable, "reason": skip.reason, "label": skip.label},
            data_version=dg.DataVersion(skip.label),
        )
    p = open_partition(context.partition_key, r.store, r.registry, config.k)
    skip = p.no_artifact(EXPANSION_STAGE)
    if skip is not None:
        return no_artifact_result(p, EXPANSION_STAGE, skip)
    spec, folder, key = p.expansion, p.dir(EXPANSION_STAGE), p.keys[EXPANSION_STAGE]
    hit = not config.force and is_complete(folder)
    if not hit:
        upstream_run = upstream_key = None
        if spec.source == "generate" and spec.method == "lamer":  # the prompt carries the upstream run's top passages
            up = p.upstream_dir(spec.upstream, "run")
            p.require_upstream(spec.upstream, "run", up)
            upstream_key = p.upstream_keys[spec.upstream]["run"]
            upstream_run = load_upstream_run(up, key=upstream_key).run
        generator = r.compute.generator(spec) if spec.source == "generate" else None
        # A bad published file raises here, naming file, line and id: nothing is stored.
        frame, info = build_expansion(
            spec, p.task, upstream_run=upstream_run, upstream_run_key=upstream_key, generator=generator,
            device=r.compute.torch_device(), progress=config.progress,
        )  # fmt: skip
        if info["key"] != key:
            raise DataError(
                f"expansion {spec.name} x {p.task_name}: built with key {info['key']}, expected {key}; its inputs changed while it ran, run it again"
            )
        store_expansion(folder, frame, info, {"provenance": provenance_metadata(p, EXPANSION_STAGE) | {"path": None}})
    info = json.loads((folder / "info.json").read_text())
    shown = {k: info[k] for k in ("n_queries", "generated_tokens", "seconds", "tokens_per_second") if info.get(k) is not None}
    sample = "\n".join(f"- **{s['query_id']}**: {s['answer'][:300]}" for s in info.get("sample", []))
    return dg.MaterializeResult(
        metadata={
            **provenance_metadata(p, EXPANSION_STAGE),
            "cache_hit": hit,
            "expansion": spec.name,
            "source": spec.source,
            "method": spec.method,
            "generator": spec.generator,
            **shown,
            "sample": dg.MetadataValue.md(sample),
        },
        data_version=dg.DataVersion(key),
    )


def judge(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    """The expansion contract on the stored expansion (a recorded verdict on the same texts and rules is reused), logged to MLflow."""
    r = context.resources
    model, _ = split_key(context.partition_key)
    spec = r.registry.model(model)
    if not expansion_name(spec):
        return dg.AssetCheckResult(passed=True, metadata={"reason": no_expansion(model).reason})
    p = open_partition(context.partition_key, r.store, r.registry, DEFAULT_K)
    skip = p.no_artifact(EXPANSION_STAGE)
    if skip is not None:
        return dg.AssetCheckResult(passed=True, metadata={"reason": skip.reason})
    spec, folder, key = p.expansion, p.dir(EXPANSION_STAGE), p.keys[EXPANSION_STAGE]
    if not is_complete(folder):
        return dg.AssetCheckResult(passed=False, description=f"no complete expansion at {folder}; materialise {EXPANSION_ASSET} first")
    judged_with = f"{key}:{stage_version('expansion_contract')}"
    gate_file = folder / GATE_FILE
    gate = json.loads(gate_file.read_text()) if gate_file.exists() else {}
    reused = gate.get("judged_with") == judged_with
    if not reused:
        frame, _ = load_expansion(folder)
        verdict = validate_expansion(frame, p.task, spec.name, folder / GATE_DIR)
        record_expansion_gate(folder, verdict, key, judged_with)
        gate = json.loads(gate_file.read_text())
    leakage = gate["leakage"]
    run_id = log_expansion_run(context, p, gate)
    md = {
        "passed": gate["passed"],
        "reused_verdict": reused,
        "message": dg.MetadataValue.md("```\n" + gate["message"] + "\n```"),
        "failing_rows": dg.MetadataValue.json(gate["failing_rows"]),
        "max_shared_words": leakage["max_shared_words"],
        "median_shared_words": leakage["median_shared_words"],
        "copies": leakage["n_copies"],
        "gate_file": dg.MetadataValue.path(str(gate_file)),
        "mlflow_run_id": run_id,
    }
    if leakage["n_copies"]:
        md["leakage_warning"] = (
            f"{leakage['n_copies']} expansion(s) copy a relevant passage ({leakage['copy_threshold_words']}+ shared words): "
            f"{', '.join(map(str, leakage['copied_query_ids'][:20]))}"
        )
    return dg.AssetCheckResult(passed=bool(gate["passed"]), metadata=md, description=gate["message"].splitlines()[0] if gate["message"] else None)


def log_expansion_run(context: dg.AssetCheckExecutionContext, p, gate: dict) -> str:
    """One MLflow run per expansion x task (experiment ``<benchmark>-expansions``), reused while the texts are the same."""
    r = context.resources
    spec, folder, key = p.expansion, p.dir(EXPANSION_STAGE), p.keys[EXPANSION_STAGE]
    info = json.loads((folder / "info.json").read_text())
    leakage = gate["leakage"]
    sample = write_json_atomic(folder / GATE_DIR / "sample.json", info.get("sample", []))
    artifacts = [sample] + [f for f in (folder / GATE_DIR / "leakage.parquet",) if f.exists()]
    benchmark = r.registry.catalog().benchmark
    experiment = benchmark + EXPERIMENT_SUFFIX
    r.mlflow.reconcile_stale_runs(experiment, is_alive=dagster_run_alive(context.instance))
    run_id, _ = r.mlflow.log_run(
        experiment,
        f"{spec.name}-{key}",
        f"{spec.name}/{p.task_name}",
        {
            **expansion_mlflow_params(info),
            "task": p.task_name,
            "task_content_hash": p.task.content_hash(),
            "code_version": info.get("code", ""),
            "gate_passed": gate["passed"],
        },
        expansion_mlflow_metrics(info, leakage),
        {
            "medbench.expansion": spec.name,
            "medbench.task": p.task_name,
            "medbench.benchmark": benchmark,
            "medbench.expansion_gate": "pass" if gate["passed"] else "fail",
            "medbench.leakage_warning": "true" if leakage["n_copies"] else "false",
            DAGSTER_RUN_TAG: context.run.run_id,
        },
        artifacts,
    )
    return run_id


def build_query_expansion(partitions: Partitions) -> tuple[dg.AssetsDefinition, dg.AssetChecksDefinition]:
    """The ``query_expansion`` asset and its blocking ``expansion_contract`` check over the model x task partitions."""
    asset = dg.asset(
        name=EXPANSION_ASSET,
        partitions_def=partitions.model_task,
        deps=[
            dg.AssetDep("curated_task", partition_mapping=task_of_partition),
            # The model's registry entry; an expanded model's version hashes its expansion's identity
            # (prompt text, generator revision, decoding, LameR's upstream), so changing it makes this stale.
            dg.AssetDep("model_spec", partition_mapping=model_of_partition),
        ],
        code_version=stage_version("expansion"),
        group_name="retrieval",
        kinds={"parquet"},
        pool="encode",  # a generator is a model too: one loads at a time
        retry_policy=dg.RetryPolicy(max_retries=2, delay=1),
        description="Expanded queries (HyDE, Query2Doc, LameR) of an expanded model on one task, from published files or a local "
        "generator, one artifact per expansion x task keyed by its provenance; other models read the task's own queries.",
        required_resource_keys={"store", "registry", "compute"},
    )(expand)
    check = dg.asset_check(
        asset=QUERY_EXPANSION,
        name=EXPANSION_CHECK,
        blocking=True,
        partitions_def=partitions.model_task,
        description="One expansion per query id, no unknown ids, no empty answer (Great Expectations); leakage: the longest word run "
        "shared with a relevant document (30+ words: a copied passage, a warning). Logged to MLflow.",
        required_resource_keys={"store", "registry", "mlflow"},
    )(judge)
    return asset, check
