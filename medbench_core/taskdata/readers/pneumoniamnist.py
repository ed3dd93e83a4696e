"""PneumoniaMNIST: a text prompt per finding ranks the chest X-rays (query-to-image)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from medbench_core.errors import DataError
from medbench_core.taskdata.licences import normalise_licence
from medbench_core.taskdata.readers.base import ReadContext, Reader, ReaderOptions
from medbench_core.taskdata.readers.common import build_task_from_rows, png_bytes, write_bytes_if_changed
from medbench_core.taskdata.task import Task, TaskMeta, resolve_inside

PNEUMONIA_FINDINGS = {0: "normal", 1: "pneumonia"}
DEFAULT_PNEUMONIA_PROMPTS: dict[str, tuple[str, ...]] = {
    "normal": ("a chest X-ray of healthy lungs with no sign of pneumonia", "a normal chest radiograph"),
    "pneumonia": ("a chest X-ray showing pneumonia", "a chest radiograph with lung opacity caused by pneumonia"),
}


# MedMNIST's .npz holds <split>_images and <split>_labels for train, val and test.
MEDMNIST_ARRAYS = frozenset(f"{s}_{k}" for s in ("train", "val", "test") for k in ("images", "labels"))


@dataclass(frozen=True, kw_only=True)
class PneumoniaMNISTOptions(ReaderOptions):
    """Options of the ``pneumoniamnist`` reader: the ``splits`` read, the query ``prompts`` per finding, the ``licence``."""

    name: str = "pneumoniamnist"
    splits: tuple[str, ...] = ("val", "test")
    prompts: dict[str, tuple[str, ...]] | None = None
    licence: str = "CC-BY-4.0"


def read_pneumoniamnist(npz_path: str | Path, options: PneumoniaMNISTOptions | None = None, context: ReadContext | None = None) -> Task:
    """PneumoniaMNIST as text-prompt -> image retrieval; writes the images as PNG into the scratch folder (``image_dir``).

    ``npz_path`` is the ``.npz`` (``<split>_images`` uint8 (n, 28, 28), ``<split>_labels``
    0 normal / 1 pneumonia) or the folder holding exactly one. Each image becomes document
    ``<split>_<index:04d>`` with image reference ``<split>_<index:04d>.png`` relative to
    ``image_dir`` (the task's ``image_root``). The PNG bytes are a pure function of the pixels
    and are written atomically, and only when the file differs, so reading twice is a no-op.

    Queries: one per prompt, id ``<finding>_<j>`` (``normal_0``, ``pneumonia_1``...), text
    the prompt. Every query judges every image: 1 when the image's label is the prompt's
    finding, else 0. Concept ids ``finding:<finding>`` on both sides; discipline ``radiology``.
    An array of text in the file that the reader does not know (e.g. ``val_captions``) is refused.
    """
    import numpy as np

    o = options or PneumoniaMNISTOptions()
    name, splits, prompts, licence = o.name, o.splits, o.prompts, o.licence
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
    for key, arr in arrays.items():
        if key not in MEDMNIST_ARRAYS and arr.dtype.kind in "US" and arr.size and any(str(v).strip() for v in arr.reshape(-1)):
            raise DataError(f"{npz_path}: array {key!r} holds text that this reader does not map; the arrays it knows are {', '.join(sorted(MEDMNIST_ARRAYS))}")

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

    image_dir = (context or ReadContext()).need_scratch(f"{npz_path}")
    image_dir.mkdir(parents=True, exist_ok=True)
    corpus: list[dict] = []
    labels: dict[str, str] = {}
    for split, imgs, labs in checked:
        for i in range(imgs.shape[0]):
            did = f"{split}_{i:04d}"
            ref = f"{did}.png"
            write_bytes_if_changed(resolve_inside(image_dir, ref, what=f"{npz_path} image {did}"), png_bytes(imgs[i]))
            finding = PNEUMONIA_FINDINGS[int(labs[i])]
            labels[did] = finding
            corpus.append(
                {
                    "doc_id": did,
                    "image": ref,
                    "language": "en",
                    "modality": "image",
                    "discipline": "radiology",
                    "concept_ids": [f"finding:{finding}"],
                    "licence": lic,
                }
            )
    queries, qrels = [], []
    for finding, texts in prompts.items():
        for j, text in enumerate(texts):
            if not text or not text.strip():
                raise DataError(f"prompt {finding}_{j} is empty; a query needs text")
            qid = f"{finding}_{j}"
            queries.append(
                {
                    "query_id": qid,
                    "text": text.strip(),
                    "language": "en",
                    "modality": "text",
                    "discipline": "radiology",
                    "concept_ids": [f"finding:{finding}"],
                    "licence": lic,
                }
            )
            qrels.extend({"query_id": qid, "doc_id": d, "relevance": int(f == finding)} for d, f in labels.items())
    meta = TaskMeta(
        name=name,
        source=o.source or f"PneumoniaMNIST (MedMNIST v2), {'+'.join(splits)} splits",
        description=o.description
        or "Text prompt describing a finding (normal / pneumonia) -> 28x28 chest X-rays with that label (M3Retrieve query-to-image shape)",
        licences=(lic,),
        query_modality="text",
        doc_modality="image",
        research_only=o.research_only,
    )
    return build_task_from_rows(meta, queries, corpus, qrels, None, image_dir, str(npz_path))


READER = Reader("pneumoniamnist", PneumoniaMNISTOptions, read_pneumoniamnist)
