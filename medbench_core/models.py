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

KINDS = ("bm25", "sentence-transformers", "transformers", "open_clip")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class ModelSpec:
    """One registered model. ``settings`` holds every knob that changes its output vectors.

    Known settings (all optional): ``query_prefix``, ``passage_prefix``, ``max_length``,
    ``pooling`` (mean|cls), ``normalize``, ``dtype``, ``language_prefixes``
    ({lang: {query: .., passage: ..}}), and for BM25 ``k1``, ``b``, ``method``, ``stopwords``,
    ``stemmer``, ``language_analyzers`` ({lang: {stopwords, stemmer}}); for open_clip ``architecture``, ``checkpoint``, ``fusion``, ``fusion_weight``.
    ``batch_size`` is a run knob and does not enter the identity.
    """

    name: str
    kind: str
    path: str = ""
    revision: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 32
    index: dict[str, Any] = field(default_factory=lambda: {"type": "flat"})

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise DataError(f"model name {self.name!r}: use letters, digits, '.', '_' or '-' (it becomes a partition key)")
        if self.kind not in KINDS:
            raise DataError(f"model {self.name}: unknown kind {self.kind!r}; known kinds: {', '.join(KINDS)}")
        if self.kind != "bm25" and not self.path and self.kind != "open_clip":
            raise DataError(f"model {self.name}: kind {self.kind} needs 'path' (a hub id or a local folder)")

    def identity(self) -> dict[str, Any]:
        """Everything that determines the model's output (not batch size or device)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "path": self.path,
            "revision": self.revision,
            "settings": self.settings,
            "index": self.index,
        }

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
    return specs
