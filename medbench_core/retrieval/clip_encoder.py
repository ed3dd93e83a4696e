"""The encoder an open_clip model makes: records with text, an image or both in, unit float32 vectors out,
text and image sides fused as the settings say (``score`` or ``embedding``; the formulas are in
:mod:`medbench_core.retrieval.clip`'s docstring). :func:`medbench_core.retrieval.clip.load_clip_encoder`
builds one."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from medbench_core.errors import DataError
from medbench_core.progress import bar as progress_bar
from medbench_core.progress import resolve as resolve_progress
from medbench_core.retrieval.instructions import apply_prefixes
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.storage import write_with
from medbench_core.taskdata.images import load_image


class ClipEncoder:
    """An open_clip model with its preprocessing and tokenizer; its settings and fusion: :mod:`medbench_core.retrieval.clip`."""

    def __init__(self, spec: ModelSpec, model: Any, preprocess: Any, tokenizer: Any, settings: dict[str, Any], device: str, progress: bool | None = False):
        import torch

        self.spec = spec
        self.model = model
        self.preprocess = preprocess
        self.tokenizer = tokenizer
        self.settings = settings
        self.device = device
        self.progress = resolve_progress(progress)
        self._torch = torch
        self.width: int | None = None
        size = getattr(model.visual, "preprocess_cfg", {}).get("size", 224)
        self.image_size = size if isinstance(size, int) else max(size)

    @property
    def dim(self) -> int:
        """Length of the vectors :meth:`encode_records` returns."""
        base = self._embed_dim()
        return 2 * base if self.settings["fusion"] == "score" else base

    def _embed_dim(self) -> int:
        if self.width is None:
            with self._torch.inference_mode():
                self.width = int(self.model.encode_text(self.tokenizer(["x"]).to(self.device)).shape[1])
        return self.width

    def encode_texts(self, texts: list[str], normalize: bool = True) -> np.ndarray:
        """Text embeddings (n, width), float32: L2-normalised, or as the text tower returns them (UniIR's score fusion sums raw ones)."""
        torch = self._torch
        out = []
        bs = max(1, int(self.spec.batch_size))
        with torch.inference_mode():
            for i in progress_bar(range(0, len(texts), bs), desc=f"{self.spec.name} texts", unit="batch", progress=self.progress and len(texts) > 0):
                tok = self.tokenizer(texts[i : i + bs]).to(self.device)
                out.append(self.model.encode_text(tok, normalize=normalize).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self._embed_dim()), dtype=np.float32)

    def _pixels(self, path: Path, rid: str) -> Any:
        img = load_image(path, rid)
        w, h = img.size
        ratio = max(w, h) / min(w, h)
        if ratio > self.settings["max_aspect_ratio"]:
            raise DataError(
                f"record {rid}: image {path} is {w}x{h} (aspect ratio {ratio:.0f}); model {self.spec.name} takes at most "
                f"{self.settings['max_aspect_ratio']:.0f} (setting max_aspect_ratio); crop the image"
            )
        try:
            return self.preprocess(img)
        except Exception as exc:  # a transform failing on one image must name that image
            raise DataError(f"record {rid}: model {self.spec.name} cannot take image {path} ({exc})") from exc

    def encode_images(self, paths: list[Path], ids: list[str], normalize: bool = True) -> np.ndarray:
        """Image embeddings (n, width), float32, L2-normalised unless ``normalize`` is false; errors name the record id and file."""
        torch = self._torch
        out = []
        bs = max(1, int(self.spec.batch_size))
        with torch.inference_mode():
            for i in progress_bar(range(0, len(paths), bs), desc=f"{self.spec.name} images", unit="batch", progress=self.progress and len(paths) > 0):
                batch = torch.stack([self._pixels(p, r) for p, r in zip(paths[i : i + bs], ids[i : i + bs])])
                batch = batch.to(device=self.device, dtype=next(self.model.parameters()).dtype)
                out.append(self.model.encode_image(batch, normalize=normalize).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self._embed_dim()), dtype=np.float32)

    def split_records(self, texts, images, languages, role: str, ids=None) -> tuple[list[str], list[int], list[int]]:
        """The records' names (``ids``, else role and position) and the positions of those with a text and
        with an image; a record with neither raises :class:`DataError`."""
        n = len(texts)
        if len(images) != n or len(languages) != n:
            raise DataError(f"model {self.spec.name}: {n} texts, {len(images)} images and {len(languages)} languages for {role} records")
        names = [str(x) for x in ids] if ids is not None else [f"{role} record at position {i}" for i in range(n)]
        has_t = [isinstance(t, str) and bool(t.strip()) for t in texts]
        has_i = [im is not None and str(im) != "" for im in images]
        empty = [names[i] for i in range(n) if not has_t[i] and not has_i[i]]
        if empty:
            raise DataError(f"model {self.spec.name}: {len(empty)} {role} record(s) have neither text nor image, e.g. {empty[:5]}")
        return names, [i for i in range(n) if has_t[i]], [i for i in range(n) if has_i[i]]

    def encode_records(
        self,
        texts: list[str | None],
        images: list[Path | None],
        languages: list[str | None],
        role: str,
        ids: list[str] | None = None,
    ) -> np.ndarray:
        """One unit vector per record (float32), fusing text and image as the settings say.

        ``ids`` (optional) name records in errors; without them a record is named by its role
        and position. A record with neither text nor image raises :class:`DataError`.
        """
        names, t_idx, i_idx = self.split_records(texts, images, languages, role, ids)
        n = len(texts)
        has_t, has_i = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        has_t[t_idx], has_i[i_idx] = True, True
        prefixed = apply_prefixes([texts[i] for i in t_idx], self.spec.settings, role, [languages[i] for i in t_idx])
        t_emb = self.encode_texts(prefixed)
        i_emb = self.encode_images([Path(images[i]) for i in i_idx], [names[i] for i in i_idx])
        d = self._embed_dim()
        txt = np.zeros((n, d), dtype=np.float32)
        img = np.zeros((n, d), dtype=np.float32)
        txt[t_idx] = t_emb
        img[i_idx] = i_emb
        # A record with one modality uses that vector for both sides.
        t_only = has_t & ~has_i
        i_only = has_i & ~has_t
        img[t_only] = txt[t_only]
        txt[i_only] = img[i_only]

        w = self.settings["fusion_weight"]
        if self.settings["fusion"] == "score":
            out = np.concatenate([math.sqrt(w) * img, math.sqrt(1.0 - w) * txt], axis=1)
        else:
            out = w * img + (1.0 - w) * txt
        # Renormalise: exact for "embedding", and removes float error for "score".
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        bad = [names[i] for i in np.flatnonzero(norms[:, 0] < 1e-6)]
        if bad:
            raise DataError(f"model {self.spec.name}: the fused vector of {bad[:5]} is zero (text and image cancel out); change fusion_weight")
        return np.ascontiguousarray(out / norms, dtype=np.float32)

    def save_safetensors(self, path: str | Path) -> Path:
        """Write the model's weights as a ``.safetensors`` file (atomically); returns the path."""
        from safetensors.torch import save_file

        path = Path(path)
        if path.suffix != ".safetensors":
            raise DataError(f"{path}: weights are saved as .safetensors only")
        state = {k: v.detach().cpu().contiguous().clone() for k, v in self.model.state_dict().items()}
        return write_with(path, lambda tmp: save_file(state, str(tmp)))
