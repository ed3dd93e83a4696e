"""The expansion artifact: one row per query, the raw generated text split into answer and reasoning.

Only ``answer`` reaches a retriever. For reasoning models the reasoning is kept in ``reasoning``
for inspection and leakage reports. Where the answer starts depends on the generator family, as
R2MED's own code reads its published outputs (``split_response_for_r1`` in src/base.py of
github.com/R2MED/R2MED at 62b7074): :data:`RULES` and :func:`rule_for_generator`.
"""

from __future__ import annotations

import json
import re
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
# How each family marks its answer (R2MED's split_response_for_r1, quoted in the test of each rule):
#   think   R1 distills, QwQ, Qwen3 thinking: what follows the first </think>
#   huatuo  HuatuoGPT-o1: what follows the first "Final Response" (its "## Final Response" heading)
#   sky     Sky-T1: what lies between <|begin_of_solution|> and <|end_of_solution|>
#   answer  Search-R1: what lies in the first <answer>...</answer>
#   none    the whole text
# When the marker is missing the whole text is the answer, as in R2MED's code.
RULES = ("think", "huatuo", "sky", "answer", "none")
# R2MED's generator folder names -> rule (src/base.py; every other generator, gpt4, o3-mini, llama-70b,
# qwen-7b/32b/72b, is read whole).
R2MED_GENERATOR_RULES = {
    **dict.fromkeys(("r1-llama-8b", "r1-qwen-32b", "r1-llama-70b", "qwq-32b", "qwen3-32b", "qwen3-8b"), "think"),
    **dict.fromkeys(("huatuo-o1-8b", "huatuo-o1-70b"), "huatuo"),
    "sky-32b": "sky",
    **dict.fromkeys(("qwen-7b-ins", "qwen-3b-ins"), "answer"),
}
_HUATUO = re.compile(r"Final Response\s*(.*)", re.DOTALL)
_HUATUO_THINKING = re.compile(r"Thinking\s*(.*?)\s* Final Response", re.DOTALL)
_SKY = re.compile(r"<\|begin_of_solution\|>\s*([\s\S]*?)\s*<\|end_of_solution\|>")
_SKY_THOUGHT = re.compile(r"<\|begin_of_thought\|>\s*([\s\S]*?)\s*<\|end_of_thought\|>")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def rule_for_generator(generator: str) -> str:
    """The rule R2MED's code applies to a generator's output, by its folder name (``huatuo-o1-70b``); ``none`` for others."""
    return R2MED_GENERATOR_RULES.get(generator, "none")


def split_reasoning(text: str, rule: str = "think") -> tuple[str, str]:
    r"""``(answer, reasoning)`` of a generated text under ``rule`` (:data:`RULES`).

    ``think``: the answer is what follows the first ``</think>``, the reasoning what precedes
    it (a leading ``<think>`` dropped). ``huatuo``: the answer is what follows the first
    ``Final Response`` (regex ``Final Response\s*(.*)``), the reasoning what R2MED's
    ``Thinking\s*(.*?)\s* Final Response`` captures, else the text before it. ``sky``: the answer
    is the first ``<|begin_of_solution|> ... <|end_of_solution|>`` span, the reasoning the
    ``<|begin_of_thought|> ... <|end_of_thought|>`` span. ``answer``: the first ``<answer> ...
    </answer>`` span, the reasoning the text before it. ``none``: the whole text is the answer.

    As R2MED's ``split_response_for_r1`` (src/base.py l.7-36 at 62b7074): an answer found after its
    marker is stripped; a text without its family's marker, or read under ``none``, is the answer
    exactly as written, whitespace and all (l.13, 20, 27, 31, 35 return ``text`` itself: a
    SentencePiece tokenizer such as NV-Embed's reads a leading newline as a token). The reasoning is stripped.
    """
    text = text or ""
    if rule == "none":
        return text, ""
    if rule == "think":
        if THINK_CLOSE not in text:
            return text, ""
        reasoning, answer = text.split(THINK_CLOSE, 1)
        reasoning = reasoning.strip()
        if reasoning.startswith(THINK_OPEN):
            reasoning = reasoning[len(THINK_OPEN) :].strip()
        return answer.strip(), reasoning
    if rule == "huatuo":
        m = _HUATUO.search(text)
        if m is None:
            return text, ""
        thinking = _HUATUO_THINKING.search(text)
        return m.group(1).strip(), (thinking.group(1) if thinking else text[: m.start()]).strip()
    if rule == "sky":
        m = _SKY.search(text)
        if m is None:
            return text, ""
        thought = _SKY_THOUGHT.search(text)
        return m.group(1).strip(), (thought.group(1) if thought else text[: m.start()]).strip()
    if rule == "answer":
        m = _ANSWER.search(text)
        if m is None:
            return text, ""
        return m.group(1).strip(), text[: m.start()].strip()
    raise DataError(f"reasoning rule {rule!r} unknown; known: {', '.join(RULES)}")


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
