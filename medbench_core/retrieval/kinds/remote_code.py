"""Kind ``remote-code-embedder``: multimodal embedders that ship their own code (MM-Embed, BGE-VL / MMRet,
GME, jina-clip, NV-Embed, ...), called through the encode methods their model cards name.

The entry says, for each kind of record, which method of the loaded model encodes it and how the
inputs go in (``text``, ``image``, ``image_text``; each a *call*, see :class:`Call`). The model is
``transformers.AutoModel.from_pretrained(folder, trust_remote_code=True)`` on a local folder or the
hub cache's snapshot at the pinned revision; its code runs only for a hub id on the registry's
``trust_remote_code`` allowlist (:func:`medbench_core.retrieval.weights.check_remote_code` refuses
an ``auto_map`` otherwise). Vectors are L2-normalised unless ``normalize: false`` (MM-Embed and
NV-Embed return raw pooled vectors; the others normalise already, and normalising twice changes
nothing).

Per-task query instructions (``instructions``, keyed like the text encoders': task name, task type,
``default``) go to the model as a keyword when the call names one (``instruction: instruction`` for
MM-Embed, GME, NV-Embed), else into the query text through ``query_template``; an image-only query
gets it too (the keyword, else as the text of an ``image_text`` call with an empty query, when the
entry has one). Passages never get one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.encoder import EncoderKind
from medbench_core.retrieval.kinds.settings import KindSettings, closest
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.weights import DTYPES
from medbench_core.taskdata.task import Task

RECORD_TYPES = ("text", "image", "image_text")
CALL_KEYS = ("method", "texts", "images", "records", "processor", "single", "kwargs", "query_kwargs", "passage_kwargs", "instruction", "output", "fuse", "mask")


@dataclass(frozen=True)
class Call:
    """How one kind of record reaches the model: ``model.<method>(...)``.

    - ``texts`` / ``images``: where the batch's texts / images go: a keyword (``text``, ``images``)
      or a position (``0``: the first positional argument);
    - ``records``: instead, one list of dicts ``{arg: 0, text: txt, image: img}`` (MM-Embed's
      ``encode([{'txt': ..., 'img': ...}])``): ``arg`` where the list goes, ``text``/``image`` the keys;
    - ``processor: true``: instead, the batch goes through the model folder's ``AutoProcessor``
      (``text=``, ``images=``, padded and truncated tensors) and the method gets its output as
      keywords: transformers' own CLIPs (PubMedCLIP: ``get_text_features`` / ``get_image_features``,
      ``output: pooler_output``);
    - ``single``: pass one record per call (a string, an image), not a list;
    - ``kwargs`` (both roles), ``query_kwargs``, ``passage_kwargs``: constant keyword arguments
      (``is_query: true``, ``max_length: 512``);
    - ``instruction``: the keyword a query's instruction goes under (else it is put into the text);
    - ``output``: the key or attribute of the returned value that holds the vectors (MM-Embed: ``hidden_states``),
      or a list of them, added (MedImageInsight: ``[text_embeddings, image_embeddings]``);
    - ``fuse: sum`` (``image_text`` only): no method; the raw text and image vectors are added (jina-clip in MTEB);
    - ``mask`` (token vectors only, :mod:`.code_folder`): the key or attribute of a ``(records, tokens)``
      mask beside a padded ``output``; tokens where it is 0 are dropped.
    """

    method: str = ""
    texts: str | int | None = None
    images: str | int | None = None
    records: dict | None = None
    processor: bool = False
    single: bool = False
    kwargs: dict = field(default_factory=dict)
    query_kwargs: dict = field(default_factory=dict)
    passage_kwargs: dict = field(default_factory=dict)
    instruction: str = ""
    output: str | list = ""
    fuse: str = ""
    mask: str = ""

    @classmethod
    def parse(cls, raw: Any, record_type: str, where: str) -> Call:
        at = f"{where}: settings.{record_type}"
        if not isinstance(raw, Mapping):
            raise DataError(f"{at} must be a mapping such as {{method: encode, texts: 0}}, not {raw!r}")
        for key in raw:
            if key not in CALL_KEYS:
                raise DataError(f"{at}: unknown key {key!r}{closest(str(key), CALL_KEYS)}; known keys: {', '.join(CALL_KEYS)}")
        types = {
            "method": str,
            "single": bool,
            "processor": bool,
            "instruction": str,
            "output": (str, list),
            "fuse": str,
            "mask": str,
            "records": (dict, type(None)),
        }
        for key, want in types.items():
            if key in raw and not isinstance(raw[key], want):
                named = {"records": "a mapping", "output": "a key or a list of keys"}.get(key) or want.__name__
                raise DataError(f"{at}: {key} must be {named}, not {raw[key]!r}")
        if isinstance(raw.get("output"), list) and not (raw["output"] and all(isinstance(o, str) and o for o in raw["output"])):
            raise DataError(f"{at}: output as a list names the keys whose vectors are added, not {raw['output']!r}")
        call = cls(**{k: v for k, v in raw.items()})
        for name in ("texts", "images"):
            v = getattr(call, name)
            if v is not None and not (isinstance(v, str) and v.isidentifier() or isinstance(v, int) and not isinstance(v, bool) and v >= 0):
                raise DataError(f"{at}: {name} must be a keyword name or a position (0, 1, ...), not {v!r}")
        for name in ("kwargs", "query_kwargs", "passage_kwargs"):
            if not isinstance(getattr(call, name), Mapping):
                raise DataError(f"{at}: {name} must be a mapping of keyword arguments")
        if call.fuse:
            if record_type != "image_text" or call.fuse != "sum":
                raise DataError(f"{at}: fuse takes 'sum' and only for image_text (the text and image calls' raw vectors added)")
            if call.method:
                raise DataError(f"{at}: give either a method or fuse: sum, not both")
            return call
        if not call.method or not call.method.isidentifier() or call.method.startswith("_"):
            raise DataError(f"{at} needs 'method': the name of the model's public encode method (e.g. encode, encode_text)")
        wants = {"text": ("texts",), "image": ("images",), "image_text": ("texts", "images")}[record_type]
        if call.processor:
            if call.records is not None or call.texts is not None or call.images is not None:
                raise DataError(f"{at}: with processor: true the processor takes the texts and images; drop texts/images/records")
        elif call.records is not None:
            rec = call.records
            if not isinstance(rec, Mapping) or set(rec) - {"arg", "text", "image"} or "arg" not in rec:
                raise DataError(f"{at}: records takes arg (where the list goes) and the keys text and image, not {rec!r}")
            missing = [w for w in wants if (w[:-1] if w == "texts" else "image") not in rec]
            if missing or call.texts is not None or call.images is not None:
                raise DataError(
                    f"{at}: with records, name the record keys ({', '.join(w[:-1] if w == 'texts' else 'image' for w in wants)}) "
                    "inside records, not texts/images"
                )
        else:
            missing = [w for w in wants if getattr(call, w) is None]
            if missing:
                raise DataError(f"{at}: say where the {' and '.join(missing)} go (a keyword or a position), or give records")
            if record_type == "text" and call.images is not None or record_type == "image" and call.texts is not None:
                raise DataError(f"{at}: a {record_type} record has no {'images' if record_type == 'text' else 'texts'} to pass")
        return call


@dataclass(frozen=True)
class RemoteCodeSettings(KindSettings):
    """``text``, ``image``, ``image_text`` (calls), ``image_input`` (pil | path), ``normalize``,
    ``processor_method``, ``instructions`` / ``query_template`` (queries only), ``dtype``."""

    text: dict | None = None
    image: dict | None = None
    image_text: dict | None = None
    image_input: str = "pil"
    normalize: bool = True
    processor_method: str = ""
    instructions: dict | None = None
    query_template: str | None = None
    dtype: str | None = None

    CHOICES = {"image_input": ("pil", "path"), "dtype": (None, *DTYPES)}
    QUERY_ONLY = ("instructions", "query_template")
    HINTS = {
        "pooling": "a remote-code embedder pools as its own encode method does",
        "trust_remote_code": "trust comes from the top-level trust_remote_code allowlist of models.yaml",
    }

    def check(self, where: str) -> None:
        calls = self.calls(where)
        if not calls:
            raise DataError(f"{where}: settings need at least one of text, image, image_text (the model's encode method for those records)")
        if "image_text" in calls and calls["image_text"].fuse and not ("text" in calls and "image" in calls):
            raise DataError(f"{where}: image_text: {{fuse: sum}} adds the text and image calls' vectors; give settings.text and settings.image too")
        if self.processor_method and (not self.processor_method.isidentifier() or self.processor_method.startswith("_")):
            raise DataError(f"{where}: processor_method must name a public method of the model, not {self.processor_method!r}")
        if self.instructions is not None and not all(isinstance(v, str) for v in self.instructions.values()):
            raise DataError(f"{where}: instructions must map a task name, task type or 'default' to an instruction text")
        if self.query_template is not None and ("{query}" not in self.query_template or "{instruction}" not in self.query_template):
            raise DataError(f"{where}: query_template {self.query_template!r} needs both {{instruction}} and {{query}}")

    def calls(self, where: str = "model entry") -> dict[str, Call]:
        """The entry's calls by record type (``text``, ``image``, ``image_text``)."""
        return {t: Call.parse(getattr(self, t), t, where) for t in RECORD_TYPES if getattr(self, t) is not None}


