"""Near-duplicate texts by MinHash LSH (datasketch), verified by their exact Jaccard similarity.

A text is compared as the set of its character 5-grams (:data:`SHINGLE`) after
:func:`~medbench_core.taskdata.contracts.overlap.normalise_query` (NFKC, case-folded, punctuation to
spaces, spaces collapsed): characters, not words, so that a short query with one word changed
still shares most of its shingles, and so that Chinese and Japanese, written without spaces, are
shingled too. A text shorter than 5 characters is one shingle, itself.

Each shingle is hashed to 32 bits (a polynomial over its code points in base :data:`_BASE`, modulo
2**32, computed for every shingle of a batch at once with numpy) and the signature is datasketch's
MinHash of those hashes (scheme ``affine32``, 128 permutations, seed 1): equal, value for value,
to ``datasketch.MinHash(num_perm=128, hashfunc=shingle_hash).update_batch(shingles)`` with the
one-shingle form of that hash (``shingle_hash`` in tests/core/test_contamination.py, which calls
datasketch for that), without a Python call per shingle.
Candidates come from datasketch's ``MinHashLSH`` at the threshold (its bands and rows chosen by
datasketch for equal weights of false positives and negatives); every candidate is then verified
on the texts' exact shingle sets, and a pair is reported only when its Jaccard similarity is at
least :data:`JACCARD_THRESHOLD`. So a reported pair is never an estimate; the LSH decides only
what is looked at (its recall, not the precision, is probabilistic).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SHINGLE = 5  # characters per shingle
NUM_PERM = 128
SEED = 1  # datasketch's default seed
JACCARD_THRESHOLD = 0.8  # docs/contamination.md: the hand-read sample that set it (precision 11/15 there; 0.7: 13/25)
_BASE = np.uint32(0x01000193)  # the FNV prime: a shingle's code points as digits in this base, modulo 2**32
_BATCH_SHINGLES = 1 << 13  # shingles whose 128 permuted hashes are held at once (4 MB: small enough to stay in the CPU cache)


def normalise(text: str | None) -> str:
    """A text as it is shingled (the overlap contract's normalisation of queries)."""
    from medbench_core.taskdata.contracts.overlap import normalise_query

    return normalise_query(text)


def shingles(text: str, k: int = SHINGLE) -> list[str]:
    """The character ``k``-grams of an already normalised ``text`` (the text itself when shorter; none when empty)."""
    if not text:
        return []
    if len(text) <= k:
        return [text]
    return [text[i : i + k] for i in range(len(text) - k + 1)]


def _shingle_hashes(texts: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every shingle hash of ``texts`` (normalised) in one array, and each text's count of shingles."""
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    if lengths.sum() == 0:
        return np.zeros(0, dtype=np.uint32), np.zeros(len(texts), dtype=np.int64)
    codes = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    counts = np.where(lengths == 0, 0, np.where(lengths <= k, 1, lengths - k + 1))
    # The hash of the window [i, i + w) for w = min(k, text length), for every start i of a shingle.
    width = np.minimum(lengths, k)
    first = np.repeat(starts, counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))
    w = np.repeat(width, counts)
    h = np.zeros(first.shape[0], dtype=np.uint32)
    with np.errstate(over="ignore"):
        for j in range(k):
            inside = w > j
            h = np.where(inside, h * _BASE + codes[np.minimum(first + j, codes.shape[0] - 1)], h)
    return h, counts


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer (datasketch applies it to every input hash before permuting)."""
    with np.errstate(over="ignore"):
        h = h ^ (h >> np.uint32(16))
        h = h * np.uint32(0x85EBCA6B)
        h = h ^ (h >> np.uint32(13))
        h = h * np.uint32(0xC2B2AE35)
        return h ^ (h >> np.uint32(16))


def permutations(num_perm: int = NUM_PERM, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutation parameters (a odd, b), drawn as ``MinHash._init_permutations`` draws them."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


def signatures(texts: Sequence[str], *, k: int = SHINGLE, num_perm: int = NUM_PERM, seed: int = SEED) -> np.ndarray:
    """MinHash signatures (``len(texts)`` x ``num_perm``, uint32) of normalised ``texts``; an empty text's row is all 2**32-1."""
    a, b = permutations(num_perm, seed)
    out = np.full((len(texts), num_perm), np.iinfo(np.uint32).max, dtype=np.uint32)
    step = 4096
    for lo in range(0, len(texts), step):
        hv, counts = _shingle_hashes(texts[lo : lo + step], k)
        mixed = _fmix32(hv)
        ends = np.cumsum(counts)
        row = 0
        while row < counts.shape[0]:
            # As many whole texts as fit in one block of shingles (at least one).
            start = ends[row] - counts[row]
            stop_row = max(row + 1, int(np.searchsorted(ends, start + _BATCH_SHINGLES, side="right")))
            block = mixed[start : ends[stop_row - 1]]
            if block.shape[0]:
                # Permutations by rows, shingles along each row: the minimum over a text's shingles is then a
                # reduction along contiguous memory (over axis 0 of the transpose, with 32 MB blocks, signatures took 7x as long).
                with np.errstate(over="ignore"):
                    phv = a[:, None] * block[None, :]
                    phv += b[:, None]
                c = counts[row:stop_row]
                nonempty = np.nonzero(c)[0]
                offsets = (np.cumsum(c) - c)[nonempty]
                out[lo + row + nonempty] = np.minimum.reduceat(phv, offsets, axis=1).T
            row = stop_row
    return out


@dataclass(frozen=True)
class TextSet:
    """Texts to compare: a source label (``task:scifact``, ``texts:<manifest>``), their side and ids, their normalised texts and signatures."""

    source: str
    side: str  # "query", "doc" or "text" (a manifest's)
    ids: tuple[str, ...]
    texts: tuple[str, ...]
    sigs: np.ndarray


def kept_texts(ids: Sequence[str], raw: Sequence[str | None]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ids and normalised texts of the non-empty texts among ``raw``, in their order."""
    norm = [normalise(t) for t in raw]
    keep = [i for i, t in enumerate(norm) if t]
    return tuple(str(ids[i]) for i in keep), tuple(norm[i] for i in keep)


def text_set(source: str, side: str, ids: Sequence[str], raw: Sequence[str | None], sigs: np.ndarray | None = None) -> TextSet:
    """A :class:`TextSet` of the non-empty texts among ``raw`` (normalised; signatures computed unless given for exactly those)."""
    kept_ids, texts = kept_texts(ids, raw)
    return TextSet(source, side, kept_ids, texts, signatures(texts) if sigs is None else sigs)


def jaccard(a: str, b: str, k: int = SHINGLE) -> float:
    """Exact Jaccard similarity of two normalised texts' shingle sets."""
    sa, sb = set(shingles(a, k)), set(shingles(b, k))
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


class LshIndex:
    """``others`` in one ``datasketch.MinHashLSH`` at ``threshold``, built once and looked up by any number of probes."""

    def __init__(self, others: Sequence[TextSet], threshold: float = JACCARD_THRESHOLD) -> None:
        from datasketch import LeanMinHash, MinHashLSH

        self.others = list(others)
        self.threshold = threshold
        self.lsh = MinHashLSH(threshold=threshold, num_perm=NUM_PERM)
        self.where: list[tuple[int, int]] = []
        with self.lsh.insertion_session() as session:
            for oi, o in enumerate(self.others):
                for j in range(len(o.ids)):
                    session.insert(len(self.where), LeanMinHash(seed=SEED, hashvalues=o.sigs[j], scheme="affine32"), check_duplication=False)
                    self.where.append((oi, j))

    def pairs(self, probe: TextSet) -> list[dict]:
        """Every (probe item, indexed item) pair with exact Jaccard >= the threshold among the LSH candidates, sorted."""
        from datasketch import LeanMinHash

        rows = []
        for i in range(len(probe.ids)):
            found = self.lsh.query(LeanMinHash(seed=SEED, hashvalues=probe.sigs[i], scheme="affine32"))
            for key in found:
                oi, j = self.where[key]
                o = self.others[oi]
                sim = jaccard(probe.texts[i], o.texts[j])
                if sim >= self.threshold:
                    row = {"side": probe.side, "id": probe.ids[i], "source": o.source, "other_side": o.side, "other_id": o.ids[j]}
                    rows.append({**row, "jaccard": round(sim, 4)})
        rows.sort(key=lambda r: (r["side"], r["id"], r["source"], r["other_side"], r["other_id"]))
        return rows


def near_duplicates(probe: TextSet, others: Sequence[TextSet], threshold: float = JACCARD_THRESHOLD) -> list[dict]:
    """Every (probe item, other item) pair with exact Jaccard >= ``threshold`` among the LSH candidates.

    The ``others`` are inserted into one ``datasketch.MinHashLSH`` (:class:`LshIndex`); each probe item is queried.
    Rows: ``side, id, source, other_side, other_id, jaccard`` (4 places), sorted.
    """
    if not len(probe.ids) or not any(len(o.ids) for o in others):
        return []
    return LshIndex(others, threshold).pairs(probe)
