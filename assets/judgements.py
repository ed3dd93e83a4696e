"""LLM relevance judgements per task: the second qrels layer (issue 33), beside the human one.

``relevance_judgements`` runs per task after the model x task runs: for each entry of the registry's
``judgements:`` section that judges the task (a text task), it pools the holes in the top k of the
entry's pool models' stored runs plus a calibration sample and grades them with a local causal LM
(UMBRELA's prompt), or reads a judgement file (TREC qrels or UMBRELA's output), unless a complete
artifact exists for its key (:func:`medbench_core.evaluation.judging.stage.judgement_stage_key`).
Stored under ``Layout.judgement_dir``, one MLflow run per judgement x task in the experiment
``<benchmark>-judgements`` (judge, revision, prompt hash, pool, counts, seconds, pairs/s, agreement
with the humans, a sample). The leaderboard scores every cell on the human and the filled layer.
"""

import json

import dagster as dg

from assets.stage import ASSET_OF_STAGE, fails_at_once
from medbench_core.errors import DataError
from medbench_core.evaluation.judging.frame import store_judgements
from medbench_core.evaluation.judging.spec import load_judgements
from medbench_core.evaluation.judging.stage import build_judgements, judgement_stage_key, load_judge
from medbench_core.evaluation.run_record import DAGSTER_RUN_TAG
from medbench_core.provenance import stage_version
from medbench_core.retrieval.derived import registry_partition_keys
from medbench_core.retrieval.kinds.capabilities import expansion_name
from medbench_core.storage import is_complete, verify_manifest
from runtime.partitions import Partitions, task_of_partition
from runtime.resources import dagster_run_alive

RELEVANCE_JUDGEMENTS = "relevance_judgements"
EXPERIMENT_SUFFIX = "-judgements"  # MLflow experiment of the judgement runs: "<benchmark>-judgements"


def pool_runs(store, registry, spec, task) -> tuple[dict, dict]:
    """Each pool model's stored run on ``task`` and its key, verified; a DataError saying what to evaluate otherwise."""
    import polars as pl

    specs = registry.models()
    models = spec.resolved_pool()["models"]
    keys = registry_partition_keys(specs, task, names=models, expansions=registry.expansions() if any(expansion_name(s) for s in specs) else [])
    runs, run_keys = {}, {}
    for m in models:
        folder = store.artifact_dir(m, task.name, "run", keys[m]["run"])
        if not is_complete(folder):
            raise DataError(
                f"judgement {spec.name} x {task.name}: pool model {m!r} has no complete retrieval_run (key {keys[m]['run']}); "
                f"evaluate it first: medbench run --models {m} --tasks {task.name}"
            )
        verify_manifest(folder)
        runs[m], run_keys[m] = pl.read_parquet(folder / "run.parquet"), keys[m]["run"]
    return runs, run_keys


