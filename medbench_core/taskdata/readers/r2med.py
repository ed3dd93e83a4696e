"""R2MED's repository layout: one folder per task with ``corpus.jsonl``, ``query.jsonl`` and the qrels.

As R2MED's own evaluation code reads them (``src/eval_BM25.py``): corpus ``{"id", "text"}``,
queries ``{"id", "text", ...}`` (extra fields such as ``doc_id``, ``answer`` and ``body_system``),
qrels ``qrels.jsonl`` with ``{"q_id", "p_id", "score"}``. The repository README names the qrels
file ``qrels.txt``; that form is read too, one judgment a line (``q_id p_id score``, or TREC's
``q_id 0 p_id score``). A query's non-empty ``body_system`` becomes its discipline, so metrics
break down by body system.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from medbench_core.errors import DataError
from medbench_core.taskdata.readers.base import ReadContext, Reader
from medbench_core.taskdata.readers.hf_files import Source, files_revision
from medbench_core.taskdata.readers.hf_retrieval import FilesOptions, Layout, Side, read_retrieval_files, side_licences
from medbench_core.taskdata.task import Task

QRELS_NAMES = ("qrels.jsonl", "qrels.txt")
# R2MED's queries also carry the ids of their relevant documents and the reference answer: the
# qrels say which documents are relevant, and an answer is not part of a retrieval query.
LAYOUT = Layout(queries=Side(ignored=("doc_id", "answer")), corpus=Side(), discipline_field="body_system")


@dataclass(frozen=True, kw_only=True)
class R2medRepoOptions(FilesOptions):
    """Options of the ``r2med_repo`` reader (:class:`~.hf_retrieval.FilesOptions`); ``subset`` names a task subfolder."""


def read_r2med_repo(folder: str | Path, options: R2medRepoOptions, context: ReadContext | None = None) -> Task:
    """Read one R2MED task folder (``folder``, or ``folder/<subset>`` when ``subset`` is given).

    The revision recorded is ``sha256:`` of the three files. Records state no licence: unless
    one is configured they are ``unknown`` (research-only under the licence gate).
    """
    o = options
    top = Path(folder)
    root = top / o.subset if o.subset and (top / o.subset).is_dir() else top
    if not root.is_dir():
        raise DataError(f"{root}: R2MED task folder not found")
    source = Source(top, o.dataset or root.name)
    corpus, query = root / "corpus.jsonl", root / "query.jsonl"
    for p in (corpus, query):
        if not p.is_file():
            raise DataError(f"{p}: file not found (an R2MED task folder holds corpus.jsonl, query.jsonl and qrels.jsonl or qrels.txt)")
    qrels = [root / n for n in QRELS_NAMES if (root / n).is_file()]
    if len(qrels) != 1:
        found = "both" if qrels else "neither"
        raise DataError(f"{root}: expected one qrels file, qrels.jsonl or qrels.txt; found {found}")
    files = [source.check(p) for p in (corpus, query, qrels[0])]
    sha = files_revision(files, root)
    q_lic, d_lic = side_licences([], o.licence, o.query_licence, o.doc_licence)
    meta = {
        "source": o.source or f"R2MED repository layout: {root.name}",
        "description": o.description,
        "dataset": o.dataset or root.name,
        "source_revision": sha,
        "subset": o.subset,
        "task_type": o.task_type,
    }
    return read_retrieval_files(
        options=o, corpus_files=[corpus], query_files=[query], qrels_files=qrels, layout=LAYOUT, meta=meta, query_licence=q_lic, doc_licence=d_lic
    )


# R2MED's rule, per retriever family: its dense script scores with BEIR's evaluate (ignore_identical_ids=True,
# eval_retrieval.py l.109-110 at 62b7074), its BM25 and reranker scripts with pytrec_eval (eval_BM25.py l.35-37), which keeps them
READER = Reader("r2med_repo", R2medRepoOptions, read_r2med_repo, ignore_identical_ids="dense")
