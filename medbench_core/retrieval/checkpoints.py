"""Reading a model checkpoint file without running code: safetensors, or torch files with ``weights_only=True``.

See :func:`load_state_dict`, the one reader of checkpoint files (open_clip and uniir-clip-sf).
"""

from __future__ import annotations

import pickletools
import re
import zipfile
from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError

CHECKPOINT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin")
# What a refused checkpoint's line says to do, in place of torch's advice (load it with weights_only=False, which runs its code).
NEVER_PICKLES = "medbench never loads pickles (they can run code): convert trusted weights to .safetensors (docs/models_and_kinds.md)"
# torch's message when its weights-only unpickler refuses a file: a paragraph of advice around the reason.
_TORCH_REFUSAL = re.compile(r"Weights only load failed\..*?(?:torch\.load\.html\.?|\Z)", re.DOTALL)


def refusal_reason(exc: BaseException) -> str:
    """Why torch's weights-only reader refused a file, in a few words, without torch's advice to retry with
    ``weights_only=False`` (which runs whatever the pickle holds)."""
    text = str(exc)
    named = re.search(r"GLOBAL ([\w.]+)", text)
    if named:
        return f"its pickle names {named.group(1)}, which is neither a tensor nor a UniIR config class"
    operand = re.search(r"Unsupported operand (\d+)", text)
    if operand:
        return f"it is a plain pickle, not a torch.save file: torch's weights-only reader stops at its instruction {operand.group(1)}"
    if "Weights only load failed" in text or "weights_only" in text:
        return "it is a pickle that holds more than tensors"
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:300] or type(exc).__name__


def without_torch_advice(text: str) -> str:
    """``text`` with each of torch's weights-only refusals (advice to load with ``weights_only=False`` included)
    replaced by its reason and :data:`NEVER_PICKLES`: what a line relays from a library that called torch.load."""
    return _TORCH_REFUSAL.sub(lambda m: f"refused: {refusal_reason(Exception(m.group(0)))}; {NEVER_PICKLES}", text)


class _Inert:
    """Stands in for a class named in a checkpoint's pickle (UniIR's OmegaConf config): records what it was given, runs nothing."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _Inert:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __repr__(self) -> str:
        return f"<stand-in for {type(self).__qualname__}>"


def _plain_dict(*args: Any) -> dict:
    """``collections.defaultdict(factory)`` read as an empty dict (the factory, a stand-in, is not kept)."""
    return {}


def _standin_for(full_name: str) -> Any:
    """What a global of a UniIR checkpoint's pickle becomes, or None for one that is not a config class."""
    module = full_name.rsplit(".", 1)[0]
    if module == "omegaconf" or module.startswith("omegaconf.") or module == "typing":
        return type(full_name, (_Inert,), {})
    if full_name == "collections.defaultdict":
        return _plain_dict
    if full_name in {f"builtins.{t}" for t in ("dict", "list", "int", "float", "str", "bool", "tuple", "bytes")}:
        return type(full_name, (_Inert,), {})  # type tags inside OmegaConf's metadata
    return None


def pickle_globals(path: Path) -> list[str]:
    """The globals (``module.name``) a ``torch.save`` zip file's pickle names, read with pickletools (nothing is unpickled)."""
    try:
        with zipfile.ZipFile(path) as zf:
            members = [n for n in zf.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if not members:
                return []
            data = zf.read(members[0])
    except zipfile.BadZipFile:
        return []  # a legacy (pre-1.6) torch file: torch.load(weights_only=True) decides alone
    found = []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL" and isinstance(arg, str):
            module, name = arg.split(" ", 1)
            if (module, name) in NAME_MAPPING:  # as torch's weights-only unpickler maps protocol-2 names
                module, name = NAME_MAPPING[(module, name)]
            elif module in IMPORT_MAPPING:
                module = IMPORT_MAPPING[module]
            found.append(f"{module}.{name}")
    return sorted(set(found))


def load_state_dict(path: str | Path, model_name: str, strip_prefixes: tuple[str, ...] = ("module.",)) -> dict[str, Any]:
    """The state dict in ``path``: a ``.safetensors`` file, or a torch file read with ``torch.load(weights_only=True)``.

    The one way medbench reads a checkpoint file (open_clip and uniir-clip-sf both call it).
    UniIR's ``clip_sf_large.pth`` also pickles its OmegaConf training config, which
    ``weights_only`` refuses. Its pickle is read with pickletools first (nothing runs); the
    OmegaConf classes (and the ``typing``/``defaultdict``/builtin type tags inside them) are then
    given to torch's weights-only unpickler as inert stand-ins (``torch.serialization.safe_globals``
    with ``(stand-in, "module.Name")`` pairs): they record their arguments and execute nothing, and
    every other global still goes through torch's allowlist, so a pickle that would call code is
    refused. The file is memory-mapped: the optimizer state it carries is never read into memory.
    A ``model`` or ``state_dict`` entry is unwrapped; each key loses ``strip_prefixes`` in order
    (``module.``: checkpoints saved from DistributedDataParallel prefix every key with it). Every
    refusal is a DataError naming the model and the file.
    """
    import pickle

    import torch

    path = Path(path)
    if not path.is_file():
        raise DataError(f"model {model_name}: checkpoint {path} not found")
    suffix = path.suffix.lower()
    if suffix not in CHECKPOINT_SUFFIXES:
        raise DataError(f"model {model_name}: checkpoint {path}: use a .safetensors file or a torch file ({'/'.join(CHECKPOINT_SUFFIXES[1:])})")
    if suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            obj: Any = load_file(str(path), device="cpu")
        except (SafetensorError, OSError) as exc:
            raise DataError(f"model {model_name}: {path} is not a readable safetensors file ({exc})") from exc
    else:
        standins = {name: s for name in pickle_globals(path) if (s := _standin_for(name)) is not None}
        mmap = zipfile.is_zipfile(path)
        try:
            with torch.serialization.safe_globals([(s, name) for name, s in standins.items()]):
                obj = torch.load(str(path), map_location="cpu", weights_only=True, mmap=mmap)
        except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError, TypeError, ValueError) as exc:
            raise DataError(
                f"model {model_name}: refused {path}: it does not load with torch.load(weights_only=True) ({refusal_reason(exc)}). {NEVER_PICKLES}"
            ) from exc
    if isinstance(obj, dict) and isinstance(obj.get("model"), dict):
        obj = obj["model"]
    elif isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or not obj or not all(hasattr(v, "shape") for v in obj.values()):
        raise DataError(f"model {model_name}: {path} holds no state dict of tensors (looked at the file, its 'model' and its 'state_dict' entry)")
    state = {}
    for key, value in obj.items():
        for prefix in strip_prefixes:
            key = key.removeprefix(prefix)
        state[key] = value
    return state
