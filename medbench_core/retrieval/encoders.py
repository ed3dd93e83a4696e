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

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from medbench_core.errors import DataError
from medbench_core.hub import is_commit_sha, is_repo_id, resolve_revision, snapshot
from medbench_core.retrieval.model_registry import ModelSpec
from medbench_core.progress import bar as progress_bar
from medbench_core.progress import library_bars
from medbench_core.progress import resolve as resolve_progress

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
        revision = effective_revision(spec)
        if spec.hub_id and not is_commit_sha(revision):
            return revision  # a branch the cache cannot resolve yet: ask again (a registry sync may pin it meanwhile)
        _REVISIONS[key] = revision
    return _REVISIONS[key]


def effective_revision(spec: ModelSpec) -> str:
    """The revision that identifies the weights: the registry's pin, or a local folder's content hash.

    A hub id pinned to a branch or tag is resolved to the commit the local hub cache records
    for it (nothing is downloaded); :func:`medbench_core.retrieval.model_registry.pin_revision` does the same at
    registration, online when allowed.
    """
    if spec.kind == "bm25":
        return spec.revision or "bm25s"
    if spec.kind == "open_clip":
        from medbench_core.retrieval.clip import clip_revision

        return clip_revision(spec)
    resolved = resolve_model_path(spec.path) if spec.path else ""
    if resolved and Path(resolved).is_dir():
        return folder_revision(resolved)
    if spec.revision and is_repo_id(spec.path):
        try:
            return resolve_revision(spec.path, spec.revision, repo_type="model", online=False)
        except DataError:
            return spec.revision
    return spec.revision or "unpinned"


DTYPES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16", "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}


def torch_dtype(spec: ModelSpec) -> Any:
    """The torch dtype of the ``dtype`` setting (None when unset: the weights' own)."""
    name = spec.settings.get("dtype")
    if name in (None, ""):
        return None
    if str(name).lower() not in DTYPES:
        raise DataError(f"model {spec.name}: dtype {name!r} unknown; use one of {sorted(DTYPES)}")
    import torch

    return getattr(torch, DTYPES[str(name).lower()])


def model_folder(spec: ModelSpec, *, online: bool = False, cache_dir: str | Path | None = None) -> Path:
    """The local folder holding the weights: the folder or package itself, or the hub snapshot at the pinned revision."""
    path = resolve_model_path(spec.path)
    if Path(path).is_dir():
        return Path(path)
    if not is_repo_id(path):
        raise DataError(f"model {spec.name}: path {spec.path!r} is neither a folder, pkg:<module> nor a hub id org/name")
    try:
        folder, _ = snapshot(path, spec.revision or "main", repo_type="model", online=online, cache_dir=cache_dir)
    except DataError as exc:
        raise DataError(f"model {spec.name}: cannot load {path!r} ({exc})") from exc
    return folder


def check_remote_code(spec: ModelSpec, folder: Path) -> None:
    """Refuse a model whose config maps to code in its repository unless the registry trusts it."""
    cfg = folder / "config.json"
    if spec.trust_remote_code or not cfg.is_file():
        return
    try:
        auto_map = json.loads(cfg.read_text()).get("auto_map")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return  # the library will say what is wrong with the file
    if auto_map:
        raise DataError(
            f"model {spec.name}: {cfg} maps to code shipped with the model (auto_map: {sorted(auto_map)}); "
            f"it runs only when {spec.path!r} is on the trust_remote_code allowlist of models.yaml"
        )


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
        if spec.settings.get("max_length"):
            self.model.max_seq_length = int(spec.settings["max_length"])
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
        self.max_length = int(spec.settings.get("max_length") or min(getattr(self.tokenizer, "model_max_length", 512), 512))
        self.pooling = spec.settings.get("pooling", "mean")
        if self.pooling not in ("mean", "cls"):
            raise DataError(f"model {spec.name}: pooling {self.pooling!r} unknown; use mean or cls")
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


def load_text_encoder(spec: ModelSpec, device: str = "cpu", progress: bool | None = False, *, online: bool = False, cache_dir: str | Path | None = None) -> TextEncoder:
    """The text encoder of ``spec``; a hub id is read from the local hub cache unless ``online``."""
    if spec.kind == "sentence-transformers":
        return SentenceTransformerEncoder(spec, device=device, progress=progress, online=online, cache_dir=cache_dir)
    if spec.kind == "transformers":
        return TransformersEncoder(spec, device=device, progress=progress, online=online, cache_dir=cache_dir)
    raise DataError(f"model {spec.name}: kind {spec.kind} is not a text encoder")