def record_type(has_text: bool, has_image: bool, calls: Mapping[str, Call]) -> str:
    """The call a record goes to: ``text``, ``image`` or ``image_text``.

    A text-only model (no image call at all: NV-Embed) reads the text side of a record that also
    carries an image, as BM25 and the text encoders do.
    """
    if has_text and has_image:
        return "text" if "image" not in calls and "image_text" not in calls else "image_text"
    return "text" if has_text else "image"


def _field(result: Any, name: str, what: str, setting: str = "output") -> Any:
    """``result[name]``, else ``result.name``, with tensors as float32 numpy arrays."""
    try:
        value = result[name]
    except (KeyError, TypeError, IndexError):
        if not hasattr(result, name):
            raise DataError(f"{what} returned {type(result).__name__} without {name!r} (settings {setting})") from None
        value = getattr(result, name)
    return _numpy(value)


def _numpy(value: Any) -> Any:
    if hasattr(value, "detach"):
        return value.detach().float().cpu().numpy()
    if isinstance(value, (list, tuple)):
        return [_numpy(v) for v in value]
    return value


def _vectors(result: Any, output: str | list, n: int, what: str) -> np.ndarray:
    """The (n, dim) float32 array a call returned (under ``output`` when given; a list of outputs: their sum)."""
    if isinstance(output, list):
        parts = [_vectors(result, o, n, what) for o in output]
        if len({p.shape for p in parts}) != 1:
            raise DataError(f"{what} returned outputs {output} of shapes {[p.shape for p in parts]}; they cannot be added")
        return np.sum(parts, axis=0, dtype=np.float32)
    if output:
        result = _field(result, output, what)
    if hasattr(result, "detach"):
        result = result.detach().float().cpu().numpy()
    try:
        arr = np.asarray(result, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise DataError(
            f"{what} returned {type(result).__name__}, not an array of vectors; name the key or attribute that holds them (settings output)"
        ) from exc
    if arr.ndim == 1 and n == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] != n:
        raise DataError(f"{what} returned an array of shape {arr.shape} for {n} records; expected ({n}, dim) (set settings output?)")
    return arr


