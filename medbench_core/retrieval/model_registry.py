"""Model specifications and the model registry file (``models.yaml``).

A model is an entry, not code: name, kind, hub id or local path, revision and the settings
that change its vectors. Adding a model means adding an entry.

Some kinds build their run from other models' runs (*derived* kinds, :data:`DERIVED_KINDS`):

- ``cross-encoder`` re-scores the top ``depth`` documents of one upstream run:
  ``rerank: {upstream: bm25, depth: 100}`` (``path``: the cross-encoder's folder or hub id).
- ``fusion`` combines two or more runs: ``fusion: {method: rrf, k: 60, runs: [bm25, all-MiniLM-L6-v2]}``
  or ``fusion: {method: wsum, norm: min-max, runs: [...], weights: [0.3, 0.7]}``.
- ``expanded`` runs its ``retriever`` on queries expanded by an entry of ``expansions:``
  (:mod:`medbench_core.retrieval.expansion`); a LameR expansion also reads an upstream run.

Their upstream names must be registered models and must not lead back to the entry itself;
:func:`load_registry` checks both, and :func:`upstream_order` lists what a derived model needs,
dependencies first. The computations live in :mod:`medbench_core.retrieval.derived`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError
from medbench_core.yaml_file import read_yaml_mapping

KINDS = ("bm25", "sentence-transformers", "transformers", "open_clip", "cross-encoder", "fusion", "expanded")
NEEDS_PATH = ("sentence-transformers", "transformers", "cross-encoder")
# Derived kinds build their run from other models' runs: kind -> the entry's field naming them.
DERIVED_KINDS = {"cross-encoder": "rerank", "fusion": "fusion", "expanded": "retriever"}
FUSION_METHODS = ("rrf", "wsum")
FUSION_NORMS = ("min-max", "max", "zmuv", "none")
DEFAULT_BASELINE = "bm25"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_EXPANDED_FIELDS = ("retriever", "expansion", "combine", "repeat_query")


@dataclass(frozen=True)
class ModelSpec:
    """One registered model. ``settings`` holds every knob that changes its output vectors.

    Known settings (all optional): ``query_prefix``, ``passage_prefix``, ``max_length``,
    ``pooling`` (mean|cls), ``normalize``, ``dtype`` (fp32|fp16|bf16, applied to the weights),
    ``language_prefixes`` ({lang: {query: .., passage: ..}}), ``long_text`` (truncate|chunk) with
    ``chunk_pooling``, ``chunk_size``, ``chunk_stride`` (:mod:`medbench_core.retrieval.chunking`),
    ``instructions`` ({task name | task type | default: instruction}) with ``query_template``
    (:mod:`medbench_core.retrieval.instructions`), and for BM25 ``k1``, ``b``, ``method``, ``stopwords``,
    ``stemmer``, ``language_analyzers`` ({lang: {stopwords, stemmer}}); for open_clip ``architecture``, ``checkpoint``, ``fusion``, ``fusion_weight``.
    ``batch_size`` is a run knob and does not enter the identity. ``trust_remote_code`` lets
    the model run code shipped in its repository; :func:`load_registry` grants it only to ids on
    the registry's ``trust_remote_code`` allowlist. ``rerank`` and ``fusion`` are the blocks of the
    derived kinds (see the module docstring), stored with defaults filled in.

    Kind ``expanded`` is a retriever (``retriever``: another entry) run on expanded queries
    (``expansion``: an entry of the ``expansions:`` section), combined by ``combine``
    (concat | replace | mean; R2MED's default for the method and retriever when left out) with
    ``repeat_query`` and, for dense concat, ``settings.separator``; see
    :mod:`medbench_core.retrieval.expansion.combine`.
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
    rerank: dict[str, Any] = field(default_factory=dict)
    fusion: dict[str, Any] = field(default_factory=dict)
    # Set by load_registry for an expanded model whose expansion is built from another model's run (LameR).
    expansion_upstream: str = field(default="", init=False, compare=False, repr=False)

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
        else:
            given = [f for f in _EXPANDED_FIELDS if getattr(self, f) not in ("", None)]
            if given:
                raise DataError(f"model {self.name}: {given} are for kind expanded only")
        if self.kind in NEEDS_PATH and not self.path:
            raise DataError(f"model {self.name}: kind {self.kind} needs 'path' (a hub id or a local folder)")
        for kind, block in DERIVED_KINDS.items():
            if getattr(self, block) and self.kind != kind:
                raise DataError(f"model {self.name}: '{block}' belongs to kind {kind}, not {self.kind}")
        if self.kind == "cross-encoder":
            object.__setattr__(self, "rerank", _rerank_block(self.name, self.rerank))
        elif self.kind == "fusion":
            object.__setattr__(self, "fusion", _fusion_block(self.name, self.fusion))

    @property
    def upstream(self) -> tuple[str, ...]:
        """Names of the models whose runs this model's run is built from (empty for retrievers)."""
        if self.kind == "cross-encoder":
            return (self.rerank["upstream"],)
        if self.kind == "fusion":
            return tuple(self.fusion["runs"])
        if self.kind == "expanded":  # its retriever, and the run LameR's expansion reads
            return tuple(dict.fromkeys(n for n in (self.retriever, self.expansion_upstream) if n))
        return ()

    @property
    def derived(self) -> bool:
        """True when the run is built from upstream runs rather than from the corpus."""
        return self.kind in DERIVED_KINDS

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
        # Only when set, so that the identity (and every key) of the other kinds stays as it was.
        for block in ("rerank", "fusion"):
            if getattr(self, block):
                ident[block] = getattr(self, block)
        if self.kind == "expanded":
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
        """The entry's fields (what ``ModelSpec(**d)`` takes back)."""
        return {f.name: dataclasses.asdict(self)[f.name] for f in dataclasses.fields(self) if f.init}


def _positive_int(model: str, where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DataError(f"model {model}: {where} must be a positive integer, not {value!r}")
    return value


def _rerank_block(model: str, block: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(block, dict) or not block:
        raise DataError(f"model {model}: kind cross-encoder needs 'rerank: {{upstream: <model>, depth: <n>}}'")
    unknown = sorted(set(block) - {"upstream", "depth"})
    if unknown:
        raise DataError(f"model {model}: rerank has unknown field(s) {unknown}; known: ['depth', 'upstream']")
    up = block.get("upstream")
    if not isinstance(up, str) or not up:
        raise DataError(f"model {model}: rerank.upstream must name the registered model whose run is reranked")
    return {"upstream": up, "depth": _positive_int(model, "rerank.depth", block.get("depth", 100))}


def _fusion_block(model: str, block: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(block, dict) or not block:
        raise DataError(f"model {model}: kind fusion needs 'fusion: {{method: rrf, runs: [<model>, <model>]}}'")
    unknown = sorted(set(block) - {"method", "k", "runs", "weights", "norm"})
    if unknown:
        raise DataError(f"model {model}: fusion has unknown field(s) {unknown}; known: ['k', 'method', 'norm', 'runs', 'weights']")
    method = block.get("method", "rrf")
    if method not in FUSION_METHODS:
        raise DataError(f"model {model}: fusion.method {method!r} unknown; use one of {FUSION_METHODS}")
    runs = block.get("runs")
    if not isinstance(runs, list) or len(runs) < 2 or not all(isinstance(r, str) and r for r in runs):
        raise DataError(f"model {model}: fusion.runs must list at least two registered model names, not {runs!r}")
    if len(set(runs)) != len(runs):
        raise DataError(f"model {model}: fusion.runs names a model twice: {runs}")
    if method == "rrf":
        if "weights" in block or "norm" in block:
            raise DataError(f"model {model}: fusion method rrf takes 'k' only; 'weights' and 'norm' belong to method wsum")
        return {"method": "rrf", "k": _positive_int(model, "fusion.k", block.get("k", 60)), "runs": list(runs)}
    if "k" in block:
        raise DataError(f"model {model}: fusion method wsum takes 'norm' and 'weights'; 'k' belongs to method rrf")
    norm = block.get("norm", "min-max")
    if norm not in FUSION_NORMS:
        raise DataError(f"model {model}: fusion.norm {norm!r} unknown; use one of {FUSION_NORMS}")
    weights = block.get("weights", [1.0] * len(runs))
    if (
        not isinstance(weights, list)
        or len(weights) != len(runs)
        or not all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 for w in weights)
    ):
        raise DataError(f"model {model}: fusion.weights must give one number >= 0 per run ({len(runs)}), not {weights!r}")
    return {"method": "wsum", "norm": norm, "runs": list(runs), "weights": [float(w) for w in weights]}


def check_upstreams(specs: list[ModelSpec], where: str = "models.yaml") -> None:
    """Raise DataError when a derived model names an unregistered upstream or reaches itself."""
    by_name = {s.name: s for s in specs}
    for s in specs:
        for up in s.upstream:
            if up == s.name:
                raise DataError(f"{where}: model {s.name!r} ({s.kind}) names itself as an upstream run")
            if up not in by_name:
                raise DataError(f"{where}: model {s.name!r} ({s.kind}) needs the run of {up!r}, which is not in the registry; known: {sorted(by_name)}")
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = path[path.index(name):] + [name]
            raise DataError(f"{where}: models {' -> '.join(cycle)} form a cycle of upstream runs; a run cannot be built from itself")
        state[name] = 1
        for up in by_name[name].upstream:
            visit(up, path + [name])
        state[name] = 2

    for s in specs:
        visit(s.name, [])


def upstream_order(name: str, specs: list[ModelSpec]) -> list[str]:
    """Every model whose run ``name``'s run is built from, directly or not, each after its own upstreams.

    Empty for a retriever. Ties keep registry order, so the order is stable.
    """
    by_name = {s.name: s for s in specs}
    if name not in by_name:
        raise DataError(f"model {name!r} is not in the registry; known: {sorted(by_name)}")
    check_upstreams(specs)
    out: list[str] = []

    def visit(n: str) -> None:
        for up in by_name[n].upstream:
            if up not in out:
                visit(up)
                out.append(up)

    visit(name)
    return out


def evaluation_order(specs: list[ModelSpec]) -> list[str]:
    """Every registered model, each after the models whose runs it is built from (registry order otherwise)."""
    check_upstreams(specs)
    out: list[str] = []
    for s in specs:
        for n in [*upstream_order(s.name, specs), s.name]:
            if n not in out:
                out.append(n)
    return out


def load_baseline(path: str | Path, specs: list[ModelSpec] | None = None) -> str:
    """The registry's ``baseline:`` (default ``bm25``), the model every other is tested against.

    Raises DataError naming the file when the baseline is not a registered model.
    """
    path = Path(path)
    doc = read_yaml_mapping(path, "model registry")
    specs = specs if specs is not None else load_registry(path)
    base = doc.get("baseline", DEFAULT_BASELINE)
    names = [s.name for s in specs]
    if base not in names:
        raise DataError(f"{path}: baseline {base!r} is not a registered model; set 'baseline:' to one of {names}")
    return base


def load_registry(path: str | Path) -> list[ModelSpec]:
    """Read ``models.yaml``: a mapping ``models: [ {name, kind, path, revision, settings}, ...]``.

    A top-level ``trust_remote_code: [org/name, ...]`` lists the hub ids whose repository code
    may run: their specs get ``trust_remote_code``; an entry asking for it whose id is not on the
    list is refused. Derived models (:data:`DERIVED_KINDS`) must name registered upstream models
    without a cycle; a ``baseline:`` given must be a registered model. Errors name the file and
    the entry at fault.
    """
    path = Path(path)
    doc = read_yaml_mapping(path, "model registry")
    entries = doc.get("models")
    if not isinstance(entries, list):
        raise DataError(f"{path}: expected a top-level 'models:' list")
    specs: list[ModelSpec] = []
    seen: set[str] = set()
    allow = remote_code_allowlist(doc, path)
    known = {f.name for f in dataclasses.fields(ModelSpec) if f.init}
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
            raise DataError(f"{path}: models[{i}]: {exc}") from exc
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
    check_upstreams(specs, where=str(path))
    base = doc.get("baseline")
    if base is not None and base not in seen:
        raise DataError(f"{path}: baseline {base!r} is not a registered model; set 'baseline:' to one of {[s.name for s in specs]}")
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
    from medbench_core.retrieval.expansion.spec import parse_expansions

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
        from medbench_core.retrieval.expansion.rules import resolve_combine

        try:
            resolve_combine(s, r, expansions[s.expansion].method)  # refuses a combination the retriever cannot do
        except DataError as exc:
            raise DataError(f"{path}: {exc}") from exc
    for e in expansions.values():
        if e.upstream and e.upstream not in by_name:
            raise DataError(f"{path}: expansion {e.name!r}: upstream {e.upstream!r} is not an entry of 'models:'")
    for s in specs:
        if s.kind == "expanded" and expansions[s.expansion].upstream:
            object.__setattr__(s, "expansion_upstream", expansions[s.expansion].upstream)
