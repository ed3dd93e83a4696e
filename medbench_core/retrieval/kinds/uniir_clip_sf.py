"""Kind ``uniir-clip-sf``: UniIR's CLIP score fusion (CLIP-SF), as UniIR and M3Retrieve compute it.

A record is embedded as CLIP's *raw* image embedding plus its *raw* text embedding, or the one it
has; queries and candidates are L2-normalised before the inner product, so a score is
``cos(img_q + txt_q, img_d + txt_d)``. Read in github.com/TIGER-AI-Lab/UniIR at 98dc570:
``src/models/uniir_clip/clip_scorefusion/clip_sf.py`` (``encode_multimodal_input``: ``encode_text * txt_mask
+ encode_image * img_mask``, no normalisation), ``src/data/mbeir_dataset.py`` l.427-434 (mask 0 for
text ``None``/``""`` and for no image), ``src/common/mbeir_retriever.py`` l.76 and l.194
(``faiss.normalize_L2`` of candidates and of queries). M3Retrieve's script does the same per record
(github.com/AkashGhosh/M3Retrieve at 94c83da, ``Code/get_uniIR_results (1).py`` ``_do_encode``:
``image_embeddings + text_embeddings`` then ``F.normalize``). medbench normalises when it encodes:
the same vectors, stored as float32 (UniIR stores float16 before normalising).

The model is OpenAI's ViT-L/14 with QuickGELU (UniIR loads it with ``clip.load("ViT-L/14")``), built
through open_clip as ``ViT-L-14-quickgelu`` (same module names as OpenAI's CLIP, so the state dict
loads strictly), or any open_clip architecture (tests use ``medbench-tiny-clip``). Weights: the
entry's ``path``, a local checkpoint file or a hub id with ``file:`` (read from the hub cache at the
pinned revision, e.g. ``TIGER-Lab/UniIR`` + ``checkpoint/CLIP_SF/clip_sf_large.pth``). UniIR's layout
is accepted: ``{"model": state_dict, "optimizer": ..., "config": <OmegaConf>, ...}`` with keys
prefixed ``clip_model.`` (``train.py`` ``save_checkpoint``; ``src/common/utils.py`` loads
``torch.load(path)["model"]``). See :func:`load_checkpoint_state` for how such a pickle is read
without running code.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medbench_core.errors import DataError
from medbench_core.retrieval.checkpoints import CHECKPOINT_SUFFIXES, load_state_dict
from medbench_core.retrieval.clip_encoder import ClipEncoder
from medbench_core.retrieval.kinds.encoder import EncoderKind
from medbench_core.retrieval.kinds.settings import KindSettings
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.weights import DTYPES
from medbench_core.taskdata.task import Task

UNIIR_TEMPLATE = "{instruction} {query}"  # mbeir_dataset.py l.220 and l.336: f"{query_prompt} {query_txt}"
UNIIR_SEED = 2023  # UniIR's eval configs: ``seed: 2023``, set_seed(seed + rank) in mbeir_embedder.py l.465-467
PREFIXES = ("module.", "clip_model.")  # DDP, then CLIPScoreFusion's one submodule
OPENAI_EXTRA_KEYS = ("input_resolution", "context_length", "vocab_size")  # in OpenAI's JIT state dicts only


@dataclass(frozen=True)
class UniIRSettings(KindSettings):
    """``architecture`` (open_clip name or bundled config), ``file`` (the checkpoint inside a hub repository),
    ``text_format`` (raw | uniir), ``instructions`` / ``query_template`` / ``prompt_seed`` / ``shuffle_cand`` /
    ``prompt_workers`` / ``prompt_batch_size`` (queries only), ``max_aspect_ratio``, ``dtype``. An instruction may
    be a list of prompts: each query draws one, as UniIR does (:func:`uniir_query_texts`)."""

    architecture: str = "ViT-L-14-quickgelu"
    file: str = ""
    text_format: str = "raw"
    instructions: dict | None = None
    query_template: str | None = None
    prompt_seed: int = UNIIR_SEED
    # UniIR's evaluation (MBEIRMainDataset, embed.yaml ``shuffle_cand: True``) draws a positive candidate per
    # query before its prompt; false: the prompts alone are drawn (MBEIRInferenceOnlyDataset)
    shuffle_cand: bool = False
    prompt_workers: int = 0  # DataLoader workers whose Python RNGs draw (UniIR's embed.yaml: num_workers 5)
    prompt_batch_size: int = 2048  # the batches dealt to those workers in turn (UniIR's embed.yaml: batch_size 2048)
    max_aspect_ratio: float = 50.0
    dtype: str | None = None

    CHOICES = {"text_format": ("raw", "uniir"), "dtype": (None, *DTYPES)}
    QUERY_ONLY = ("instructions", "query_template", "prompt_seed", "shuffle_cand", "prompt_workers", "prompt_batch_size")
    HINTS = {
        "fusion": "UniIR's score fusion is the raw sum, normalised; kind open_clip has fusion: score | embedding",
        "fusion_weight": "UniIR's score fusion weighs image and text embeddings as they are",
        "checkpoint": "give the checkpoint as the entry's path (a file, or a hub id with settings.file)",
        "seed": "uniir-clip-sf loads a checkpoint; random weights are kind open_clip's",
    }

    def check(self, where: str) -> None:
        if self.prompt_workers < 0 or self.prompt_batch_size < 1:
            raise DataError(f"{where}: prompt_workers must be >= 0 and prompt_batch_size >= 1")
        if self.max_aspect_ratio < 1:
            raise DataError(f"{where}: max_aspect_ratio must be at least 1, not {self.max_aspect_ratio}")
        if self.instructions is not None and not all(
            isinstance(v, str) or isinstance(v, list) and v and all(isinstance(p, str) and p.strip() for p in v) for v in self.instructions.values()
        ):
            raise DataError(
                f"{where}: instructions must map a task name, task type or 'default' to an instruction text or a list of them (one drawn per query)"
            )
        template = self.query_template or UNIIR_TEMPLATE
        if "{query}" not in template or "{instruction}" not in template:
            raise DataError(f"{where}: query_template {template!r} needs both {{instruction}} and {{query}}")


def format_string(s: str | None) -> str:
    """UniIR's text normalisation (``src/data/preprocessing/utils.py`` l.110-116), applied with ``text_format: uniir``."""
    s = (s or "").replace("\r", "").strip().strip('"')
    if s:
        s = s[0].upper() + s[1:]
        s = s + "." if s[-1] not in (".", "?", "!") else s
    return s


