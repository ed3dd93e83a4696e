"""The task catalogue (``tasks.yaml``): which source datasets become which curated tasks.

Each entry names a reader and its arguments; ``research_only`` marks tasks whose licences
are not permissive (they run, and everything they produce says so).

Every other key of an entry is an option of its reader, checked when the file is read: an unknown
or mistyped option is refused naming the file, the task and the closest known option
(``tasks.yaml: task 'x': unknown option 'spilt' for reader beir; did you mean 'split'?``).

An entry reads a local folder (``path``: relative to the shared data folder, which it may not
leave through ``..`` nor through a symbolic link, or absolute, which the task's provenance then
records as ``source_path``) or, for readers with
``dataset`` and ``revision`` options, a hub dataset (``dataset`` + a pinned ``revision``).
``subsets`` turns one entry into one task per subset: a list of names, or a mapping from name to
that subset's revision or to a mapping of its own options (``revision``, ``task_type``, ...). Each
task is named ``<name>_<subset>`` (lowercase, ``-`` to ``_``), ``{subset}`` in ``path``,
``dataset`` or any text option is replaced by the subset's name, and the reader gets ``subset``::

    - name: r2med
      reader: mteb
      dataset: "R2MED/{subset}"
      subsets: {Biology: {revision: 8b9fec2db9eda4b5742d03732213fbaee8169556}, ...}
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medbench_core.errors import DataError, config_errors
from medbench_core.taskdata.mteb_tasks import expand_entries as expand_mteb_entries
from medbench_core.taskdata.readers import ReadContext, ReaderOptions, get_reader, parse_options
from medbench_core.taskdata.readers.base import SharedReads
from medbench_core.taskdata.task_identity import TaskIdentity, read_identity, task_identity
from medbench_core.yaml_file import read_yaml_mapping

if TYPE_CHECKING:
    from medbench_core.taskdata.task import Task

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_]*\Z")
_SHARED_READS = SharedReads()  # this process's: build_task scopes it to each read's reader and source
_BENCHMARK_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\Z")


@dataclass(frozen=True)
class TaskEntry:
    """One task of the catalogue: its reader, source ``path`` and options.

    ``options`` holds the entry's reader options as written (after ``subsets`` expansion);
    ``read_options`` the reader's validated options object built from them.
    """

    name: str
    reader: str
    path: str
    research_only: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    read_options: ReaderOptions | None = None
    # what the task is, for matching declared training data (taskdata/task_identity.py); not an option, in no key
    identity: TaskIdentity | None = None


@dataclass(frozen=True)
class Catalog:
    benchmark: str
    tasks: tuple[TaskEntry, ...]
    licence_allowlist: tuple[str, ...]
    # the overlap contract's exact-duplicate image check across the version's test splits: ignore, mark (warn) or refuse
    test_image_duplicates: str = "ignore"

    def task(self, name: str) -> TaskEntry:
        for t in self.tasks:
            if t.name == name:
                return t
        raise DataError(f"task {name!r} is not in the catalogue; known: {[t.name for t in self.tasks]}")

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tasks]


@config_errors
def load_catalog(path: str | Path) -> Catalog:
    """Read ``tasks.yaml``; errors name the file and the entry at fault, and the closest known option or reader."""
    path = Path(path)
    doc = read_yaml_mapping(path, "task catalogue")
    entries = doc.get("tasks")
    if not isinstance(entries, list) or not entries:
        raise DataError(f"{path}: expected a non-empty top-level 'tasks:' list")
    entries = expand_mteb_entries(entries, path)  # reader: mteb with task:/benchmark: -> entries from mteb's metadata
    tasks = []
    seen = set()
    for i, raw in enumerate(entries):
        if not isinstance(raw, dict) or not {"name", "reader"} <= set(raw) or not ({"path", "dataset"} & set(raw)):
            raise DataError(f"{path}: tasks[{i}] needs 'name', 'reader' and 'path' (a local folder) or 'dataset' (a hub dataset id)")
        where = f"{path}: task {raw['name']!r}"
        try:
            rd = get_reader(str(raw["reader"]))
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from None
        if "subsets" in raw and not rd.takes_subsets:
            raise DataError(f"{where}: reader {raw['reader']!r} has no subsets (readers with a 'subset' option take them)")
        for e in expand_subsets(raw, where):
            name = e["name"]
            if not isinstance(name, str) or not _NAME_RE.match(name):
                raise DataError(f"{path}: task name {name!r}: use lowercase letters, digits and '_'")
            if name in seen:
                raise DataError(f"{path}: task {name!r} appears twice")
            seen.add(name)
            at = f"{path}: task {name!r}"
            if e.get("path") is not None:
                check_path(e["path"], at)
            hub = bool(e.get("dataset")) and not e.get("path")
            if hub and not rd.reads_hub:
                raise DataError(
                    f"{at}: reader {e['reader']!r} reads local folders only; give 'path' (readers with 'dataset' and 'revision' options read hub datasets)"
                )
            read_options = parse_options(rd, e, at, called=str(e["reader"]))  # before the revision: a typo'd 'revison' explains it
            if hub and not e.get("revision"):
                raise DataError(
                    f"{at}: hub dataset {e['dataset']!r} has no revision; pin one (revision: <40-hex commit sha>) so the task reads the same data every time"
                )
            opts = {k: v for k, v in e.items() if k not in {"name", "reader", "path", "research_only", "identity"}}
            tasks.append(
                TaskEntry(
                    name=name,
                    reader=e["reader"],
                    path=str(e.get("path") or ""),
                    research_only=read_options.research_only,
                    options=opts,
                    read_options=read_options,
                    identity=task_identity(name, read_identity(e.get("identity"), at), opts),
                )
            )
    allow = doc.get("licence_allowlist") or []
    benchmark = doc.get("benchmark", "medbench")
    if not isinstance(benchmark, str) or not _BENCHMARK_RE.match(benchmark):  # MLflow's experiment names, release records
        raise DataError(f"{path}: benchmark {benchmark!r}: use letters, digits, '.', '_', '+' or '-' (it names the MLflow experiments)")
    dup = doc.get("test_image_duplicates", "ignore")
    if dup not in ("ignore", "mark", "refuse"):
        raise DataError(f"{path}: test_image_duplicates {dup!r}: use ignore, mark (a warning in the overlap gate) or refuse (the gate fails)")
    return Catalog(benchmark=benchmark, tasks=tuple(tasks), licence_allowlist=tuple(allow), test_image_duplicates=dup)


def check_path(value: Any, where: str) -> str:
    """A task's ``path``, normalised: relative to the data folder and staying inside it, or absolute (recorded as such)."""
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: 'path' must be a non-empty string (a folder or file under the data folder, or an absolute path)")
    if Path(value).is_absolute():
        return value
    norm = posixpath.normpath(value.replace("\\", "/"))
    if norm == ".." or norm.startswith("../"):
        raise DataError(
            f"{where}: path {value!r} leaves the data folder through '..'; give a path inside the data folder, "
            "or an absolute path (recorded as such in the task's provenance)"
        )
    return norm


