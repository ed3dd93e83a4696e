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
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from medbench_core.errors import DataError
from medbench_core.taskdata.source_rules import reference_problem, shown

PARTS = ("corpus", "queries", "qrels")
# Config names of each part, in order of preference (after the <subset>- prefixed one).
PART_CONFIGS = {"corpus": ("corpus",), "queries": ("queries", "query"), "qrels": ("default", "qrels")}
RECORD_SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")
QRELS_SUFFIXES = (*RECORD_SUFFIXES, ".tsv", ".txt")


def suffix_of(path: Path) -> str:
    name = path.name.lower()
    return ".jsonl.gz" if name.endswith(".jsonl.gz") else path.suffix.lower()


CARD_MAX_BYTES = 8 << 20  # a dataset card's front matter (MTEB's largest cards list hundreds of configs)


def dataset_card(folder: Path) -> dict[str, Any]:
    """The YAML front matter of ``folder/README.md`` (``{}`` when there is none).

    Read as tasks.yaml is (:func:`medbench_core.yaml_file.load_yaml`: aliases bounded, errors with the
    line in the README), from the first :data:`CARD_MAX_BYTES` of the file: a front matter that does
    not end within them is refused.
    """
    from medbench_core.yaml_file import load_yaml

    path = folder / "README.md"
    if not path.is_file():
        return {}
    with open(path, "rb") as f:
        data = f.read(CARD_MAX_BYTES + 1)
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff").replace("\r\n", "\n")
    m = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, flags=re.DOTALL)
    if not m:
        if len(data) > CARD_MAX_BYTES and re.match(r"^---\s*\n", text):
            raise DataError(f"{path}: the dataset card's front matter does not end within {CARD_MAX_BYTES} bytes; refusing it")
        return {}
    try:
        doc = load_yaml("\n" + m.group(1), str(path)) or {}  # "\n" for the opening '---': lines as in the file
    except DataError as exc:
        detail = str(exc).removeprefix(str(path)).lstrip(":").strip()  # "LINE: problem", or the problem
        raise DataError(f"{path}: the dataset card's YAML front matter is not valid ({'line ' if detail[:1].isdigit() else ''}{detail})") from None
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


# --- where a dataset is read from: a local folder or a hub snapshot --------------------------------


@dataclass(frozen=True)
class Source:
    """A dataset's root folder: a local folder, or a snapshot in the hub cache.

    ``revision`` is the hub commit sha (``""`` for a local folder, whose revision is the hash of
    the files read: :func:`files_revision`). ``blobs`` is the repository's ``blobs/`` folder when
    the root is a snapshot: the snapshot's files are symbolic links into it (huggingface_hub's
    cache layout), which are followed; a link anywhere else is refused (:func:`check_snapshot_links`).
    In a local folder a link must stay inside the folder.
    """

    root: Path
    dataset: str
    revision: str = ""
    blobs: Path | None = None

    @property
    def hub(self) -> bool:
        return self.blobs is not None

    def check(self, path: Path, what: str = "") -> Path:
        """``path`` (a file or folder under the root) when no link on its way leads outside what is allowed."""
        path = Path(path)
        where = f"{what}: " if what else ""
        root = self.root.resolve()
        real = path.resolve()
        inside = real.is_relative_to(root)
        if self.hub and not inside:  # the repository's blobs, or the cache-wide store they may link to
            inside = any(real.is_relative_to(b.resolve()) for b in (self.blobs, self.blobs.parent.parent / "blobs"))
        if not inside:
            raise DataError(
                f"{where}{path} leads to {real}, outside {self.root}" + (f" and its repository's blobs ({self.blobs})" if self.hub else "") + "; refusing it"
            )
        return path

    def file(self, rel: str, what: str) -> Path | None:
        """The file ``rel`` (a relative POSIX path, :func:`relative_path`) under the root, None when there is none."""
        full = self.root.joinpath(*relative_path(rel, what).parts)
        if not full.is_file():
            return None
        return self.check(full, what)


