"""A registered model: the entry fields every kind shares, its kind's typed settings and its kind's own block.

``models.yaml`` stays as users write it; :func:`parse_entry` reads one entry through its kind
(:mod:`medbench_core.retrieval.kinds`), which owns the settings schema and any fields of its own
(a fusion's ``fusion:``, a reranker's ``rerank:``, an expanded model's ``retriever:`` ...).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds import get_kind, kind_names
from medbench_core.retrieval.kinds.settings import KindSettings, NoSettings, closest

COMMON_FIELDS = ("name", "kind", "path", "revision", "settings", "batch_size", "index", "trust_remote_code", "training_data")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\Z")


# --- the capabilities of a kind that concern its entry (named with the others in capabilities.py) ---


@runtime_checkable
class OwnEntryFields(Protocol):
    """A kind whose entries have fields of their own beside the common ones (:data:`COMMON_FIELDS`): a fusion's
    ``fusion:``, a reranker's ``rerank:``, an expanded model's ``retriever:``, ``expansion:`` ... They are read into the
    spec's ``block`` when models.yaml is read, and written back into its identity (so into every key)."""

    #: the names of its own fields; an entry with any other field beside the common ones is refused
    entry_fields: tuple[str, ...]

    def parse_block(self, spec: ModelSpec, fields: dict[str, Any], where: str) -> Any:
        """Its own fields of the entry (those given), checked and read into the spec's ``block`` (``where`` names file
        and entry; DataError for what is missing or wrong)."""
        ...

    def block_entry(self, spec: ModelSpec) -> dict[str, Any]:
        """The block as the entry writes it (it enters the identity and :meth:`ModelSpec.to_entry`)."""
        ...


@runtime_checkable
class ChecksEntry(Protocol):
    """A kind that checks an entry's common fields and settings together, beyond what its settings schema checks
    field by field (open_clip: an architecture or an ``hf-hub:`` checkpoint; UniIR: a checkpoint file; late interaction:
    its index settings)."""

    def check_entry(self, spec: ModelSpec, where: str) -> None:
        """DataError (naming ``where``: file and entry) for an entry its models cannot be built from."""
        ...


@runtime_checkable
class NeedsPath(Protocol):
    """A kind whose every model names where its weights come from with ``path:`` (a hub id or a local folder): an
    entry without one is refused when models.yaml is read."""

    needs_path: Literal[True]


@runtime_checkable
class RefusesPath(Protocol):
    """A kind whose models have no weights to load (BM25, TF-IDF, a fusion, an expanded model): an entry with a
    ``path:`` is refused, with the reason."""

    #: why it takes no path, the end of the refusal ("BM25 has no weights")
    no_path_reason: str


def entry_fields(kind: object) -> tuple[str, ...]:
    """The fields of ``kind``'s own an entry may give beside the common ones (:class:`OwnEntryFields`); none for other kinds."""
    return tuple(kind.entry_fields) if isinstance(kind, OwnEntryFields) else ()


def read_block(spec: ModelSpec, fields: dict[str, Any], where: str) -> Any:
    """``spec``'s block from its kind's own fields of the entry (``fields``), after the kind's check of the whole entry
    (:class:`ChecksEntry`); None for a kind without fields of its own."""
    kind = spec.plugin
    if isinstance(kind, ChecksEntry):
        kind.check_entry(spec, where)
    return kind.parse_block(spec, fields, where) if isinstance(kind, OwnEntryFields) else None


def block_entry(spec: ModelSpec) -> dict[str, Any]:
    """``spec``'s own fields as its entry writes them (they enter its identity); ``{}`` for a kind without any."""
    kind = spec.plugin
    return kind.block_entry(spec) if isinstance(kind, OwnEntryFields) else {}


def path_rule(kind: object) -> tuple[bool, bool, str]:
    """``(needs a path, takes one, why not)`` of ``kind``'s entries: :class:`NeedsPath`, :class:`RefusesPath`, or a path
    taken when given."""
    if isinstance(kind, RefusesPath):
        return False, False, kind.no_path_reason
    return isinstance(kind, NeedsPath) and kind.needs_path is True, True, ""


