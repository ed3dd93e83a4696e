"""Dense text encoders: sentence-transformers or plain transformers, from a hub id or a local folder.

Query and passage prefixes, per-language prefixes, max length, pooling and normalisation come
from the model's settings. Embeddings are float32 and, by default, L2-normalised so inner
product is cosine similarity.

Hub ids load from the local hub cache at the pinned revision (the snapshot folder of that
commit); only ``online=True`` downloads. ``dtype`` (``float32``/``fp32``, ``float16``/``fp16``,
``bfloat16``/``bf16``) is applied to the loaded weights, not only recorded. A model whose folder
maps to custom code (``auto_map`` in ``config.json``) is refused unless its spec has
``trust_remote_code`` (granted by the ``trust_remote_code:`` allowlist of ``models.yaml``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from medbench_core.errors import DataError
from medbench_core.progress import bar as progress_bar
from medbench_core.progress import library_bars
from medbench_core.progress import resolve as resolve_progress
from medbench_core.retrieval.instructions import apply_prefixes
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.weights import check_remote_code, model_folder, torch_dtype


class SentenceTransformerEncoder:
    """sentence-transformers model; ``role`` is ``query`` or ``passage``."""

    def __init__(self, spec: ModelSpec, device: str = "cpu", progress: bool | None = False, *, online: bool = False, cache_dir: str | Path | None = None):
        from sentence_transformers import SentenceTransformer

        self.spec = spec
        dtype = torch_dtype(spec)
        folder = model_folder(spec, online=online, cache_dir=cache_dir)
        check_remote_code(spec, folder)
        try:
            with library_bars(progress):
                self.model = SentenceTransformer(str(folder), device=device, trust_remote_code=spec.trust_remote_code, local_files_only=True)
        except (OSError, ValueError) as exc:  # ValueError: a folder that holds no model
            raise DataError(f"model {spec.name}: cannot load {str(folder)!r} ({exc}); offline runs need a local folder or a cached hub id") from exc
        if dtype is not None:
            self.model.to(dtype)
        if spec.settings.max_length:
            self.model.max_seq_length = int(spec.settings.max_length)
        self.progress = resolve_progress(progress)

    @property
    def tokenizer(self) -> Any:
        return self.model.tokenizer

    @property
    def max_length(self) -> int | None:
        return self.model.max_seq_length

    def encode(self, texts: list[str], *, role: str, languages: list[str] | None = None) -> np.ndarray:
        texts = apply_prefixes(texts, self.spec.settings, role, languages)
        emb = self.model.encode(
            texts,
            batch_size=self.spec.batch_size,
            normalize_embeddings=self.spec.settings.normalize,
            convert_to_numpy=True,
            show_progress_bar=self.progress,
        )
        return np.ascontiguousarray(emb, dtype=np.float32)

    def batch_plan(self, texts: list[str], *, role: str, languages: list[str] | None = None) -> list[np.ndarray]:
        """The batches :meth:`encode` of all ``texts`` forms: positions, longest (prefixed) text first.

        sentence-transformers sorts its inputs by character length, then batches; encoding these
        batches one at a time gives the very same vectors (tests/core/test_vectors.py).
        """
        prefixed = apply_prefixes(texts, self.spec.settings, role, languages)
        order = np.argsort([-len(t) for t in prefixed])  # as SentenceTransformer._inference orders them
        bs = self.spec.batch_size
        return [order[i : i + bs] for i in range(0, len(order), bs)]


class TransformersEncoder:
    """Plain transformers AutoModel with mean or CLS pooling.

    With ``passage_pair`` a passage goes to the tokenizer as the second text of the pair
    ``("", text)`` (``truncation="longest_first"``: the empty first text has nothing to give, so the
    passage is cut), which is how R2MED's ``BiEncoderModel`` feeds MedCPT's article encoder
    (src/utils.py l.371-378 at 62b7074); queries are always single texts.
    """

    def __init__(self, spec: ModelSpec, device: str = "cpu", progress: bool | None = False, *, online: bool = False, cache_dir: str | Path | None = None):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.spec = spec
        self.device = device
        dtype = torch_dtype(spec)
        folder = model_folder(spec, online=online, cache_dir=cache_dir)
        check_remote_code(spec, folder)
        kwargs: dict[str, Any] = {"trust_remote_code": spec.trust_remote_code, "local_files_only": True}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(folder), **kwargs)
            with library_bars(progress):
                self.model = AutoModel.from_pretrained(str(folder), use_safetensors=True, **kwargs).to(device).eval()
        except (OSError, ValueError) as exc:  # ValueError: a folder that holds no model
            raise DataError(f"model {spec.name}: cannot load {str(folder)!r} ({exc}); offline runs need a local folder or a cached hub id") from exc
        if dtype is not None:
            self.model.to(dtype)
        self.max_length = int(spec.settings.max_length or min(getattr(self.tokenizer, "model_max_length", 512), 512))
        self.pooling = spec.settings.pooling
        self.passage_pair = bool(spec.settings.passage_pair)
        self.progress = resolve_progress(progress)
        self._torch = torch

    def encode(self, texts: list[str], *, role: str, languages: list[str] | None = None) -> np.ndarray:
        torch = self._torch
        texts = apply_prefixes(texts, self.spec.settings, role, languages)
        out = []
        bs = self.spec.batch_size
        batches = range(0, len(texts), bs)
        with torch.inference_mode():
            for i in progress_bar(batches, desc=f"{self.spec.name} {role}s", unit="batch", progress=self.progress):
                chunk = texts[i : i + bs]
                if self.passage_pair and role == "passage":
                    pair = {"text": [""] * len(chunk), "text_pair": chunk, "truncation": "longest_first"}
                else:
                    pair = {"text": chunk, "truncation": True}
                batch = self.tokenizer(**pair, padding=True, max_length=self.max_length, return_tensors="pt").to(self.device)
                hidden = self.model(**batch).last_hidden_state
                if self.pooling == "cls":
                    vec = hidden[:, 0]
                else:
                    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                if self.spec.settings.normalize:
                    vec = torch.nn.functional.normalize(vec, p=2, dim=1)
                out.append(vec.float().cpu().numpy())
        dim = self.model.config.hidden_size
        return np.ascontiguousarray(np.concatenate(out) if out else np.zeros((0, dim)), dtype=np.float32)

    def batch_plan(self, texts: list[str], *, role: str, languages: list[str] | None = None) -> list[np.ndarray]:
        """The batches :meth:`encode` of all ``texts`` forms: consecutive positions."""
        bs = self.spec.batch_size
        return [np.arange(i, min(i + bs, len(texts))) for i in range(0, len(texts), bs)]
