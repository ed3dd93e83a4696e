"""VQA-RAD: clinician question -> radiology image, the organ as the discipline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from medbench_core.errors import DataError
from medbench_core.taskdata.licences import normalise_licence
from medbench_core.taskdata.readers.base import ReadContext, Reader, ReaderOptions
from medbench_core.taskdata.readers.common import build_task_from_rows, load_json, refuse_unmapped
from medbench_core.taskdata.source_rules import check_id
from medbench_core.taskdata.task import Task, TaskMeta, resolve_inside

VQA_RAD_SPLITS = {"train": ("freeform", "para"), "test": ("test_freeform", "test_para")}
_ORGANS = {"CHEST": "chest", "ABD": "abdomen", "HEAD": "head"}
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
# The fields of a VQA-RAD question record (its release's JSON).
FIELDS = frozenset(
    {
        "qid",
        "phrase_type",
        "qid_linked_id",
        "image_case_url",
        "image_name",
        "image_organ",
        "evaluation",
        "question",
        "question_rephrase",
        "question_relation",
        "question_frame",
        "question_type",
        "answer",
        "answer_type",
    }
)


@dataclass(frozen=True, kw_only=True)
class VqaRadOptions(ReaderOptions):
    """Options of the ``vqa_rad`` reader: the question ``split`` (train, test or all) and the ``licence``."""

    name: str = "vqa_rad"
    split: str = "test"
    licence: str = "CC0-1.0"


def read_vqa_rad(folder: str | Path, options: VqaRadOptions | None = None, context: ReadContext | None = None) -> Task:
    """VQA-RAD (``vqa_rad.json`` + ``images/``) as question -> image retrieval.

    Queries: the questions of ``split`` (``test``: phrase types test_freeform/test_para;
    ``train``: freeform/para; ``all``), id ``q<qid>``, text the question, discipline the
    image's organ (CHEST -> chest, ABD -> abdomen, HEAD -> head). Corpus: every image in
    ``images/`` (id its file stem, e.g. ``synpic54610``), including images no question asks
    about. Qrels: the image a question was asked about is relevant (1). No tiers or concept ids
    (the source has neither). Every image is decoded once so a broken file fails here.
    """
    from medbench_core.taskdata.images import load_image

    o = options or VqaRadOptions()
    name, split, licence = o.name, o.split, o.licence
    folder = Path(folder)
    path = folder / "vqa_rad.json"
    root = folder / "images"
    if split not in (*VQA_RAD_SPLITS, "all"):
        raise DataError(f"VQA-RAD split {split!r} unknown; use train, test or all")
    types = {t for s, ts in VQA_RAD_SPLITS.items() if split in (s, "all") for t in ts}
    data = load_json(path)
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of question records, got {type(data).__name__}")
    if not root.is_dir():
        raise DataError(f"{root}: image folder not found")
    lic = normalise_licence(licence)
    organ_of: dict[str, str] = {}
    queries, qrels = [], []
    seen: dict[str, int] = {}
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            raise DataError(f"{path}: record {i}: expected a JSON object, got {type(rec).__name__}")
        qid = f"q{str(rec.get('qid', '')).strip()}"
        where = f"{path}: record {i} (qid {rec.get('qid')!r})"
        if qid == "q":
            raise DataError(f"{where}: no 'qid'")
        image = str(rec.get("image_name") or "").strip()
        question = str(rec.get("question") or "").strip()
        if not question:
            refuse_unmapped(rec, FIELDS, where, "no question")
        if not image and not question:
            raise DataError(f"{where}: has neither a question nor an image")
        if not image:
            raise DataError(f"{where}: has no image_name; a question -> image pair needs its image")
        resolve_inside(root, image, what=where)
        check_id(qid, where, "query id")
        organ_raw = str(rec.get("image_organ") or "").strip().upper()
        organ = _ORGANS.get(organ_raw, organ_raw.lower() or "unknown")
        did = check_id(Path(image).stem, where, "image id (image_name without its suffix)")
        organ_of.setdefault(did, organ)
        if rec.get("phrase_type") not in types:
            continue
        if not question:
            raise DataError(f"{where}: has no question text")
        if qid in seen:
            raise DataError(f"{where}: qid appears twice (first as record {seen[qid]})")
        seen[qid] = i
        queries.append({"query_id": qid, "text": question, "language": "en", "modality": "text", "discipline": organ, "concept_ids": [], "licence": lic})
        qrels.append({"query_id": qid, "doc_id": did, "relevance": 1})
    files = sorted(p for p in root.iterdir() if p.suffix.lower() in _IMAGE_SUFFIXES)
    on_disk = {p.stem: p.name for p in files}
    missing = sorted(set(organ_of) - set(on_disk))
    if missing:
        raise DataError(f"{path}: question(s) name image(s) missing from {root}: {missing[:10]}")
    corpus = []
    for did, fname in on_disk.items():
        check_id(did, f"{root}: image {fname!r}", "image id (the file name without its suffix)")
        load_image(resolve_inside(root, fname, what=f"{root} image {did}"), did)
        corpus.append(
            {
                "doc_id": did,
                "image": fname,
                "language": "en",
                "modality": "image",
                "discipline": organ_of.get(did, "unknown"),
                "concept_ids": [],
                "licence": lic,
            }
        )
    if not queries:
        raise DataError(f"{path}: no questions in split {split!r}")
    meta = TaskMeta(
        name=name,
        source=o.source or f"VQA-RAD (Lau et al., Scientific Data 2018), {split} questions",
        description=o.description or "Clinician-written radiology question -> the image it was asked about (M3Retrieve question-to-image shape)",
        licences=(lic,),
        query_modality="text",
        doc_modality="image",
        research_only=o.research_only,
    )
    return build_task_from_rows(meta, queries, corpus, qrels, None, root, str(path))


READER = Reader("vqa_rad", VqaRadOptions, read_vqa_rad)
