"""Giving memory back to the operating system between the stages of one process.

Python objects and C buffers freed after a stage (a reader's per-record dicts, a contract's pandas
copies) leave glibc's heap with free pages it keeps for later; the next stage then starts from that
resident size, and the process's peak is the sum of both. ``malloc_trim(0)`` hands the free pages
back (glibc only; elsewhere nothing happens).

A full collection walks every object the collector tracks: with torch, Dagster and Great Expectations
imported, ~630K of them, 0.35 s a time, whatever the data (a third of a tiny task's `medbench run`).
The first call freezes what survives it (``gc.freeze``: the libraries, the definitions, alive for the
whole process), so each later collection walks only what the stages made since.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys

_FROZEN = False


def give_back_free_memory() -> None:
    """Collect garbage, then return glibc's free heap pages to the OS (a no-op without glibc)."""
    global _FROZEN
    gc.collect()
    if not _FROZEN:  # (gc.get_freeze_count() walks the frozen list: 60 ms)
        gc.freeze()  # the first call's survivors are out of later collections' walk (see above)
        _FROZEN = True
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # another libc (musl has no malloc_trim)
        pass
