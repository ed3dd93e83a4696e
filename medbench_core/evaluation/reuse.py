"""What a leaderboard takes from the last one instead of computing it again (issue 53): values and drawn files, by their inputs.

Adding a model to a board of many changes few of its numbers: every other cell's CI, every other
pair's test and every other model's trust plot are functions of inputs that did not change. Inside
``with reusing(results)``, :func:`reused` looks such a value up in ``results`` (:class:`Results`)
under a digest of everything it depends on (the values' bytes, the parameters, and the source of
the code that computes it with the versions of the libraries it calls), and computes it only when
it is absent; :func:`drawn` does the same for a plot, whose PNG is taken from the last leaderboard
when its bytes are those recorded for the same inputs. The functions are deterministic (fixed seeds,
a fresh generator per call; plots with fixed sizes and no timestamp), so what is reused is, to the
bit, what would have been computed: ``tests/core/test_stats_reuse.py`` builds a board with and
without reuse and compares the files byte for byte.

Outside such a block nothing is looked up or kept: the metrics stage, the golden outputs and any
caller that does not ask for reuse compute everything, as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

_T = TypeVar("_T")
_HERE = Path(__file__).resolve().parent


class Results:
    """Values and drawn files' sha256 by the digest of their inputs (module docstring).

    ``load``/``save`` keep them in one JSON file between processes (floats as Python writes them,
    which read back to the same bits); ``save`` keeps only the entries used since loading, so the
    file holds what the last leaderboard needed. ``hits`` and ``computed`` count this build's
    look-ups. A file that cannot be read counts as empty: it is an optimisation, never an input.
    """

    FORMAT = 1

    def __init__(self, entries: Mapping[str, Any] | None = None) -> None:
        self._stored: dict[str, Any] = dict(entries or {})
        self.used: dict[str, Any] = {}
        self.hits = 0
        self.computed = 0

    def get(self, key: str, *, count: bool = True) -> Any:
        """The value stored under ``key`` (None when there is none), counted as a hit unless ``count`` is False."""
        value = self.used.get(key, self._stored.get(key))
        if value is not None:
            self.used[key] = value
            self.hits += count
        return value

    def put(self, key: str, value: Any) -> None:
        self.computed += 1
        self.used[key] = value

    @classmethod
    def load(cls, path: str | Path) -> Results:
        try:
            doc = json.loads(Path(path).read_text())
            if doc.get("format") != cls.FORMAT:
                return cls()
            return cls(dict(doc["entries"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return cls()

    def save(self, path: str | Path) -> None:
        from medbench_core.storage import write_text_atomic

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(Path(path), json.dumps({"format": self.FORMAT, "entries": self.used}, separators=(",", ":")))


_ACTIVE: ContextVar[Results | None] = ContextVar("medbench_reuse", default=None)
_CODE: dict[tuple[str, ...], str] = {}


@contextmanager
def reusing(results: Results) -> Iterator[Results]:
    """Within the block, :func:`reused` and :func:`drawn` take what ``results`` holds for their inputs, and add to it."""
    token = _ACTIVE.set(results)
    try:
        yield results
    finally:
        _ACTIVE.reset(token)


def active() -> Results | None:
    """The :class:`Results` of the enclosing :func:`reusing` block, if any."""
    return _ACTIVE.get()


def code_digest(modules: tuple[str, ...], libraries: tuple[str, ...]) -> str:
    """sha256 over the source of ``modules`` (files of medbench_core/evaluation) and the versions of ``libraries``."""
    key = (*modules, "|", *libraries)
    if key not in _CODE:
        from importlib import metadata

        h = hashlib.sha256()
        for lib in libraries:
            h.update(f"{lib} {metadata.version(lib)}\0".encode())
        for name in modules:
            h.update(name.encode() + b"\0" + (_HERE / name).read_bytes())
        _CODE[key] = h.hexdigest()[:16]
    return _CODE[key]


def digest(kind: str, code: str, *parts: Any) -> str:
    """The key of a value of ``kind`` computed by ``code`` (:func:`code_digest`) from ``parts``: arrays by their
    float64 bytes and shape, frames by their columns' names, types and values, mappings and sequences item by item."""
    h = hashlib.sha256(f"{kind}\0{code}".encode())
    _feed(h, parts)
    return h.hexdigest()[:32]


def _feed(h: Any, part: Any) -> None:
    import polars as pl

    if isinstance(part, np.ndarray):
        a = np.ascontiguousarray(part, dtype=np.float64)
        h.update(f"\0a{a.shape}".encode() + a.tobytes())
    elif isinstance(part, pl.DataFrame):
        h.update(f"\0f{list(zip(part.columns, map(str, part.dtypes)))}".encode())
        h.update(part.write_csv().encode())  # polars writes floats in their shortest exact form
    elif isinstance(part, Mapping):
        h.update(b"\0m")
        for k, v in part.items():
            _feed(h, k)
            _feed(h, v)
    elif isinstance(part, list | tuple):
        h.update(f"\0s{len(part)}".encode())
        for v in part:
            _feed(h, v)
    else:
        h.update(f"\0{part!r}".encode())


def reused(key: Callable[[], str], compute: Callable[[], _T]) -> _T:
    """``compute()``, or its value for these inputs (``key()``, called only inside :func:`reusing`) from the active :class:`Results`."""
    results = _ACTIVE.get()
    if results is None:
        return compute()
    k = key()
    got = results.get(k)
    if got is None:
        got = compute()
        results.put(k, got)
    return got


def drawn(key: Callable[[], str], previous: Path, target: Path, draw: Callable[[Path], Any]) -> None:
    """``draw(target)``, or, inside :func:`reusing`, the bytes of ``previous`` (the same plot of the last leaderboard)
    copied to ``target`` when the active :class:`Results` records them (their sha256) for these inputs (``key()``)."""
    results = _ACTIVE.get()
    if results is None:
        draw(target)
        return
    k = key()
    sha = results.get(k, count=False)
    if sha is not None and previous.is_file():
        data = previous.read_bytes()
        if hashlib.sha256(data).hexdigest() == sha:  # else: the file is not those bytes any more, drawn again
            if Path(target) != Path(previous):
                target.write_bytes(data)
            results.hits += 1
            return
    draw(target)
    results.put(k, hashlib.sha256(Path(target).read_bytes()).hexdigest())