def uniir_query_texts(
    texts: list[str | None],
    prompt: tuple[str, Any] | None,
    text_format: str,
    seed: int = UNIIR_SEED,
    *,
    positives: list[int] | None = None,
    workers: int = 0,
    batch_size: int = 2048,
    ids: list[str] | None = None,
) -> list[str | None]:
    """Query texts as UniIR builds them (github.com/TIGER-AI-Lab/UniIR at 98dc570, ``src/data/mbeir_dataset.py``).

    ``prompt``: ``(template, instruction)``, the instruction a text or a list of prompts. Each query
    in order draws one with ``random.choice`` (``_get_random_query_prompt``, l.102-106:
    ``format_string(random.choice(prompts))``; UniIR seeds Python's ``random`` with ``seed + rank``).
    ``positives`` (UniIR's evaluation, ``MBEIRMainDataset.__getitem__`` with ``shuffle_cand``): the
    number of each query's positive candidates; before its prompt, a query draws one of them with
    ``random.choice`` (``_get_random_cand``), as UniIR's dataset does, so the prompt draws interleave
    with these (a query without one fails there, and here: ``Cannot find positive candidates``).
    ``workers``: the draws happen in DataLoader workers, worker ``w`` seeding Python's ``random``
    with ``seed + w`` (torch's ``_worker_loop``; ``seed`` then stands for the loader's base seed) and
    taking the batches of ``batch_size`` queries in turn; 0: one process reading the queries in order.

    ``text_format: uniir``: the prompt is formatted first, then the joined text again (l.220 and
    l.336: ``format_string(f"{query_prompt} {query_txt}")``, with ``query_txt = entry.get("query_txt")
    or ""``), so an image-only query's text is the formatted prompt and its text embedding enters the
    sum (the collator masks only ``None`` and ``""``, l.430-431). Without a prompt: ``format_string(query_txt)``.
    ``raw`` (M3Retrieve's captions as they are): the template with the prompt, and an image-only
    query's text is the prompt alone.
    """
    uniir = text_format == "uniir"
    if prompt is None:
        return [(format_string(t) or None) if uniir else t for t in texts]
    template, instruction = prompt
    rngs = [random.Random(seed + w) for w in range(workers)] if workers else [random.Random(seed)]
    choices = [instruction] if isinstance(instruction, str) else list(instruction)  # one prompt is a draw too (a list of one)
    out: list[str | None] = []
    for i, text in enumerate(texts):
        rng = rngs[(i // batch_size) % workers] if workers else rngs[0]
        if positives is not None:
            if positives[i] < 1:
                name = ids[i] if ids is not None else f"at position {i}"
                raise DataError(f"query {name}: no positive candidate to draw (UniIR's MBEIRMainDataset asserts one: 'Cannot find positive candidates')")
            rng.choice(range(positives[i]))  # _get_random_cand: random.choice(pos_cand_list), only its draw matters here
        chosen = rng.choice(choices)
        if uniir:
            chosen = format_string(chosen)
            joined = format_string(template.replace("{instruction}", chosen).replace("{query}", text or ""))  # str.replace: a query may hold braces
        else:
            joined = template.replace("{instruction}", chosen).replace("{query}", text) if (text or "").strip() else chosen
        out.append(joined or None)
    return out


# --- reading a checkpoint -----------------------------------------------------------------------


def load_checkpoint_state(path: str | Path, model_name: str) -> dict[str, Any]:
    """The CLIP state dict in ``path`` in open_clip's key layout, read by :func:`medbench_core.retrieval.checkpoints.load_state_dict`.

    UniIR's layout is accepted: keys lose ``module.`` and ``clip_model.``, a ``model`` entry is
    unwrapped, and the OpenAI JIT extras (``input_resolution`` ...) are dropped.
    """
    state = load_state_dict(path, model_name, strip_prefixes=PREFIXES)
    return {key: value for key, value in state.items() if key not in OPENAI_EXTRA_KEYS}


# --- the encoder --------------------------------------------------------------------------------


class UniIRClipEncoder(ClipEncoder):
    """open_clip CLIP whose record vector is normalise(raw image embedding + raw text embedding)."""

    @property
    def dim(self) -> int:
        return self._embed_dim()

    def encode_records(self, texts, images, languages, role, ids=None, prompt: tuple[str, Any] | None = None, positives=None) -> np.ndarray:
        """normalise(raw image + raw text embedding) per record; queries are built as UniIR builds them (:func:`uniir_query_texts`,
        ``prompt``, ``positives``: each query's count of positive candidates, with ``shuffle_cand``)."""
        n = len(texts)
        s = self.spec.settings
        if role == "query":
            draws = {"positives": positives, "workers": s.prompt_workers, "batch_size": s.prompt_batch_size, "ids": ids}
            texts = uniir_query_texts(list(texts), prompt, s.text_format, s.prompt_seed, **draws)
        elif s.text_format == "uniir":
            texts = [format_string(t) if isinstance(t, str) else t for t in texts]
        names, t_idx, i_idx = self.split_records(texts, images, languages, role, ids)
        out = np.zeros((n, self._embed_dim()), dtype=np.float32)
        # UniIR masks the side a record lacks: its embedding enters the sum as zero.
        out[t_idx] += self.encode_texts([texts[i] for i in t_idx], normalize=False)
        out[i_idx] += self.encode_images([Path(images[i]) for i in i_idx], [names[i] for i in i_idx], normalize=False)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        bad = [names[i] for i in np.flatnonzero(norms[:, 0] < 1e-12)]
        if bad:
            raise DataError(f"model {self.spec.name}: the summed embedding of {bad[:5]} is zero; it cannot be normalised")
        return np.ascontiguousarray(out / norms, dtype=np.float32)


def checkpoint_file(spec: ModelSpec, *, online: bool = False, cache_dir: str | Path | None = None) -> Path:
    """The checkpoint file of ``spec``: its ``path``, or ``settings.file`` inside the hub snapshot of ``path`` at the pinned revision."""
    from medbench_core.hub import is_repo_id, snapshot

    if spec.settings.file:
        if not is_repo_id(spec.path):
            raise DataError(f"model {spec.name}: settings.file names a file inside a hub repository; path {spec.path!r} is not a hub id org/name")
        try:
            folder, _ = snapshot(spec.path, spec.revision or "main", repo_type="model", online=online, cache_dir=cache_dir)
        except DataError as exc:
            raise DataError(f"model {spec.name}: cannot load {spec.path!r} ({exc})") from exc
        path = folder / spec.settings.file
        if not path.is_file():
            raise DataError(f"model {spec.name}: {spec.settings.file!r} is not in {spec.path}@{folder.name} ({folder})")
        return path
    path = Path(spec.path).expanduser()
    if not path.is_file():
        hint = "; for a hub repository give settings.file (e.g. checkpoint/CLIP_SF/clip_sf_large.pth)" if is_repo_id(spec.path) else ""
        raise DataError(f"model {spec.name}: checkpoint {spec.path} not found{hint}")
    return path


def load_uniir_encoder(
    spec: ModelSpec, device: str = "cpu", progress: bool | None = False, *, online: bool = False, cache_dir: str | Path | None = None
) -> Any:
    """The CLIP-SF encoder of ``spec``: the architecture built by open_clip, the checkpoint loaded strictly, in eval mode on ``device``."""
    import open_clip

    from medbench_core.retrieval.clip import _quiet_random_init_warning, resolve_architecture
    from medbench_core.retrieval.weights import torch_dtype

    s = spec.settings
    path = checkpoint_file(spec, online=online, cache_dir=cache_dir)
    arch = resolve_architecture(spec.name, s.architecture)
    with _quiet_random_init_warning():
        model, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=None, device="cpu", weights_only=True)
    tokenizer = open_clip.get_tokenizer(arch)
    state = load_checkpoint_state(path, spec.name)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        lines = str(exc).splitlines()
        raise DataError(f"model {spec.name}: {path} does not fit architecture {arch!r}: {' '.join(lines[:3])[:500]}") from exc
    model = model.to(device).eval()
    dtype = torch_dtype(spec)
    if dtype is not None:
        model = model.to(dtype)
    return UniIRClipEncoder(spec, model, preprocess, tokenizer, {"fusion": "sum", "max_aspect_ratio": s.max_aspect_ratio}, device, progress=progress)


def positive_counts(task: Task) -> list[int]:
    """Each query's positive candidates as UniIR's evaluation sees them (``MBEIRMainDataset.__getitem__``):
    judged relevant, and in eval mode only those of the query's own dataset (the part of an M-BEIR id
    before ``:``; ids without one are not filtered)."""
    qrels = task.qrels.filter(pl.col("relevance") > 0).select("query_id", "doc_id").iter_rows()
    counts: dict[str, int] = {}
    for q, d in qrels:
        if ":" in q and ":" in d and q.split(":")[0] != d.split(":")[0]:
            continue
        counts[q] = counts.get(q, 0) + 1
    return [counts.get(q, 0) for q in task.queries["query_id"].to_list()]


class UniIRClipSFKind(EncoderKind):
    name = "uniir-clip-sf"
    packages = ("open_clip_torch", "torch", "safetensors", "pillow")
    Settings = UniIRSettings
    # 2: queries as UniIR builds them: the prompt formatted before the join, an image-only query
    #    given the prompt as its text, a list of prompts drawn per query
    version = "2"
    needs_path = True
    reads = frozenset({"text", "image"})

    def check_entry(self, spec: ModelSpec, where: str) -> None:
        from medbench_core.hub import is_repo_id

        if not spec.settings.file and not is_repo_id(spec.path) and Path(spec.path).suffix.lower() not in CHECKPOINT_SUFFIXES:
            raise DataError(f"{where}: path {spec.path!r}: give a checkpoint file ({', '.join(CHECKPOINT_SUFFIXES)}) or a hub id with settings.file")

    def hub_id(self, spec: ModelSpec) -> str:
        from medbench_core.hub import is_repo_id

        return spec.path if spec.settings.file and is_repo_id(spec.path) else ""

    def revision(self, spec: ModelSpec) -> str:
        """A local file's ``sha256:<16 hex>``; a hub checkpoint's commit as the cache records it (or the entry's revision)."""
        from medbench_core.storage import sha256_file

        if self.hub_id(spec):
            if not spec.revision:
                return "unpinned"
            from medbench_core.hub import resolve_revision

            try:
                return resolve_revision(spec.path, spec.revision, repo_type="model", online=False)
            except DataError:
                return spec.revision
        return "sha256:" + sha256_file(checkpoint_file(spec))[:16]

    def query_prompt(self, spec: ModelSpec, task: Task) -> tuple[str, Any] | None:
        """``(template, instruction)`` on ``task``: the instruction a text, or a tuple of prompts to draw from per query."""
        table = spec.settings.instructions or {}
        for key in (task.name, task.meta.task_type, "default"):
            if key and key in table:
                value = table[key]
                return spec.settings.query_template or UNIIR_TEMPLATE, value if isinstance(value, str) else tuple(value)
        return None

    def prompt_key(self, spec: ModelSpec, task: Task) -> dict[str, Any] | None:
        if spec.settings.instructions is None and spec.settings.query_template is None:
            return None
        prompt = self.query_prompt(spec, task)
        key: dict[str, Any] = {"query_prompt": [prompt[0], prompt[1] if isinstance(prompt[1], str) else list(prompt[1])] if prompt else None}
        if prompt and (not isinstance(prompt[1], str) or spec.settings.shuffle_cand):
            key["prompt_seed"] = spec.settings.prompt_seed  # the draws depend on it
        if prompt and spec.settings.shuffle_cand:
            key["prompt_draws"] = {"shuffle_cand": True, "workers": spec.settings.prompt_workers, "batch_size": spec.settings.prompt_batch_size}
        return key

    def represent_queries(self, spec: ModelSpec, task: Task, model: Any, *, prompt: tuple[str, Any] | None, expansion: Any = None) -> np.ndarray:
        """Query vectors, the texts built as UniIR builds them (the prompt on image-only queries too)."""
        from medbench_core.retrieval.records import side_records

        ids, texts, images, langs = side_records(task, "query")
        extra = {"positives": positive_counts(task)} if prompt is not None and spec.settings.shuffle_cand else {}
        emb = model.encode_records(texts, images, langs, "query", ids=ids, prompt=prompt, **extra)
        if emb.shape[0] != len(ids):
            raise DataError(f"task {task.name}: encoder returned {emb.shape[0]} vectors for {len(ids)} queries")
        return np.ascontiguousarray(emb, dtype=np.float32)

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        return {
            **super().mteb_meta(spec, registry), "framework": ["PyTorch"], "similarity_fn_name": "cosine",
            "use_instructions": bool(spec.settings.instructions), "max_tokens": 77.0,
        }  # fmt: skip

    def load(self, spec: ModelSpec, *, device: str = "cpu", progress: bool | None = False, online: bool = False) -> Any:
        return load_uniir_encoder(spec, device=device, progress=progress, online=online)


KIND = UniIRClipSFKind()
