"""A registered model's version: everything that changes its results, as one key.

The ``model_spec`` observations (assets/registry.py) record it so that Dagster marks exactly the
changed model's partitions stale; ``medbench run``'s warm path (medbench_cli/uptodate.py) compares
it to decide that nothing changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from medbench_core.errors import MedbenchError
from medbench_core.provenance import artifact_key
from medbench_core.retrieval.expansion.stage import expansion_fingerprint
from medbench_core.retrieval.kinds.base import cached_revision
from medbench_core.retrieval.kinds.capabilities import expansion_name
from medbench_core.retrieval.kinds.derived_base import is_derived
from medbench_core.retrieval.model_registry import ModelSpec, evaluation_order


def model_version(spec: ModelSpec, upstream_versions: Mapping[str, str] | None = None, expansion: Any = None, *, revision: str | None = None) -> str:
    """Data version of a registered model: everything that changes its results.

    A retriever: its identity and weights' revision (recorded as observations of ``model_spec``,
    so that changing one model's settings marks exactly that model's partitions stale; Dagster
    compares upstream data versions). ``revision``: the commit sha a hub model's revision was
    pinned to at registration (a moved branch then gives a new version); by default the revision
    the stages key their artifacts by. A derived model: its identity, its own weights' revision
    (a cross-encoder's), the version of each upstream (``upstream_versions``) and, for an
    expanded model, its expansion's fingerprint (``expansion``).
    """
    if not is_derived(spec):
        return artifact_key(model=spec.identity(), revision=revision or cached_revision(spec))
    own = revision or cached_revision(spec) if spec.plugin.loads_weights else ""
    return artifact_key(model=spec.identity(), revision=own, upstream=dict(upstream_versions or {}), expansion=expansion)


def model_versions(
    specs: Sequence[ModelSpec], expansions: Sequence[Any] = (), tasks: Sequence[str] = (), pins: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """The version of every registered model, upstreams first (:func:`model_version`).

    ``expansions``: the registry's ``expansions:`` entries; ``tasks``: the catalogue's task names
    (an expansion's prompt template and published file may differ per task); ``pins``: hub
    models' pinned revisions by model name (objects with ``sha``). A model whose version cannot
    be computed (e.g. a missing model folder), or one built on such a model, is left out: its
    partitions fail with that error when run.
    """
    by_name = {s.name: s for s in specs}
    by_expansion = {e.name: e for e in expansions}
    pins = pins or {}
    out: dict[str, str] = {}
    for name in evaluation_order(list(specs)):
        spec = by_name[name]
        if any(u not in out for u in spec.upstream):
            continue
        try:
            expansion = None
            if expansion_name(spec):
                e = by_expansion[expansion_name(spec)]
                expansion = {"name": e.name, "tasks": expansion_fingerprint(e, list(tasks), upstream_version=out.get(e.upstream))}
            pin = pins.get(name)
            out[name] = model_version(spec, {u: out[u] for u in spec.upstream}, expansion, revision=getattr(pin, "sha", None))
        except MedbenchError:
            continue
    return out
