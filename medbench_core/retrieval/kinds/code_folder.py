"""Kinds ``code-folder`` and ``code-folder-late``: a model that is a Python class in a folder (or an installed
package), run only when ``models.yaml`` allowlists that code by path and content hash.

M3Retrieve's MedImageInsight is ``MedImageInsight(model_dir=..., vision_model_name=..., language_model_name=...)``
with ``load_model()`` and ``encode(images=, texts=)`` (github.com/AkashGhosh/M3Retrieve at 94c83da,
``Code/get_medImageInsight_results.py`` l.69-79, l.127-133); UniIR's BLIP-FF and PreFLMR (``flmr``) are
classes too. The entry names the code and how to call it:

- ``path``: the folder holding the code (or ``pkg:<package>``, an installed package);
- ``entry``: ``module:Class`` (or a factory function) importable from that folder;
- ``init``: keyword arguments of the constructor; ``{folder}`` in a text is the folder's path,
  ``{device}`` the compute device;
- ``setup``: a method called once after construction (MedImageInsight's ``load_model``);
- ``imports``: further code the class imports that is not in the lock (``pkg:flmr``): each must be
  allowlisted too;
- ``text``, ``image``, ``image_text``: the call per kind of record, as ``remote-code-embedder``'s
  (:class:`~medbench_core.retrieval.kinds.remote_code_calls.Call`; ``output`` may list outputs to add:
  ``[text_embeddings, image_embeddings]``); ``image_input`` ``pil``, ``path`` or ``base64``.

``code-folder`` gives one vector per record (searched with FAISS); ``code-folder-late`` one vector
per token (a list of ``(tokens, dim)`` arrays, or a padded array with a ``mask`` output), scored
by MaxSim (:mod:`.late_interaction`).

**Trust.** models.yaml's top-level ``trust_code: [{path: <folder or pkg:name>, sha256: <hex>}]``
lists the code that may run; the hash is :func:`code_hash` of the folder: every file the code can
import or load (sources, bytecode, data, weights) and every link, by relative path and content
(:mod:`medbench_core.retrieval.trusted_code`; a link leaving the folder, a sourceless ``.pyc`` or a
pickle is refused). Reading the registry refuses an entry whose code is not listed or whose hash
differs, with one line giving the hash now; loading scans again right before the import, imports
the folder's modules only from the bytes scanned (no bytecode read or written), and checks that every
module the code uses under one of the folder's names is the folder's. What the code loads from
outside its folders is pinned or refused: a path in ``init`` is hashed into the revision, a hub
repository must be pinned to its commit in ``settings.hub`` (``{repo: commit}``), and any other
weights file opened from outside is refused. The revision is ``code-sha256:<16 hex>``, each
import's, the sha256 of the folder's other files (``files-sha256``), of each ``init`` path outside
(``init.<key>@<16 hex>``) and each hub pin (``hub:<repo>@<12 hex>``), so changed code or weights
re-key every artifact.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError
from medbench_core.retrieval import trusted_code
from medbench_core.retrieval.kinds.late_interaction import LateInteractionKind
from medbench_core.retrieval.kinds.remote_code import RemoteCodeKind
from medbench_core.retrieval.kinds.remote_code_calls import RECORD_TYPES, Call
from medbench_core.retrieval.kinds.remote_code_encoder import RemoteCodeEncoder
from medbench_core.retrieval.kinds.settings import KindSettings
from medbench_core.retrieval.kinds.spec import ModelSpec

CODE_SUFFIXES = (".py", ".pyx", ".so", ".pyd")


# --- the code and its hash ----------------------------------------------------------------------


def code_root(path: str, where: str = "") -> Path:
    """The folder of ``path``: a local folder, or ``pkg:<package>`` (an installed package's folder)."""
    at = f"{where}: " if where else ""
    if path.startswith("pkg:"):
        spec = importlib.util.find_spec(path[4:]) if path[4:] and "." not in path[4:] else None
        if spec is None or not spec.submodule_search_locations:
            raise DataError(f"{at}code {path!r}: no installed package {path[4:]!r} (a folder-shaped package, found on sys.path)")
        return Path(list(spec.submodule_search_locations)[0]).resolve()
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise DataError(f"{at}code folder {path!r} does not exist")
    return folder


def _files(root: Path, code: bool) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).parts
        if not p.is_file() or "__pycache__" in rel or any(part.startswith(".") for part in rel):
            continue
        if (p.suffix in CODE_SUFFIXES) == code:
            out.append(p)
    return out


