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

from dataclasses import dataclass
from typing import Any

import numpy as np

from medbench_core.errors import DataError
from medbench_core.retrieval.kinds.encoder import EncoderKind
from medbench_core.retrieval.kinds.remote_code_calls import RECORD_TYPES, Call, record_type
from medbench_core.retrieval.kinds.remote_code_encoder import load_remote_code_encoder
from medbench_core.retrieval.kinds.settings import KindSettings
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.weights import DTYPES
from medbench_core.taskdata.task import Task


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
        R2MED's NV-Embed, GritLM and Instructor classes, which pass it so, give it to the expansion too (Expandable.instructs_expansion)."""
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
