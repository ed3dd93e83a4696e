"""Compiled inner loops of the bootstrap CIs and the randomisation test at scale (issue 25).

numpy needs a gathered copy of every resample (``np.take``, then ``np.mean``): at 164K queries
and 10,000 resamples that is 1.6 billion values written and read again per metric, and the sign
flips build two more such arrays. These numba loops read each resampled value once and add in
the very order numpy adds, so every mean is the same to the last bit
(``tests/core/test_stats_scale.py``):

- a bootstrap mean is ``np.mean`` over a contiguous row: the add identity 0.0 plus numpy's
  ``pairwise_sum`` (numpy/_core/src/umath/loops_utils.h.src: blocks of at most 128 values summed
  with 8 accumulators, longer runs split in two at a multiple of 8), divided by n;
- a sign-flipped mean adds the queries in sequence from 0.0 (numpy's reduction over scipy's
  strided axis).

The random draws stay numpy's, on the caller's generator, in the order scipy draws them. They
run in the calling thread while a second thread runs the loop on the previous block (numpy's
generators and these loops both release the GIL); the values do not depend on the timing. No
fastmath: LLVM must not reassociate the sums.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

_BLOCK = 128  # numpy's PW_BLOCKSIZE


def pairwise_plan(n: int) -> np.ndarray:
    """numpy's pairwise recursion over ``n`` values as a postfix program: ``lo * 256 + length``
    for a block summed directly (length <= 128), -1 to add the two sums on top of the stack."""
    ops: list[int] = []

    def walk(lo: int, size: int) -> None:
        if size <= _BLOCK:
            ops.append(lo * 256 + size)
            return
        half = size // 2
        half -= half % 8
        walk(lo, half)
        walk(lo + half, size - half)
        ops.append(-1)

    walk(0, n)
    return np.asarray(ops, dtype=np.int64)


@njit(cache=True, nogil=True)
def _block_sum(x: np.ndarray, idx: np.ndarray, lo: int, n: int) -> float:
    """numpy's pairwise_sum of x[idx[lo:lo + n]] for one block (n <= 128)."""
    if n < 8:
        s = 0.0
        for i in range(lo, lo + n):
            s += x[idx[i]]
        return s
    r0, r1, r2, r3 = x[idx[lo]], x[idx[lo + 1]], x[idx[lo + 2]], x[idx[lo + 3]]
    r4, r5, r6, r7 = x[idx[lo + 4]], x[idx[lo + 5]], x[idx[lo + 6]], x[idx[lo + 7]]
    end = lo + n - n % 8
    i = lo + 8
    while i < end:
        r0 += x[idx[i]]
        r1 += x[idx[i + 1]]
        r2 += x[idx[i + 2]]
        r3 += x[idx[i + 3]]
        r4 += x[idx[i + 4]]
        r5 += x[idx[i + 5]]
        r6 += x[idx[i + 6]]
        r7 += x[idx[i + 7]]
        i += 8
    s = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < lo + n:
        s += x[idx[i]]
        i += 1
    return s


@njit(cache=True, nogil=True)
def resampled_means(x: np.ndarray, idx: np.ndarray, plan: np.ndarray, out: np.ndarray) -> None:
    """out[r] = np.mean(x[idx[r]]) bit for bit; ``plan`` = pairwise_plan(idx.shape[1])."""
    b, n = idx.shape
    stack = np.empty(64, dtype=np.float64)
    for r in range(b):
        row = idx[r]
        top = 0
        for op in plan:
            if op >= 0:
                stack[top] = _block_sum(x, row, op >> 8, op & 255)
                top += 1
            else:
                stack[top - 2] = stack[top - 2] + stack[top - 1]
                top -= 1
        out[r] = (0.0 + stack[0]) / n


@njit(cache=True, nogil=True)
def sign_flip_means(x: np.ndarray, y: np.ndarray, bits: np.ndarray, out: np.ndarray) -> None:
    """out[r] = mean(x') - mean(y'), pair q swapped when bit 0 of ``bits[r, q]`` is 0."""
    b, n = bits.shape
    for r in range(b):
        sx = 0.0
        sy = 0.0
        row = bits[r]
        for q in range(n):
            if row[q] & 1:
                sx += x[q]
                sy += y[q]
            else:
                sx += y[q]
                sy += x[q]
        out[r] = sx / n - sy / n


def in_blocks(draw: Callable[[int], np.ndarray], work: Callable[[np.ndarray, int], None], total: int, rows: int) -> None:
    """For each block of ``rows`` resamples (the last may be shorter): ``block = draw(b)`` here, in
    order, then ``work(block, start)`` in a second thread while the next block is drawn."""
    with ThreadPoolExecutor(1, thread_name_prefix="medbench-resample") as pool:
        pending = None
        for start in range(0, total, rows):
            block = draw(min(rows, total - start))
            if pending is not None:
                pending.result()
            pending = pool.submit(work, block, start)
        if pending is not None:
            pending.result()