def _digest(root: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def code_hash(root: Path, where: str = "") -> str:
    """The trust hash of a code folder: every file its code can import or load and every link, by relative path and content
    (:func:`medbench_core.retrieval.trusted_code.scan`; DataError for a link leaving it, a sourceless .pyc, a pickle)."""
    scanned = trusted_code.scan(root, where)
    if not any(rel.endswith(CODE_SUFFIXES) for rel in scanned.files):
        raise DataError(f"code folder {root}: no Python files (.py, .pyx, .so, .pyd) in it")
    return scanned.digest


def data_hash(root: Path) -> str:
    """sha256 over the folder's files other than code (weights, configs); ``""`` when it has none."""
    files = _files(root, code=False)
    return _digest(root, files) if files else ""


@dataclass(frozen=True)
class TrustedCode:
    """The allowlisted code of one model: ``(path as written, resolved folder, sha256)`` per code folder."""

    folders: tuple[tuple[str, str, str], ...]


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?\Z")


# --- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CodeFolderSettings(KindSettings):
    """``entry`` (module:Class), ``init``, ``setup``, ``imports``, ``hub`` (hub repositories the code loads -> pinned commit),
    the calls ``text`` / ``image`` / ``image_text``, ``image_input`` (pil | path | base64), ``normalize``,
    ``instructions`` / ``query_template`` (queries only)."""

    entry: str = ""
    init: dict | None = None
    setup: str = ""
    imports: list | None = None
    hub: dict | None = None
    text: dict | None = None
    image: dict | None = None
    image_text: dict | None = None
    image_input: str = "pil"
    normalize: bool = True
    instructions: dict | None = None
    query_template: str | None = None

    CHOICES = {"image_input": ("pil", "path", "base64")}
    QUERY_ONLY = ("instructions", "query_template")
    HINTS = {
        "class": "give entry: module:Class",
        "trust_remote_code": "code folders are trusted by path and hash in the top-level trust_code list of models.yaml",
        "dtype": "a code folder's class decides its own precision (pass it in init if it takes one)",
    }

    def check(self, where: str) -> None:
        module, _, attr = self.entry.partition(":")
        if not (module and attr and all(p.isidentifier() for p in module.split(".")) and all(p.isidentifier() for p in attr.split("."))):
            raise DataError(f"{where}: settings.entry must be module:Class (e.g. medimageinsightmodel:MedImageInsight), not {self.entry!r}")
        if self.setup and (not self.setup.isidentifier() or self.setup.startswith("_")):
            raise DataError(f"{where}: settings.setup must name a public method (e.g. load_model), not {self.setup!r}")
        if self.imports is not None and not all(isinstance(x, str) and x for x in self.imports):
            raise DataError(f"{where}: settings.imports lists code folders or pkg:<package>, not {self.imports!r}")
        if self.instructions is not None and not all(isinstance(v, str) for v in self.instructions.values()):
            raise DataError(f"{where}: instructions must map a task name, task type or 'default' to an instruction text")
        if self.query_template is not None and ("{query}" not in self.query_template or "{instruction}" not in self.query_template):
            raise DataError(f"{where}: query_template {self.query_template!r} needs both {{instruction}} and {{query}}")
        for repo, commit in (self.hub or {}).items():
            if not (isinstance(repo, str) and HUB_ID.match(repo) and isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit)):
                raise DataError(
                    f"{where}: settings.hub maps each hub repository the code loads to the commit it must be (40 hex), "
                    f"not {repo!r}: {commit!r} (a refused run prints the commit it found)"
                )
        calls = self.calls(where)
        if not calls:
            raise DataError(f"{where}: settings need at least one of text, image, image_text (the method that encodes those records)")
        if "image_text" in calls and calls["image_text"].fuse and not ("text" in calls and "image" in calls):
            raise DataError(f"{where}: image_text: {{fuse: sum}} adds the text and image calls' vectors; give settings.text and settings.image too")
        for kind, call in calls.items():
            if call.mask and not self.late:
                raise DataError(f"{where}: settings.{kind}.mask is for token vectors (kind code-folder-late)")
            if self.late and (call.fuse or isinstance(call.output, list)):
                raise DataError(f"{where}: settings.{kind}: token vectors are not added (no fuse, one output); kind code-folder-late")

    late = False

    def calls(self, where: str = "model entry") -> dict[str, Call]:
        """The entry's calls by record type (``text``, ``image``, ``image_text``)."""
        return {t: Call.parse(getattr(self, t), t, where) for t in RECORD_TYPES if getattr(self, t) is not None}


@dataclass(frozen=True)
class CodeFolderLateSettings(CodeFolderSettings):
    """As :class:`CodeFolderSettings`; each call returns token vectors (``output``, optional ``mask``)."""

    late = True


# --- loading -------------------------------------------------------------------------------------


def _substitute(value: Any, folder: Path, device: str) -> Any:
    if isinstance(value, str):
        return value.replace("{folder}", str(folder)).replace("{device}", device)
    if isinstance(value, list):
        return [_substitute(v, folder, device) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, folder, device) for k, v in value.items()}
    return value


