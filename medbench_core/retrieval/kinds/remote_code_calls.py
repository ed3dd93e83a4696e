"""The calling convention of a remote-code embedder's entry: which method of the loaded model encodes a
kind of record, how the inputs go in, and where the vectors come back (:class:`Call`).

A small language written in ``models.yaml`` (``settings.text``, ``settings.image``,
``settings.image_text``), parsed and checked here with errors naming the entry and key; the
encoder (:mod:`.remote_code_encoder`) follows it, the kinds ``remote-code-embedder``
(:mod:`.remote_code`) and ``code-folder`` (:mod:`.code_folder`) take it as settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.settings import closest

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


def output_vectors(result: Any, output: str | list, n: int, what: str) -> np.ndarray:
    """The (n, dim) float32 array a call returned (under ``output`` when given; a list of outputs: their sum)."""
    if isinstance(output, list):
        parts = [output_vectors(result, o, n, what) for o in output]
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


def output_token_sets(result: Any, call: Call, n: int, what: str) -> list[np.ndarray]:
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
