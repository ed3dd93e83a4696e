"""What to report about an expansion: MLflow params and metrics, and expanded models beside their retrievers."""

from __future__ import annotations

from typing import Any

import polars as pl

from medbench_core.retrieval.kinds.capabilities import expansion_name
from medbench_core.retrieval.kinds.retriever_base import corpus_of
from medbench_core.retrieval.model_registry import ModelSpec


def expansion_mlflow_params(info: dict[str, Any]) -> dict[str, str]:
    """Flat MLflow params of a built expansion (its ``info``): key, source, generator, revision,
    method, decoding settings, prompt hash, upstream run."""
    ident = info.get("identity", {})
    out = {
        "expansion": info.get("expansion"),
        "expansion.key": info.get("key"),
        "expansion.source": ident.get("source"),
        "expansion.method": ident.get("method"),
        "expansion.generator": ident.get("generator"),
        "expansion.revision": ident.get("revision"),
        "expansion.file_sha256": ident.get("file_sha256"),
        "expansion.prompt_sha256": info.get("prompt_sha256"),
        "expansion.upstream_run": ident.get("upstream_run"),
        "expansion.batch_size": ident.get("batch_size"),
        "expansion.dtype": ident.get("dtype"),
    }
    for k, v in (ident.get("decoding") or {}).items():
        out[f"expansion.decoding.{k}"] = v
    return {k: str(v) for k, v in out.items() if v is not None}


def expansion_mlflow_metrics(info: dict[str, Any], leakage: dict[str, Any] | None = None) -> dict[str, float]:
    """Flat MLflow metrics: tokens generated, seconds, tokens/s (generated expansions) and the
    leakage summary (``leakage.max_shared_words``, ``leakage.n_copies``, ...)."""
    out: dict[str, float] = {}
    for k in ("n_queries", "prompt_tokens", "generated_tokens", "seconds", "tokens_per_second"):
        if info.get(k) is not None:
            out[f"expansion.{k}"] = float(info[k])
    for k, v in (leakage or {}).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"leakage.{k}"] = float(v)
    return out


def beside_retriever(board: pl.DataFrame, models: list[ModelSpec], copies: dict[tuple[str, str], int] | None = None) -> pl.DataFrame:
    """Each expanded model's score beside its plain retriever's, task by task, with the difference.

    ``board`` is the wide leaderboard (``model`` + one column per task, as
    the task columns of :func:`medbench_core.evaluation.reports.leaderboard`); ``copies`` maps (model, task) to the number
    of expansions flagged as copying a relevant passage. Rows: model, retriever, task, value,
    retriever_value, delta (None where either side is missing), copies.
    """
    tasks = [c for c in board.columns if c != "model"]
    values = {(r["model"], t): r[t] for r in board.iter_rows(named=True) for t in tasks}
    rows = []
    for m in models:
        retriever = corpus_of(m)
        if not expansion_name(m) or not retriever:
            continue
        for t in tasks:
            v, base = values.get((m.name, t)), values.get((retriever, t))
            rows.append(
                {
                    "model": m.name,
                    "retriever": retriever,
                    "task": t,
                    "value": v,
                    "retriever_value": base,
                    "delta": None if v is None or base is None else round(v - base, 4),
                    "copies": (copies or {}).get((m.name, t), 0),
                }
            )
    schema = {
        "model": pl.Utf8,
        "retriever": pl.Utf8,
        "task": pl.Utf8,
        "value": pl.Float64,
        "retriever_value": pl.Float64,
        "delta": pl.Float64,
        "copies": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
