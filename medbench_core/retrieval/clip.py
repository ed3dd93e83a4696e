"""open_clip encoders for records that carry text, an image, or both.

A model is an architecture plus a checkpoint, both from the spec's settings:

- ``architecture``: an open_clip model name (``ViT-B-32``), the name of a config bundled in
  ``medbench_core/clip_configs/`` (``medbench-tiny-clip``, a two-layer ViT and text tower for
  tests), or a path to such a ``.json`` config.
- ``checkpoint`` (or the spec's ``path``): empty / ``none`` = random weights drawn with ``seed`` (default 0); a local
  ``.safetensors`` file (loaded with safetensors); a local ``.pt`` / ``.pth`` / ``.bin`` file,
  loaded only with ``torch.load(weights_only=True)`` so a pickle that runs code is refused;
  ``hf-hub:<org>/<repo>`` (read from the local hub cache at the spec's pinned ``revision``,
  downloaded only with ``online=True``), or an open_clip pretrained tag (``laion2b_s34b_b79k``),
  downloaded by open_clip for users who have network. Other files are refused.
- ``fusion`` (``score`` | ``embedding``) and ``fusion_weight`` ``w`` in [0, 1] (default 0.5),
  the weight of the image side, for records carrying both text and an image:

  * ``score`` (CLIP score fusion, "CLIP SF"): the vector is ``[sqrt(w)*img, sqrt(1-w)*txt]``
    (twice the model's width), so the inner product of two such records is
    ``w*cos(img, img') + (1-w)*cos(txt, txt')``. A record with one modality puts its one
    vector ``v`` in both slots, ``[sqrt(w)*v, sqrt(1-w)*v]``: a text-only query against an
    image-only document then scores exactly CLIP's ``cos(txt, img)``, and against a
    text+image record ``w*cos(v, img') + (1-w)*cos(v, txt')``.
  * ``embedding``: ``normalise(w*img + (1-w)*txt)``; one-modality records are their vector.

  Every vector is float32 with unit L2 norm, so inner product is the score.
- ``max_aspect_ratio`` (default 50): CLIP preprocessing resizes the shorter side to the input
  size, so a 1x5000 strip would become a huge image; such images are refused.
- ``query_prefix`` / ``passage_prefix`` / ``language_prefixes``: added to the text side, as
  for text encoders.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from medbench_core.errors import DataError
from medbench_core.progress import bar as progress_bar
from medbench_core.progress import resolve as resolve_progress
from medbench_core.retrieval.checkpoints import CHECKPOINT_SUFFIXES, load_state_dict
from medbench_core.retrieval.instructions import apply_prefixes
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.storage import sha256_file, write_with
from medbench_core.taskdata.images import load_image

CONFIG_DIR = Path(__file__).with_name("clip_configs")
FUSIONS = ("score", "embedding")
TORCH_SUFFIXES = CHECKPOINT_SUFFIXES[1:]  # .pt .pth .bin
_registered = False


def bundled_architectures() -> list[str]:
    """Names of the open_clip configs shipped in ``clip_configs/``."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def _register_configs(open_clip: Any) -> None:
    global _registered
    if not _registered:
        open_clip.add_model_config(CONFIG_DIR)
        _registered = True


def clip_settings(spec: ModelSpec) -> dict[str, Any]:
    """The open_clip settings of ``spec`` (the kind's typed settings), the checkpoint taken from ``path`` when the settings give none."""
    s = spec.settings
    ckpt = s.checkpoint or spec.path or ""
    return {
        "architecture": s.architecture,
        "checkpoint": "" if str(ckpt).strip().lower() in ("", "none", "random") else str(ckpt).strip(),
        "seed": s.seed,
        "fusion": s.fusion,
        "fusion_weight": s.fusion_weight,
        "max_aspect_ratio": s.max_aspect_ratio,
    }


