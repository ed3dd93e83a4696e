"""Readers for the datasets that are not BEIR folders: each turns a source into one Task.

- :func:`read_frenchmedmcqa`: concept discrimination; each French question ranks its own five
  options (a candidate-set task), difficulty tiers from the number of correct options.
- :func:`read_pneumoniamnist`: query-to-image; a text prompt per finding ranks the chest X-rays.
- :func:`read_medicat`: visual context retrieval, figure -> caption and caption -> figure in
  one task, each direction restricted to the other side by candidate pools.
- :func:`read_vqa_rad`: question -> radiology image, the organ as the discipline.

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

import hashlib
import io
import json
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.images import load_image
from medbench_core.licences import normalise_licence
from medbench_core.model import (
    CANDIDATES_SCHEMA,
    CORPUS_SCHEMA,
    QRELS_SCHEMA,
    QUERY_SCHEMA,
    Task,
    TaskMeta,
    check_referential_integrity,
    make_task,
    resolve_inside,
)
from medbench_core.readers import iter_jsonl
from medbench_core.storage import write_bytes_atomic

def normalise_text(text: str) -> str:
    """Unicode NFKC, case folded, punctuation (Unicode category P*) to spaces, whitespace collapsed.

    The same rule as the cross-task query comparison of the data contracts. Symbols such as
    ``+`` or ``°`` are kept: ``Na+`` and ``Na`` are different concepts.
    """
    s = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return " ".join("".join(" " if unicodedata.category(c).startswith("P") else c for c in s).split())


def text_concept_id(text: str) -> str:
    """Concept id of a concept written as text: ``txt:`` + 16 hex digits of sha256(normalised text)."""
    return "txt:" + hashlib.sha256(normalise_text(text).encode("utf-8")).hexdigest()[:16]


def _load_json(path: Path) -> Any:
    if not path.exists():
        raise DataError(f"{path}: file not found")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from exc
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _task(meta: TaskMeta, queries: list[dict], corpus: list[dict], qrels: list[dict], candidates: list[dict] | None, image_root: Path | None, where: str) -> Task:
    """Build and integrity-check a task from row dicts (make_task fills the columns a side lacks)."""

    def frame(rows: list[dict], schema: dict) -> pl.DataFrame:
        if not rows:
            return pl.DataFrame(schema=schema)
        return pl.DataFrame(rows, schema={k: v for k, v in schema.items() if k in rows[0]})

    task = make_task(
        meta,
        frame(queries, QUERY_SCHEMA),
        frame(corpus, CORPUS_SCHEMA),
        frame(qrels, QRELS_SCHEMA),
        None if candidates is None else frame(candidates, CANDIDATES_SCHEMA),
        image_root=image_root,
    )
    try:
        check_referential_integrity(task)
    except DataError as exc:
        raise DataError(f"{where}: {exc}") from exc
    return task


# --- FrenchMedMCQA ---------------------------------------------------------------------------

MCQA_LETTERS = ("a", "b", "c", "d", "e")


def mcqa_tier(n_correct: int) -> str:
    """Difficulty tier of a FrenchMedMCQA question from its number of correct options.

    ``hard``: 1 correct option of 5; ``medium``: 2 or 3; ``easy``: 4 or 5. The rule follows
    what a ranking must do: with one correct option the model has to single it out from four
    distractors, and a random ranking of the five options scores nDCG@10 = 0.59 in
    expectation; with 2 or 3 correct options 0.72 or 0.83; with 4 it scores 0.92 and with 5
    it scores 1 (nothing to discriminate).
    """
    if n_correct <= 0:
        raise ValueError(f"n_correct must be >= 1, got {n_correct}")
    if n_correct == 1:
        return "hard"
    if n_correct <= 3:
        return "medium"
    return "easy"


def read_frenchmedmcqa(
    folder: str | Path,
    split: str = "test",
    *,
    name: str = "frenchmedmcqa",
    licence: str = "Apache-2.0",
    research_only: bool = False,
    source: str = "",
    description: str = "",
) -> Task:
    """FrenchMedMCQA ``<folder>/<split>.json`` as a concept-discrimination task.

    One query per question (id: the question's ``id``; text: the question; ``tier`` from
    :func:`mcqa_tier`; concept ids: those of its correct options). One document per option,
    id ``<question id>:<letter>``, text the option, concept id :func:`text_concept_id` of the
    option text. ``candidates`` pairs each question with its own five options only; qrels
    judge all five (correct 1, others 0). Language ``fr``, discipline the record's
    ``subject_name``, licence ``licence`` normalised.
    """
    folder = Path(folder)
    path = folder if folder.suffix == ".json" else folder / f"{split}.json"
    data = _load_json(path)
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of questions, got {type(data).__name__}")
    lic = normalise_licence(licence)
    queries, corpus, qrels, cands = [], [], [], []
    seen: set[str] = set()
    for i, rec in enumerate(data):
        qid = str(rec.get("id", "")).strip() if isinstance(rec, dict) else ""
        where = f"{path}: question {i}" + (f" (id {qid})" if qid else "")
        if not isinstance(rec, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        if not qid:
            raise DataError(f"{where}: no 'id'")
        if qid in seen:
            raise DataError(f"{where}: id appears twice")
        seen.add(qid)
        question = (rec.get("question") or "").strip()
        if not question:
            raise DataError(f"{where}: record has no question text (and no image); fix or drop the record")
        answers = rec.get("answers")
        if not isinstance(answers, dict) or sorted(answers) != list(MCQA_LETTERS):
            got = sorted(answers) if isinstance(answers, dict) else type(answers).__name__
            raise DataError(f"{where}: 'answers' must map the letters {list(MCQA_LETTERS)} to option texts, got {got}")
        correct = rec.get("correct_answers")
        if not isinstance(correct, list) or not correct or not set(correct) <= set(MCQA_LETTERS) or len(set(correct)) != len(correct):
            raise DataError(f"{where}: 'correct_answers' must be a non-empty list of distinct letters a-e, got {correct!r}")
        n_stated = rec.get("nbr_correct_answers")
        if n_stated is not None and int(n_stated) != len(correct):
            raise DataError(f"{where}: nbr_correct_answers is {n_stated} but correct_answers lists {len(correct)}")
        discipline = (rec.get("subject_name") or "").strip() or "unknown"
        concepts: dict[str, str] = {}
        for letter in MCQA_LETTERS:
            text = answers[letter]
            if not isinstance(text, str) or not text.strip():
                raise DataError(f"{where}: option {letter!r} has no text; an option needs text to be ranked")
            did = f"{qid}:{letter}"
            concepts[letter] = text_concept_id(text)
            corpus.append({"doc_id": did, "text": text.strip(), "language": "fr", "modality": "text", "discipline": discipline, "concept_ids": [concepts[letter]], "licence": lic})
            qrels.append({"query_id": qid, "doc_id": did, "relevance": int(letter in correct)})
            cands.append({"query_id": qid, "doc_id": did})
        queries.append(
            {
                "query_id": qid,
                "text": question,
                "language": "fr",
                "modality": "text",
                "discipline": discipline,
                "concept_ids": sorted({concepts[c] for c in correct}),
                "tier": mcqa_tier(len(correct)),
                "licence": lic,
            }
        )
    if not queries:
        raise DataError(f"{path}: no questions")
    meta = TaskMeta(
        name=name,
        source=source or f"FrenchMedMCQA (Labrak et al., 2022), {split} split",
        description=description or "French pharmacy exam question -> its own five options; correct options relevant (MMed-Bench-IR concept discrimination shape)",
        licences=(lic,),
        languages=("fr",),
        research_only=research_only,
    )
    return _task(meta, queries, corpus, qrels, cands, None, str(path))


# --- PneumoniaMNIST --------------------------------------------------------------------------

PNEUMONIA_FINDINGS = {0: "normal", 1: "pneumonia"}
DEFAULT_PNEUMONIA_PROMPTS: dict[str, tuple[str, ...]] = {
    "normal": ("a chest X-ray of healthy lungs with no sign of pneumonia", "a normal chest radiograph"),
    "pneumonia": ("a chest X-ray showing pneumonia", "a chest radiograph with lung opacity caused by pneumonia"),
}


def _png_bytes(arr: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    # Stored (level 0) deflate: the bytes depend only on the pixels, not on the zlib version,
    # so the task's content hash is stable across machines.
    Image.fromarray(arr).save(buf, format="PNG", compress_level=0)
    return buf.getvalue()


def write_png_if_changed(path: Path, data: bytes) -> bool:
    """Write ``data`` atomically unless ``path`` already holds exactly these bytes; True if written."""
    if path.is_file() and not path.is_symlink() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return False
    write_bytes_atomic(path, data)
    return True


def read_pneumoniamnist(
    npz_path: str | Path,
    image_dir: str | Path,
    *,
    name: str = "pneumoniamnist",
    splits: tuple[str, ...] = ("val", "test"),
    prompts: dict[str, tuple[str, ...] | list[str]] | None = None,
    licence: str = "CC-BY-4.0",
    research_only: bool = False,
    source: str = "",
    description: str = "",
) -> Task:
    """PneumoniaMNIST as text-prompt -> image retrieval; writes the images as PNG into ``image_dir``.

    ``npz_path`` is the ``.npz`` (``<split>_images`` uint8 (n, 28, 28), ``<split>_labels``
    0 normal / 1 pneumonia) or the folder holding exactly one. Each image becomes document
    ``<split>_<index:04d>`` with image reference ``<split>_<index:04d>.png`` relative to
    ``image_dir`` (the task's ``image_root``). The PNG bytes are a pure function of the pixels
    and are written atomically, and only when the file differs, so reading twice is a no-op.

    Queries: one per prompt, id ``<finding>_<j>`` (``normal_0``, ``pneumonia_1``...), text
    the prompt. Every query judges every image: 1 when the image's label is the prompt's
    finding, else 0. Concept ids ``finding:<finding>`` on both sides; discipline ``radiology``.
    """
    npz_path = Path(npz_path)
    if npz_path.is_dir():
        found = sorted(npz_path.glob("*.npz"))
        if len(found) != 1:
            raise DataError(f"{npz_path}: expected exactly one .npz file, found {[p.name for p in found]}")
        npz_path = found[0]
    if not npz_path.exists():
        raise DataError(f"{npz_path}: file not found")
    prompts = {k: tuple(v) for k, v in (prompts or DEFAULT_PNEUMONIA_PROMPTS).items()}
    unknown = sorted(set(prompts) - set(PNEUMONIA_FINDINGS.values()))
    if unknown or not prompts:
        raise DataError(f"prompts name unknown finding(s) {unknown}; use {sorted(PNEUMONIA_FINDINGS.values())}")
    lic = normalise_licence(licence)
    try:
        # allow_pickle=False: an .npz holding object arrays could run code when unpickled.
        with np.load(npz_path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (ValueError, OSError) as exc:
        raise DataError(f"{npz_path}: not a readable .npz of plain arrays ({exc})") from exc

    # Check every split before writing anything, so bad input leaves image_dir as it was.
    checked: list[tuple[str, np.ndarray, np.ndarray]] = []
    for split in splits:
        ik, lk = f"{split}_images", f"{split}_labels"
        if ik not in arrays or lk not in arrays:
            raise DataError(f"{npz_path}: split {split!r} needs arrays {ik!r} and {lk!r}; the file holds {sorted(arrays)}")
        imgs, labs = arrays[ik], arrays[lk].reshape(-1)
        if imgs.ndim != 3 or imgs.dtype != np.uint8 or imgs.shape[1] == 0 or imgs.shape[2] == 0:
            raise DataError(f"{npz_path}: {ik} must be uint8 (n, height, width) greyscale, got {imgs.dtype} {imgs.shape}")
        if labs.shape[0] != imgs.shape[0]:
            raise DataError(f"{npz_path}: {ik} has {imgs.shape[0]} images but {lk} has {labs.shape[0]} labels")
        bad = np.flatnonzero(~np.isin(labs, list(PNEUMONIA_FINDINGS)))
        if bad.size:
            raise DataError(f"{npz_path}: {lk}[{int(bad[0])}] = {labs[bad[0]]}; labels must be 0 (normal) or 1 (pneumonia)")
        checked.append((split, imgs, labs))

    image_dir = Path(image_dir)
    image_dir.mkdir(parents=True, exist_ok=True)
    corpus: list[dict] = []
    labels: dict[str, str] = {}
    for split, imgs, labs in checked:
        for i in range(imgs.shape[0]):
            did = f"{split}_{i:04d}"
            ref = f"{did}.png"
            write_png_if_changed(resolve_inside(image_dir, ref, what=f"{npz_path} image {did}"), _png_bytes(imgs[i]))
            finding = PNEUMONIA_FINDINGS[int(labs[i])]
            labels[did] = finding
            corpus.append({"doc_id": did, "image": ref, "language": "en", "modality": "image", "discipline": "radiology", "concept_ids": [f"finding:{finding}"], "licence": lic})
    queries, qrels = [], []
    for finding, texts in prompts.items():
        for j, text in enumerate(texts):
            if not text or not text.strip():
                raise DataError(f"prompt {finding}_{j} is empty; a query needs text")
            qid = f"{finding}_{j}"
            queries.append({"query_id": qid, "text": text.strip(), "language": "en", "modality": "text", "discipline": "radiology", "concept_ids": [f"finding:{finding}"], "licence": lic})
            qrels.extend({"query_id": qid, "doc_id": d, "relevance": int(f == finding)} for d, f in labels.items())
    meta = TaskMeta(
        name=name,
        source=source or f"PneumoniaMNIST (MedMNIST v2), {'+'.join(splits)} splits",
        description=description or "Text prompt describing a finding (normal / pneumonia) -> 28x28 chest X-rays with that label (M3Retrieve query-to-image shape)",
        licences=(lic,),
        query_modality="text",
        doc_modality="image",
        research_only=research_only,
    )
    return _task(meta, queries, corpus, qrels, None, image_dir, str(npz_path))


# --- MedICaT ---------------------------------------------------------------------------------


def read_medicat(
    folder: str | Path,
    *,
    name: str = "medicat",
    caption_field: str = "s2_caption",
    figure_context: bool = False,
    research_only: bool = False,
    source: str = "",
    description: str = "",
) -> Task:
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
    folder = Path(folder)
    path = folder if folder.suffix == ".jsonl" else folder / "sample.jsonl"
    root = path.parent / "figures"
    queries, corpus, qrels, cands = [], [], [], []
    seen: dict[str, int] = {}
    for lineno, rec in iter_jsonl(path):
        pdf_hash, fig_key, fig_uri = (str(rec.get(k) or "").strip() for k in ("pdf_hash", "fig_key", "fig_uri"))
        if not pdf_hash or not fig_key:
            raise DataError(f"{path}:{lineno}: record needs 'pdf_hash' and 'fig_key' to be identified")
        key = f"{pdf_hash}/{fig_key}"
        where = f"{path}:{lineno}: record {key}"
        if key in seen:
            raise DataError(f"{where}: appears twice (first at line {seen[key]})")
        seen[key] = lineno
        caption = rec.get(caption_field)
        caption = caption.strip() if isinstance(caption, str) else ""
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
        source=source or "MedICaT sample (Subramanian et al., Findings of EMNLP 2020), PubMed Central figures",
        description=description or "Figure -> its caption and caption -> its figure, each ranked among the other side only (M3Retrieve visual context shape)",
        licences=tuple(sorted({q["licence"] for q in queries})),
        query_modality=",".join(sorted({q["modality"] for q in queries})),
        doc_modality="image,text",
        research_only=research_only,
    )
    return _task(meta, queries, corpus, qrels, cands, root, str(path))


# --- VQA-RAD ---------------------------------------------------------------------------------

VQA_RAD_SPLITS = {"train": ("freeform", "para"), "test": ("test_freeform", "test_para")}
_ORGANS = {"CHEST": "chest", "ABD": "abdomen", "HEAD": "head"}
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def read_vqa_rad(
    folder: str | Path,
    split: str = "test",
    *,
    name: str = "vqa_rad",
    licence: str = "CC0-1.0",
    research_only: bool = False,
    source: str = "",
    description: str = "",
) -> Task:
    """VQA-RAD (``vqa_rad.json`` + ``images/``) as question -> image retrieval.

    Queries: the questions of ``split`` (``test``: phrase types test_freeform/test_para;
    ``train``: freeform/para; ``all``), id ``q<qid>``, text the question, discipline the
    image's organ (CHEST -> chest, ABD -> abdomen, HEAD -> head). Corpus: every image in
    ``images/`` (id its file stem, e.g. ``synpic54610``), including images no question asks
    about. Qrels: the image a question was asked about is relevant (1). No tiers or concept ids
    (the source has neither). Every image is decoded once so a broken file fails here.
    """
    folder = Path(folder)
    path = folder / "vqa_rad.json"
    root = folder / "images"
    if split not in (*VQA_RAD_SPLITS, "all"):
        raise DataError(f"VQA-RAD split {split!r} unknown; use train, test or all")
    types = {t for s, ts in VQA_RAD_SPLITS.items() if split in (s, "all") for t in ts}
    data = _load_json(path)
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of question records, got {type(data).__name__}")
    if not root.is_dir():
        raise DataError(f"{root}: image folder not found")
    lic = normalise_licence(licence)
    organ_of: dict[str, str] = {}
    queries, qrels = [], []
    seen: set[str] = set()
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            raise DataError(f"{path}: record {i}: expected a JSON object, got {type(rec).__name__}")
        qid = f"q{str(rec.get('qid', '')).strip()}"
        where = f"{path}: record {i} (qid {rec.get('qid')!r})"
        if qid == "q":
            raise DataError(f"{where}: no 'qid'")
        image = str(rec.get("image_name") or "").strip()
        question = str(rec.get("question") or "").strip()
        if not image and not question:
            raise DataError(f"{where}: has neither a question nor an image")
        if not image:
            raise DataError(f"{where}: has no image_name; a question -> image pair needs its image")
        resolve_inside(root, image, what=where)
        organ_raw = str(rec.get("image_organ") or "").strip().upper()
        organ = _ORGANS.get(organ_raw, organ_raw.lower() or "unknown")
        did = Path(image).stem
        organ_of.setdefault(did, organ)
        if rec.get("phrase_type") not in types:
            continue
        if not question:
            raise DataError(f"{where}: has no question text")
        if qid in seen:
            raise DataError(f"{where}: qid appears twice")
        seen.add(qid)
        queries.append({"query_id": qid, "text": question, "language": "en", "modality": "text", "discipline": organ, "concept_ids": [], "licence": lic})
        qrels.append({"query_id": qid, "doc_id": did, "relevance": 1})
    files = sorted(p for p in root.iterdir() if p.suffix.lower() in _IMAGE_SUFFIXES)
    on_disk = {p.stem: p.name for p in files}
    missing = sorted(set(organ_of) - set(on_disk))
    if missing:
        raise DataError(f"{path}: question(s) name image(s) missing from {root}: {missing[:10]}")
    corpus = []
    for did, fname in on_disk.items():
        load_image(resolve_inside(root, fname, what=f"{root} image {did}"), did)
        corpus.append({"doc_id": did, "image": fname, "language": "en", "modality": "image", "discipline": organ_of.get(did, "unknown"), "concept_ids": [], "licence": lic})
    if not queries:
        raise DataError(f"{path}: no questions in split {split!r}")
    meta = TaskMeta(
        name=name,
        source=source or f"VQA-RAD (Lau et al., Scientific Data 2018), {split} questions",
        description=description or "Clinician-written radiology question -> the image it was asked about (M3Retrieve question-to-image shape)",
        licences=(lic,),
        query_modality="text",
        doc_modality="image",
        research_only=research_only,
    )
    return _task(meta, queries, corpus, qrels, None, root, str(path))
