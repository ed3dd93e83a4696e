"""What a model says it was trained on: the ``training_data:`` field of a models.yaml entry.

The field is a list; each item is one of

- a dataset name or hub id, as a string or ``{dataset: NAME}`` (``MSMARCO``, ``SciFact``,
  ``BeIR/scifact``): matched against what each task says it is (tasks.yaml ``identity:``);
- ``{mteb: ORG/NAME}``: the ``ModelMeta.training_datasets`` of that model in the installed mteb,
  read offline (with mteb's similar tasks, as its zero-shot figure reads them);
- ``{texts: FILE}``: a local manifest of training texts, one per line (``.txt``) or JSON lines
  with a ``text`` field (``.jsonl``), audited for near-duplicates of every task's texts;
- ``{images: FILE}``: a local manifest of training images, one per line: an image path (relative
  to the manifest) or its perceptual hashes ``<phash hex> <dhash hex>`` (a set that cannot be shared).

``training_data: []`` says the model was trained on nothing (BM25, random weights): zero-shot on
every task. No field says nothing: the audit marks its cells *unknown*, unless mteb knows the
model by its hub id. Derived models (fusion, reranking, expansion) inherit their upstreams'
declarations (medbench_core.evaluation.contamination). Relative manifest paths resolve beside
models.yaml. A declaration enters no artifact key of the model: it changes what the audit says,
not what the model computes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError

SOURCE_FORMS = ("dataset", "mteb", "texts", "images")
MANIFEST_FORMS = ("texts", "images")


@dataclass(frozen=True)
class TrainingSource:
    """One item of a ``training_data:`` list: its form (dataset, mteb, texts, images; not a model kind), its value
    (a manifest's resolved path) and its line in models.yaml."""

    form: str
    value: str
    line: int = 0

    def describe(self) -> str:
        return self.value if self.form == "dataset" else f"{self.form}: {self.value}"


@dataclass(frozen=True)
class TrainingData:
    """A model's own declaration: ``declared`` False when its entry has no ``training_data:`` field."""

    declared: bool
    sources: tuple[TrainingSource, ...] = ()
    file: str = ""  # the models.yaml it was read from, for errors found later (an mteb name mteb does not know)

    def to_entry(self) -> list[Any]:
        """The field as models.yaml writes it."""
        return [s.value if s.form == "dataset" else {s.form: s.value} for s in self.sources]


UNDECLARED = TrainingData(declared=False)


def read_training_data(raw: Any, *, models_file: str | Path, index: int, model: str) -> TrainingData:
    """The ``training_data:`` of ``models[index]`` (``raw``; :data:`UNDECLARED` when absent, pass ``...``).

    Errors name the file, the line and the model: a value that is not a list, an item of no known
    kind, an empty name, a manifest that is not a readable file.
    """
    from medbench_core.yaml_file import line_of

    if raw is ...:
        return UNDECLARED
    path = Path(models_file)

    def where(*keys: Any) -> str:
        return f"{path}:{line_of(path, ['models', index, 'training_data', *keys])}: model {model!r}: training_data"

    if raw is None:
        raw = []
    if not isinstance(raw, list):
        kinds = "dataset names, {mteb: ORG/NAME}, {texts: FILE} or {images: FILE}"
        raise DataError(f"{where()} must be a list of {kinds}; [] says it was trained on nothing")
    sources = []
    for i, item in enumerate(raw):
        line = line_of(path, ["models", index, "training_data", i])
        if isinstance(item, str):
            item = {"dataset": item}
        if not isinstance(item, dict) or len(item) != 1:
            raise DataError(f"{where(i)}[{i}]: give one of {', '.join(SOURCE_FORMS)} per item (a string is a dataset name), not {item!r}")
        ((kind, value),) = item.items()
        if kind not in SOURCE_FORMS:
            from medbench_core.retrieval.kinds.settings import closest

            raise DataError(f"{where(i)}[{i}]: unknown kind {kind!r}{closest(str(kind), SOURCE_FORMS)}; known: {', '.join(SOURCE_FORMS)}")
        if not isinstance(value, str) or not value.strip():
            raise DataError(f"{where(i)}[{i}]: {kind} must be a non-empty string, not {value!r}")
        value = value.strip()
        if kind in MANIFEST_FORMS:
            file = Path(value) if Path(value).is_absolute() else path.parent / value
            if not file.is_file():
                raise DataError(f"{where(i)}[{i}]: {kind} manifest {value} not found (looked for {file}); paths are relative to {path.name}")
            value = str(file.resolve())
        if kind == "mteb" and "/" not in value:
            raise DataError(f"{where(i)}[{i}]: mteb names a model as ORG/NAME (sentence-transformers/all-MiniLM-L6-v2), not {value!r}")
        sources.append(TrainingSource(kind, value, line))
    return TrainingData(declared=True, sources=tuple(sources), file=str(path))