def judge_task(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """Build (or reuse) every judgement artifact of the partition's task."""
    with fails_at_once():  # a bad judgement file, a pool model not evaluated: refused at once
        return _judge_task(context)


def _judge_task(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    r = context.resources
    name = context.partition_key
    specs = [s for s in load_judgements(r.registry.models_file) if s.judges_task(name)]
    if not specs:
        return dg.MaterializeResult(
            metadata={"task": name, "judgements": "none", "reason": "no judgements: entry judges this task"}, data_version=dg.DataVersion("none")
        )
    task = r.store.load_task(name)
    r.store.layout.require_gate(name, task.content_hash())
    if task.meta.doc_modality != "text":
        return dg.MaterializeResult(
            metadata={"task": name, "judgements": "n/a", "reason": f"the judges read text passages; {name}'s documents are {task.meta.doc_modality}"},
            data_version=dg.DataVersion("n/a"),
        )
    shown, versions = {}, []
    for spec in specs:
        runs, run_keys = pool_runs(r.store, r.registry, spec, task) if spec.source == "generate" else ({}, {})
        key = judgement_stage_key(spec, task, pool_runs=run_keys)
        folder = r.store.layout.judgement_dir(spec.name, name, key)
        hit = is_complete(folder)
        if not hit:
            judge = load_judge(spec, device=r.compute.torch_device()) if spec.source == "generate" else None
            frame, info = build_judgements(spec, task, runs=runs, run_keys=run_keys, judge=judge, cache_dir=r.store.layout.judgement_cache_dir(spec.name))
            if info["key"] != key:
                raise DataError(f"judgement {spec.name} x {name}: built with key {info['key']}, expected {key}; its inputs changed while it ran, run it again")
            store_judgements(folder, frame, info, {"provenance": {"judgement": spec.name, "task": name, "task_content_hash": task.content_hash(),
                                                                  "code_version": stage_version("judgements"), "provenance_key": key}})  # fmt: skip
        info = json.loads((folder / "info.json").read_text())
        run_id = log_judgement_run(context, spec, name, info)
        agree = info.get("agreement") or {}
        shown[spec.name] = {
            "key": key,
            "cache_hit": hit,
            "pairs": info["n_pairs"],
            "fill": info["n_fill"],
            "calibration": info["n_calibration"],
            "unparsed": info["n_unparsed"],
            "kappa": agree.get("kappa_quadratic"),
            "alpha": agree.get("alpha_ordinal"),
            "mlflow_run_id": run_id,
        }
        versions.append(key)
    return dg.MaterializeResult(metadata={"task": name, "judgements": dg.MetadataValue.json(shown)}, data_version=dg.DataVersion("-".join(versions)))


def log_judgement_run(context, spec, task: str, info: dict) -> str:
    """One MLflow run per judgement x task (experiment ``<benchmark>-judgements``), reused while its artifact is the same."""
    r = context.resources
    benchmark = r.registry.catalog().benchmark
    experiment = benchmark + EXPERIMENT_SUFFIX
    r.mlflow.reconcile_stale_runs(experiment, is_alive=dagster_run_alive(context.instance))
    agree = info.get("agreement") or {}
    params = {
        "judgement": spec.name, "judgement.key": info["key"], "judgement.source": info["source"], "judgement.judge": spec.judge,
        "judgement.revision": info.get("revision") or info.get("file_sha256"), "judgement.prompt_sha256": info.get("prompt_sha256"),
        "judgement.decode": info.get("decode"), "judgement.pool": json.dumps(info.get("pool")) if info.get("pool") else None,
        "judgement.grade_map": json.dumps(info["grade_map"]), "task": task, "code_version": info.get("code"),
    }  # fmt: skip
    metrics = {f"judgement.{k}": float(info[k]) for k in ("n_pairs", "n_fill", "n_calibration", "n_unparsed", "n_from_cache", "n_fill_relevant", "seconds",
                                                          "seconds_model", "pairs_per_second", "prompt_tokens") if info.get(k) is not None}  # fmt: skip
    for k in ("kappa_quadratic", "alpha_ordinal", "exact"):
        if agree.get(k) is not None:
            metrics[f"agreement.{k}"] = float(agree[k])
    for k in ("kappa_ci", "alpha_ci"):
        lo, hi = agree.get(k) or [None, None]
        if lo is not None:
            metrics[f"agreement.{k}_low"], metrics[f"agreement.{k}_high"] = float(lo), float(hi)
    folder = r.store.layout.judgement_dir(spec.name, task, info["key"])
    run_id, _ = r.mlflow.log_run(
        experiment, f"{spec.name}-{info['key']}", f"{spec.name}/{task}", {k: str(v) for k, v in params.items() if v is not None}, metrics,
        {"medbench.judgement": spec.name, "medbench.task": task, "medbench.benchmark": benchmark, DAGSTER_RUN_TAG: context.run.run_id},
        [folder / "info.json", folder / "qrels.llm.trec"],
    )  # fmt: skip
    return run_id


def build_relevance_judgements(partitions: Partitions) -> dg.AssetsDefinition:
    """The ``relevance_judgements`` asset over the task partitions, after every model's run of the task."""
    return dg.asset(
        name=RELEVANCE_JUDGEMENTS,
        partitions_def=partitions.tasks,
        deps=[
            dg.AssetDep("curated_task"),
            # The pool reads the stored runs of the task (every model partition of it).
            dg.AssetDep(ASSET_OF_STAGE["run"], partition_mapping=task_of_partition),
        ],
        code_version=stage_version("judgements"),
        group_name="evaluation",
        kinds={"parquet", "mlflow"},
        pool="encode",  # a judge is a model too: one loads at a time
        description="LLM relevance judgements of the holes in the chosen models' top-k (UMBRELA's 0-3 prompt, a local causal LM) or a "
        "judgement file (TREC qrels, UMBRELA output): the second qrels layer; one MLflow run per judgement x task.",
        required_resource_keys={"store", "registry", "compute", "mlflow"},
    )(judge_task)
