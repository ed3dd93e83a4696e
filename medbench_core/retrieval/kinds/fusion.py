"""Kind ``fusion``: two or more registered models' runs fused into one (ranx's definitions,
:func:`medbench_core.retrieval.fuse_rerank.fuse`).

``fusion: {method: rrf, k: 60, runs: [bm25, all-MiniLM-L6-v2]}`` or
``fusion: {method: wsum, norm: min-max, runs: [...], weights: [0.3, 0.7]}``. It loads no weights
and reads no record itself: it is applicable wherever every fused model is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.fuse_rerank import FUSION_METHODS, FUSION_NORMS, fuse
from medbench_core.retrieval.kinds.derived_base import DerivedKind
from medbench_core.retrieval.kinds.settings import closest
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.kinds.stage_inputs import Input
from medbench_core.taskdata.task import Task


@dataclass(frozen=True)
class FusionBlock:
    """A fusion entry's ``fusion:`` block, with defaults filled in (``k`` for rrf; ``norm`` and ``weights`` for wsum)."""

    method: str
    runs: tuple[str, ...]
    k: int | None = None
    norm: str | None = None
    weights: tuple[float, ...] | None = None

    def to_entry(self) -> dict[str, Any]:
        out = {"method": self.method, "runs": list(self.runs)}
        if self.method == "rrf":
            out["k"] = self.k
        else:
            out.update(norm=self.norm, weights=list(self.weights or ()))
        return out


def positive_int(where: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DataError(f"{where}: {name} must be a positive integer, not {value!r}")
    return value


class FusionKind(DerivedKind):
    name = "fusion"
    version = "1"
    entry_fields = ("fusion",)
    no_path_reason = "a fusion has no weights; its runs name the models it fuses"
    reads = frozenset({"text", "image"})  # reads no record itself

    def parse_block(self, spec: ModelSpec, fields: dict[str, Any], where: str) -> FusionBlock:
        block = fields.get("fusion")
        if not isinstance(block, dict) or not block:
            raise DataError(f"{where}: kind fusion needs 'fusion: {{method: rrf, runs: [<model>, <model>]}}'")
        known = ["k", "method", "norm", "runs", "weights"]
        for key in block:
            if key not in known:
                raise DataError(f"{where}: fusion has unknown field {key!r}{closest(str(key), known)}; known: {known}")
        method = block.get("method", "rrf")
        if method not in FUSION_METHODS:
            raise DataError(f"{where}: fusion.method {method!r} unknown; use one of {FUSION_METHODS}")
        runs = block.get("runs")
        if not isinstance(runs, list) or len(runs) < 2 or not all(isinstance(r, str) and r for r in runs):
            raise DataError(f"{where}: fusion.runs must list at least two registered model names, not {runs!r}")
        if len(set(runs)) != len(runs):
            raise DataError(f"{where}: fusion.runs names a model twice: {runs}")
        if method == "rrf":
            if "weights" in block or "norm" in block:
                raise DataError(f"{where}: fusion method rrf takes 'k' only; 'weights' and 'norm' belong to method wsum")
            return FusionBlock("rrf", tuple(runs), k=positive_int(where, "fusion.k", block.get("k", 60)))
        if "k" in block:
            raise DataError(f"{where}: fusion method wsum takes 'norm' and 'weights'; 'k' belongs to method rrf")
        norm = block.get("norm", "min-max")
        if norm not in FUSION_NORMS:
            raise DataError(f"{where}: fusion.norm {norm!r} unknown; use one of {FUSION_NORMS}")
        weights = block.get("weights", [1.0] * len(runs))
        if (
            not isinstance(weights, list)
            or len(weights) != len(runs)
            or not all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 for w in weights)
        ):
            raise DataError(f"{where}: fusion.weights must give one number >= 0 per run ({len(runs)}), not {weights!r}")
        return FusionBlock("wsum", tuple(runs), norm=norm, weights=tuple(float(w) for w in weights))

    def block_entry(self, spec: ModelSpec) -> dict[str, Any]:
        return {"fusion": spec.block.to_entry()}

    def upstream(self, spec: ModelSpec) -> tuple[str, ...]:
        return spec.block.runs

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        return {**super().mteb_meta(spec, registry), "model_type": ["hybrid"]}

    def compute(
        self, spec: ModelSpec, task: Task, inputs: Mapping[str, Input], out: Path, *, k: int, device: str = "cpu", progress: bool = False, model: Any = None
    ) -> tuple[pl.DataFrame, dict[str, Any]]:
        f = spec.block
        runs = {name: inputs[name].run for name in f.runs}
        if f.method == "rrf":
            run = fuse(runs, "rrf", k=f.k, top_k=k)
        else:
            run = fuse(runs, "wsum", weights=list(f.weights), norm=f.norm, top_k=k)
        return run, {"fusion": f.to_entry()}


KIND = FusionKind()