def checkpoint_format_of(checkpoint: str) -> str:
    """``random``, ``safetensors``, ``torch`` (weights-only), ``hub`` (hf-hub:) or ``tag``; refuses other files."""
    if not checkpoint:
        return "random"
    if checkpoint.startswith("hf-hub:"):
        return "hub"
    p = Path(checkpoint)
    suffix = p.suffix.lower()
    if suffix == ".safetensors":
        return "safetensors"
    if suffix in TORCH_SUFFIXES:
        return "torch"
    if p.exists() or "/" in checkpoint or "\\" in checkpoint or suffix:
        raise DataError(
            f"checkpoint {checkpoint!r}: only .safetensors files, or {'/'.join(TORCH_SUFFIXES)} files that load with "
            "torch.load(weights_only=True), are accepted; convert other formats to safetensors"
        )
    return "tag"


def clip_revision(spec: ModelSpec) -> str:
    """What identifies the weights: ``random:seed=N``, ``sha256:<16 hex>`` of a local file, or the hub id/tag."""
    s = clip_settings(spec)
    checkpoint_format = checkpoint_format_of(s["checkpoint"])
    if checkpoint_format == "random":
        return f"random:seed={s['seed']}"
    if checkpoint_format in ("safetensors", "torch"):
        p = Path(s["checkpoint"])
        if not p.is_file():
            raise DataError(f"model {spec.name}: checkpoint {p} not found")
        return "sha256:" + sha256_file(p)[:16]
    if checkpoint_format == "hub":
        revision = spec.revision or s["checkpoint"]
        if spec.revision:
            from medbench_core.hub import resolve_revision

            try:  # a branch pinned in the registry: the commit the local hub cache records for it
                revision = resolve_revision(s["checkpoint"][len("hf-hub:") :], spec.revision, repo_type="model", online=False)
            except DataError:
                revision = spec.revision
        return revision + _text_revision_suffix(spec)
    return spec.revision or s["checkpoint"]


def _text_revision_suffix(spec: ModelSpec) -> str:
    """``+<repo>@<sha>`` for each HF text repository the cached snapshot's config names ('' when none, or not cached yet)."""
    try:
        folder = hub_checkpoint_folder(spec)
        repos = hub_text_repos(spec, folder)
    except DataError:
        return ""  # loading will say what is missing
    return "".join(f"+{repo}@{sha}" for repo, (_, sha) in sorted(repos.items()))


class ClipEncoder:
    """An open_clip model with its preprocessing and tokenizer; see the module docstring."""

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


@contextlib.contextmanager
def _quiet_random_init_warning() -> Iterator[None]:
    # open_clip warns "initialized randomly" on the root logger even when weights follow from
    # a local file (loaded below) or random weights are what the spec asks for.
    class _Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "No pretrained weights loaded" not in record.getMessage()

    f = _Drop()
    root = logging.getLogger()
    root.addFilter(f)
    try:
        yield
    finally:
        root.removeFilter(f)


HF_TEXT_KEYS = ("hf_model_name", "hf_tokenizer_name")
WEIGHT_GLOBS = ("*.safetensors", "*.bin", "*.pth")  # what open_clip's local-dir loading looks for (factory._find_checkpoint_in_dir)


def _open_clip_config(folder: Path) -> dict[str, Any]:
    import json

    path = folder / "open_clip_config.json"
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable open_clip config ({exc})") from exc
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model_cfg"), dict):
        raise DataError(f"{path}: no 'model_cfg' mapping; open_clip reads the architecture from it")
    return cfg


