"""Corpus vectors at scale: written block by block into a preallocated ``.npy``, read memory-mapped,
and a memory check that refuses a corpus that would not fit before any work starts.

A 1.2M x 384 float32 corpus is 1.8 GB. Encoding it all at once held it two to three times
over (the encoder's per-batch outputs, their stacked copy, the array handed to ``np.save``);
here each block of vectors goes straight into the file (``np.lib.format.open_memmap``: the
same bytes ``np.save`` writes, tested), which is flushed and fsynced before anyone reads it.
Readers map the file (``np.load(mmap_mode="r")``) and touch only the rows they use; indices
are filled from it one block at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from medbench_core.errors import DataError

BLOCK_ROWS = 16_384  # vectors per encoding or index block: 24 MB at 384 float32 dims
GIB = 2**30


class MemoryBudgetError(DataError):
    """A corpus whose vectors or index would not fit in the memory available."""


def available_memory() -> int:
    """Bytes the OS could give this process now without swapping (``psutil.virtual_memory().available``)."""
    import psutil

    return int(psutil.virtual_memory().available)


def check_memory(
    task: str,
    what: str,
    needed: int,
    available: int | Callable[[], int] | None = None,
    headroom: float = 0.9,
) -> None:
    """Raise :class:`MemoryBudgetError` naming ``task``, the bytes needed and available, before any work.

    ``available`` is a byte count or a function returning one (default :func:`available_memory`);
    only ``headroom`` of it is counted as usable (the OS, the model and the search need some).
    """
    have = available() if callable(available) else (available_memory() if available is None else int(available))
    if needed > headroom * have:
        raise MemoryBudgetError(
            f"task {task}: {what} needs {needed / GIB:.2f} GiB of memory and {have / GIB:.2f} GiB is available "
            f"(at most {headroom:.0%} of it is used); run it on a host with more memory, or use an index that "
            f"stores less per vector"
        )


def corpus_bytes(n_rows: int, dim: int, spec: dict[str, Any] | None) -> tuple[int, str]:
    """Bytes the index and search stages will need for this corpus, and a phrase saying what they are."""
    from medbench_core.retrieval.index import index_bytes, index_settings

    need = index_bytes(n_rows, dim, spec) + BLOCK_ROWS * dim * 4
    return need, f"the {index_settings(spec, n_rows)['type']} index over {n_rows:,} documents x {dim} dims (float32)"


def write_npy_blocks(path: str | Path, n_rows: int, dim: int, blocks: Iterable[tuple[np.ndarray | slice, np.ndarray]]) -> None:
    """Write an ``(n_rows, dim)`` float32 ``.npy`` from ``(rows, vectors)`` blocks; fsynced on return.

    ``rows`` (indices or a slice) say where each block goes, so blocks may come in any order;
    every row must be written exactly once (checked). The file's bytes are those of
    ``np.save(path, full_array)``.
    """
    path = Path(path)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n_rows, dim))
    written = np.zeros(n_rows, dtype=bool)
    try:
        for rows, vectors in blocks:
            vectors = np.asarray(vectors, dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape[1] != dim:
                raise DataError(f"{path}: a block of shape {vectors.shape} does not fit vectors of {dim} dims")
            if isinstance(rows, slice):
                rows = np.arange(n_rows)[rows]
            if len(rows) != len(vectors):
                raise DataError(f"{path}: {len(vectors)} vectors for {len(rows)} rows")
            if written[rows].any():
                raise DataError(f"{path}: row {int(rows[written[rows]][0])} written twice")
            out[rows] = vectors
            written[rows] = True
        if not written.all():
            raise DataError(f"{path}: {int((~written).sum())} of {n_rows} rows never written (first: {int(np.flatnonzero(~written)[0])})")
        out.flush()
    finally:
        del out
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _read_header(f) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) from an open ``.npy`` file, left positioned at its data."""
    fmt = np.lib.format
    major, _ = fmt.read_magic(f)
    return fmt.read_array_header_1_0(f) if major == 1 else fmt.read_array_header_2_0(f)


def npy_shape(path: str | Path) -> tuple[int, ...]:
    """Shape of a ``.npy`` file from its header (no data read)."""
    with open(path, "rb") as f:
        return _read_header(f)[0]


def iter_blocks(path: str | Path, block_rows: int = BLOCK_ROWS):
    """``(start, block)`` over the rows of a 2-D ``.npy`` file, each block read into its own array.

    Plain reads, not a mapping: pages read for one block are not charged to this process once
    the block is gone, so filling an index costs the index plus one block.
    """
    with open(path, "rb") as f:
        shape, fortran, dtype = _read_header(f)
        if fortran or len(shape) != 2:
            raise DataError(f"{path}: expected a C-ordered 2-D array, found shape {shape}{' (Fortran order)' if fortran else ''}")
        n, dim = shape
        for start in range(0, n, block_rows):
            rows = min(block_rows, n - start)
            block = np.fromfile(f, dtype=dtype, count=rows * dim).reshape(rows, dim)
            if block.shape[0] != rows:
                raise DataError(f"{path}: truncated at row {start + block.shape[0]} of {n}")
            yield start, block


def encode_side_to(
    path: str | Path,
    encoder: Any,
    task: Any,
    side: str,
    *,
    before_encoding: Callable[[int, int], None] | None = None,
) -> tuple[int, int]:
    """Encode the queries or the corpus of ``task`` into the ``.npy`` at ``path``, one batch at a time.

    Batches follow the encoder's own ``batch_plan`` (the batches it would form from all records
    at once), so the vectors are bit-identical to encoding everything in one call; an encoder
    without a plan is called once. ``before_encoding(rows, dim)`` runs after a one-record probe
    has told the dimension and before anything else is encoded: the place to refuse a corpus
    that will not fit. Returns ``(rows, dim)``.
    """
    from medbench_core.retrieval.records import _accepts_ids, side_records

    ids, texts, images, langs = side_records(task, side)
    n = len(ids)
    if n == 0:
        raise DataError(f"task {task.name}: no {side} records to encode")
    takes_ids = _accepts_ids(encoder)
    plan_of = getattr(encoder, "batch_plan", None)
    plan = (plan_of(texts, langs, side) if plan_of else None) or [np.arange(n)]

    def encode(rows: np.ndarray) -> np.ndarray:
        pick = lambda xs: [xs[i] for i in rows]  # noqa: E731
        emb = encoder.encode_records(pick(texts), pick(images), pick(langs), side, **({"ids": pick(ids)} if takes_ids else {}))
        if emb.shape[0] != len(rows):
            raise DataError(f"task {task.name}: encoder returned {emb.shape[0]} vectors for {len(rows)} {side} records")
        return emb

    dim = int(encode(np.arange(1)).shape[1])
    if before_encoding is not None:
        before_encoding(n, dim)
    check_disk(task.name, Path(path).parent, n * dim * 4)
    write_npy_blocks(path, n, dim, ((rows, encode(rows)) for rows in plan))
    return n, dim


def check_disk(task: str, folder: Path, needed: int) -> None:
    """Refuse to start writing ``needed`` bytes into ``folder`` when its filesystem has less free."""
    import shutil

    free = shutil.disk_usage(folder).free
    if needed > free:
        raise MemoryBudgetError(f"task {task}: the vectors need {needed / GIB:.2f} GiB on disk and {folder} has {free / GIB:.2f} GiB free")
