"""A model loaded with its own code (``transformers.AutoModel`` with ``trust_remote_code``), called as its
entry's calls say (:mod:`.remote_code_calls`): records of any kind it has a call for in, float32 vectors
(or token vectors) out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.remote_code_calls import output_token_sets, output_vectors, record_type
from medbench_core.retrieval.kinds.spec import ModelSpec


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
                got, n_rows = invoke(rows), rows.stop - rows.start
                out.append(output_token_sets(got, call, n_rows, what) if multi else output_vectors(got, call.output, n_rows, what))
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