@dataclass(frozen=True)
class ModelSpec:
    """One registered model. ``settings`` is its kind's settings object (every knob that changes its
    output); ``block`` the kind's own entry fields, typed by the kind (None for most kinds).
    ``batch_size`` is a run knob and does not enter the identity. ``trust_remote_code`` is granted
    by the registry's allowlist only (:func:`medbench_core.retrieval.model_registry.load_registry`).
    """

    name: str
    kind: str
    path: str = ""
    revision: str = ""
    settings: KindSettings = field(default_factory=NoSettings)
    batch_size: int = 32
    index: dict[str, Any] = field(default_factory=lambda: {"type": "flat"})
    trust_remote_code: bool = False
    block: Any = None
    # what the entry says the model was trained on (medbench_core.retrieval.training_data); read by the
    # registry with file and line, never part of the identity: it changes what the audit says, not the output
    training_data: Any = None

    @property
    def plugin(self) -> Any:
        """The :class:`~medbench_core.retrieval.kinds.base.Kind` this model is."""
        return get_kind(self.kind)

    @property
    def upstream(self) -> tuple[str, ...]:
        """Names of the models whose runs this model's run is built from (empty for a retriever)."""
        return self.plugin.upstream(self)

    @property
    def hub_id(self) -> str:
        """The hub repository this model's weights come from (``org/name``), or ``""``."""
        return self.plugin.hub_id(self)

    def identity(self) -> dict[str, Any]:
        """Everything that determines the model's output (not batch size or device).

        Settings enter as written when they differ from the kind's defaults, so writing a default
        out keeps the identity (and every key).
        """
        ident = {
            "name": self.name,
            "kind": self.kind,
            "path": self.path,
            "revision": self.revision,
            "settings": self.settings.explicit(),
            "index": self.index,
        }
        ident.update(block_entry(self))
        return ident

    def key(self) -> str:
        """Short stable hash of :meth:`identity`."""
        blob = json.dumps(self.identity(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def with_settings(self, **changes: Any) -> ModelSpec:
        """This entry with some settings changed, read again by its kind (so the change is checked)."""
        entry = self.to_entry()
        entry["settings"] = {**entry.get("settings", {}), **changes}
        return dataclasses.replace(
            parse_entry(entry, where="model entry"), trust_remote_code=self.trust_remote_code, block=self.block, training_data=self.training_data
        )

    def to_entry(self) -> dict[str, Any]:
        """The entry as models.yaml would write it (what :func:`parse_entry` reads back)."""
        entry: dict[str, Any] = {"name": self.name, "kind": self.kind}
        for f in ("path", "revision"):
            if getattr(self, f):
                entry[f] = getattr(self, f)
        if self.settings.explicit():
            entry["settings"] = self.settings.explicit()
        entry.update(batch_size=self.batch_size, index=dict(self.index))
        if self.trust_remote_code:
            entry["trust_remote_code"] = True
        entry.update(block_entry(self))
        return entry


def parse_entry(entry: Mapping[str, Any], where: str = "models.yaml") -> ModelSpec:
    """One models.yaml entry as a :class:`ModelSpec`, checked by its kind.

    Refuses (DataError naming ``where`` and the entry) an unknown kind, an unknown field or setting
    (with the closest known one), a missing path for a kind that loads weights, and a kind's own
    fields that are missing or wrong. ``trust_remote_code`` is taken as given: the registry
    decides it from its allowlist.
    """
    if not isinstance(entry, Mapping) or "name" not in entry or "kind" not in entry:
        raise DataError(f"{where}: a model entry needs at least 'name' and 'kind', not {entry!r}")
    name, kind_name = entry["name"], entry["kind"]
    at = f"{where}: model {name!r}"
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise DataError(f"{at}: use letters, digits, '.', '_', '+' or '-' in a model name (it becomes a partition key)")
    if kind_name not in kind_names():
        raise DataError(f"{at}: unknown kind {kind_name!r}{closest(str(kind_name), kind_names())}; known kinds: {', '.join(kind_names())}")
    kind = get_kind(kind_name)
    own = entry_fields(kind)
    for key in entry:
        if key not in COMMON_FIELDS and key not in own:
            others = [k.name for k in map(get_kind, kind_names()) if key in entry_fields(k)]
            why = f" ('{key}' belongs to kind {', '.join(others)})" if others else closest(str(key), [*COMMON_FIELDS, *own])
            raise DataError(f"{at}: unknown field {key!r} for kind {kind_name}{why}; known fields: {', '.join(sorted([*COMMON_FIELDS, *own]))}")
    path = entry.get("path") or ""
    needs_path, takes_path, no_path_reason = path_rule(kind)
    if needs_path and not path:
        raise DataError(f"{at}: kind {kind_name} needs 'path' (a hub id or a local folder)")
    if path and not takes_path:
        raise DataError(f"{at}: kind {kind_name} takes no 'path'; {no_path_reason}")
    settings = kind.Settings.parse(entry.get("settings"), at, kind_name)
    batch_size = entry.get("batch_size", 32)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise DataError(f"{at}: batch_size must be a positive integer, not {batch_size!r}")
    index = entry.get("index") or {"type": "flat"}
    if not isinstance(index, Mapping):
        raise DataError(f"{at}: index must be a mapping such as {{type: flat}}, not {index!r}")
    spec = ModelSpec(
        name=name,
        kind=kind_name,
        path=str(path),
        revision=str(entry.get("revision") or ""),
        settings=settings,
        batch_size=batch_size,
        index=dict(index),
        trust_remote_code=bool(entry.get("trust_remote_code", False)),
    )
    return dataclasses.replace(spec, block=read_block(spec, {k: entry[k] for k in own if k in entry}, at))


def model_spec(**entry: Any) -> ModelSpec:
    """:func:`parse_entry` of keyword fields: ``model_spec(name="bm25", kind="bm25", settings={"k1": 0.9})``."""
    return parse_entry(entry, where="model entry")
