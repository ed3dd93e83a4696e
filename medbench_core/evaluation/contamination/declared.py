"""What each model declares it was trained on, its upstreams' declarations included, and MTEB's.

A model's own declaration is its models.yaml ``training_data:`` (medbench_core.retrieval.training_data).
``{mteb: ORG/NAME}`` items, and a model without the field whose hub id mteb knows, add
``mteb.get_model_meta(NAME, fetch_from_hf=False).get_training_datasets()``: the model's
``training_datasets`` with the tasks mteb lists as similar to them, the set mteb's own zero-shot
figure uses (mteb/models/model_meta.py, ``ModelMeta.is_zero_shot_on``; read offline from the
installed mteb 2.26.24, which for all-MiniLM-L6-v2 declares MSMARCO, NQ and 8 more, 24 with the
similar tasks). A derived model (fusion, reranking, expanded queries) has its own declaration
plus every upstream's: trained on what any of them was trained on, and *silent* (declares
nothing) when any of them is. A derived model without weights of its own (fusion, expanded
queries: no ``path``) needs no field: it adds nothing; a reranker's weights need theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.derived_base import is_derived
from medbench_core.retrieval.training_data import MANIFEST_FORMS


@lru_cache(maxsize=None)
def mteb_training_datasets(name: str) -> tuple[str, ...] | None:
    """mteb's training datasets of model ``name`` (with similar tasks), read offline; None when mteb
    knows the model but declares nothing; DataError when mteb does not know it."""
    import mteb

    try:
        meta = mteb.get_model_meta(name, fetch_from_hf=False)
    except (KeyError, ValueError) as exc:
        raise DataError(f"mteb {mteb.__version__} has no model {name!r} ({' '.join(str(exc).split())[:200]})") from None
    got = meta.get_training_datasets()
    return None if got is None else tuple(sorted(got))


@dataclass(frozen=True)
class Declared:
    """A model's effective declaration. ``names``: declared dataset name -> where it was declared;
    ``manifests``: manifest source label (``texts:/path``, ``images:/path``) -> where; ``silent``:
    the models of its lineage that declare nothing (then the cell is unknown unless evidence says trained)."""

    model: str
    names: dict[str, str] = field(default_factory=dict)
    manifests: dict[str, str] = field(default_factory=dict)
    silent: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        return not self.silent

    def to_json(self) -> dict[str, Any]:
        return {"names": dict(sorted(self.names.items())), "manifests": dict(sorted(self.manifests.items())), "silent": list(self.silent)}


MtebLookup = Callable[[str], "tuple[str, ...] | None"]


def own_declaration(spec: Any, mteb_lookup: MtebLookup = mteb_training_datasets) -> Declared:
    """One model's own declaration (no upstreams): its ``training_data:``, or mteb's entry for its hub id, or silence."""
    td = spec.training_data
    names: dict[str, str] = {}
    manifests: dict[str, str] = {}
    if td is None or not td.declared:
        if is_derived(spec) and not spec.path:
            return Declared(spec.name)  # a fusion, expanded queries: no weights of its own, only its upstreams' (declarations())
        hub = spec.hub_id
        if hub:
            try:
                got = mteb_lookup(hub)
            except DataError:
                got = None
            if got is not None:
                return Declared(spec.name, {n: f"{spec.name}: mteb {hub}" for n in got})
        return Declared(spec.name, silent=(spec.name,))
    for s in td.sources:
        if s.form == "dataset":
            names.setdefault(s.value, f"{spec.name}: models.yaml line {s.line}")
        elif s.form == "mteb":
            try:
                got = mteb_lookup(s.value)
            except DataError as exc:
                raise DataError(f"{td.file}:{s.line}: model {spec.name!r}: training_data: {exc}") from None
            if got is None:
                return Declared(spec.name, silent=(spec.name,))  # mteb knows the model, and not what it was trained on
            for n in got:
                names.setdefault(n, f"{spec.name}: mteb {s.value}")
        elif s.form in MANIFEST_FORMS:
            manifests[f"{s.form}:{s.value}"] = f"{spec.name}: models.yaml line {s.line}"
    return Declared(spec.name, names, manifests)


def declarations(specs: Sequence[Any], mteb_lookup: MtebLookup = mteb_training_datasets, only: Iterable[str] | None = None) -> dict[str, Declared]:
    """Every model's effective declaration: its own and every upstream's (recursively), merged. With ``only``, those
    models' (of ``specs``) and their upstreams' alone: a model nobody asks about is not looked up (``import mteb``
    costs seconds of CPU, and a cold run of bm25 alone has no model that mteb knows)."""
    by_name = {s.name: s for s in specs}
    out: dict[str, Declared] = {}

    def visit(name: str) -> Declared:
        if name in out:
            return out[name]
        d = own_declaration(by_name[name], mteb_lookup)
        names, manifests, silent = dict(d.names), dict(d.manifests), list(d.silent)
        for up in by_name[name].upstream:
            u = visit(up)
            for k, v in u.names.items():
                names.setdefault(k, v)
            for k, v in u.manifests.items():
                manifests.setdefault(k, v)
            silent += [m for m in u.silent if m not in silent]
        out[name] = Declared(name, names, manifests, tuple(silent))
        return out[name]

    for name in by_name if only is None else [n for n in dict.fromkeys(only) if n in by_name]:
        visit(name)
    return out


def manifest_sources(specs: Sequence[Any]) -> list[tuple[str, str]]:
    """Every distinct (kind, resolved path) manifest any model declares, sorted: what each task is audited against."""
    found = {(s.form, s.value) for spec in specs if spec.training_data is not None for s in spec.training_data.sources if s.form in MANIFEST_FORMS}
    return sorted(found)
