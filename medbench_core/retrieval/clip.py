"""open_clip models from their settings: architecture, checkpoint, revision and loading (:func:`load_clip_encoder`).

The encoder a model makes (:class:`~medbench_core.retrieval.clip_encoder.ClipEncoder`) reads records that carry
text, an image, or both.

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError
from medbench_core.retrieval.checkpoints import CHECKPOINT_SUFFIXES, load_state_dict
from medbench_core.retrieval.clip_encoder import ClipEncoder
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.storage import sha256_file

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
