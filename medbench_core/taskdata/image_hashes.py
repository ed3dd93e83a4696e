"""Perceptual hashes of images (imagehash: pHash and dHash, 64 bits each) and the exact pixel digest.

pHash (the DCT of a 32x32 grey copy, its 8x8 lowest frequencies against their median) survives
resizing and JPEG recompression; dHash (the signs of horizontal differences of a 9x8 grey copy)
is a second, independent view: a pair is a near-duplicate only when **both** are within their
Hamming thresholds (:data:`PHASH_MAX`, :data:`DHASH_MAX`), which keeps two different chest X-rays
(alike at 8x8) apart. An *exact* duplicate has the same decoded pixels (sha256 over mode, size and
RGB bytes), whatever the file's format or metadata. imagehash is imported inside the functions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PHASH_MAX = 3  # of 64 bits: docs/contamination.md, measured on resized and recompressed copies and on PneumoniaMNIST
DHASH_MAX = 4
HASH_BITS = 64


@dataclass(frozen=True)
class ImageHashes:
    """pHash and dHash as unsigned 64-bit integers (imagehash's bit order) and the pixel digest ('' when only the hashes are known)."""

    phash: int
    dhash: int
    pixels: str = ""

    def hex(self) -> tuple[str, str]:
        return f"{self.phash:016x}", f"{self.dhash:016x}"


def _bits_to_int(bits: np.ndarray) -> int:
    out = 0
    for b in bits.flatten():
        out = (out << 1) | int(bool(b))
    return out


def hash_image(image) -> ImageHashes:
    """The hashes of a PIL image (imagehash.phash and imagehash.dhash, hash size 8) and its pixel digest."""
    import imagehash

    rgb = image.convert("RGB")
    digest = hashlib.sha256(f"{rgb.size[0]}x{rgb.size[1]}:".encode() + rgb.tobytes()).hexdigest()
    return ImageHashes(_bits_to_int(imagehash.phash(image).hash), _bits_to_int(imagehash.dhash(image).hash), digest)


def hash_file(path: str | Path, record_id: str = "") -> ImageHashes:
    """:func:`hash_image` of the image file ``path`` (decoded with the bounds of every image medbench reads)."""
    from medbench_core.taskdata.images import load_image

    return hash_image(load_image(path, record_id or str(path)))


def parse_hashes(line: str) -> ImageHashes | None:
    """``<phash hex> <dhash hex>`` (16 hex digits each, as imagehash's ``str()`` writes them) or None when the line is not that."""
    parts = line.split()
    if len(parts) >= 2 and all(len(p) == 16 for p in parts[:2]):
        try:
            return ImageHashes(int(parts[0], 16), int(parts[1], 16))
        except ValueError:
            return None
    return None


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamming distances between every uint64 of ``a`` (column) and of ``b`` (row)."""
    return np.bitwise_count(a[:, None] ^ b[None, :]).astype(np.int16)


def close_pairs(
    left: Sequence[ImageHashes], right: Sequence[ImageHashes], *, same: bool = False, phash_max: int = PHASH_MAX, dhash_max: int = DHASH_MAX
) -> list[tuple[int, int, int, int, bool]]:
    """(i, j, pHash distance, dHash distance, exact) for each pair within both thresholds or with equal pixels.

    ``same``: ``left`` and ``right`` are one list, each unordered pair once (i < j). Brute force over
    blocks of 2,048 rows (64-bit XOR and popcount): a few seconds for tens of thousands of images.
    """
    if not left or not right:
        return []
    lp = np.array([h.phash for h in left], dtype=np.uint64)
    ld = np.array([h.dhash for h in left], dtype=np.uint64)
    rp = np.array([h.phash for h in right], dtype=np.uint64)
    rd = np.array([h.dhash for h in right], dtype=np.uint64)
    lx = [h.pixels for h in left]
    rx = [h.pixels for h in right]
    out = []
    for lo in range(0, len(left), 2048):
        dp = hamming(lp[lo : lo + 2048], rp)
        dd = hamming(ld[lo : lo + 2048], rd)
        hit = (dp <= phash_max) & (dd <= dhash_max)
        for i, j in zip(*np.nonzero(hit | (dp == 0) & (dd == 0))):
            gi = lo + int(i)
            if same and gi >= j:
                continue
            exact = bool(lx[gi]) and lx[gi] == rx[j]
            out.append((gi, int(j), int(dp[i, j]), int(dd[i, j]), exact))
    # Equal pixels with hashes beyond the thresholds cannot happen (same pixels, same hashes), so nothing else to add.
    return out
