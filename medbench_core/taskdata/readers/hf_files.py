"""Where the parts of a Hugging Face retrieval dataset are in a local folder (MTEB, R2MED, M3Retrieve-style layouts).

Where each part is found, first rule that matches:

1. the dataset card (``README.md`` front matter ``configs:`` with ``data_files``), as the hub
   and the ``datasets`` library read it; with a ``subset`` the configs ``<subset>-corpus``,
   ``<subset>-queries``, ``<subset>-qrels`` come first (MTEB's multi-subset naming);
2. a file ``<part>.jsonl``, ``<part>.jsonl.gz`` or ``<part>.parquet`` in the folder;
3. a folder ``<part>/`` whose files are named by split (``test.parquet``,
   ``test-00000-of-00001.parquet``, BEIR's ``qrels/test.tsv``).

A part holding several splits uses ``split``; a part holding one split uses it whatever its name
(R2MED's corpus split is called ``corpus``), as MTEB does.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError

PARTS = ("corpus", "queries", "qrels")
# Config names of each part, in order of preference (after the <subset>- prefixed one).
PART_CONFIGS = {"corpus": ("corpus",), "queries": ("queries", "query"), "qrels": ("default", "qrels")}
RECORD_SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")
QRELS_SUFFIXES = (*RECORD_SUFFIXES, ".tsv", ".txt")


def suffix_of(path: Path) -> str:
    name = path.name.lower()
    return ".jsonl.gz" if name.endswith(".jsonl.gz") else path.suffix.lower()


def dataset_card(folder: Path) -> dict[str, Any]:
    """The YAML front matter of ``folder/README.md`` (``{}`` when there is none)."""
    import yaml

    path = folder / "README.md"
    if not path.is_file():
        return {}
    text = path.read_text(encoding="utf-8", errors="replace")
    m = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, flags=re.DOTALL)
    if not m:
        return {}
    try:
        doc = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError as exc:
        raise DataError(f"{path}: the dataset card's YAML front matter is not valid ({exc})") from exc
    if not isinstance(doc, dict):
        raise DataError(f"{path}: the dataset card's front matter is not a mapping")
    return doc


def _card_splits(folder: Path, card: dict[str, Any], config: str) -> dict[str, list[Path]] | None:
    """split -> files of one config declared in the card, or None when the card does not declare it."""
    for c in card.get("configs") or []:
        if not isinstance(c, dict) or c.get("config_name", "default") != config:
            continue
        data_files = c.get("data_files")
        entries: list[tuple[str, Any]]
        if isinstance(data_files, (str, list)) and not (isinstance(data_files, list) and data_files and isinstance(data_files[0], dict)):
            entries = [("train", data_files)]  # the datasets library's name for an unsplit config
        elif isinstance(data_files, list):
            entries = [(str(d.get("split", "train")), d.get("path")) for d in data_files]
        elif isinstance(data_files, dict):
            entries = list(data_files.items())
        else:
            raise DataError(f"{folder / 'README.md'}: config {config!r} has no usable data_files")
        out: dict[str, list[Path]] = {}
        for split, patterns in entries:
            for pattern in [patterns] if isinstance(patterns, str) else list(patterns or []):
                hits = sorted(p for p in folder.glob(str(pattern)) if p.is_file())
                if not hits:
                    raise DataError(f"{folder / 'README.md'}: config {config!r} split {split!r}: no file matches {pattern!r} in {folder}")
                out.setdefault(split, []).extend(hits)
        return out
    return None


def _folder_splits(part_dir: Path, suffixes: tuple[str, ...]) -> dict[str, list[Path]]:
    """split -> files of a part folder, the split being the file name up to its first '-' or '.'."""
    out: dict[str, list[Path]] = {}
    for p in sorted(part_dir.rglob("*")):
        if p.is_file() and suffix_of(p) in suffixes and not p.name.startswith("."):
            out.setdefault(re.split(r"[-.]", p.name, maxsplit=1)[0], []).append(p)
    return out


def _pick_split(splits: dict[str, list[Path]], split: str, where: str) -> list[Path]:
    if split in splits:
        return splits[split]
    if len(splits) == 1:
        return next(iter(splits.values()))
    raise DataError(f"{where}: split {split!r} not found; it has {sorted(splits)}: set 'split' to one of them")


def find_part(folder: Path, part: str, *, split: str = "test", subset: str = "", names: Iterable[str] | None = None) -> list[Path]:
    """The files holding ``part`` (corpus, queries or qrels) of the dataset in ``folder`` (see the module docstring)."""
    folder = Path(folder)
    names = tuple(names) if names is not None else PART_CONFIGS[part]
    configs = ((f"{subset}-{part}",) if subset else ()) + names
    suffixes = QRELS_SUFFIXES if part == "qrels" else RECORD_SUFFIXES
    card = dataset_card(folder)
    for config in configs:
        splits = _card_splits(folder, card, config)
        if splits:
            return _pick_split(splits, split, f"{folder / 'README.md'}: config {config!r}")
    for config in configs:
        for suffix in suffixes:
            if (folder / f"{config}{suffix}").is_file() and suffix not in (".tsv", ".txt"):
                return [folder / f"{config}{suffix}"]
        if (folder / config).is_dir():
            splits = _folder_splits(folder / config, suffixes)
            if splits:
                return _pick_split(splits, split, str(folder / config))
    tried = ", ".join(f"{c}{{{','.join(RECORD_SUFFIXES)}}} or {c}/" for c in configs)
    raise DataError(f"{folder}: no {part} found (looked for a dataset card config and for {tried})")


def files_revision(paths: Iterable[Path], root: Path) -> str:
    """``sha256:<16 hex>`` over the names (relative to ``root``) and bytes of the files read."""
    h = hashlib.sha256()
    for p in sorted(set(paths)):
        h.update(str(Path(p).relative_to(root) if Path(p).is_relative_to(root) else Path(p).name).encode())
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return "sha256:" + h.hexdigest()[:16]
