"""Readers: each turns one source dataset layout into a :class:`~medbench_core.taskdata.task.Task`.

- :func:`read_beir`: a BEIR folder (text -> text).
- :func:`read_frenchmedmcqa`: concept discrimination; each French question ranks its own five
  options (a candidate-set task), difficulty tiers from the number of correct options.
- :func:`read_pneumoniamnist`: query-to-image; a text prompt per finding ranks the chest X-rays.
- :func:`read_medicat`: visual context retrieval, figure -> caption and caption -> figure in
  one task, each direction restricted to the other side by candidate pools.
- :func:`read_vqa_rad`: question -> radiology image, the organ as the discipline.
- :func:`read_mteb` (``mteb``, alias ``hf_retrieval``): the Hugging Face retrieval layout of MTEB
  and R2MED's hub datasets, from a local folder or a hub dataset id at a pinned revision.
- :func:`read_r2med_repo` (``r2med_repo``): R2MED's repository layout (corpus.jsonl, query.jsonl, qrels).
- :func:`read_m3retrieve` (``m3retrieve``): M3Retrieve-style folders whose records carry images.
- :func:`read_multilingual` (``multilingual``, alias ``mmed_ir``): every query names its language.

Every reader takes ``name``, ``research_only`` (from configuration, never inferred) and optional
``source`` / ``description`` texts for the task metadata. Every record carries language,
modality, discipline, concept ids and a licence. Malformed files are reported with file and
line; records that cannot be used (no text and no image, a missing or unreadable image) with
their id.

Concept ids (used by the cross-task concept-overlap contract): a concept written as text gets
:func:`text_concept_id`, ``txt:`` + the first 16 hex digits of the sha256 of the text after
:func:`normalise_text` (Unicode NFKC, case folding, punctuation to spaces, whitespace
collapsed). The same concept spelled with different case or punctuation in two tasks therefore
gets the same id. Findings are ``finding:<name>``; MedICaT figures ``medicat:<pdf_hash>/<fig_key>``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

# reader name in tasks.yaml -> "module:function" under medbench_core.taskdata.readers, imported on use
READERS: dict[str, str] = {
    "beir": "beir:read_beir",
    "frenchmedmcqa": "frenchmedmcqa:read_frenchmedmcqa",
    "pneumoniamnist": "pneumoniamnist:read_pneumoniamnist",
    "medicat": "medicat:read_medicat",
    "vqa_rad": "vqa_rad:read_vqa_rad",
    "mteb": "mteb:read_mteb",
    "hf_retrieval": "mteb:read_mteb",
    "r2med_repo": "r2med:read_r2med_repo",
    "m3retrieve": "m3retrieve:read_m3retrieve",
    "multilingual": "multilingual:read_multilingual",
    "mmed_ir": "multilingual:read_multilingual",
}
# Readers that render files (images) into a scratch folder, passed as their second argument.
RENDERS_FILES = frozenset({"pneumoniamnist"})
# Readers that can read a hub dataset (``dataset:`` + ``revision:``); they take ``online`` and ``hub_cache``.
HUB_READERS = frozenset({"mteb", "hf_retrieval", "m3retrieve", "multilingual", "mmed_ir"})
# Readers that may write image bytes into a scratch folder, passed as ``image_scratch``.
IMAGE_SCRATCH = frozenset({"m3retrieve"})
# Readers that take ``subset`` (so a catalogue entry may list ``subsets``).
SUBSET_READERS = HUB_READERS | {"r2med_repo"}


def reader(name: str) -> Callable:
    """The read function registered as ``name`` (see :data:`READERS`)."""
    module, function = READERS[name].split(":")
    return getattr(importlib.import_module(f"medbench_core.taskdata.readers.{module}"), function)
