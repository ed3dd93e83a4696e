"""What every reader is: a name, one frozen options class, and a read function.

A reader module ends with one registration, e.g. ``READER = Reader("beir", BeirOptions, read_beir)``,
and its module name is listed once in :data:`medbench_core.taskdata.readers.REGISTRY`. The read
function takes ``(source, options, context)``: the folder or file named by ``path`` in tasks.yaml
(``None`` for a hub dataset), the reader's validated options, and a :class:`ReadContext` (scratch
folder, online, hub cache) that comes from the run, never from tasks.yaml.

:func:`parse_options` turns a tasks.yaml mapping into the options object: an unknown key is refused
naming the closest known option, a value of the wrong type naming the type expected. Nothing here
imports polars or the readers, so ``load_catalog`` validates tasks.yaml cheaply.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from medbench_core.errors import DataError

# Keys of a tasks.yaml entry that the catalogue itself reads (not reader options).
CATALOGUE_KEYS = ("name", "reader", "path", "subsets", "identity")


@dataclass(frozen=True, kw_only=True)
class ReaderOptions:
    """Options every reader takes.

    ``research_only`` comes from configuration, never from the data: it lets a task with unknown,
    NC or ND licences through the licence gate and marks everything it produces. ``source`` and
    ``description`` are texts for the task metadata (each reader has a default source text).
    """

    name: str
    research_only: bool = False
    source: str = ""
    description: str = ""
    # drop a retrieved document whose id is the query's id before scoring (BEIR's evaluator does);
    # "dense": only from a dense retriever's run (R2MED's rule); None: the reader's own default (Reader.ignore_identical_ids)
    ignore_identical_ids: bool | Literal["dense"] | None = None


@dataclass(frozen=True)
class ReadContext:
    """What a read gets from the run rather than from tasks.yaml.

    ``scratch``: a folder the reader may write into (rendered PNGs, image bytes, images taken out
    of an archive); the curated task copies what it references. ``online``: a hub dataset may be
    downloaded (otherwise it is read from the local hub cache, ``hub_cache`` or huggingface_hub's).
    ``shared``: what the reads of one source share (:meth:`share`), given by the curation layer.
    """

    scratch: Path | None = None
    online: bool = False
    hub_cache: Path | None = None
    shared: SharedReads | None = None

    def need_scratch(self, what: str) -> Path:
        if self.scratch is None:
            raise DataError(f"{what}: this reader writes files (images) and needs a scratch folder (ReadContext(scratch=...))")
        return Path(self.scratch)

    def share(self, key: tuple, build: Callable[[], Any], kept: Kept | None = None) -> Any:
        """``build()``, once for every read of the same source (its bytes) with the same ``key`` in this process,
        and with ``kept``, once for every process that reads from the same folder of shared reads.

        For work that several tasks of one entry repeat (``subsets``: the GNU Health ICD-10 split is
        built whole for each of its tasks): ``key`` names everything of the options that work depends on;
        the curation layer adds the reader, the source's sha256 and the curation's code version
        (:class:`SharedReads`). The value is shared between those reads: a reader must not change it.
        """
        return build() if self.shared is None else self.shared.get(key, build, kept)


@dataclass(frozen=True)
class Kept:
    """How a shared value is kept on disk between processes: ``dump`` to JSON-able data, ``load`` back to an equal value."""

    dump: Callable[[Any], Any]
    load: Callable[[Any], Any]


class SharedReads:
    """The values :meth:`ReadContext.share` built, scoped to one reader and one source's content (``scope()``,
    computed at the first share: a read that shares nothing does not hash its source for it), at most ``keep``
    of them (the last used), within this process; with a ``folder``, those shared with a :class:`Kept` are also
    written there (JSON, by a digest of scope and key) and read back by the next process, the last ``keep_files``."""

    def __init__(self, keep: int = 2, folder: Path | None = None, keep_files: int = 4) -> None:
        self.keep, self.folder, self.keep_files = keep, folder, keep_files
        self._scope: Callable[[], tuple] = tuple
        self._values: dict[tuple, Any] = {}

    def scoped(self, scope: Callable[[], tuple]) -> SharedReads:
        """These shared values, for reads of ``scope()`` (the reader's name, the source's digest, the code version)."""
        view = SharedReads(self.keep, self.folder, self.keep_files)
        view._scope, view._values = scope, self._values
        return view

    def get(self, key: tuple, build: Callable[[], Any], kept: Kept | None = None) -> Any:
        full = (self._scope(), key)
        if full in self._values:
            self._values[full] = self._values.pop(full)  # the last used is kept longest
            return self._values[full]
        on_disk = self.folder is not None and kept is not None
        value = self._read(full, kept) if on_disk else None
        if value is None:
            value = build()
            if on_disk:
                self._write(full, value, kept)
        self._values[full] = value
        while len(self._values) > self.keep:
            self._values.pop(next(iter(self._values)))
        return value

    def _file(self, full: tuple) -> Path:
        import hashlib

        return Path(self.folder) / f"{hashlib.sha256(repr(full).encode()).hexdigest()[:32]}.json"

    def _read(self, full: tuple, kept: Kept) -> Any:
        """The value kept for ``full``; None when there is none, or it is unreadable or of another key (then built again)."""
        import json

        try:
            data = json.loads(self._file(full).read_text(encoding="utf-8"))
            return kept.load(data["value"]) if data.get("key") == repr(full) else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def _write(self, full: tuple, value: Any, kept: Kept) -> None:
        """Kept atomically (a reader never sees half a file); the oldest beyond ``keep_files`` removed. An optimisation:
        a failed write is not an error (the curation writing its task says a full disk)."""
        import json

        from medbench_core.storage import write_text_atomic

        try:
            Path(self.folder).mkdir(parents=True, exist_ok=True)
            # insertion order kept (no sort_keys): what the reader iterates comes back in the order it was built
            write_text_atomic(self._file(full), json.dumps({"key": repr(full), "value": kept.dump(value)}, ensure_ascii=False))
            files = sorted(Path(self.folder).glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
            for old in files[self.keep_files :]:
                old.unlink(missing_ok=True)
        except OSError:
            pass


@dataclass(frozen=True)
class Reader:
    """A registered reader: its tasks.yaml name, options class and read function."""

    name: str
    options: type[ReaderOptions]
    read: Callable[..., Any]
    #: what the evaluator of the data's own benchmark does with a retrieved document whose id is
    #: the query's id: True drops it before scoring (BEIR's EvaluateRetrieval.evaluate), False keeps
    #: it (pytrec_eval / trec_eval, mteb 2.x), "dense" drops it from a dense retriever's run only
    #: (R2MED: its dense script scores with BEIR, its BM25 and reranker scripts with pytrec_eval)
    ignore_identical_ids: bool | str = False

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.options))

    @property
    def reads_hub(self) -> bool:
        """Whether an entry may name a hub dataset (``dataset:`` + ``revision:``) instead of a ``path``."""
        return {"dataset", "revision"} <= set(self.option_names)

    @property
    def takes_subsets(self) -> bool:
        """Whether an entry may list ``subsets:`` (the reader has a ``subset`` option)."""
        return "subset" in self.option_names


def closest(word: str, known: list[str] | tuple[str, ...]) -> str:
    """``; did you mean 'x'?`` for the closest of ``known`` (difflib), or ``""`` when none is close."""
    match = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {match[0]!r}?" if match else ""


def parse_options(reader: Reader, raw: dict[str, Any], where: str, called: str = "") -> ReaderOptions:
    """The reader's options from the keys of a tasks.yaml entry (``where`` prefixes every error).

    Keys in :data:`CATALOGUE_KEYS` are the catalogue's own and skipped; any other key must be an
    option of the reader, with a value of its type (a list is accepted for a tuple). ``called`` is
    the name the entry used for the reader (an alias), for the messages.
    """
    called = called or reader.name
    hints = typing.get_type_hints(reader.options)
    known = [*reader.option_names, "path", "reader"]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in CATALOGUE_KEYS and key != "name":
            continue
        if key not in hints:
            hint = closest(str(key), known) or f"; its options: {', '.join(sorted(reader.option_names))}"
            raise DataError(f"{where}: unknown option {key!r} for reader {called}{hint}")
        values[key] = _check_type(value, hints[key], f"{where}: option {key!r}")
    missing = [
        f.name
        for f in dataclasses.fields(reader.options)
        if f.name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise DataError(f"{where}: reader {called} needs option(s) {', '.join(repr(m) for m in missing)}")
    return reader.options(**values)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        k, v = typing.get_args(tp)
        return f"a mapping of {_type_name(k)} to {_type_name(v)}"
    return {str: "a string", bool: "true or false", int: "an integer", float: "a number", type(None): "null"}.get(tp, getattr(tp, "__name__", str(tp)))


def _check_type(value: Any, tp: Any, where: str) -> Any:
    """``value`` as type ``tp`` (lists become tuples), or DataError naming what was expected."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _check_type(value, arg, where)
            except DataError:
                continue
    elif origin is Literal:
        if value in typing.get_args(tp):
            return value
    elif origin is tuple:
        if isinstance(value, (list, tuple)):
            return tuple(_check_type(v, typing.get_args(tp)[0], f"{where} item {i}") for i, v in enumerate(value))
    elif origin is dict:
        if isinstance(value, dict):
            k, v = typing.get_args(tp)
            return {_check_type(kk, k, where): _check_type(vv, v, f"{where}[{kk!r}]") for kk, vv in value.items()}
    elif tp is type(None):
        if value is None:
            return None
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    else:
        raise TypeError(f"{where}: option type {tp!r} is not supported by parse_options")
    got = f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else type(value).__name__
    wants_text = tp is str or (origin in (typing.Union, types.UnionType) and str in typing.get_args(tp))
    hint = " (quote it in YAML)" if wants_text and not isinstance(value, (dict, list)) else ""
    raise DataError(f"{where} must be {_type_name(tp)}, not {got}{hint}")
