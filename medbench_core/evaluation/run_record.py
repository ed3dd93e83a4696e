"""What one evaluation run records in MLflow (params and tags), and what a release reads back from it.

One home for the names, so that the writer (the ``task_metrics`` asset), the MLflow store (which
finds a partition's run by its key) and the release tool (which reads the keys back) agree.
Pure dictionaries: no MLflow here.
"""

from __future__ import annotations

import json
from typing import Any

from medbench_core.evaluation.mlflow_names import PARAM_CHARS, mlflow_name
from medbench_core.retrieval.kinds.capabilities import record_params
from medbench_core.retrieval.kinds.derived_base import is_derived
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.taskdata.task import Task

RUN_KEY_TAG = "medbench.run_key"  # the metrics stage's provenance key: one FINISHED run per key
DAGSTER_RUN_TAG = "medbench.dagster_run_id"  # which Dagster run logged it (stale-run reconciliation)
# Upstream stage -> the param holding its provenance key (the metrics key is the run key tag).
STAGE_KEY_PARAMS = {"embeddings": "embeddings_key", "index": "index_key", "run": "run_key"}


def evaluation_params(
    spec: ModelSpec,
    task: Task,
    *,
    revision: str,
    keys: dict[str, str],
    k: int,
    code_version: str,
    code_version_metrics: str,
    git_sha: str,
    lock_hash: str,
) -> dict[str, Any]:
    """The params of a model x task run: model, task, code and upstream stage keys.

    Beside them, :func:`medbench_core.retrieval.stages.run_params`: the dataset's source and revision
    (``dataset``, ``dataset_revision``, ``subset``, ``task_type``), what the model does with long
    text (``long_text``, chunk settings, ``max_length``), its query prompt, ``dtype`` and
    ``trust_remote_code``. ``model_revision`` is the weights' resolved revision (a hub branch
    pinned to its commit sha, a local folder's content hash); ``model_revision_requested`` is the
    entry's own ``revision:`` when that differs (e.g. ``main``).
    The benchmark version (the data.dvc hash) is added as tag ``medbench.data_version`` at release.
    """
    from medbench_core.retrieval.stages import run_params  # the whole pipeline: not for every importer of the tag names

    requested = {"model_revision_requested": spec.revision} if spec.revision and spec.revision != revision else {}
    return {
        **run_params(spec, task),
        **requested,
        "model": spec.name,
        "model_id": spec.path or spec.kind,
        "model_kind": spec.kind,
        "model_revision": revision,
        "model_settings": json.dumps(spec.settings.explicit(), sort_keys=True),
        "task": task.name,
        "task_content_hash": task.content_hash(),
        "task_licences": ",".join(task.meta.licences),
        **({"task_licence_lineage": "; ".join(task.meta.licence_lineage)[:6000]} if task.meta.licence_lineage else {}),
        "research_only": task.meta.research_only,
        "code_version": code_version,
        "code_version_metrics": code_version_metrics,
        "git_sha": git_sha,
        "lock_hash": lock_hash,
        "k": k,
        # A run built from upstream runs (fusion, rerank) has no embeddings or index of its own: "".
        **{param: keys.get(stage, "") for stage, param in STAGE_KEY_PARAMS.items()},
    }


def derived_params(spec: ModelSpec, upstream_run_keys: dict[str, str], run_info: dict[str, Any] | None = None) -> dict[str, str]:
    """The params a model built from upstreams adds to :func:`evaluation_params`.

    ``upstream_models`` and ``upstream.<model>.run_key`` for every model whose run it builds on
    (fusion: each fused run; rerank: the reranked run; expanded: a LameR expansion's upstream),
    and for an expanded model its ``retriever``, ``expansion``, ``expansion_key`` and the resolved
    ``combine`` (from the run's ``info.json``, ``run_info``). Empty for a retriever.
    """
    if not is_derived(spec):
        return {}
    out = {"upstream_models": ",".join(upstream_run_keys)}
    out.update({f"upstream.{mlflow_name(name, PARAM_CHARS)}.run_key": key for name, key in upstream_run_keys.items()})
    out.update(record_params(spec, run_info or {}))
    return out


def evaluation_tags(model: str, task: Task, benchmark: str, dagster_run_id: str) -> dict[str, str]:
    """The tags of a model x task run (the run key tag is added by the store when it logs)."""
    return {
        "medbench.model": model,
        "medbench.task": task.name,
        "medbench.benchmark": benchmark,
        "medbench.research_only": str(task.meta.research_only).lower(),
        DAGSTER_RUN_TAG: dagster_run_id,
    }


def flat_fingerprint(fp: dict) -> dict[str, str]:
    """The environment fingerprint as flat MLflow params (``env.python``, ``env.pkg.numpy``, ...)."""
    out = {f"env.{k}": str(v) for k, v in fp.items() if k != "packages"}
    out.update({f"env.pkg.{k}": str(v) for k, v in fp.get("packages", {}).items()})
    return out


def canary_params(record: dict[str, Any], tolerance: float) -> dict[str, Any]:
    """The params of a drift canary run: the environment fingerprint, what was re-scored, the tolerance."""
    return {
        **flat_fingerprint(record["fingerprint"]),
        **{k: record[k] for k in ("model", "task", "task_content_hash", "lock_hash", "git_sha", "code_version")},
        "tolerance": tolerance,
    }


def canary_tags(verdict_passed: bool, dagster_run_id: str) -> dict[str, str]:
    """The tags of a drift canary run."""
    return {"medbench.canary": "true", "medbench.verdict": "pass" if verdict_passed else "drift", DAGSTER_RUN_TAG: dagster_run_id}


def release_entry(run_id: str, params: dict[str, str], tags: dict[str, str], metrics: dict[str, float]) -> dict[str, Any]:
    """A release record's entry for one logged evaluation run; KeyError names what it lacks."""
    return {
        "model": tags["medbench.model"],
        "task": tags["medbench.task"],
        "mlflow_run_id": run_id,
        "keys": {**{stage: params[param] for stage, param in STAGE_KEY_PARAMS.items()}, "metrics": tags[RUN_KEY_TAG]},
        "model_kind": params["model_kind"],
        "model_id": params.get("model_id", ""),
        "model_settings": json.loads(params.get("model_settings") or "{}"),
        "task_content_hash": params["task_content_hash"],
        "metrics": dict(sorted(metrics.items())),
    }