def subset_slug(subset: str) -> str:
    """``Medical-Sciences`` -> ``medical_sciences``: the task-name suffix of a subset."""
    return re.sub(r"[^a-z0-9]+", "_", subset.lower()).strip("_")


def expand_subsets(entry: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """One entry per subset of ``entry`` (itself when it has no ``subsets``); see the module docstring."""
    subsets = entry.get("subsets")
    if subsets is None:
        return [entry]
    if isinstance(subsets, list) and subsets:
        per: dict[str, dict[str, Any]] = {str(s): {} for s in subsets}
    elif isinstance(subsets, dict) and subsets:
        per = {}
        for s, v in subsets.items():
            if v is None:
                per[str(s)] = {}
            elif isinstance(v, str):
                per[str(s)] = {"revision": v}
            elif isinstance(v, dict):
                per[str(s)] = dict(v)
            else:
                raise DataError(f"{where}: subset {s!r}: give its revision (a string) or a mapping of its options, not {type(v).__name__}")
    else:
        raise DataError(f"{where}: 'subsets' must be a non-empty list of names or a mapping name -> revision / options")
    out = []
    base = {k: v for k, v in entry.items() if k != "subsets"}
    for subset, own in per.items():
        slug = subset_slug(subset)
        if not slug:
            raise DataError(f"{where}: subset {subset!r} has no letters or digits to name a task with")
        e = {k: (v.replace("{subset}", subset) if isinstance(v, str) else v) for k, v in {**base, **own}.items()}
        e["name"] = f"{entry['name']}_{slug}"
        e["subset"] = subset
        out.append(e)
    return out


def build_task(
    entry: TaskEntry,
    data_root: str | Path,
    work_dir: str | Path,
    *,
    online: bool = False,
    hub_cache: str | Path | None = None,
    shared_reads: str | Path | None = None,
) -> Task:
    """Read the source dataset of ``entry`` (a folder under ``data_root``, or a hub dataset) into a Task.

    ``work_dir`` holds the reader's scratch folder (``images/``: rendered PNGs, image bytes of
    Parquet datasets, images taken out of an archive). ``shared_reads``: a folder where what the tasks
    of one source share (the GNU Health ICD-10 split) is kept for the next process, by the reader, the
    source's sha256, the reader's settings and the curation's code version. Hub datasets are downloaded only with
    ``online=True``; otherwise they must be in the local hub cache (``hub_cache``, default
    huggingface_hub's). A source named by an absolute ``path`` is recorded in the task's
    metadata (``source_path``).
    """
    from medbench_core.taskdata.source_rules import check_task

    rd = get_reader(entry.reader)
    options = entry.read_options or parse_options(
        rd, {"name": entry.name, "research_only": entry.research_only, **entry.options}, f"task {entry.name!r}", called=entry.reader
    )
    from medbench_core.provenance import stage_version

    src = local_source(entry, data_root)
    # What the tasks of one source share (ReadContext.share) is built once per reader, source bytes and code version:
    # in this process, and with shared_reads, once for every process (adding a subset does not split the wheel again).
    reads = _SHARED_READS if shared_reads is None else _shared_reads_in(Path(shared_reads))
    code = stage_version("curated_task")
    shared = None if src is None else reads.scoped(lambda: (entry.reader, str(src), source_files_digest(src), code))
    context = ReadContext(scratch=Path(work_dir) / "images", online=online, hub_cache=Path(hub_cache) if hub_cache else None, shared=shared)
    task = rd.read(src, options, context)
    if entry.path and Path(entry.path).is_absolute():
        task.meta = dataclasses.replace(task.meta, source_path=str(Path(entry.path)))
        task._hash = None
    check_task(task, f"task {entry.name}")  # the rules every reader applies as it reads, once more over the whole task

    from medbench_core.taskdata.task import identical_id_pairs

    ignore = rd.ignore_identical_ids if options.ignore_identical_ids is None else options.ignore_identical_ids
    if ignore and identical_id_pairs(task)["queries"]:
        task.meta = dataclasses.replace(task.meta, ignore_identical_ids=ignore)  # True, or "dense" (R2MED's rule)
        task._hash = None
    return task


def _shared_reads_in(folder: Path) -> SharedReads:
    """This process's shared reads (the same values), kept in ``folder`` too."""
    view = _SHARED_READS.scoped(tuple)
    view.folder = folder
    return view


def local_source(entry: TaskEntry, data_root: str | Path) -> Path | None:
    """The file or folder ``entry`` reads (None for a hub dataset), when it exists and no link leads it
    outside the data folder (:func:`~medbench_core.taskdata.source_rules.check_source_links`; a source
    named by an absolute path is read where it is, and recorded as the task's ``source_path``)."""
    from medbench_core.taskdata.source_rules import check_source_links

    if not entry.path:
        return None
    src = Path(data_root) / check_path(entry.path, f"task {entry.name!r}")
    if not src.exists():
        raise DataError(f"task {entry.name}: source {src} not found (is ../shared/data beside the checkout?)")
    return check_source_links(src, None if Path(entry.path).is_absolute() else Path(data_root), f"task {entry.name}")


# --- is a curated copy still current? ------------------------------------------------------------


EACH_FILE_LIMIT = 5000  # a source of more files records only its one digest (the names of changed files are then not known)


def curation_inputs(entry: TaskEntry, data_root: str | Path) -> dict[str, Any]:
    """What curating ``entry`` reads, as digests recorded beside the curated task: ``entry`` (its reader,
    path and options as tasks.yaml gives them), ``code`` (the curation's declared version: the readers, the
    task model) and, for a local source, ``files`` (sha256 over its files' names and bytes,
    :func:`source_files_digest`) with ``stat`` (over their names, sizes and modification times: the cheap
    check :func:`changed_inputs` and :func:`unchanged_inputs` make first) and ``each`` (16 hex of each file's sha256, by
    name, for a source of at most :data:`EACH_FILE_LIMIT` files: :func:`changed_source_files` names the files that changed)."""
    from medbench_core.provenance import stage_version

    out: dict[str, Any] = {"entry": _entry_digest(entry), "code": stage_version("curated_task")}
    src = _local_source(entry, data_root)
    if src is not None and src.exists():
        local_source(entry, data_root)  # no file outside the data folder is read, not even to be hashed
        out["stat"], out["files"] = _stat_digest(src), source_files_digest(src)
        each = source_file_digests(src)
        if len(each) <= EACH_FILE_LIMIT:
            out["each"] = each
    return out


def source_file_digests(src: Path) -> dict[str, str]:
    """Name -> 16 hex of the sha256 of each file of ``src`` (the same names and bytes :func:`source_files_digest` covers)."""
    from medbench_core.storage import sha256_noting

    src = Path(src)
    files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
    return {(p.name if p == src else str(p.relative_to(src))): sha256_noting(p)[:16] for p in files}


def changed_source_files(recorded: dict[str, Any] | None, entry: TaskEntry, data_root: str | Path) -> list[str]:
    """The files of ``entry``'s local source that changed, appeared or went since it was curated from ``recorded`` inputs
    (each as ``name``, ``name (new)`` or ``name (gone)``); empty when unknown (no per-file digests recorded, or no source here)."""
    src = _local_source(entry, data_root)
    if not recorded or "each" not in recorded or src is None or not src.exists():
        return []
    now, then = source_file_digests(src), recorded["each"]
    out = [n for n in sorted(set(now) & set(then)) if now[n] != then[n]]
    out += [f"{n} (new)" for n in sorted(set(now) - set(then))] + [f"{n} (gone)" for n in sorted(set(then) - set(now))]
    return out


def unchanged_inputs(recorded: dict[str, Any] | None, entry: TaskEntry, data_root: str | Path) -> tuple[dict[str, Any] | None, str]:
    """Whether curating ``entry`` again would read what the curated task's ``recorded`` inputs (:func:`curation_inputs`)
    describe, so that it is current as stored (issue 53): ``(inputs, "")`` when its entry and the curation's code are
    those recorded and its source files have the same names, sizes and modification times, or, when those moved, the
    same sha256 (``inputs`` is then what to record: the new stat); ``(None, why not)`` otherwise, and for a hub
    dataset (whose cached branch may move: curated again)."""
    from medbench_core.provenance import stage_version

    if not recorded:
        return None, "no inputs recorded with the curated task"
    if recorded.get("entry") != _entry_digest(entry):
        return None, "its entry in tasks.yaml changed"
    if recorded.get("code") != stage_version("curated_task"):
        return None, "the curation's code version changed"
    src = _local_source(entry, data_root)
    if src is None:
        return None, "a hub dataset"
    if not src.exists() or "files" not in recorded:
        return None, "its source files are not where they were"
    local_source(entry, data_root)  # no link out of the data folder is followed, not even to be hashed
    stat = _stat_digest(src)
    if stat == recorded.get("stat"):
        return dict(recorded), ""
    if source_files_digest(src) != recorded["files"]:
        return None, "its source files changed"
    return {**recorded, "stat": stat}, ""


def changed_inputs(recorded: dict[str, Any] | None, entry: TaskEntry, data_root: str | Path) -> str:
    """Why a task curated from ``recorded`` inputs (:func:`curation_inputs`) is not current for ``entry``
    now; '' when it is, when nothing was recorded (curated before inputs were recorded), or when the
    source is not here (a pulled release, a source removed after curating: nothing says it changed)."""
    if not recorded:
        return ""
    if recorded.get("entry") != _entry_digest(entry):
        return "its entry in tasks.yaml changed since it was curated"
    if "files" not in recorded:
        return ""
    src = _local_source(entry, data_root)
    if src is None or not src.exists():
        return ""
    if _stat_digest(src) == recorded.get("stat"):
        return ""
    if len(recorded["files"]) != len(digest := source_files_digest(src)):
        # Recorded (16 hex) before the one source digest was shared with releases: it cannot be compared.
        return f"its source files ({src}) were touched since it was curated, and the digest recorded then is of an older form"
    if digest != recorded["files"]:
        return f"its source files ({src}) changed since it was curated"
    return ""


def _entry_digest(entry: TaskEntry) -> str:
    import hashlib
    import json

    described = {"reader": entry.reader, "path": entry.path, "research_only": entry.research_only, "options": entry.options}
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _local_source(entry: TaskEntry, data_root: str | Path) -> Path | None:
    return Path(data_root) / entry.path if entry.path else None


def source_files_digest(src: Path) -> str:
    """sha256 (64 hex) over the names and bytes of the files of ``src``, a task's source file or folder: the one digest of a
    task's source files. Releases record it as ``source_sha256`` (medbench_release.record), ``medbench run``'s warm path
    compares it (medbench_cli.uptodate) and curated tasks record it as their ``files`` input; do not change it, or every
    recorded release stops verifying. A file is read again only when its stat changed (storage.sha256_noting)."""
    import hashlib

    from medbench_core.storage import sha256_noting

    src = Path(src)
    files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(src)).encode() if p != src else p.name.encode())
        h.update(sha256_noting(p).encode())
    return h.hexdigest()


def _stat_digest(src: Path) -> str:
    """Over the names, sizes and mtimes of the files of ``src``: the cheap check made before :func:`source_files_digest`."""
    import hashlib

    files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
    stat = hashlib.sha256()
    for p in files:
        name = (p.name if p == src else str(p.relative_to(src))).encode() + b"\0"
        st = p.stat()
        stat.update(name + f"{st.st_size}:{st.st_mtime_ns}\0".encode())
    return stat.hexdigest()[:16]