def _token_sets(result: Any, call: Call, n: int, what: str) -> list[np.ndarray]:
    """The ``n`` arrays of token vectors a call returned: a list of ``(tokens, dim)`` arrays, or a padded
    ``(n, tokens, dim)`` array with the ``mask`` output saying which tokens are real."""
    if isinstance(call.output, list):
        raise DataError(f"{what}: token vectors come from one output, not a list {call.output}")
    value = _field(result, call.output, what) if call.output else _numpy(result)
    sets = [np.asarray(v, dtype=np.float32) for v in value] if isinstance(value, list) else list(np.asarray(value, dtype=np.float32))
    if len(sets) != n or any(v.ndim != 2 for v in sets):
        raise DataError(f"{what} returned {len(sets)} token sets of shapes {[v.shape for v in sets[:3]]} for {n} records; expected (tokens, dim) each")
    if call.mask:
        mask = np.asarray(_field(result, call.mask, what, "mask")).astype(bool)
        if mask.ndim == 3 and mask.shape[2] == 1:  # FLMR's context_mask is (records, tokens, 1)
            mask = mask[:, :, 0]
        if mask.shape[0] != n or mask.ndim != 2 or mask.shape[1] != sets[0].shape[0]:
            raise DataError(f"{what}: mask {call.mask!r} of shape {mask.shape} does not fit {n} records of {sets[0].shape[0]} tokens")
        sets = [v[m] for v, m in zip(sets, mask)]
    return sets


