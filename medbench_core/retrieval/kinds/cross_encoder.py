"""Kind ``cross-encoder``: a sentence-transformers ``CrossEncoder`` that re-scores the top ``depth``
documents of one upstream run (``rerank: {upstream: bm25, depth: 100}``;
:func:`medbench_core.retrieval.fuse_rerank.rerank`).

``path`` is the cross-encoder's folder, ``pkg:<module>`` or a hub id read from the local hub cache at
its pinned revision, as the text encoders load theirs. Setting: ``max_length``. Reads text only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.dense import resolve_revision_of_path
from medbench_core.retrieval.kinds.derived_base import DerivedKind
from medbench_core.retrieval.kinds.fusion import positive_int
from medbench_core.retrieval.kinds.settings import KindSettings, closest
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.kinds.stage_inputs import Input
from medbench_core.taskdata.task import Task


@dataclass(frozen=True)
class CrossEncoderSettings(KindSettings):
    max_length: int | None = None


@dataclass(frozen=True)
class RerankBlock:
    upstream: str
    depth: int = 100

    def to_entry(self) -> dict[str, Any]:
        return {"upstream": self.upstream, "depth": self.depth}


def load_cross_encoder(spec: ModelSpec, device: str = "cpu", progress: bool | None = False, *, online: bool = False) -> Any:
    """The sentence-transformers ``CrossEncoder`` of ``spec`` (:func:`medbench_core.retrieval.weights.model_folder`)."""
    from sentence_transformers import CrossEncoder

    from medbench_core.progress import library_bars
    from medbench_core.retrieval.weights import check_remote_code, model_folder

    try:
        folder = model_folder(spec, online=online)
    except DataError as exc:
        raise DataError(f"model {spec.name}: cannot load cross-encoder ({exc}); offline runs need a local folder or a cached hub id") from exc
    check_remote_code(spec, folder)
    kwargs: dict[str, Any] = {"device": device}
    if spec.settings.max_length:
        kwargs["max_length"] = int(spec.settings.max_length)
    if spec.trust_remote_code:
        kwargs["trust_remote_code"] = True
    try:
        with library_bars(progress):
            return CrossEncoder(str(folder), **kwargs)
    except (OSError, ValueError) as exc:
        raise DataError(f"model {spec.name}: cannot load cross-encoder {str(folder)!r} ({exc})") from exc


class CrossEncoderKind(DerivedKind):
    name = "cross-encoder"
    packages = ("sentence-transformers", "transformers", "tokenizers", "safetensors", "torch")
    Settings = CrossEncoderSettings
    version = "1"
    entry_fields = ("rerank",)
    needs_path = True
    loads_weights = True

    def parse_block(self, spec: ModelSpec, fields: dict[str, Any], where: str) -> RerankBlock:
        block = fields.get("rerank")
        if not isinstance(block, dict) or not block:
            raise DataError(f"{where}: kind cross-encoder needs 'rerank: {{upstream: <model>, depth: <n>}}'")
        for key in block:
            if key not in ("depth", "upstream"):
                raise DataError(f"{where}: rerank has unknown field {key!r}{closest(str(key), ['depth', 'upstream'])}; known: ['depth', 'upstream']")
        up = block.get("upstream")
        if not isinstance(up, str) or not up:
            raise DataError(f"{where}: rerank.upstream must name the registered model whose run is reranked")
        return RerankBlock(up, positive_int(where, "rerank.depth", block.get("depth", 100)))

    def block_entry(self, spec: ModelSpec) -> dict[str, Any]:
        return {"rerank": spec.block.to_entry()}

    def upstream(self, spec: ModelSpec) -> tuple[str, ...]:
        return (spec.block.upstream,)

    def revision(self, spec: ModelSpec) -> str:
        return resolve_revision_of_path(spec)

    def long_text_params(self, spec: ModelSpec, model: Any = None) -> dict[str, Any]:
        return {"long_text": "truncate", "max_length": None}  # a query-document pair beyond the model's length is cut

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        return {**super().mteb_meta(spec, registry), "framework": ["Sentence Transformers", "PyTorch"], "model_type": ["cross-encoder"]}

    def load(self, spec: ModelSpec, *, device: str = "cpu", progress: bool | None = False, online: bool = False) -> Any:
        return load_cross_encoder(spec, device=device, progress=progress, online=online)

    def check_inputs(self, spec: ModelSpec, task: Task, inputs: Mapping[str, Input]) -> None:
        up = spec.block.upstream
        k = inputs[up].k
        if spec.block.depth > k:
            raise DataError(
                f"model {spec.name}: rerank depth {spec.block.depth} is deeper than upstream run {up!r} (k={k}) on task {task.name}; "
                f"lower rerank.depth to <= {k} or retrieve {up} with k >= {spec.block.depth}"
            )

    def compute(
        self, spec: ModelSpec, task: Task, inputs: Mapping[str, Input], out: Path, *, k: int, device: str = "cpu", progress: bool = False, model: Any = None
    ) -> tuple[pl.DataFrame, dict[str, Any]]:
        from medbench_core.retrieval.fuse_rerank import rerank

        up_name, depth = spec.block.upstream, spec.block.depth
        up = inputs[up_name]
        self.check_inputs(spec, task, inputs)  # before the model loads: a bad depth fails at once
        ce = model if model is not None else self.load(spec, device=device, progress=progress)
        run = rerank(up.run, task, ce, depth, upstream_k=up.k, model=spec.name, upstream=up_name, batch_size=spec.batch_size, progress=progress)
        if k < depth:
            run = run.filter(pl.col("rank") <= k)
        return run, {"rerank": spec.block.to_entry()}


KIND = CrossEncoderKind()
