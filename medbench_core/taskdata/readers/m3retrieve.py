"""M3Retrieve-style image-corpus tasks: an MTEB-format folder per discipline whose records may carry images.

Queries carry text, an image, or both; documents are passages or images (or both). A record's
image is a path relative to the dataset folder (``image``, ``img``, ``img_path`` or
``image_path``, the field names M3Retrieve's evaluation code uses) or, in Parquet, the Hugging
Face ``Image`` feature ``{bytes, path}``, whose bytes are written into the reader's scratch
folder. ``txt`` is read as the text field when ``text`` is absent. Each discipline folder is one
task (``subsets:`` in the catalogue); the discipline of every record is the subset's name unless
``discipline`` is given. M3Retrieve's dataset metadata leaves the licence empty, so records are
``unknown`` unless a licence is configured.
"""

from __future__ import annotations

from pathlib import Path

from medbench_core.taskdata.task import Task
from medbench_core.taskdata.readers.hf_retrieval import Layout
from medbench_core.taskdata.readers.mteb import read_mteb


def read_m3retrieve(
    folder: str | Path | None = None,
    *,
    name: str,
    subset: str = "",
    discipline: str | None = None,
    image_scratch: str | Path | None = None,
    **options,
) -> Task:
    """Read one M3Retrieve-style discipline folder (local, or a pinned hub dataset); see :func:`read_mteb` for ``options``."""
    return read_mteb(
        folder,
        name=name,
        subset=subset,
        discipline=discipline or (subset or None),
        layout=Layout(images=True),
        image_scratch=image_scratch,
        **options,
    )