def verify_trust(spec: ModelSpec) -> tuple[TrustedCode, list[trusted_code.FolderScan]]:
    """The entry's allowlisted code, each folder scanned again now (DataError naming the folder when its hash moved), with the scans."""
    trusted = spec.block
    if not isinstance(trusted, TrustedCode):
        raise DataError(
            f"model {spec.name}: its code runs only when models.yaml lists it under trust_code (path and sha256); this entry was not read from such a registry"
        )
    scans = []
    for written, folder, allowed in trusted.folders:
        scanned = trusted_code.scan(Path(folder), f"model {spec.name}")
        if scanned.digest != allowed:
            raise DataError(
                f"model {spec.name}: the code in {folder} changed after models.yaml allowlisted it (sha256 now {scanned.digest}); "
                "read the change, then update trust_code"
            )
        scans.append(scanned)
    return trusted, scans


def outside_paths(spec: ModelSpec, folders: list[Path]) -> list[tuple[str, Path]]:
    """``(init key, path)`` of each text in ``init`` that names an existing file or folder outside the entry's code folders
    (weights the class is given: BLIP-FF's ``checkpoint``); they are hashed into the revision."""
    folder = folders[0]
    out: list[tuple[str, Path]] = []

    def walk(value: Any, key: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{key}.{i}")
        elif isinstance(value, str) and ("/" in value or value.startswith("~")):
            path = Path(_substitute(value, folder, "cpu")).expanduser()
            if path.exists():
                path = path.resolve()
                if not any(path == f or f in path.parents for f in folders):
                    out.append((key, path))

    walk(spec.settings.init or {}, "")
    return out


def _watch(spec: ModelSpec, folders: list[Path]) -> trusted_code.LoadWatch:
    return trusted_code.LoadWatch(spec.name, tuple(folders), tuple(p for _k, p in outside_paths(spec, folders)), dict(spec.settings.hub or {}))


def load_code_folder_object(spec: ModelSpec, device: str = "cpu") -> Any:
    """The entry's object: the allowlisted module imported from its scanned bytes, the class constructed with ``init``,
    ``setup`` called; what it loaded from outside its folders checked (pinned, or passed in ``init``)."""
    trusted, scans = verify_trust(spec)
    folder = Path(trusted.folders[0][1])
    folders = [Path(f) for _w, f, _h in trusted.folders]
    module_name, _, attr = spec.settings.entry.partition(":")
    package = spec.path.startswith("pkg:")
    import_root = folder.parent if package else folder
    trusted_code.install((s, written.startswith("pkg:")) for (written, _f, _h), s in zip(trusted.folders, scans))
    if str(import_root) not in sys.path:
        sys.path.insert(0, str(import_root))  # the class may look for its siblings' files as its own scripts run it
    watch = _watch(spec, folders)
    with trusted_code.watching(watch):
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # the user's code failing to import must say which entry and why
            raise DataError(f"model {spec.name}: importing {module_name!r} from {folder} failed ({type(exc).__name__}: {exc})") from exc
        origin = Path(getattr(module, "__file__", "") or "").resolve()
        if folder not in origin.parents:
            raise DataError(
                f"model {spec.name}: module {module_name!r} was imported from {origin}, not from the allowlisted {folder}; rename it or remove the other copy"
            )
        trusted_code.check_origins(spec.name, folders)
        target: Any = module
        for part in attr.split("."):
            target = getattr(target, part, None)
            if target is None:
                raise DataError(f"model {spec.name}: {module_name} has no {attr!r} (settings.entry)")
        kwargs = _substitute(dict(spec.settings.init or {}), folder, device)
        try:
            obj = target(**kwargs)
        except TypeError as exc:
            raise DataError(f"model {spec.name}: {spec.settings.entry}(**init) failed: {exc}") from exc
        if spec.settings.setup:
            method = getattr(obj, spec.settings.setup, None)
            if not callable(method):
                raise DataError(f"model {spec.name}: {type(obj).__name__} has no method {spec.settings.setup!r} (settings.setup)")
            method()
    watch.check()
    trusted_code.check_origins(spec.name, folders)
    if hasattr(obj, "eval") and callable(obj.eval) and hasattr(obj, "parameters"):
        obj.eval()  # a torch module: inference mode as the scripts put it
    return obj


class CodeFolderEncoder(RemoteCodeEncoder):
    """A code folder's object, each encode watched: what it loads from outside its folders must be pinned, or nothing it gives is used."""

    def __init__(self, spec: ModelSpec, model: Any, device: str = "cpu", progress: bool | None = False):
        super().__init__(spec, model, device=device, progress=progress)
        self.folders = [Path(f) for _w, f, _h in spec.block.folders]
        self.watch = _watch(spec, self.folders)

    def _watched(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        with trusted_code.watching(self.watch):
            out = method(*args, **kwargs)
        self.watch.check()
        trusted_code.check_origins(self.spec.name, self.folders)  # a module imported lazily, inside a method, is checked too
        return out

    def encode_records(self, *args: Any, **kwargs: Any) -> Any:
        return self._watched(super().encode_records, *args, **kwargs)

    def encode_multi(self, *args: Any, **kwargs: Any) -> Any:
        return self._watched(super().encode_multi, *args, **kwargs)


# --- the kinds -----------------------------------------------------------------------------------


class CodeFolderMixin:
    """What both code-folder kinds share: trust, revision, applicability by call, instructions, loading."""

    needs_path = True
    reads = frozenset({"text", "image"})

    def code_paths(self, spec: ModelSpec) -> list[str]:
        """The entry's code: its path, then each of settings.imports."""
        return [spec.path, *(spec.settings.imports or [])]

    def grant_trust(self, spec: ModelSpec, trusted_code: Mapping[str, str], where: str) -> ModelSpec:
        """``spec`` with its allowlisted code recorded, when every code folder is on ``trusted_code`` (path -> sha256) with its hash now."""
        resolved = {}
        for written, allowed in trusted_code.items():
            try:
                resolved[str(code_root(written))] = (written, allowed)
            except DataError:
                continue  # an allowlisted folder that is gone concerns only the entries that use it
        folders = []
        for path in self.code_paths(spec):
            folder = code_root(path, f"{where}: model {spec.name!r}")
            now = code_hash(folder, f"{where}: model {spec.name!r}")
            listed = resolved.get(str(folder))
            if listed is None:
                raise DataError(
                    f"{where}: model {spec.name!r}: the code in {folder} is not on the trust_code allowlist; read it, then add "
                    f"{{path: {path}, sha256: {now}}} under trust_code"
                )
            if listed[1].lower() != now:
                raise DataError(
                    f"{where}: model {spec.name!r}: the code in {folder} changed since trust_code listed it "
                    f"(sha256 now {now}, listed {listed[1]}); read the change, then update the hash"
                )
            folders.append((path, str(folder), now))
        return dataclasses.replace(spec, block=TrustedCode(tuple(folders)))

    def hub_id(self, spec: ModelSpec) -> str:
        return ""

    def revision(self, spec: ModelSpec) -> str:
        """``code-sha256:<16 hex>`` of the folder's code, ``+<import>@<16 hex>`` per import, ``+files-sha256:<16 hex>`` of its other
        files, ``+init.<key>@<16 hex>`` per ``init`` path outside the folders, ``+hub:<repo>@<12 hex>`` per pinned hub repository."""
        roots = [code_root(p) for p in self.code_paths(spec)]
        parts = [f"code-sha256:{code_hash(roots[0])[:16]}"]
        parts += [f"{p}@{code_hash(r)[:16]}" for p, r in zip(self.code_paths(spec)[1:], roots[1:])]
        data = data_hash(roots[0])
        if data:
            parts.append(f"files-sha256:{data[:16]}")
        parts += [f"init.{key}@{trusted_code.path_digest(path)[:16]}" for key, path in outside_paths(spec, roots)]
        parts += [f"hub:{repo}@{commit[:12]}" for repo, commit in sorted((spec.settings.hub or {}).items())]
        return "+".join(parts)

    def load(self, spec: ModelSpec, *, device: str = "cpu", progress: bool | None = False, online: bool = False) -> Any:
        return CodeFolderEncoder(spec, load_code_folder_object(spec, device), device=device, progress=progress)


class CodeFolderKind(CodeFolderMixin, RemoteCodeKind):
    """One vector per record, from a class in an allowlisted folder (MedImageInsight, UniIR's BLIP-FF)."""

    name = "code-folder"
    Settings = CodeFolderSettings
    version = "1"

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        return {**super().mteb_meta(spec, registry), "framework": ["PyTorch"], "open_weights": None}


class CodeFolderLateKind(CodeFolderMixin, LateInteractionKind):
    """Token vectors per record, from a class in an allowlisted folder (PreFLMR through ``flmr``), scored by MaxSim."""

    name = "code-folder-late"
    Settings = CodeFolderLateSettings
    version = "1"

    own_applicability = RemoteCodeKind.own_applicability
    query_prompt = RemoteCodeKind.query_prompt
    prompt_key = RemoteCodeKind.prompt_key

    def mteb_meta(self, spec: ModelSpec, registry: Any) -> dict[str, Any]:
        calls = spec.settings.calls(f"model {spec.name}")
        images = "image" in calls or "image_text" in calls
        return {
            **super().mteb_meta(spec, registry),
            "use_instructions": bool(spec.settings.instructions),
            "modalities": ["image", "text"] if images else ["text"],
        }


KIND = CodeFolderKind()
LATE = CodeFolderLateKind()
