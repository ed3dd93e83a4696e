"""Model weights on disk: local folders, ``pkg:`` models shipped in a Python package, hub snapshots at a
pinned revision, a folder's content revision, the ``dtype`` applied to loaded weights, and the
refusal of repository code the registry does not trust.

Shared by every kind that loads weights (text encoders, cross-encoders, open_clip, generators).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError
from medbench_core.hub import is_repo_id, snapshot
from medbench_core.retrieval.kinds.spec import ModelSpec

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".json", ".txt", ".model")


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


DTYPES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16", "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}


def torch_dtype(spec: ModelSpec) -> Any:
    """The torch dtype of the ``dtype`` setting (None when unset: the weights' own)."""
    name = getattr(spec.settings, "dtype", None)
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