class RemoteCodeEncoder:
    """A loaded remote-code model, called as the entry's calls say; encodes records of any kind it has a call for."""

    def __init__(self, spec: ModelSpec, model: Any, device: str = "cpu", progress: bool | None = False):
        import torch

        from medbench_core.progress import resolve as resolve_progress

        self.spec = spec
        self.model = model
        self.device = device
        self.calls = spec.settings.calls(f"model {spec.name}")
        self.processor: Any = None
        self.progress = resolve_progress(progress)
        self._torch = torch

    def _images(self, paths: list[Path], names: list[str]) -> list[Any]:
        from medbench_core.taskdata.images import load_image

        loaded = [load_image(p, n) for p, n in zip(paths, names)]  # a bad file is named before the model sees it
        mode = self.spec.settings.image_input
        if mode == "base64":  # the file's bytes, base64 (MedImageInsight's encode decodes them with base64.b64decode)
            import base64

            return [base64.b64encode(Path(p).read_bytes()).decode("ascii") for p in paths]
        return [str(p) for p in paths] if mode == "path" else loaded

    def _call(self, which: str, texts: list[str] | None, images: list[Any] | None, role: str, instruction: str | None, multi: bool = False) -> Any:
        """The vectors of one group of records (``multi``: a list of token-vector arrays)."""
        call = self.calls[which]
        n = len(texts if texts is not None else images)
        if call.fuse == "sum":
            return self._call("text", texts, None, role, instruction) + self._call("image", None, images, role, instruction)
        extra = dict(call.kwargs)
        extra.update(call.query_kwargs if role == "query" else call.passage_kwargs)
        if instruction is not None and role == "query":
            if call.instruction:  # image-only queries too: MM-Embed's script passes instruction= with every query
                extra[call.instruction] = instruction[1]
            elif texts is not None:
                texts = [instruction[0].replace("{instruction}", instruction[1]).replace("{query}", t) for t in texts]
        what = f"model {self.spec.name}: {call.method}"
        method = getattr(self.model, call.method, None)
        if method is None or not callable(method):
            raise DataError(f"model {self.spec.name}: the loaded {type(self.model).__name__} has no method {call.method!r} (settings.{which}.method)")
        items = [{} for _ in range(n)]
        if call.records is not None:
            for i in range(n):
                if texts is not None:
                    items[i][call.records["text"]] = texts[i]
                if images is not None:
                    items[i][call.records["image"]] = images[i]

        def invoke(rows: slice) -> Any:
            args: dict[int, Any] = {}
            kw = dict(extra)
            if call.processor:
                feed: dict[str, Any] = {"return_tensors": "pt"}
                if texts is not None:
                    feed.update(text=texts[rows], padding=True, truncation=True)
                if images is not None:
                    feed["images"] = images[rows]
                return method(**self.processor(**feed).to(self.device), **kw)
            parts = [(call.records["arg"], items[rows])] if call.records is not None else []
            if call.records is None:
                if texts is not None:
                    parts.append((call.texts, texts[rows]))
                if images is not None:
                    parts.append((call.images, images[rows]))
            for where, value in parts:
                value = value[0] if call.single else value
                if isinstance(where, int):
                    args[where] = value
                else:
                    kw[where] = value
            if sorted(args) != list(range(len(args))):
                raise DataError(f"model {self.spec.name}: settings.{which} puts arguments at positions {sorted(args)}; positions must start at 0 without gaps")
            return method(*[args[i] for i in range(len(args))], **kw)

        step = 1 if call.single else max(1, int(self.spec.batch_size))
        out = []
        with self._torch.inference_mode():
            for start in range(0, n, step):
                rows = slice(start, min(n, start + step))
                got = invoke(rows)
                out.append(_token_sets(got, call, rows.stop - rows.start, what) if multi else _vectors(got, call.output, rows.stop - rows.start, what))
        if multi:
            return [v for part in out for v in part]
        return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)

    def _groups(self, texts, images, role: str, ids, instruction, allow_empty: bool = False) -> tuple[list[str], list[Any], dict[str, list[int]]]:
        """The records' names, their texts (an image-only query promoted to image_text gets ``""``) and positions by call;
        ``allow_empty``: a record with neither text nor image goes to the text call as ``""`` (an empty expansion, as R2MED encodes it)."""
        n = len(texts)
        names = [str(x) for x in ids] if ids is not None else [f"{role} record at position {i}" for i in range(n)]
        has_t = [isinstance(t, str) and bool(t.strip()) for t in texts]
        has_i = [im is not None and str(im) != "" for im in images]
        groups: dict[str, list[int]] = {"text": [], "image": [], "image_text": []}
        # An image-only query whose image call takes no instruction keyword gets its instruction as text,
        # through the image_text call (the template with an empty query), as UniIR gives it its prompt.
        promote = role == "query" and instruction is not None and "image_text" in self.calls and not ("image" in self.calls and self.calls["image"].instruction)
        texts = list(texts)
        for i in range(n):
            if not has_t[i] and not has_i[i]:
                if allow_empty:
                    texts[i] = "" if texts[i] is None else texts[i]
                    groups["text"].append(i)
                    continue
                raise DataError(f"model {self.spec.name}: {role} record {names[i]} has neither text nor image")
            if promote and has_i[i] and not has_t[i]:
                texts[i] = ""
                groups["image_text"].append(i)
                continue
            groups[record_type(has_t[i], has_i[i], self.calls)].append(i)
        for kind, rows in groups.items():
            if rows and kind not in self.calls:
                raise DataError(
                    f"model {self.spec.name}: {len(rows)} {role} record(s) carry {kind.replace('_', ' and ')} (e.g. {names[rows[0]]}) "
                    f"and the entry gives no settings.{kind}"
                )
        return names, texts, groups

    def encode_multi(self, texts, images, languages, role, ids=None, instruction: tuple[str, str] | None = None) -> list[np.ndarray]:
        """Token vectors per record (late interaction), by the call for its kind; each vector L2-normalised unless ``normalize: false``."""
        names, texts, groups = self._groups(texts, images, role, ids, instruction)
        out: list[np.ndarray | None] = [None] * len(texts)
        for kind, rows in groups.items():
            if not rows:
                continue
            t = [texts[i] for i in rows] if kind != "image" else None
            im = self._images([Path(images[i]) for i in rows], [names[i] for i in rows]) if kind != "text" else None
            for i, vecs in zip(rows, self._call(kind, t, im, role, instruction, multi=True)):
                if len(vecs) == 0:
                    raise DataError(f"model {self.spec.name}: settings.{kind} gave no token vectors for {role} record {names[i]}")
                if self.spec.settings.normalize:
                    vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
                out[i] = np.ascontiguousarray(vecs, dtype=np.float32)
        dims = {v.shape[1] for v in out if v is not None}
        if len(dims) > 1:
            raise DataError(f"model {self.spec.name}: the calls give token vectors of {sorted(dims)} dims; one model gives one width")
        return out  # type: ignore[return-value]

    def encode_records(self, texts, images, languages, role, ids=None, instruction: tuple[str, str] | None = None, allow_empty: bool = False) -> np.ndarray:
        """One vector per record, by the call for its kind (text, image, or both); L2-normalised unless ``normalize: false``.

        ``instruction``: ``(template, instruction)`` for queries (a keyword of the call, or put into the text).
        ``allow_empty``: an empty text is encoded as ``""`` (expansions: R2MED encodes an empty one) instead of refused.
        """
        n = len(texts)
        names, texts, groups = self._groups(texts, images, role, ids, instruction, allow_empty)
        vectors: np.ndarray | None = None
        for kind, rows in groups.items():
            if not rows:
                continue
            t = [texts[i] for i in rows] if kind != "image" else None
            im = self._images([Path(images[i]) for i in rows], [names[i] for i in rows]) if kind != "text" else None
            got = self._call(kind, t, im, role, instruction)
            if vectors is None:
                vectors = np.zeros((n, got.shape[1]), dtype=np.float32)
            elif got.shape[1] != vectors.shape[1]:
                raise DataError(f"model {self.spec.name}: settings.{kind} gives {got.shape[1]}-d vectors, another call {vectors.shape[1]}-d")
            vectors[rows] = got
        assert vectors is not None  # n >= 1: encode_side refuses an empty side
        if self.spec.settings.normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            zero = [names[i] for i in np.flatnonzero(norms[:, 0] < 1e-12)]
            if zero and not allow_empty:
                raise DataError(f"model {self.spec.name}: the vector of {zero[:5]} is zero; it cannot be normalised")
            # an empty expansion's zero vector stays zero, as torch's normalize (R2MED's NVEmbedModel, utils.py l.675-676) leaves it
            vectors = vectors / np.maximum(norms, 1e-12)
        return np.ascontiguousarray(vectors, dtype=np.float32)