def hub_text_repos(spec: ModelSpec, folder: Path, *, online: bool = False, cache_dir: str | Path | None = None) -> dict[str, tuple[Path, str]]:
    """``{repo id: (snapshot folder, sha)}`` of the Hugging Face repositories an ``hf-hub:`` config's text tower names.

    BiomedCLIP-style configs build the text tower from ``text_cfg.hf_model_name`` (its config.json;
    the weights come from the open_clip checkpoint) and tokenize with ``hf_tokenizer_name`` (open_clip's
    ``get_tokenizer('hf-hub:...')`` loads that repository's tokenizer, not the open_clip repository's
    files; open_clip v3.3 factory.py l.715-726, hf_model.py l.120-122). Both are read from the
    local hub cache at ``text_revision`` (default ``main``, resolved through the cache's refs), so
    they are pinned and enter the model's revision.
    """
    from medbench_core.hub import is_repo_id, snapshot

    text = _open_clip_config(folder)["model_cfg"].get("text_cfg") or {}
    out: dict[str, tuple[Path, str]] = {}
    for key in HF_TEXT_KEYS:
        repo = text.get(key) or ""
        if not repo or repo in out or not is_repo_id(repo):
            continue
        try:
            out[repo] = snapshot(repo, spec.settings.text_revision or "main", repo_type="model", online=online, cache_dir=cache_dir)
        except DataError as exc:
            raise DataError(
                f"model {spec.name}: {folder / 'open_clip_config.json'} builds its text tower from {key} {repo!r}, which is not in the local "
                f"hub cache at {spec.settings.text_revision or 'main'!r} ({exc}); fetch it once (hf download {repo}) or run online"
            ) from exc
    return out


def _hub_text_tower(spec: ModelSpec, folder: Path, *, online: bool, cache_dir: str | Path | None) -> tuple[dict[str, Any] | None, Path | None]:
    """The text config with its HF model pointing at the pinned local snapshot (None: no HF text tower), and the tokenizer's folder."""
    if not any(any(folder.glob(g)) for g in WEIGHT_GLOBS):
        raise DataError(f"model {spec.name}: {folder} holds no weights ({', '.join(WEIGHT_GLOBS)}); open_clip would build the model with random weights")
    repos = hub_text_repos(spec, folder, online=online, cache_dir=cache_dir)
    text = dict(_open_clip_config(folder)["model_cfg"].get("text_cfg") or {})
    cfg = None
    if text.get("hf_model_name") in repos:
        # The checkpoint holds the text tower's weights: build it from the pinned config, download nothing.
        cfg = {**text, "hf_model_name": str(repos[text["hf_model_name"]][0]), "hf_model_pretrained": False}
    tok = repos.get(text.get("hf_tokenizer_name") or "")
    return cfg, tok[0] if tok else None


def resolve_architecture(model: str, arch: str) -> str:
    """The open_clip model name of ``arch``: an open_clip name, a bundled config's name, or a ``.json`` config file (registered here)."""
    import open_clip

    _register_configs(open_clip)
    if arch.endswith(".json"):
        cfg = Path(arch)
        if not cfg.is_file():
            raise DataError(f"model {model}: architecture config {cfg} not found")
        open_clip.add_model_config(cfg)
        arch = cfg.stem
    if arch not in open_clip.list_models():
        raise DataError(
            f"model {model}: architecture {arch!r} unknown; use an open_clip model name (open_clip.list_models()) "
            f"or a bundled config: {bundled_architectures()}"
        )
    return arch


def hub_checkpoint_folder(spec: ModelSpec, *, online: bool = False, cache_dir: str | Path | None = None) -> Path:
    """The snapshot folder of an ``hf-hub:<org>/<name>`` checkpoint at the spec's pinned revision.

    Read from the local hub cache (``models--org--name/snapshots/<sha>``); only ``online`` downloads.
    """
    from medbench_core.hub import snapshot

    repo = clip_settings(spec)["checkpoint"][len("hf-hub:") :]
    try:
        folder, _ = snapshot(repo, spec.revision or "main", repo_type="model", online=online, cache_dir=cache_dir)
    except DataError as exc:
        raise DataError(f"model {spec.name}: cannot load hf-hub:{repo} ({exc})") from exc
    if not (folder / "open_clip_config.json").is_file():
        hint = ""
        if (folder / "config.json").is_file():  # PubMedCLIP and other CLIPs published for transformers
            hint = (
                "; its config.json makes it a transformers model (a transformers CLIPModel such as PubMedCLIP): "
                "run it with kind remote-code-embedder, calling get_text_features / get_image_features through its processor"
            )
        raise DataError(f"model {spec.name}: {folder} has no open_clip_config.json; it is not an open_clip hub model{hint}")
    return folder


