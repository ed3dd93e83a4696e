"""Data contracts: Great Expectations suites that gate curated tasks.

Two gates, each a set of GX Core 1.x expectation suites run by checkpoints:

* :func:`validate_task` judges one task, table by table (queries, corpus, qrels,
  candidates):

  - schema: every column of the task data model present with its type; ids not null and
    unique; every record has non-empty text or an image; an image reference resolves, through
    :func:`medbench_core.taskdata.task.resolve_inside` (no ``..``, absolute paths or symbolic links),
    to a file inside the task's image folder that decodes as an image;
  - integrity: every table has at least one row (GX passes an empty frame unless told);
    qrels and candidates name existing queries and documents; no pair is judged twice;
    every query has at least one positive judgment (and, with candidates, a non-empty pool
    that holds its positives);
  - identity (a multilingual task: :mod:`medbench_core.taskdata.contracts.identity`): no query equals its
    relevant document's title or text after normalisation, nor near-duplicates it (char 3-5-gram TF-IDF
    cosine >= 0.9); the verdict names the closest pair;
  - licence: every record carries a licence (``unknown`` when the source states none, never
    null) and its canonical form (:func:`medbench_core.taskdata.licences.normalise_licence`) is in the
    policy's allowlist; a research-only task also admits ``unknown``, NC and ND.

* :func:`validate_tasks` judges a set of tasks against each other: no query shared after
  :func:`normalise_query` (NFKC, case, whitespace, punctuation); no pair of queries from
  different tasks at or above :data:`NEAR_DUPLICATE_THRESHOLD` similarity; no query concept id
  in two tasks; no image (sha256 of its bytes) in two tasks.

GX quirks handled here: ``checkpoint.run()`` never raises, an empty frame passes, an all-null
column passes an in-set expectation, and a missing column only makes its own expectations
fail. So the suites carry explicit row-count and not-null expectations, every required
column has an existence expectation, and the verdict is computed from the per-expectation
outcomes rather than trusted from GX. Derived columns (``has_content``, ``image_check``,
``licence_canonical``, ``doc_id_known``...) are computed in polars and judged by GX, so the
suites stay small and the data docs readable.

Each validation can store its GX results (``gx_results.json``), our verdict
(``contract.json``) and GX data docs (``data_docs/index.html``) under a folder the caller
passes; the paths come back on the :class:`ContractResult`.

The gate verdict of a task is recorded in ``<task dir>/GATE.json`` (:func:`record_gate`) and the
cross-task verdict in ``<tasks root>/OVERLAP_GATE.json`` (:func:`record_overlap_gate`);
:func:`gate_refusal` tells a downstream step whether it may build on a task (through
``Layout.gate_refusal``), which makes a failed gate hold across separate runs.
"""

from medbench_core.taskdata.contracts.gates import (
    gate_refusal,
    gate_status_path,
    overlap_gate_path,
    read_gate,
    record_gate,
    record_overlap_gate,
)
from medbench_core.taskdata.contracts.overlap import near_duplicates, normalise_query, validate_tasks
from medbench_core.taskdata.contracts.results import (
    ALL_TASKS,
    CONTRACT_FILE,
    DOCS_DIR,
    GATE_FILE,
    NEAR_DUPLICATE_THRESHOLD,
    NGRAM_RANGE,
    OVERLAP_GATE_FILE,
    RESULTS_FILE,
    ContractResult,
    NearDuplicate,
    Outcome,
)
from medbench_core.taskdata.contracts.task_suite import validate_task

__all__ = [
    "ALL_TASKS",
    "CONTRACT_FILE",
    "DOCS_DIR",
    "GATE_FILE",
    "NEAR_DUPLICATE_THRESHOLD",
    "NGRAM_RANGE",
    "OVERLAP_GATE_FILE",
    "RESULTS_FILE",
    "ContractResult",
    "NearDuplicate",
    "Outcome",
    "gate_refusal",
    "gate_status_path",
    "near_duplicates",
    "normalise_query",
    "overlap_gate_path",
    "read_gate",
    "record_gate",
    "record_overlap_gate",
    "validate_task",
    "validate_tasks",
]
