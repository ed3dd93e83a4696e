"""Kind ``open_clip``: CLIP models that embed records carrying text, an image, or both
(:mod:`medbench_core.retrieval.clip` for the architecture, checkpoint and fusion settings).

Reads every record, so it is applicable to image tasks; it cannot be expanded (an expansion is text
for a text retriever).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.encoder import EncoderKind
from medbench_core.retrieval.kinds.settings import KindSettings
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.weights import DTYPES


@dataclass(frozen=True)
class ClipSettings(KindSettings):
    """``architecture``, ``checkpoint`` (or the entry's ``path``), ``seed`` (random weights), ``fusion``
    (score | embedding) and ``fusion_weight`` (the image side's weight), ``max_aspect_ratio``, prefixes, ``dtype``;
    ``text_revision``: the revision of the Hugging Face text tower / tokenizer repositories an ``hf-hub:``
    config names (BiomedCLIP's ``hf_model_name``), default ``main`` resolved through the hub cache."""

    architecture: str = ""
    checkpoint: str = ""
    seed: int = 0
    fusion: str = "score"
    fusion_weight: float = 0.5
    max_aspect_ratio: float = 50.0
    query_prefix: str = ""
    passage_prefix: str = ""
    language_prefixes: dict = field(default_factory=dict)
    dtype: str | None = None
    text_revision: str = ""

    CHOICES = {"fusion": ("score", "embedding"), "dtype": (None, *DTYPES)}
    HINTS = {
        "long_text": "long_text is for text encoders; CLIP's text tower reads 77 tokens",
        "max_length": "CLIP's text tower reads 77 tokens",
    }

    def check(self, where: str) -> None:
        if not 0.0 <= self.fusion_weight <= 1.0:
            raise DataError(f"{where}: fusion_weight {self.fusion_weight} must lie in [0, 1] (the image side's weight)")
        if self.max_aspect_ratio < 1:
            raise DataError(f"{where}: max_aspect_ratio must be at least 1, not {self.max_aspect_ratio}")


class OpenClipKind(EncoderKind):
    name = "open_clip"
    packages = ("open_clip_torch", "torch", "safetensors", "pillow")
    Settings = ClipSettings
    version = "1"
    reads = frozenset({"text", "image"})

    def check_entry(self, spec: ModelSpec, where: str) -> None:
        from medbench_core.retrieval.clip import bundled_architectures, checkpoint_format_of, clip_settings

        s = clip_settings(spec)
        if not s["architecture"] and not s["checkpoint"].startswith("hf-hub:"):
            raise DataError(f"{where}: settings need 'architecture' (an open_clip model name or one of {bundled_architectures()})")
        try:
            checkpoint_format = checkpoint_format_of(s["checkpoint"])
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from exc
        if spec.settings.text_revision and checkpoint_format != "hub":
            raise DataError(f"{where}: text_revision pins the text tower repositories of an hf-hub: checkpoint; this model has none")

    def hub_id(self, spec: ModelSpec) -> str:
        from medbench_core.retrieval.clip import clip_settings

        ckpt = clip_settings(spec)["checkpoint"]
        return ckpt[len("hf-hub:") :] if ckpt.startswith("hf-hub:") else ""

    def revision(self, spec: ModelSpec) -> str:
        from medbench_core.retrieval.clip import clip_revision

        return clip_revision(spec)

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        return {
            **super().mteb_meta(spec, registry),
            "framework": ["PyTorch"],
            "similarity_fn_name": "cosine",
            "open_weights": True if self.hub_id(spec) else None,
        }

    def load(self, spec: ModelSpec, *, device: str = "cpu", progress: bool | None = False, online: bool = False) -> Any:
        from medbench_core.retrieval.clip import load_clip_encoder

        return load_clip_encoder(spec, device=device, progress=progress, online=online)


KIND = OpenClipKind()