def relative_path(rel: str, what: str) -> PurePosixPath:
    """``rel`` as a relative POSIX path; ``..``, absolute paths, backslashes and unsafe characters
    (:func:`~medbench_core.taskdata.source_rules.reference_problem`) are refused.

    ``what`` names the reference in errors (``"<file>:<line>: record <id>: image"``).
    """
    if not isinstance(rel, str) or not rel.strip():
        raise DataError(f"{what}: empty path")
    if "\\" in rel:
        raise DataError(f"{what} {rel!r} has a backslash; paths in a dataset use '/'")
    p = PurePosixPath(rel.strip())
    if p.is_absolute() or re.match(r"^[A-Za-z]:", str(p)):
        raise DataError(f"{what} {rel!r} is an absolute path; paths in a dataset are relative to it")
    if ".." in p.parts:
        raise DataError(f"{what} {rel!r} contains '..' and would leave the dataset")
    problem = reference_problem(p.as_posix())
    if problem:
        raise DataError(f"{what} {shown(rel)} {problem}; a path in a dataset is relative, of printable characters")
    return p


_SHARED_BLOB = re.compile(r"^[0-9a-f]{2}/[0-9a-f]{64}\Z")


def check_snapshot_links(snapshot: Path, blobs: Path) -> None:
    """Refuse a snapshot holding a symbolic link that does not lead into its repository's ``blobs/``.

    huggingface_hub links ``snapshots/<sha>/<path>`` to ``../../blobs/<etag>``; since version 2 a
    blob may itself be a link into the cache-wide store ``<cache>/blobs/<2 hex>/<64 hex>`` (Xet
    files shared between repositories, ``huggingface_hub/utils/_shared_blobs.py``). Exactly those
    two steps are followed; any other link is refused.
    """
    blobs = Path(os.path.normpath(blobs))
    shared = blobs.parent.parent / "blobs"

    def target(link: Path) -> Path:
        return Path(os.path.normpath(link.parent / os.readlink(link)))

    for folder, dirs, files in os.walk(snapshot):
        for name in (*dirs, *files):
            p = Path(folder) / name
            if not p.is_symlink():
                continue
            blob = target(p)
            ok = blob.parent == blobs and (blob.is_file() and not blob.is_symlink())
            if blob.parent == blobs and blob.is_symlink():
                store = target(blob)
                rel = store.relative_to(shared).as_posix() if store.is_relative_to(shared) else ""
                ok = bool(_SHARED_BLOB.match(rel)) and store.is_file() and not store.is_symlink()
            if not ok:
                raise DataError(
                    f"{p}: a symbolic link to {os.readlink(p)!r} ({p.resolve()}), which is not a file in the repository's blobs "
                    f"({blobs}); a hub snapshot links only into its own blobs: refusing the snapshot"
                )


def locate(folder: str | Path | None, *, name: str, dataset: str, revision: str, online: bool, hub_cache: str | Path | None) -> Source:
    """The :class:`Source` of a local folder or of a pinned hub dataset (read from the hub cache unless ``online``)."""
    if folder is None or str(folder) == "":
        if not dataset:
            raise DataError(f"task {name}: give 'path' (a local folder) or 'dataset' (a hub dataset id with a pinned revision)")
        if not revision:
            raise DataError(
                f"task {name}: hub dataset {dataset!r} has no revision; pin one (revision: <40-hex commit sha>) so the task reads the same data every time"
            )
        from medbench_core.hub import snapshot

        root, sha = snapshot(dataset, revision, repo_type="dataset", online=online, cache_dir=hub_cache)
        blobs = root.parent.parent / "blobs"
        check_snapshot_links(root, blobs)
        return Source(root, dataset, sha, blobs)
    root = Path(folder)
    if revision:
        raise DataError(
            f"task {name}: 'revision' pins a hub dataset; the local folder {root} is identified by the hash of its files "
            "(drop 'revision', or read the hub dataset with 'dataset' instead of 'path')"
        )
    if not root.is_dir():
        raise DataError(f"{root}: dataset folder not found")
    return Source(root, dataset or root.name)
