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
    ``pooling`` (mean|cls), ``normalize``, ``dtype`` (fp32|fp16|bf16, applied to the weights),
    ``language_prefixes`` ({lang: {query: .., passage: ..}}), ``long_text`` (truncate|chunk) with
    ``chunk_pooling``, ``chunk_size``, ``chunk_stride`` (:mod:`medbench_core.chunking`),
    ``instructions`` ({task name | task type | default: instruction}) with ``query_template``
    (:mod:`medbench_core.instructions`), and for BM25 ``k1``, ``b``, ``method``, ``stopwords``,
    ``stemmer``, ``language_analyzers`` ({lang: {stopwords, stemmer}}); for open_clip ``architecture``, ``checkpoint``, ``fusion``, ``fusion_weight``.
    ``batch_size`` is a run knob and does not enter the identity. ``trust_remote_code`` lets
    the model run code shipped in its repository; :func:`load_registry` grants it only to ids on
    the registry's ``trust_remote_code`` allowlist.

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
    trust_remote_code: bool = False
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
        """Everything that determines the model's output (not batch size or device).

        ``long_text: truncate`` written out is the default spelled out: it is left out, so the
        entry keeps the identity (and the artifacts) it had without it.
        """
        settings = self.settings
        if settings.get("long_text") == "truncate":
            settings = {k: v for k, v in settings.items() if k != "long_text"}
        ident = {
            "name": self.name,
            "kind": self.kind,
            "path": self.path,
            "revision": self.revision,
            "settings": settings,
            "index": self.index,
        }
        if self.kind == "expanded":  # only here, so the other kinds keep their keys
            ident.update({f: getattr(self, f) for f in _EXPANDED_FIELDS})
        return ident

    @property
    def hub_id(self) -> str:
        """The hub repository this model's weights come from (``org/name``), or ``""``."""
        from medbench_core.hub import is_repo_id

        ckpt = str(self.settings.get("checkpoint") or self.path or "")
        if self.kind == "open_clip":
            return ckpt[len("hf-hub:") :] if ckpt.startswith("hf-hub:") else ""
        return self.path if self.kind in ("sentence-transformers", "transformers") and is_repo_id(self.path) else ""

    def key(self) -> str:
        """Short stable hash of :meth:`identity`."""
        blob = json.dumps(self.identity(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_registry(path: str | Path) -> list[ModelSpec]:
    """Read ``models.yaml``: a mapping ``models: [ {name, kind, path, revision, settings}, ...]``.

    A top-level ``trust_remote_code: [org/name, ...]`` lists the hub ids whose repository code
    may run: their specs get ``trust_remote_code``; an entry asking for it whose id is not on the
    list is refused. Errors name the file and the entry at fault.
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
    allow = remote_code_allowlist(doc, path)
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
            spec = ModelSpec(**{**entry, "settings": entry.get("settings") or {}, "revision": str(entry.get("revision") or "")})
        except TypeError as exc:
            raise DataError(f"{path}: models[{i}] ({entry['name']}): {exc}") from exc
        except DataError as exc:
            raise DataError(f"{path}: {exc}") from exc
        hub_id = spec.hub_id
        if spec.trust_remote_code and hub_id not in allow:
            raise DataError(
                f"{path}: model {spec.name!r} asks for trust_remote_code but {hub_id or spec.path or spec.name!r} is not on the "
                "top-level trust_remote_code allowlist; add the hub id there after reading its code"
            )
        if hub_id and hub_id in allow:
            spec = dataclasses.replace(spec, trust_remote_code=True)
        specs.append(spec)
    _check_expanded(specs, doc, path)
    return specs


def remote_code_allowlist(doc: dict[str, Any], path: Path) -> frozenset[str]:
    """The ``trust_remote_code`` list of a registry document (hub ids)."""
    raw = doc.get("trust_remote_code") or []
    if not isinstance(raw, list) or not all(isinstance(x, str) and "/" in x for x in raw):
        raise DataError(f"{path}: trust_remote_code must be a list of hub ids (org/name)")
    return frozenset(raw)


def pin_revision(spec: ModelSpec, *, online: bool = False, cache_dir: str | Path | None = None) -> ModelSpec:
    """``spec`` with its hub revision resolved to a commit sha (the registration step).

    A model without a hub id is returned as it is. A hub id with no revision is resolved from
    ``main``. Offline, the local hub cache must hold the ref; online, the hub is asked.
    """
    hub_id = spec.hub_id
    if not hub_id:
        return spec
    from medbench_core.hub import resolve_revision

    try:
        sha = resolve_revision(hub_id, spec.revision or "main", repo_type="model", online=online, cache_dir=cache_dir)
    except DataError as exc:
        raise DataError(f"model {spec.name}: {exc}") from exc
    return dataclasses.replace(spec, revision=sha)


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
