"""The judgement artifact of one judgement x task: every judged pair, the LLM qrels layer, its agreement.

Files: ``judgements.parquet`` (:data:`JUDGEMENT_SCHEMA`, one row per judged pair), ``qrels.llm.trec``
(the parsed grades on the task's scale, as trec_eval reads qrels: the LLM layer on its own),
``info.json`` (key, identity, counts, timings, agreement, a sample) and ``MANIFEST.json`` (sha256 of
each, with the provenance). Written into a folder built aside and swapped in whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.storage import MANIFEST, replace_dir_atomic, verify_manifest, write_manifest

JUDGEMENT_SCHEMA: dict[str, pl.DataType] = {
    "query_id": pl.Utf8,
    "doc_id": pl.Utf8,
    "role": pl.Utf8,  # fill (a hole the humans did not judge) | calibration (the humans judged it too)
    "human": pl.Int64,  # the human grade (calibration pairs); null for fill pairs
    "judge_grade": pl.Int64,  # the judge's grade on its own scale; null: unparsed
    "grade": pl.Int64,  # on the task's scale (grade_map); null: unparsed
    "raw": pl.Utf8,  # the reply (constrained: the marker and the chosen grade)
    "probabilities": pl.List(pl.Float64),  # softmax over the grade tokens (constrained decoding); empty otherwise
    "pool_models": pl.Utf8,  # the pool models whose top k held the pair (fill pairs of a generated pool)
    "best_rank": pl.Int64,
    "prompt_tokens": pl.Int64,
    "from_cache": pl.Boolean,
}
FILES = ("judgements.parquet", "qrels.llm.trec", "info.json")


def judgement_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """A frame in :data:`JUDGEMENT_SCHEMA` (missing columns null)."""
    full = [{k: r.get(k) for k in JUDGEMENT_SCHEMA} for r in rows]
    return pl.DataFrame(full, schema=JUDGEMENT_SCHEMA, orient="row") if full else pl.DataFrame(schema=JUDGEMENT_SCHEMA)


def llm_qrels(frame: pl.DataFrame) -> pl.DataFrame:
    """The LLM layer as qrels (query_id, doc_id, relevance): every parsed grade, on the task's scale."""
    return frame.filter(pl.col("grade").is_not_null()).select("query_id", "doc_id", pl.col("grade").alias("relevance"))


def store_judgements(folder: str | Path, frame: pl.DataFrame, info: dict[str, Any], extra: dict[str, Any] | None = None) -> Path:
    """Write the artifact into ``folder`` atomically with its sha256 manifest."""

    def build(tmp: Path) -> None:
        frame.select(list(JUDGEMENT_SCHEMA)).cast(JUDGEMENT_SCHEMA).write_parquet(tmp / "judgements.parquet", statistics=False)
        lines = [f"{q} 0 {d} {g}\n" for q, d, g in llm_qrels(frame).iter_rows()]
        (tmp / "qrels.llm.trec").write_text("".join(lines))
        (tmp / "info.json").write_text(json.dumps(info, indent=2, sort_keys=True, default=str) + "\n")
        write_manifest(tmp, list(FILES), extra)

    return replace_dir_atomic(folder, build)


def load_judgements(folder: str | Path) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The frame and info of a stored judgement artifact, after verifying its manifest."""
    folder = Path(folder)
    if not (folder / MANIFEST).exists():
        raise DataError(f"{folder}: no judgement artifact here; materialise relevance_judgements first")
    verify_manifest(folder)
    return pl.read_parquet(folder / "judgements.parquet"), json.loads((folder / "info.json").read_text())
