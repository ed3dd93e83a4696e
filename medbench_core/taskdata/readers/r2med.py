"""R2MED's repository layout: one folder per task with ``corpus.jsonl``, ``query.jsonl`` and the qrels.

As R2MED's own evaluation code reads them (``src/eval_BM25.py``): corpus ``{"id", "text"}``,
queries ``{"id", "text", ...}`` (extra fields such as ``doc_id``, ``answer`` and ``body_system``),
qrels ``qrels.jsonl`` with ``{"q_id", "p_id", "score"}``. The repository README names the qrels
file ``qrels.txt``; that form is read too, one judgment a line (``q_id p_id score``, or TREC's
``q_id 0 p_id score``). A query's non-empty ``body_system`` becomes its discipline, so metrics
break down by body system.
"""

from __future__ import annotations

from pathlib import Path

from medbench_core.errors import DataError
from medbench_core.taskdata.task import Task
from medbench_core.taskdata.readers.hf_files import files_revision
from medbench_core.taskdata.readers.hf_retrieval import Layout, read_retrieval_files, side_licences

QRELS_NAMES = ("qrels.jsonl", "qrels.txt")


def read_r2med_repo(
    folder: str | Path,
    *,
    name: str,
    subset: str = "",
    dataset: str = "",
    licence: str | None = None,
    query_licence: str | None = None,
    doc_licence: str | None = None,
    discipline: str | None = None,
    task_type: str = "",
    source: str = "",
    description: str = "",
    research_only: bool = False,
    duplicate_judgments: str = "error",
) -> Task:
    """Read one R2MED task folder (``folder``, or ``folder/<subset>`` when ``subset`` is given).

    The revision recorded is ``sha256:`` of the three files. Records state no licence: unless
    one is configured they are ``unknown`` (research-only under the licence gate).
    """
    root = Path(folder)
    if subset and (root / subset).is_dir():
        root = root / subset
    if not root.is_dir():
        raise DataError(f"{root}: R2MED task folder not found")
    corpus, query = root / "corpus.jsonl", root / "query.jsonl"
    for p in (corpus, query):
        if not p.is_file():
            raise DataError(f"{p}: file not found (an R2MED task folder holds corpus.jsonl, query.jsonl and qrels.jsonl or qrels.txt)")
    qrels = [root / n for n in QRELS_NAMES if (root / n).is_file()]
    if len(qrels) != 1:
        found = "both" if qrels else "neither"
        raise DataError(f"{root}: expected one qrels file, qrels.jsonl or qrels.txt; found {found}")
    sha = files_revision([corpus, query, qrels[0]], root)
    q_lic, d_lic = side_licences(None, licence, query_licence, doc_licence)
    meta = {
        "source": source or f"R2MED repository layout: {root.name}",
        "description": description,
        "dataset": dataset or root.name,
        "source_revision": sha,
        "subset": subset,
        "task_type": task_type,
    }
    return read_retrieval_files(
        name=name,
        corpus_files=[corpus],
        query_files=[query],
        qrels_files=qrels,
        root=root,
        layout=Layout(discipline_field="body_system"),
        meta=meta,
        query_licence=q_lic,
        doc_licence=d_lic,
        discipline=discipline,
        research_only=research_only,
        duplicate_judgments=duplicate_judgments,
    )
