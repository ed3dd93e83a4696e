"""Multilingual retrieval in the MMed-Bench-IR style: every query names its language.

An MTEB-format folder whose query records carry ``language`` (or ``lang``), e.g. ``ja``, ``fr``;
documents carry theirs or take ``language`` (default ``en``: English evidence, as in
MMed-Bench-IR's cross-lingual QA retrieval). The language of each query drives the per-language
metric breakdown and the cross-lingual gap (``gap.language.<lang>.ndcg_at_10``: the best language's
nDCG@10 minus that language's) that :func:`medbench_core.retrieval.stages.score` reports. A query without a language is an
error naming its file and line.
"""

from __future__ import annotations

from pathlib import Path

from medbench_core.taskdata.task import Task
from medbench_core.taskdata.readers.hf_retrieval import Layout
from medbench_core.taskdata.readers.mteb import read_mteb


def read_multilingual(folder: str | Path | None = None, *, name: str, language: str = "en", **options) -> Task:
    """Read a multilingual MTEB-format folder (see the module docstring; ``options`` as :func:`read_mteb`)."""
    return read_mteb(folder, name=name, language=language, layout=Layout(query_language_required=True), **options)
