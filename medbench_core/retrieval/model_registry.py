"""The model registry file (``models.yaml``): its entries, their upstreams, the baseline and the remote-code allowlist.

A model is an entry, not code: name, kind, hub id or local path, revision and the settings that
change its output. Each entry is read by its kind (:mod:`medbench_core.retrieval.kinds`), which
refuses an unknown field or setting naming the closest known one. Some kinds build their run from
other models' runs (derived kinds: fusion, cross-encoder, expanded); their upstream names must be
registered models and must not lead back to the entry itself: :func:`load_registry` checks both,
and :func:`upstream_order` lists what a derived model needs, dependencies first.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError, config_errors
from medbench_core.retrieval.kinds.base import model_kind
from medbench_core.retrieval.kinds.capabilities import complete, grant_trust
from medbench_core.retrieval.kinds.spec import COMMON_FIELDS, ModelSpec, model_spec, parse_entry  # noqa: F401  (re-exported)
from medbench_core.retrieval.training_data import read_training_data
from medbench_core.yaml_file import read_yaml_mapping

DEFAULT_BASELINE = "bm25"


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
            cycle = path[path.index(name) :] + [name]
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


@config_errors
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


@config_errors
def load_registry(path: str | Path) -> list[ModelSpec]:
    """Read ``models.yaml``: a mapping ``models: [ {name, kind, path, revision, settings, ...}, ...]``.

    Each entry is read by its kind (:func:`~medbench_core.retrieval.kinds.spec.parse_entry`): an
    unknown kind, field or setting is refused naming the file, the entry and the closest known key.
    A top-level ``trust_remote_code: [org/name, ...]`` lists the hub ids whose repository code
    may run: their specs get ``trust_remote_code``; an entry asking for it whose id is not on the
    list is refused. A top-level ``trust_code: [{path, sha256}, ...]`` lists the code folders (or
    ``pkg:<package>``) whose classes may run, by content hash: each kind checks its entries against
    it (:class:`~medbench_core.retrieval.kinds.capabilities.RunsTrustedCode`). Derived models must name
    registered upstream models without a cycle; a ``baseline:`` given must be a registered model.
    """
    path = Path(path)
    doc = read_yaml_mapping(path, "model registry")
    entries = doc.get("models")
    if not isinstance(entries, list):
        raise DataError(f"{path}: expected a top-level 'models:' list")
    specs: list[ModelSpec] = []
    seen: set[str] = set()
    allow = remote_code_allowlist(doc, path)
    trusted_code = code_allowlist(doc, path)
    refused: list[str] = []  # every entry whose code the trust_code allowlist refuses, named in one pass
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "name" not in entry or "kind" not in entry:
            raise DataError(f"{path}: models[{i}] needs at least 'name' and 'kind'")
        if entry["name"] in seen:
            raise DataError(f"{path}: model name {entry['name']!r} appears twice")
        seen.add(entry["name"])
        spec = parse_entry(entry, where=str(path))
        model_kind(spec)
        declared = read_training_data(entry.get("training_data", ...), models_file=path, index=i, model=spec.name)
        spec = dataclasses.replace(spec, training_data=declared)
        hub_id = spec.hub_id
        if spec.trust_remote_code and hub_id not in allow:
            raise DataError(
                f"{path}: model {spec.name!r} asks for trust_remote_code but {hub_id or spec.path or spec.name!r} is not on the "
                "top-level trust_remote_code allowlist; add the hub id there after reading its code"
            )
        if hub_id and hub_id in allow:
            spec = dataclasses.replace(spec, trust_remote_code=True)
        try:
            specs.append(grant_trust(spec, trusted_code, str(path)))
        except DataError as exc:
            refused.append(str(exc))
    if len(refused) == 1:
        raise DataError(refused[0])
    if refused:
        raise DataError(f"{path}: {len(refused)} model entries refused (the code each would run, by trust_code):\n" + "\n".join(refused))
    specs = _complete(specs, doc, path)
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


def code_allowlist(doc: dict[str, Any], path: Path) -> dict[str, str]:
    """The ``trust_code`` list of a registry document: code folder (or ``pkg:<package>``) as written -> its sha256."""
    import re

    raw = doc.get("trust_code") or []
    if not isinstance(raw, list):
        raise DataError(f"{path}: trust_code must be a list of {{path: <code folder or pkg:name>, sha256: <64 hex>}}")
    out: dict[str, str] = {}
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) != {"path", "sha256"} or not isinstance(item["path"], str) or not item["path"]:
            raise DataError(f"{path}: trust_code[{i}] must be {{path: <code folder or pkg:name>, sha256: <64 hex>}}, not {item!r}")
        if not isinstance(item["sha256"], str) or not re.fullmatch(r"[0-9a-fA-F]{64}", item["sha256"]):
            raise DataError(f"{path}: trust_code[{i}] ({item['path']}): sha256 must be 64 hex digits (the refusal of an unlisted folder prints it)")
        out[item["path"]] = item["sha256"].lower()
    return out


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


def _complete(specs: list[ModelSpec], doc: dict[str, Any], path: Path) -> list[ModelSpec]:
    """Each entry checked by its kind against the whole registry (upstream entries, ``expansions:``)."""
    from medbench_core.retrieval.expansion.spec import parse_expansions

    expansions = {e.name: e for e in parse_expansions(doc.get("expansions"), path)}
    by_name = {s.name: s for s in specs}
    for e in expansions.values():
        if e.upstream and e.upstream not in by_name:
            raise DataError(f"{path}: expansion {e.name!r}: upstream {e.upstream!r} is not an entry of 'models:'")
    return [complete(s, by_name, expansions, str(path)) for s in specs]