def load_clip_encoder(
    spec: ModelSpec, device: str = "cpu", progress: bool | None = False, *, online: bool = False, cache_dir: str | Path | None = None
) -> ClipEncoder:
    """Build the open_clip model of ``spec`` (see the module docstring) in eval mode on ``device``; ``progress``: bars while encoding.

    An ``hf-hub:`` checkpoint is loaded from its snapshot folder at the pinned revision
    (open_clip's ``local-dir:``; safetensors first, other weights only with ``weights_only``);
    ``dtype`` is applied to the weights.
    """
    import open_clip
    import torch

    from medbench_core.retrieval.weights import torch_dtype

    s = clip_settings(spec)
    checkpoint_format = checkpoint_format_of(s["checkpoint"])
    dtype = torch_dtype(spec)
    folder = hub_checkpoint_folder(spec, online=online, cache_dir=cache_dir) if checkpoint_format == "hub" else None
    local_dir = f"local-dir:{folder}" if folder else ""
    arch = resolve_architecture(spec.name, s["architecture"]) if checkpoint_format != "hub" else s["architecture"]
    try:
        # A private RNG stream: random weights depend on the seed only, not on what ran before.
        with torch.random.fork_rng(devices=[]), _quiet_random_init_warning():
            torch.manual_seed(s["seed"])
            if folder is not None:
                text_cfg, tokenizer_folder = _hub_text_tower(spec, folder, online=online, cache_dir=cache_dir)
                extra = {"text_cfg": text_cfg} if text_cfg else {}
                model, _, preprocess = open_clip.create_model_and_transforms(local_dir, device="cpu", weights_only=True, **extra)
                if tokenizer_folder is not None:
                    from open_clip.tokenizer import HFTokenizer

                    cfg = _open_clip_config(folder)["model_cfg"].get("text_cfg", {})
                    tokenizer = HFTokenizer(
                        str(tokenizer_folder), context_length=cfg.get("context_length", 77), tokenizer_mode=cfg.get("tokenizer_mode"),
                        **cfg.get("tokenizer_kwargs", {}),
                    )  # fmt: skip
                else:
                    tokenizer = open_clip.get_tokenizer(local_dir)
            else:
                pretrained = s["checkpoint"] if checkpoint_format == "tag" else None
                model, _, preprocess = open_clip.create_model_and_transforms(
                    arch, pretrained=pretrained, pretrained_text=False, device="cpu", weights_only=True
                )
                tokenizer = open_clip.get_tokenizer(arch)
    except DataError:
        raise
    except Exception as exc:  # network, missing tag, bad config: say which model and what to do
        from medbench_core.retrieval.checkpoints import without_torch_advice

        raise DataError(
            f"model {spec.name}: open_clip could not build {arch or s['checkpoint']!r} with checkpoint {s['checkpoint'] or 'random'!r} "
            f"({type(exc).__name__}: {without_torch_advice(str(exc))}); offline runs need a local .safetensors checkpoint"
        ) from exc
    if checkpoint_format in ("safetensors", "torch"):
        path = Path(s["checkpoint"])
        state = load_state_dict(path, spec.name)
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            lines = str(exc).splitlines()
            raise DataError(f"model {spec.name}: {path} does not fit architecture {arch!r}: {' '.join(lines[:3])[:500]}") from exc
    model = model.to(device).eval()
    if dtype is not None:
        model = model.to(dtype)
    return ClipEncoder(spec, model, preprocess, tokenizer, s, device, progress=progress)
