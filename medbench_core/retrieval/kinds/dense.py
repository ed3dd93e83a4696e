"""Kinds ``sentence-transformers`` and ``transformers``: dense text encoders from a local folder,
``pkg:<module>`` (a model shipped in a Python package) or a hub id read from the local hub cache at
the pinned revision.

Settings: ``query_prefix``, ``passage_prefix``, ``expansion_prefix``, ``language_prefixes``
(``{lang: {query: .., passage: ..}}``), ``max_length``, ``normalize`` (default true: inner product
is cosine), ``dtype`` (applied to the weights), ``long_text`` (truncate | chunk) with
``chunk_pooling``, ``chunk_size``, ``chunk_stride`` (:mod:`medbench_core.retrieval.chunking`),
``instructions`` and ``query_template`` (:mod:`medbench_core.retrieval.instructions`; they change
only the queries, so they key the run, not the corpus vectors); ``transformers`` adds ``pooling``
(mean | cls) and ``passage_pair``: passages encoded as the text pair ``("", text)``, truncated
``longest_first``, i.e. ``[CLS] [SEP] text [SEP]`` with the text's tokens of token type 1, as R2MED
encodes documents with MedCPT's article encoder (its ``BiEncoderModel.encode``, src/utils.py
l.366-384 at 62b7074: ``title_batch = ["" ...]``, ``doc_tokenizer(title_batch, sentences_batch,
truncation='longest_first', max_length=512)``; MedCPT's article encoder reads ``[title, abstract]``
pairs). Queries stay single texts. Text-only: a task with image-only records is ``n/a``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError
from medbench_core.retrieval.chunking import MODES, POOLINGS, LongText
from medbench_core.retrieval.kinds.encoder import EncoderKind
from medbench_core.retrieval.kinds.settings import KindSettings
from medbench_core.retrieval.kinds.spec import ModelSpec
from medbench_core.retrieval.weights import DTYPES
from medbench_core.taskdata.task import Task


@dataclass(frozen=True)
class TextEncoderSettings(KindSettings):
    query_prefix: str = ""
    passage_prefix: str = ""
    expansion_prefix: str = ""
    language_prefixes: dict = field(default_factory=dict)
    max_length: int | None = None
    normalize: bool = True
    dtype: str | None = None
    long_text: str = "truncate"
    chunk_pooling: str = "max"
    chunk_size: int | None = None
    chunk_stride: int | None = None
    instructions: dict | None = None
    query_template: str | None = None

    CHOICES = {"long_text": MODES, "chunk_pooling": POOLINGS, "dtype": (None, *DTYPES)}
    QUERY_ONLY = ("instructions", "query_template")
    HINTS = {"pooling": "sentence-transformers models pool as their own modules say; use kind transformers to choose mean or cls"}

    def check(self, where: str) -> None:
        for lang, prefixes in self.language_prefixes.items():
            if not isinstance(prefixes, dict) or set(prefixes) - {"query", "passage", "expansion"}:
                raise DataError(f"{where}: language_prefixes.{lang} takes 'query', 'passage' and 'expansion' only, not {prefixes!r}")
        if self.max_length is not None and self.max_length < 1:
            raise DataError(f"{where}: max_length must be a positive number of tokens, not {self.max_length}")
        from medbench_core.retrieval import chunking, instructions

        try:
            chunking.long_text(self)  # refuses chunk settings that cannot work
        except DataError as exc:
            raise DataError(f"{where}: {str(exc).split(': ', 1)[-1]}") from exc
        if instructions.uses_instructions(self):
            if self.instructions is not None and not all(isinstance(v, str) for v in self.instructions.values()):
                raise DataError(f"{where}: instructions must map a task name, task type or 'default' to an instruction text")
            template = self.query_template or instructions.DEFAULT_TEMPLATE
            if "{query}" not in template or "{instruction}" not in template:
                raise DataError(f"{where}: query_template {template!r} needs both {{instruction}} and {{query}}")


@dataclass(frozen=True)
class TransformersSettings(TextEncoderSettings):
    pooling: str = "mean"
    passage_pair: bool = False  # passages as the pair ("", text): R2MED's MedCPT documents (module docstring)

    CHOICES = {**TextEncoderSettings.CHOICES, "pooling": ("mean", "cls")}
    HINTS = {}


def resolve_revision_of_path(spec: ModelSpec) -> str:
    """The revision that identifies weights loaded from ``spec.path``: a local folder's content hash,
    a hub id's pinned commit as the local hub cache records it, or the entry's revision."""
    from medbench_core.hub import is_repo_id, resolve_revision
    from medbench_core.retrieval.weights import folder_revision, resolve_model_path

    resolved = resolve_model_path(spec.path) if spec.path else ""
    if resolved and Path(resolved).is_dir():
        return folder_revision(resolved)
    if spec.revision and is_repo_id(spec.path):
        try:
            return resolve_revision(spec.path, spec.revision, repo_type="model", online=False)
        except DataError:
            return spec.revision
    return spec.revision or "unpinned"


class TextEncoderKind(EncoderKind):
    """A dense text encoder (one registered kind per library)."""

    Settings = TextEncoderSettings
    version = "1"
    needs_path = True
    expansion_family = "dense"

    def instructs_expansion(self, spec: ModelSpec) -> bool:
        """False: the instruction is written into the query's text (R2MED's FlagDRES, BiEncoder) (:class:`~.capabilities.Expandable`)."""
        return False

    def encoder_class(self) -> Any:
        raise NotImplementedError

    def hub_id(self, spec: ModelSpec) -> str:
        from medbench_core.hub import is_repo_id

        return spec.path if is_repo_id(spec.path) else ""

    def revision(self, spec: ModelSpec) -> str:
        return resolve_revision_of_path(spec)

    def long_text(self, spec: ModelSpec) -> LongText:
        from medbench_core.retrieval import chunking

        return chunking.long_text(spec.settings, spec.name)

    def query_prompt(self, spec: ModelSpec, task: Task) -> tuple[str, str] | None:
        from medbench_core.retrieval import instructions

        return instructions.resolve(spec.settings, task.name, task.meta.task_type, spec.name)

    def prompt_key(self, spec: ModelSpec, task: Task) -> dict[str, Any] | None:
        from medbench_core.retrieval import instructions

        return instructions.key_part(spec.settings, task.name, task.meta.task_type, spec.name) or None

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        s = spec.settings
        return {
            **super().mteb_meta(spec, registry), "framework": [self.mteb_framework, "PyTorch"], "open_weights": True if self.hub_id(spec) else None,
            "similarity_fn_name": "cosine" if s.normalize else "dot", "use_instructions": bool(s.instructions or s.query_prefix),
            "max_tokens": float(s.max_length) if s.max_length else None,
        }  # fmt: skip

    def load_text_encoder(self, spec: ModelSpec, *, device: str = "cpu", progress: bool | None = False, online: bool = False, cache_dir: Any = None) -> Any:
        """The bare text encoder (``encode(texts, role=, languages=)``)."""
        return self.encoder_class()(spec, device=device, progress=progress, online=online, cache_dir=cache_dir)

    def load(self, spec: ModelSpec, *, device: str = "cpu", progress: bool | None = False, online: bool = False) -> Any:
        """The encoder as a record encoder that reads the text side of each record."""
        from medbench_core.retrieval.records import TextOnly

        return TextOnly(self.load_text_encoder(spec, device=device, progress=progress, online=online), spec.name)


class SentenceTransformersKind(TextEncoderKind):
    name = "sentence-transformers"
    packages = ("sentence-transformers", "transformers", "tokenizers", "safetensors", "torch")
    mteb_framework = "Sentence Transformers"

    def encoder_class(self) -> Any:
        from medbench_core.retrieval.text_encoders import SentenceTransformerEncoder

        return SentenceTransformerEncoder


class TransformersKind(TextEncoderKind):
    name = "transformers"
    packages = ("transformers", "tokenizers", "safetensors", "torch", "sentence-transformers")  # one encoders module serves both kinds
    mteb_framework = "Transformers"
    Settings = TransformersSettings

    def encoder_class(self) -> Any:
        from medbench_core.retrieval.text_encoders import TransformersEncoder

        return TransformersEncoder


SENTENCE_TRANSFORMERS = SentenceTransformersKind()
TRANSFORMERS = TransformersKind()


def load_text_encoder(spec: ModelSpec, device: str = "cpu", progress: bool | None = False, *, online: bool = False, cache_dir: Any = None) -> Any:
    """The bare text encoder of a dense text model ``spec`` (DataError for another kind)."""
    if not isinstance(spec.plugin, TextEncoderKind):
        raise DataError(f"model {spec.name}: kind {spec.kind} is not a text encoder")
    return spec.plugin.load_text_encoder(spec, device=device, progress=progress, online=online, cache_dir=cache_dir)
