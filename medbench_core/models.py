"""Model specifications and the model registry file (``models.yaml``).

A model is an entry, not code: name, kind, hub id or local path, revision and the settings
that change its vectors. Adding a model means adding an entry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from medbench_core.errors import DataError

KINDS = ("bm25", "sentence-transformers", "transformers", "open_clip", "expanded")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_EXPANDED_FIELDS = ("retriever", "expansion", "combine", "repeat_query")


@dataclass(frozen=True)
class ModelSpec:
    """One registered model. ``settings`` holds every knob that changes its output vectors.

    Known settings (all optional): ``query_prefix``, ``passage_prefix``, ``max_length``,
    ``pooling`` (mean|cls), ``normalize``, ``dtype``, ``language_prefixes``
    ({lang: {query: .., passage: ..}}), and for BM25 ``k1``, ``b``, ``method``, ``stopwords``,
    ``stemmer``, ``language_analyzers`` ({lang: {stopwords, stemmer}}); for open_clip ``architecture``, ``checkpoint``, ``fusion``, ``fusion_weight``.
    ``batch_size`` is a run knob and does not enter the identity.

    Kind ``expanded`` is a retriever (``retriever``: another entry) run on expanded queries
    (``expansion``: an entry of the ``expansions:`` section), combined by ``combine``
    (concat | replace | mean; R2MED's default for the method and retriever when left out) with
    ``repeat_query`` and, for dense concat, ``settings.separator``; see
    :mod:`medbench_core.expansion.combine`.
    """

    name: str
    kind: str
    path: str = ""
    revision: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 32
    index: dict[str, Any] = field(default_factory=lambda: {"type": "flat"})
    retriever: str = ""
    expansion: str = ""
    combine: str = ""
    repeat_query: int | None = None

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise DataError(f"model name {self.name!r}: use letters, digits, '.', '_', '+' or '-' (it becomes a partition key)")
        if self.kind not in KINDS:
            raise DataError(f"model {self.name}: unknown kind {self.kind!r}; known kinds: {', '.join(KINDS)}")
        if self.kind == "expanded":
            if not self.retriever or not self.expansion:
                raise DataError(f"model {self.name}: kind expanded needs 'retriever' (a model entry) and 'expansion' (an entry of 'expansions:')")
            if self.path:
                raise DataError(f"model {self.name}: kind expanded takes no 'path'; its retriever's entry names the model")
            return
        given = [f for f in _EXPANDED_FIELDS if getattr(self, f) not in ("", None)]
        if given:
            raise DataError(f"model {self.name}: {given} are for kind expanded only")
        if self.kind != "bm25" and not self.path and self.kind != "open_clip":
            raise DataError(f"model {self.name}: kind {self.kind} needs 'path' (a hub id or a local folder)")

    def identity(self) -> dict[str, Any]:
        """Everything that determines the model's output (not batch size or device)."""
        ident = {
            "name": self.name,
            "kind": self.kind,
            "path": self.path,
            "revision": self.revision,
            "settings": self.settings,
            "index": self.index,
        }
        if self.kind == "expanded":  # only here, so the other kinds keep their keys
            ident.update({f: getattr(self, f) for f in _EXPANDED_FIELDS})
        return ident

    def key(self) -> str:
        """Short stable hash of :meth:`identity`."""
        blob = json.dumps(self.identity(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_registry(path: str | Path) -> list[ModelSpec]:
    """Read ``models.yaml``: a mapping ``models: [ {name, kind, path, revision, settings}, ...]``.

    Errors name the file and the entry at fault.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: model registry not found")
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise DataError(f"{path}: not valid YAML ({exc})") from exc
    entries = doc.get("models")
    if not isinstance(entries, list):
        raise DataError(f"{path}: expected a top-level 'models:' list")
    specs: list[ModelSpec] = []
    seen: set[str] = set()
    known = {f.name for f in dataclasses.fields(ModelSpec)}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "name" not in entry or "kind" not in entry:
            raise DataError(f"{path}: models[{i}] needs at least 'name' and 'kind'")
        unknown = sorted(set(entry) - known)
        if unknown:
            raise DataError(f"{path}: model {entry['name']!r} has unknown field(s) {unknown}; known: {sorted(known)}")
        if entry["name"] in seen:
            raise DataError(f"{path}: model name {entry['name']!r} appears twice")
        seen.add(entry["name"])
        try:
            specs.append(ModelSpec(**{**entry, "settings": entry.get("settings") or {}, "revision": str(entry.get("revision") or "")}))
        except TypeError as exc:
            raise DataError(f"{path}: models[{i}] ({entry['name']}): {exc}") from exc
        except DataError as exc:
            raise DataError(f"{path}: {exc}") from exc
    _check_expanded(specs, doc, path)
    return specs


def _check_expanded(specs: list[ModelSpec], doc: dict[str, Any], path: Path) -> None:
    """An expanded entry names a plain retriever of this file and an expansion of its ``expansions:``."""
    from medbench_core.expansion.spec import parse_expansions

    expansions = {e.name: e for e in parse_expansions(doc.get("expansions"), path)}
    by_name = {s.name: s for s in specs}
    for s in specs:
        if s.kind != "expanded":
            continue
        r = by_name.get(s.retriever)
        if r is None or r.kind == "expanded":
            raise DataError(f"{path}: model {s.name!r}: retriever {s.retriever!r} must be another, non-expanded entry of 'models:'")
        if s.expansion not in expansions:
            raise DataError(f"{path}: model {s.name!r}: expansion {s.expansion!r} is not in 'expansions:' (known: {sorted(expansions)})")
        from medbench_core.expansion.combine import resolve_combine

        try:
            resolve_combine(s, r, expansions[s.expansion].method)  # refuses a combination the retriever cannot do
        except DataError as exc:
            raise DataError(f"{path}: {exc}") from exc
    for e in expansions.values():
        if e.upstream and e.upstream not in by_name:
            raise DataError(f"{path}: expansion {e.name!r}: upstream {e.upstream!r} is not an entry of 'models:'")
