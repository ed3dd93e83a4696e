"""Allowlisted code runs as exactly the bytes that were allowlisted (issue 44, items 1 and 2).

A code folder (kinds ``code-folder`` and ``code-folder-late``) is trusted by one sha256. That hash
(:func:`scan`) covers every file the folder's code can import or load: sources, bytecode in
``__pycache__``, extension modules, data, configs and weights, hidden files too (only VCS metadata,
``.git``, ``.hg``, ``.svn``, which those tools rewrite on their own, is left out), and every symbolic
link with its target. A link that leads outside the folder is refused, as are what medbench never
runs or loads: a sourceless ``.pyc`` module, a pickle (``.pkl``, a torch checkpoint, a NumPy object
array: loading one can execute code), a device or a pipe.

Python 3.11's import system would still run other bytes than those hashed: a ``__pycache__/*.pyc``
whose header matches its source's mtime and size runs instead of the source, and a module of the
same name imported earlier, or from another ``sys.path`` entry, shadows the folder's. So the
folder's modules are imported only through :class:`TrustedFinder`, first on ``sys.meta_path``:
each source is read once, its bytes checked against the scan, and compiled from those bytes (no
bytecode is read or written); an extension module is checked right before it is loaded. After
loading, every module from a trusted folder must have come through it, and every top-level name a
trusted folder provides must be the folder's (:func:`check_origins`).

What the code loads from outside its folders (item 2) is watched while it runs
(:class:`LoadWatch`, a ``sys.addaudithook`` on ``open``): a file of a Hugging Face hub snapshot
must belong to a repository the entry pins to that commit (``settings.hub``), and a weights file
(``.safetensors``, ``.bin``, ``.pt``, ...) outside the trusted folders must be one the entry passes
in ``init`` (hashed into the model's revision by :func:`path_digest`). Anything else is refused
after the call, before any vector it produced is used.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import stat
import sys
import threading
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError

VCS_FOLDERS = frozenset({".git", ".hg", ".svn"})  # rewritten by git itself (its index on `git status`); never imported
PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".npy", ".npz", ".h5", ".onnx", ".msgpack", ".pkl", ".gguf")
_HUB_SNAPSHOT = re.compile(r"/models--(?P<repo>[^/]+)/snapshots/(?P<commit>[0-9a-f]{40})/")


# --- the folder and its hash ----------------------------------------------------------------------


@dataclass(frozen=True)
class FolderScan:
    """One scan of a trusted folder: every file by path relative to it with its sha256, every link with its target."""

    root: Path
    files: dict[str, str]
    links: dict[str, str]
    digest: str


def _sha256(path: Path) -> str:
    from medbench_core.storage import sha256_noting

    return sha256_noting(path)  # a file read again only when its stat changed (weights are large)


def _pickled(path: Path) -> bool:
    """Whether loading ``path`` would unpickle: a pickle (protocol 2+), a torch checkpoint (zip with a .pkl), a NumPy object array."""
    if path.suffix.lower() in PICKLE_SUFFIXES:
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(128)
    except OSError:
        return False
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:  # PROTO opcode: pickle protocol 2-5 (legacy torch.save too)
        return True
    if head.startswith(b"\x93NUMPY"):
        return b"'descr': '|O'" in head or b"'descr': 'O'" in head
    if head.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(path) as zf:
                return any(n.endswith(".pkl") for n in zf.namelist())
        except (zipfile.BadZipFile, OSError):
            return False
    return False


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def scan(root: Path, where: str = "") -> FolderScan:
    """Every file under ``root`` (see the module docstring), refusing what cannot be trusted by hash; DataError names the file."""
    root = Path(root).resolve()
    at = f"{where}: " if where else ""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in VCS_FOLDERS)
        for name in sorted(filenames) + [d for d in dirnames if (here / d).is_symlink()]:
            p = here / name
            rel = p.relative_to(root).as_posix()
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                target = p.resolve()
                if not _inside(target, root):
                    raise DataError(
                        f"{at}code folder {root}: {rel} is a link to {target}, outside the folder; its code or data would run "
                        "without being in the hash: copy what it points to into the folder, or remove the link"
                    )
                links[rel] = target.relative_to(root).as_posix()
                continue
            if not stat.S_ISREG(st.st_mode):
                raise DataError(f"{at}code folder {root}: {rel} is not a regular file (a device, pipe or socket); remove it")
            in_cache = "__pycache__" in p.relative_to(root).parts
            if p.suffix in (".pyc", ".pyo") and not in_cache:
                raise DataError(
                    f"{at}code folder {root}: {rel} is bytecode without its source (a sourceless module runs bytes nobody can read); "
                    "remove it, or put its .py source in the folder"
                )
            if not in_cache and _pickled(p):
                raise DataError(
                    f"{at}code folder {root}: {rel} is a pickle (loading it can execute code; medbench never loads pickles): "
                    "convert the weights to .safetensors and load those"
                )
            files[rel] = _sha256(p)
        dirnames[:] = [d for d in dirnames if not (here / d).is_symlink()]
    h = hashlib.sha256()
    for rel in sorted(set(files) | set(links)):
        if rel in files:
            h.update(b"f\0" + rel.encode() + b"\0" + files[rel].encode() + b"\0")
        else:
            h.update(b"l\0" + rel.encode() + b"\0" + links[rel].encode() + b"\0")
    return FolderScan(root, files, links, h.hexdigest())


def path_digest(path: Path) -> str:
    """sha256 of a file, or over every file of a folder by relative path and content, links followed (weights a model is given
    from outside its folder: a hub snapshot's files are links to its blobs). Only hashed: what the code may load is its own."""
    path = Path(path)
    if path.is_file():
        return _sha256(path.resolve())
    h = hashlib.sha256()
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(path, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:  # a link back up the tree
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath, name)
            if p.is_file():
                h.update(p.relative_to(path).as_posix().encode() + b"\0" + _sha256(p.resolve()).encode() + b"\0")
    return h.hexdigest()


# --- importing from the scanned bytes only -------------------------------------------------------


class _SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles the source it reads, after checking those bytes against the scan; never reads or writes bytecode."""

    def __init__(self, fullname: str, path: str, finder: TrustedFinder):
        super().__init__(fullname, path)
        self.finder = finder

    def get_code(self, fullname: str) -> Any:
        data = self.get_data(self.path)
        self.finder.check_bytes(Path(self.path), hashlib.sha256(data).hexdigest(), fullname)
        return self.source_to_code(data, self.path)


class _CheckedExtensionLoader(importlib.machinery.ExtensionFileLoader):
    """An extension module of a trusted folder, its file checked against the scan right before it is loaded."""

    def __init__(self, fullname: str, path: str, finder: TrustedFinder):
        super().__init__(fullname, path)
        self.finder = finder

    def create_module(self, spec: Any) -> Any:
        self.finder.check_bytes(Path(self.path), _sha256(Path(self.path)), spec.name)
        return super().create_module(spec)


TRUSTED_LOADERS = (_SourceOnlyLoader, _CheckedExtensionLoader)


@dataclass
class _Root:
    scan: FolderScan
    import_root: Path  # the folder on the path: the code folder itself, or a package's parent
    names: frozenset[str] | None  # the top-level names served (a package: its own name); None: whatever the folder holds


class TrustedFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of the trusted folders, ahead of every other finder, and loads them from their checked bytes."""

    def __init__(self) -> None:
        self.roots: dict[Path, _Root] = {}
        self.lock = threading.Lock()

    def trust(self, scanned: FolderScan, package: bool) -> None:
        """Serve ``scanned``'s modules: a code folder's top-level names, or (``package``) the one package it is."""
        import_root = scanned.root.parent if package else scanned.root
        names = frozenset({scanned.root.name}) if package else None
        with self.lock:
            self.roots[scanned.root] = _Root(scanned, import_root, names)

    def root_of(self, path: Path) -> _Root | None:
        path = path.resolve()
        for root, entry in self.roots.items():
            if _inside(path, root):
                return entry
        return None

    def check_bytes(self, path: Path, digest: str, fullname: str) -> None:
        entry = self.root_of(path)
        rel = path.resolve().relative_to(entry.scan.root).as_posix() if entry else ""
        if entry is None or entry.scan.files.get(rel) != digest:
            raise ImportError(
                f"module {fullname!r}: {path} is not the file allowlisted in trust_code (changed or added after the folder was checked); nothing of it ran"
            )

    def provides(self, name: str) -> list[Path]:
        """The trusted import roots that hold top-level module ``name``."""
        out = []
        for entry in self.roots.values():
            if entry.names is not None and name not in entry.names:
                continue
            if _candidates(entry.import_root, name):
                out.append(entry.import_root)
        return out

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        name = fullname.rpartition(".")[2]
        if path is None:
            places = self.provides(fullname)
        else:
            places = [Path(p) for p in path if self.root_of(Path(p)) is not None]
        for place in places:
            spec = self._spec_in(Path(place), fullname, name)
            if spec is not None:
                return spec
        return None

    def _spec_in(self, place: Path, fullname: str, name: str) -> Any:
        # FileFinder's order: a package folder with __init__, then an extension module, a source, bytecode; else a namespace folder.
        package = place / name
        init = package / "__init__.py"
        if package.is_dir() and init.is_file():
            loader = _SourceOnlyLoader(fullname, str(init), self)
            return importlib.util.spec_from_file_location(fullname, str(init), loader=loader, submodule_search_locations=[str(package)])
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            ext = place / f"{name}{suffix}"
            if ext.is_file():
                return importlib.util.spec_from_file_location(fullname, str(ext), loader=_CheckedExtensionLoader(fullname, str(ext), self))
        source = place / f"{name}.py"
        if source.is_file():
            return importlib.util.spec_from_file_location(fullname, str(source), loader=_SourceOnlyLoader(fullname, str(source), self))
        if (place / f"{name}.pyc").is_file():
            raise ImportError(f"module {fullname!r}: {place / f'{name}.pyc'} is bytecode without its source; medbench runs no sourceless module")
        if package.is_dir():
            spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
            spec.submodule_search_locations = [str(package)]
            return spec
        return None


def _candidates(place: Path, name: str) -> bool:
    if (place / name).is_dir() or (place / f"{name}.py").is_file() or (place / f"{name}.pyc").is_file():
        return True
    return any((place / f"{name}{s}").is_file() for s in importlib.machinery.EXTENSION_SUFFIXES)


_FINDER = TrustedFinder()


def install(scanned: Iterable[tuple[FolderScan, bool]]) -> TrustedFinder:
    """Put the finder first on ``sys.meta_path`` (once) and serve each ``(scan, is_package)``; bytecode writing off for this process."""
    sys.dont_write_bytecode = True  # nothing this process imports leaves bytecode for a later one to run
    for s, package in scanned:
        _FINDER.trust(s, package)
    if not sys.meta_path or sys.meta_path[0] is not _FINDER:
        if _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
        sys.meta_path.insert(0, _FINDER)
    importlib.invalidate_caches()
    return _FINDER


def _module_file(module: Any) -> Path | None:
    spec = getattr(module, "__spec__", None)
    origin = getattr(spec, "origin", None) or getattr(module, "__file__", None)
    if not origin or origin in ("built-in", "frozen", "namespace"):
        return None
    return Path(origin)


def _origin_inside(module: Any, root: Path) -> bool:
    origin = _module_file(module)
    if origin is not None:
        return _inside(origin.resolve(), root)
    paths = [Path(p).resolve() for p in getattr(module, "__path__", None) or []]
    return bool(paths) and all(_inside(p, root) for p in paths)


def check_origins(model: str, roots: list[Path]) -> None:
    """Every module of a trusted folder came through the finder, and every module their code refers to under a name a
    trusted folder provides is that folder's.

    DataError naming the first module that is not: one imported from the folder some other way (its
    bytecode may have run), or one of a folder's names imported from elsewhere (earlier in this
    process, or from another ``sys.path`` entry) that the folder's code uses.
    """
    import types

    roots = [r.resolve() for r in roots]
    ours = []
    for name, module in sorted(sys.modules.items()):
        origin = _module_file(module) if module is not None else None
        inside = next((r for r in roots if _inside(origin.resolve(), r)), None) if origin is not None else None
        if inside is None:
            continue
        if not isinstance(getattr(getattr(module, "__spec__", None), "loader", None), TRUSTED_LOADERS):
            raise DataError(
                f"model {model}: module {name!r} ({origin}) was imported from the allowlisted {inside} before medbench checked it, "
                "so bytes other than the allowlisted ones may have run; import nothing from the folder before medbench loads the model"
            )
        ours.append(module)
    for module in ours:
        for value in list(vars(module).values()):
            try:
                used = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
            except Exception:  # a lazy object that computes its attributes: not a module reference
                continue
            if not isinstance(used, str) or sys.modules.get(used) is None:
                continue
            places = _FINDER.provides(used.partition(".")[0])
            if places and not any(_origin_inside(sys.modules[used], p) for p in places):
                where = _module_file(sys.modules[used]) or list(getattr(sys.modules[used], "__path__", []))
                raise DataError(
                    f"model {model}: {module.__name__} uses module {used!r} from {where}, not the one in the allowlisted {places[0]}; "
                    "rename it or remove the other copy"
                )


# --- what the code loads from outside its folders ---------------------------------------------------


@dataclass
class LoadWatch:
    """What one model may load from outside its trusted folders, and what it was seen loading otherwise."""

    model: str
    roots: tuple[Path, ...]
    declared: tuple[Path, ...]  # files and folders passed in init (hashed into the revision)
    hub: dict[str, str]  # repository -> pinned commit
    found: list[str] = field(default_factory=list)

    def allowed_file(self, path: Path) -> bool:
        return any(_inside(path, r) for r in (*self.roots, *self.declared, *_python_places()))

    def note(self, raw: str) -> None:
        path = Path(os.path.abspath(raw))
        if any(_inside(path, r) for r in (*self.roots, *self.declared)):
            return  # the folder's own files (hashed) and what init gives it (hashed into the revision)
        m = _HUB_SNAPSHOT.search(raw)
        if m:
            repo, commit = m.group("repo").replace("--", "/"), m.group("commit")
            pinned = self.hub.get(repo)
            if pinned is None or set(pinned) == {"0"}:  # not pinned, or the docs' placeholder
                line = f"it loads {repo} at commit {commit} from the hub cache, and settings.hub does not pin it: add {{{repo}: {commit}}} to settings.hub"
            elif pinned != commit:
                line = f"it loads {repo} at commit {commit} from the hub cache, and settings.hub pins {pinned}: `hf download {repo} --revision {pinned}`"
            else:
                return
        else:
            if path.suffix.lower() not in WEIGHT_SUFFIXES or self.allowed_file(path) or self.allowed_file(path.resolve()):
                return
            line = (
                f"it loads weights {path} from outside its allowlisted folders, which nothing pins: pass the path in settings.init "
                "(hashed into the model's revision) or move the file into the folder"
            )
        if line not in self.found:
            self.found.append(line)

    def check(self) -> None:
        if self.found:
            raise DataError(f"model {self.model}: refused: {self.found[0]}" + (f" (and {len(self.found) - 1} more)" if len(self.found) > 1 else ""))


_WATCHING: list[LoadWatch] = []
_HOOKED = False
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


@functools.cache
def _python_places() -> tuple[Path, ...]:
    import site

    places = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), site.getusersitepackages()}
    return tuple(Path(p).resolve() for p in places if p)


def _hook(event: str, args: tuple) -> None:
    if event != "open" or not _WATCHING:
        return
    path, mode, flags = (tuple(args) + (None, None, None))[:3]
    if isinstance(path, int) or path is None:
        return
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return
    if isinstance(flags, int) and flags & _WRITE_FLAGS:
        return
    raw = os.fsdecode(path) if isinstance(path, bytes) else str(path)
    for watch in _WATCHING:
        watch.note(raw)


@contextmanager
def watching(watch: LoadWatch) -> Iterator[LoadWatch]:
    """Note every file opened for reading while the block runs (``watch.check()`` afterwards refuses what it found)."""
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_hook)  # hooks cannot be removed: this one does nothing while no watch is on
        _HOOKED = True
    _WATCHING.append(watch)
    try:
        yield watch
    finally:
        _WATCHING.remove(watch)