def load_remote_code_encoder(
    spec: ModelSpec, device: str = "cpu", progress: bool | None = False, *, online: bool = False, cache_dir: str | Path | None = None
) -> RemoteCodeEncoder:
    """The model of ``spec`` loaded with its own code (only when the registry trusts it), in eval mode on ``device``."""
    from transformers import AutoModel

    from medbench_core.progress import library_bars
    from medbench_core.retrieval.weights import check_remote_code, model_folder, torch_dtype

    folder = model_folder(spec, online=online, cache_dir=cache_dir)
    check_remote_code(spec, folder)
    try:
        with library_bars(progress):
            model = AutoModel.from_pretrained(str(folder), trust_remote_code=spec.trust_remote_code, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise DataError(f"model {spec.name}: cannot load {str(folder)!r} ({exc}); offline runs need a local folder or a cached hub id") from exc
    dtype = torch_dtype(spec)
    if dtype is not None:
        model = model.to(dtype)
    model = model.to(device).eval()
    if spec.settings.processor_method:
        setup = getattr(model, spec.settings.processor_method, None)
        if not callable(setup):
            raise DataError(
                f"model {spec.name}: the loaded {type(model).__name__} has no method {spec.settings.processor_method!r} (settings.processor_method)"
            )
        setup(str(folder))  # BGE-VL: model.set_processor(<model folder>)
    encoder = RemoteCodeEncoder(spec, model, device=device, progress=progress)
    if any(c.processor for c in encoder.calls.values()):
        from transformers import AutoProcessor

        try:
            encoder.processor = AutoProcessor.from_pretrained(str(folder), trust_remote_code=spec.trust_remote_code, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise DataError(f"model {spec.name}: settings ask for the model's processor and {folder} has none that loads ({exc})") from exc
    return encoder


class RemoteCodeKind(EncoderKind):
    name = "remote-code-embedder"
    packages = ("transformers", "tokenizers", "safetensors", "torch", "pillow")
    Settings = RemoteCodeSettings
    # 2: image-only queries get the instruction (the call's keyword, else as text through image_text)
    version = "2"
    needs_path = True
    reads = frozenset({"text", "image"})
    expansion_family = "dense"  # text expansions: R2MED's NV-Embed rows

    def instructs_expansion(self, spec: ModelSpec) -> bool:
        """True when the text call hands the instruction to the model as a keyword (``instruction: instruction``):
        R2MED's NV-Embed, GritLM and Instructor classes, which pass it so, give it to the expansion too (Kind.instructs_expansion)."""
        call = spec.settings.calls(f"model {spec.name}").get("text")
        return bool(call is not None and call.instruction)

    def hub_id(self, spec: ModelSpec) -> str:
        from medbench_core.hub import is_repo_id

        return spec.path if is_repo_id(spec.path) else ""

    def revision(self, spec: ModelSpec) -> str:
        from medbench_core.retrieval.kinds.dense import resolve_revision_of_path

        return resolve_revision_of_path(spec)

    def own_applicability(self, spec: ModelSpec, task: Task) -> str | None:
        """``n/a`` when the task holds a kind of record (text, image, both) the entry gives no call for."""
        calls = spec.settings.calls(f"model {spec.name}")
        for side, frame, texts in (("queries", task.queries, task.queries["text"].fill_null("").to_list()), ("documents", task.corpus, task.doc_text())):
            ids = frame["query_id" if side == "queries" else "doc_id"].to_list()
            images = frame["image"].to_list() if "image" in frame.columns else [None] * frame.height
            for i, (t, im) in enumerate(zip(texts, images)):
                if not (t or "").strip() and not im:
                    continue
                kind = record_type(bool((t or "").strip()), bool(im), calls)
                if kind not in calls:
                    return f"{spec.name} has no settings.{kind}, and {side} of {task.name} carry {kind.replace('_', ' and ')} (e.g. {ids[i]})"
        return None

    def query_prompt(self, spec: ModelSpec, task: Task) -> tuple[str, str] | None:
        from medbench_core.retrieval import instructions

        return instructions.resolve(spec.settings, task.name, task.meta.task_type, spec.name)

    def prompt_key(self, spec: ModelSpec, task: Task) -> dict[str, Any] | None:
        from medbench_core.retrieval import instructions

        return instructions.key_part(spec.settings, task.name, task.meta.task_type, spec.name) or None

    def represent_queries(self, spec: ModelSpec, task: Task, model: Any, *, prompt: tuple[str, str] | None, expansion: Any = None) -> np.ndarray:
        """Query vectors; the instruction goes to the model as its call says (a keyword, or inside the text)."""
        from medbench_core.retrieval.records import side_records

        ids, texts, images, langs = side_records(task, "query")
        if expansion is not None:
            from medbench_core.retrieval.expansion.combine import dense_query_vectors

            expansions, combine = expansion

            def encode(texts: list[str], role: str, query_prompt: tuple[str, str] | None) -> np.ndarray:
                # an expansion is a text the model reads as a query (its query keywords), with the
                # query's instruction only when the combination says so (instruct_expansion)
                return model.encode_records(texts, [None] * len(texts), langs, "query", ids=ids, instruction=query_prompt, allow_empty=True)

            return dense_query_vectors(encode, [t or "" for t in texts], expansions, combine, prompt, normalize=bool(spec.settings.normalize))
        emb = model.encode_records(texts, images, langs, "query", ids=ids, instruction=prompt)
        if emb.shape[0] != len(ids):
            raise DataError(f"task {task.name}: encoder returned {emb.shape[0]} vectors for {len(ids)} queries")
        return np.ascontiguousarray(emb, dtype=np.float32)

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        calls = spec.settings.calls(f"model {spec.name}")
        images = "image" in calls or "image_text" in calls
        return {
            **super().mteb_meta(spec, registry), "framework": ["Transformers", "PyTorch"], "open_weights": True if self.hub_id(spec) else None,
            "similarity_fn_name": "cosine" if spec.settings.normalize else "dot", "use_instructions": bool(spec.settings.instructions),
            "modalities": ["image", "text"] if images else ["text"],
        }  # fmt: skip

    def load(self, spec: ModelSpec, *, device: str = "cpu", progress: bool | None = False, online: bool = False) -> Any:
        return load_remote_code_encoder(spec, device=device, progress=progress, online=online)


KIND = RemoteCodeKind()
