"""Dense text encoders: sentence-transformers or plain transformers, from a hub id or a local folder.

Query and passage prefixes, per-language prefixes, max length, pooling and normalisation come
from the model's settings. Embeddings are float32 and, by default, L2-normalised so inner
product is cosine similarity.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from medbench_core.errors import DataError
from medbench_core.models import ModelSpec

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".json", ".txt", ".model")


class TextEncoder(Protocol):
    """Anything that turns texts into a (n, dim) float32 array."""

    def encode(self, texts: list[str], *, role: str, languages: list[str] | None = None) -> np.ndarray: ...


def resolve_model_path(path: str) -> str:
    """A local folder, ``pkg:<module>`` (a model shipped inside a Python package), or a hub id."""
    if path.startswith("pkg:"):
        module = path[4:]
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise DataError(f"model path {path!r}: Python package {module!r} is not installed")
        root = Path(list(spec.submodule_search_locations)[0])
        for cand in [root, *sorted(p for p in root.iterdir() if p.is_dir())]:
            if (cand / "config.json").exists() or (cand / "modules.json").exists():
                return str(cand)
        raise DataError(f"model path {path!r}: no model folder (config.json) inside {root}")
    if path.startswith(("/", "./", "../", "~")) and not Path(path).expanduser().is_dir():
        # Unmistakably a local path: say so, rather than let the hub client reject it as a repo id.
        raise DataError(f"model path {path!r}: no such folder; give a local model folder, pkg:<module> or a hub id")
    return path


def folder_revision(folder: str | Path) -> str:
    """Content revision of a local model folder: sha256 over names and bytes of its model files."""
    folder = Path(folder)
    h = hashlib.sha256()
    n = 0
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        # Only the folder's own hub-download cache is skipped: the folder itself may live under ~/.cache.
        if p.is_file() and p.suffix in _WEIGHT_SUFFIXES and ".cache" not in rel.parts:
            n += 1
            h.update(str(rel).encode())
            with open(p, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
    if n == 0:
        raise DataError(f"model folder {folder}: no model files (*.safetensors, *.bin, *.json, ...) to identify its weights")
    return "sha256:" + h.hexdigest()[:16]


_REVISIONS: dict[str, str] = {}


def cached_revision(spec: ModelSpec) -> str:
    """:func:`effective_revision`, hashed once per process and model identity (a folder's hash takes a moment)."""
    key = json.dumps(spec.identity(), sort_keys=True, default=str)
    if key not in _REVISIONS:
        _REVISIONS[key] = effective_revision(spec)
    return _REVISIONS[key]


def effective_revision(spec: ModelSpec) -> str:
    """The revision that identifies the weights: the registry's pin, or a local folder's content hash."""
    if spec.kind == "bm25":
        return spec.revision or "bm25s"
    if spec.kind == "open_clip":
        from medbench_core.clip import clip_revision

        return clip_revision(spec)
    resolved = resolve_model_path(spec.path) if spec.path else ""
    if resolved and Path(resolved).is_dir():
        return folder_revision(resolved)
    return spec.revision or "unpinned"


def _prefix(settings: dict[str, Any], role: str, language: str | None) -> str:
    per_lang = settings.get("language_prefixes") or {}
    if language and language in per_lang and role in per_lang[language]:
        return per_lang[language][role]
    return settings.get(f"{role}_prefix", "") or ""


def apply_prefixes(texts: list[str], settings: dict[str, Any], role: str, languages: list[str] | None) -> list[str]:
    langs = languages if languages is not None else [None] * len(texts)
    return [_prefix(settings, role, lang) + t for t, lang in zip(texts, langs)]


class SentenceTransformerEncoder:
    """sentence-transformers model; ``role`` is ``query`` or ``passage``."""

    def __init__(self, spec: ModelSpec, device: str = "cpu", progress: bool = False):
        from sentence_transformers import SentenceTransformer

        self.spec = spec
        path = resolve_model_path(spec.path)
        kwargs: dict[str, Any] = {"device": device}
        if spec.revision and not Path(path).is_dir():
            kwargs["revision"] = spec.revision
        try:
            self.model = SentenceTransformer(path, **kwargs)
        except (OSError, ValueError) as exc:  # ValueError: a folder that holds no model
            raise DataError(f"model {spec.name}: cannot load {path!r} ({exc}); offline runs need a local folder or a cached hub id") from exc
        if spec.settings.get("max_length"):
            self.model.max_seq_length = int(spec.settings["max_length"])
        self.progress = progress

    def encode(self, texts: list[str], *, role: str, languages: list[str] | None = None) -> np.ndarray:
        texts = apply_prefixes(texts, self.spec.settings, role, languages)
        emb = self.model.encode(
            texts,
            batch_size=self.spec.batch_size,
            normalize_embeddings=bool(self.spec.settings.get("normalize", True)),
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
    """Plain transformers AutoModel with mean or CLS pooling."""

    def __init__(self, spec: ModelSpec, device: str = "cpu", progress: bool = False):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.spec = spec
        self.device = device
        path = resolve_model_path(spec.path)
        kwargs: dict[str, Any] = {}
        if spec.revision and not Path(path).is_dir():
            kwargs["revision"] = spec.revision
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
            self.model = AutoModel.from_pretrained(path, use_safetensors=True, **kwargs).to(device).eval()
        except (OSError, ValueError) as exc:  # ValueError: a folder that holds no model
            raise DataError(f"model {spec.name}: cannot load {path!r} ({exc}); offline runs need a local folder or a cached hub id") from exc
        self.max_length = int(spec.settings.get("max_length") or min(getattr(self.tokenizer, "model_max_length", 512), 512))
        self.pooling = spec.settings.get("pooling", "mean")
        if self.pooling not in ("mean", "cls"):
            raise DataError(f"model {spec.name}: pooling {self.pooling!r} unknown; use mean or cls")
        self.progress = progress
        self._torch = torch

    def encode(self, texts: list[str], *, role: str, languages: list[str] | None = None) -> np.ndarray:
        torch = self._torch
        texts = apply_prefixes(texts, self.spec.settings, role, languages)
        out = []
        bs = self.spec.batch_size
        with torch.inference_mode():
            for i in range(0, len(texts), bs):
                batch = self.tokenizer(texts[i : i + bs], padding=True, truncation=True, max_length=self.max_length, return_tensors="pt").to(self.device)
                hidden = self.model(**batch).last_hidden_state
                if self.pooling == "cls":
                    vec = hidden[:, 0]
                else:
                    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                if self.spec.settings.get("normalize", True):
                    vec = torch.nn.functional.normalize(vec, p=2, dim=1)
                out.append(vec.float().cpu().numpy())
        dim = self.model.config.hidden_size
        return np.ascontiguousarray(np.concatenate(out) if out else np.zeros((0, dim)), dtype=np.float32)

    def batch_plan(self, texts: list[str], *, role: str, languages: list[str] | None = None) -> list[np.ndarray]:
        """The batches :meth:`encode` of all ``texts`` forms: consecutive positions."""
        bs = self.spec.batch_size
        return [np.arange(i, min(i + bs, len(texts))) for i in range(0, len(texts), bs)]


def load_text_encoder(spec: ModelSpec, device: str = "cpu", progress: bool = False) -> TextEncoder:
    if spec.kind == "sentence-transformers":
        return SentenceTransformerEncoder(spec, device=device, progress=progress)
    if spec.kind == "transformers":
        return TransformersEncoder(spec, device=device, progress=progress)
    raise DataError(f"model {spec.name}: kind {spec.kind} is not a text encoder")
