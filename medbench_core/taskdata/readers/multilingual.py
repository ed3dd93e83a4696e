"""Multilingual retrieval in the MMed-Bench-IR style: every query names its language.

An MTEB-format folder whose query records carry ``language`` (or ``lang``), e.g. ``ja``, ``fr``;
documents carry theirs or take ``language`` (default ``en``: English evidence, as in
MMed-Bench-IR's cross-lingual QA retrieval). The language of each query drives the per-language
metric breakdown that :func:`medbench_core.evaluation.scoring.score` reports and the leaderboard's
multilingual section (:mod:`medbench_core.evaluation.multilingual`: the paired gap, English minus each
language over the concepts asked in both). A query without a language is an error naming its file and line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from medbench_core.taskdata.readers.base import ReadContext, Reader
from medbench_core.taskdata.readers.hf_files import locate
from medbench_core.taskdata.readers.hf_retrieval import HubOptions, Layout
from medbench_core.taskdata.readers.mteb import read_parts, subset_root
from medbench_core.taskdata.task import Task


@dataclass(frozen=True, kw_only=True)
class MultilingualOptions(HubOptions):
    """Options of the ``multilingual`` reader (:class:`~.hf_retrieval.HubOptions`); ``language`` is the documents' default."""


def read_multilingual(folder: str | Path | None, options: MultilingualOptions, context: ReadContext | None = None) -> Task:
    """Read a multilingual MTEB-format folder or hub dataset (see the module docstring)."""
    context = context or ReadContext()
    source = locate(folder, name=options.name, dataset=options.dataset, revision=options.revision, online=context.online, hub_cache=context.hub_cache)
    root, prefix = subset_root(source, options.subset)
    return read_parts(source, root, prefix, options, Layout(query_language_required=True), card_folders=(source.root,))


READER = Reader("multilingual", MultilingualOptions, read_multilingual)
