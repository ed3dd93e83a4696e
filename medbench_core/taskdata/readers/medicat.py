"""MedICaT: figure -> caption and caption -> figure in one task, each direction restricted to the other side by candidate pools."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from medbench_core.errors import DataError
from medbench_core.taskdata.licences import normalise_licence
from medbench_core.taskdata.readers.base import ReadContext, Reader, ReaderOptions
from medbench_core.taskdata.readers.common import build_task_from_rows, iter_jsonl, refuse_unmapped
from medbench_core.taskdata.source_rules import check_id
from medbench_core.taskdata.task import Task, TaskMeta, resolve_inside

# The fields of a MedICaT record (its release's JSON lines).
FIELDS = frozenset({"pdf_hash", "fig_key", "fig_uri", "s2_caption", "s2orc_caption", "s2orc_references", "radiology", "scope", "predicted_type", "oa_info"})


@dataclass(frozen=True, kw_only=True)
class MedicatOptions(ReaderOptions):
    """Options of the ``medicat`` reader: the ``caption_field`` used, and ``figure_context`` (figure queries carry the citing sentences)."""

    name: str = "medicat"
    caption_field: str = "s2_caption"
    figure_context: bool = False


def read_medicat(folder: str | Path, options: MedicatOptions | None = None, context: ReadContext | None = None) -> Task:
    """MedICaT sample (``sample.jsonl`` + ``figures/``) as one visual-context task, both directions.

    For each figure record (key ``<pdf_hash>/<fig_key>``):

    - query ``fig2cap:<key>``: the figure (modality ``image``); with ``figure_context`` it also
      carries the article's sentences that cite the figure (``s2orc_references``) as text,
      modality ``both``, when there are any;
    - query ``cap2fig:<key>``: the caption (modality ``text``);
    - documents ``caption:<key>`` (text) and ``figure:<key>`` (image ``<pdf_hash>_<fig_uri>``
      under ``figures/``, the task's ``image_root``).

    Candidates restrict ``fig2cap`` queries to caption documents and ``cap2fig`` queries to
    figure documents; qrels judge the record's own counterpart relevant (1). Both directions
    live in one task because two tasks would share images and captions, which the cross-task
    overlap contract forbids. Every record's licence is its article's ``oa_info.oa.license``
    normalised (``cc-by-nc-nd`` -> ``CC-BY-NC-ND``), ``unknown`` when absent. Discipline is
    ``radiology`` when the record's ``radiology`` flag is set, else ``medical imaging``.
    ``research_only`` comes from configuration (MedICaT itself is non-commercial).
    """
    from medbench_core.taskdata.images import load_image

    o = options or MedicatOptions()
    name, caption_field, figure_context = o.name, o.caption_field, o.figure_context
    folder = Path(folder)
    path = folder if folder.suffix == ".jsonl" else folder / "sample.jsonl"
    root = path.parent / "figures"
    queries, corpus, qrels, cands = [], [], [], []
    seen: dict[str, int] = {}
    for lineno, rec in iter_jsonl(path):
        pdf_hash, fig_key, fig_uri = (str(rec.get(k) or "").strip() for k in ("pdf_hash", "fig_key", "fig_uri"))
        if not pdf_hash or not fig_key:
            raise DataError(f"{path}:{lineno}: record needs 'pdf_hash' and 'fig_key' to be identified")
        key = check_id(f"{pdf_hash}/{fig_key}", f"{path}:{lineno}", "record key (pdf_hash/fig_key)")  # its ids are <direction>:<key>
        where = f"{path}:{lineno}: record {key}"
        if key in seen:
            raise DataError(f"{where}: appears twice (first at line {seen[key]})")
        seen[key] = lineno
        caption = rec.get(caption_field)
        caption = caption.strip() if isinstance(caption, str) else ""
        if not caption:
            refuse_unmapped(rec, FIELDS | {caption_field}, where, f"no caption ({caption_field})")
        if not caption and not fig_uri:
            raise DataError(f"{where}: has neither a caption ({caption_field}) nor an image (fig_uri)")
        if not caption:
            raise DataError(f"{where}: has no caption ({caption_field}); a figure-caption pair needs both")
        if not fig_uri:
            raise DataError(f"{where}: has no image (fig_uri); a figure-caption pair needs both")
        ref = f"{pdf_hash}_{fig_uri}"
        image_path = resolve_inside(root, ref, what=where)
        try:
            load_image(image_path, key)
        except DataError as exc:
            raise DataError(f"{path}:{lineno}: {exc}") from exc
        oa = (rec.get("oa_info") or {}).get("oa") or {}
        lic = normalise_licence(oa.get("license"))
        discipline = "radiology" if rec.get("radiology") else "medical imaging"
        concept = f"medicat:{key}"
        common = {"language": "en", "discipline": discipline, "concept_ids": [concept], "licence": lic}
        context = " ".join(s.strip() for s in (rec.get("s2orc_references") or []) if isinstance(s, str) and s.strip())
        fig_text = context if figure_context and context else None
        queries.append({"query_id": f"fig2cap:{key}", "text": fig_text, "image": ref, "modality": "both" if fig_text else "image", **common})
        queries.append({"query_id": f"cap2fig:{key}", "text": caption, "image": None, "modality": "text", **common})
        corpus.append({"doc_id": f"caption:{key}", "text": caption, "image": None, "modality": "text", **common})
        corpus.append({"doc_id": f"figure:{key}", "text": None, "image": ref, "modality": "image", **common})
        qrels.append({"query_id": f"fig2cap:{key}", "doc_id": f"caption:{key}", "relevance": 1})
        qrels.append({"query_id": f"cap2fig:{key}", "doc_id": f"figure:{key}", "relevance": 1})
    if not seen:
        raise DataError(f"{path}: no records")
    for key in seen:
        cands.extend({"query_id": f"fig2cap:{key}", "doc_id": f"caption:{k}"} for k in seen)
        cands.extend({"query_id": f"cap2fig:{key}", "doc_id": f"figure:{k}"} for k in seen)
    meta = TaskMeta(
        name=name,
        source=o.source or "MedICaT sample (Subramanian et al., Findings of EMNLP 2020), PubMed Central figures",
        description=o.description or "Figure -> its caption and caption -> its figure, each ranked among the other side only (M3Retrieve visual context shape)",
        licences=tuple(sorted({q["licence"] for q in queries})),
        query_modality=",".join(sorted({q["modality"] for q in queries})),
        doc_modality="image,text",
        research_only=o.research_only,
    )
    return build_task_from_rows(meta, queries, corpus, qrels, cands, root, str(path))


READER = Reader("medicat", MedicatOptions, read_medicat)
