"""The expansion artifact: one row per query, the raw generated text split into answer and reasoning.

Only ``answer`` reaches a retriever. For reasoning models (R1-style, QwQ, Qwen3 thinking) the
reasoning before ``</think>`` is kept in ``reasoning`` for inspection and leakage reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.storage import MANIFEST, replace_dir_atomic, verify_manifest, write_manifest

EXPANSION_SCHEMA: dict[str, pl.DataType] = {
    "query_id": pl.Utf8,
    "raw": pl.Utf8,  # the text as generated or published
    "answer": pl.Utf8,  # what retrieval uses
    "reasoning": pl.Utf8,  # the part before </think>; "" when there is none
    "prompt": pl.Utf8,  # the rendered prompt (chat template applied); null for published files
    "prompt_tokens": pl.Int32,  # null for published files
    "generated_tokens": pl.Int32,  # up to and including the end-of-sequence token; null for files
}
FILES = ("expansions.parquet", "info.json")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def split_reasoning(text: str, rule: str = "think") -> tuple[str, str]:
    """``(answer, reasoning)`` of a generated text.

    ``think``: the answer is what follows the first ``</think>``, the reasoning what precedes
    it (a leading ``<think>`` dropped); a text without ``</think>`` is all answer, as R2MED reads
    it. ``none``: the whole text is the answer.
    """
    text = text or ""
    if rule == "none" or THINK_CLOSE not in text:
        return text.strip(), ""
    reasoning, answer = text.split(THINK_CLOSE, 1)
    reasoning = reasoning.strip()
    if reasoning.startswith(THINK_OPEN):
        reasoning = reasoning[len(THINK_OPEN):].strip()
    return answer.strip(), reasoning


def expansion_frame(rows: list[dict[str, Any]], rule: str = "think") -> pl.DataFrame:
    """Frame in :data:`EXPANSION_SCHEMA` from rows holding ``query_id`` and ``raw`` (and optionally
    ``prompt``, ``prompt_tokens``, ``generated_tokens``)."""
    out = []
    for r in rows:
        answer, reasoning = split_reasoning(r["raw"], rule)
        out.append(
            {
                "query_id": str(r["query_id"]),
                "raw": r["raw"],
                "answer": answer,
                "reasoning": reasoning,
                "prompt": r.get("prompt"),
                "prompt_tokens": r.get("prompt_tokens"),
                "generated_tokens": r.get("generated_tokens"),
            }
        )
    return pl.DataFrame(out, schema=EXPANSION_SCHEMA, orient="row") if out else pl.DataFrame(schema=EXPANSION_SCHEMA)


def answers(frame: pl.DataFrame, query_ids: list[str], where: str = "expansion") -> list[str]:
    """The answer of each query in ``query_ids`` order; every query must have exactly one."""
    by_id: dict[str, str] = {}
    for q, a in frame.select("query_id", "answer").iter_rows():
        if q in by_id:
            raise DataError(f"{where}: query {q} has more than one expansion")
        by_id[q] = a
    missing = [q for q in query_ids if q not in by_id]
    if missing:
        raise DataError(f"{where}: {len(missing)} query id(s) have no expansion, e.g. {missing[:5]}")
    return [by_id[q] for q in query_ids]


def write_expansion(frame: pl.DataFrame, info: dict[str, Any], out: Path) -> list[str]:
    """Write ``expansions.parquet`` and ``info.json`` into ``out`` (the caller makes it atomic)."""
    out = Path(out)
    frame.select(list(EXPANSION_SCHEMA)).cast(EXPANSION_SCHEMA).write_parquet(out / "expansions.parquet", statistics=False)
    (out / "info.json").write_text(json.dumps(info, indent=2, sort_keys=True, default=str) + "\n")
    return list(FILES)


def store_expansion(folder: str | Path, frame: pl.DataFrame, info: dict[str, Any], extra: dict[str, Any] | None = None) -> Path:
    """Write the artifact into ``folder`` atomically with its sha256 manifest.

    The folder is built beside ``folder`` and swapped in whole: a reader sees the previous
    artifact or the new one, and an exception leaves the previous one in place.
    """

    def build(tmp: Path) -> None:
        files = write_expansion(frame, info, tmp)
        write_manifest(tmp, files, extra)

    return replace_dir_atomic(folder, build)


def load_expansion(folder: str | Path) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The frame and info of a stored expansion, after verifying its manifest."""
    folder = Path(folder)
    if not (folder / MANIFEST).exists():
        raise DataError(f"{folder}: no expansion artifact here; materialise the expansion first")
    verify_manifest(folder)
    return pl.read_parquet(folder / "expansions.parquet"), json.loads((folder / "info.json").read_text())
