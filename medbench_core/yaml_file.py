"""Reading the project's YAML files (tasks.yaml, models.yaml, a dataset card's front matter) with errors
that name the file and line, and with bounds (docs/running.md, "Guarantees: sources"):

- the file is at most :data:`MAX_YAML_BYTES` (1 MiB; the project's own files are a few KB), refused
  before it is read;
- it is UTF-8 (a BOM is accepted); a byte that is not is refused naming the line and byte offset;
- aliases (``*name``) may repeat at most :data:`MAX_ALIAS_NODES` nodes in all: each use of an alias
  counts the nodes under its anchor, as a program walking the loaded document meets them (a
  "billion laughs" anchor bomb of a few hundred bytes expands to billions), and an alias that
  refers to its own anchor (a cycle) is refused;
- nesting deeper than the parser goes (a RecursionError) is refused naming the line.
"""

from __future__ import annotations

import codecs
import copy
from pathlib import Path
from typing import Any

from medbench_core.errors import DataError, config_errors

MAX_YAML_BYTES = 1 << 20
MAX_ALIAS_NODES = 100_000


@config_errors
def read_yaml_mapping(path: str | Path, what: str, max_bytes: int = MAX_YAML_BYTES) -> dict[str, Any]:
    """The top-level mapping of the YAML file ``path`` (``what`` names it in errors: "task catalogue").

    An empty file is an empty mapping; a missing file, a file over ``max_bytes``, bytes that are not
    UTF-8, invalid YAML, aliases that expand too far (module docstring) or a top level that is not a
    mapping is a :class:`~medbench_core.errors.ConfigError` naming the file (and the line, where there is one).
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: {what} not found")
    if not path.is_file():
        raise DataError(f"{path}: {what} is not a regular file")
    size = path.stat().st_size
    if size > max_bytes:
        raise DataError(f"{path}: {what} is {size} bytes, over the limit of {max_bytes} for a YAML file; is it the right file?")
    text = decode_utf8(path.read_bytes()[: max_bytes + 1], str(path))
    doc = _parsed(text, str(path))
    if not isinstance(doc, dict):
        raise DataError(f"{path}: expected a mapping at the top level (keys such as 'tasks:' or 'models:'), found {type(doc).__name__}")
    return doc


# The documents of the last files read, by their exact text: one `medbench run` reads models.yaml and tasks.yaml
# about 30 times (every step asks the registry and the catalogue), and PyYAML's parser takes 10-15 ms a time. A file
# whose bytes changed is parsed again; an invalid one is never kept (its error is raised every time).
_PARSED: dict[tuple[str, str], Any] = {}
_PARSED_MAX = 16


def _parsed(text: str, where: str) -> Any:
    """``load_yaml(text, where) or {}``, a fresh copy each call (callers may change what they get)."""
    key = (where, text)
    if key not in _PARSED:
        doc = load_yaml(text, where) or {}
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = doc
    return copy.deepcopy(_PARSED[key])


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text (a leading BOM dropped); DataError naming ``where``, the line and the byte offset otherwise."""
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = skip + exc.start
        line = data.count(b"\n", 0, at) + 1
        raise DataError(f"{where}:{line}: not UTF-8: byte 0x{data[at]:02x} at byte offset {at} ({exc.reason}); re-encode the file as UTF-8") from None


def load_yaml(text: str, where: str, max_alias_nodes: int = MAX_ALIAS_NODES) -> Any:
    """The document in the YAML ``text`` (PyYAML's safe loader), its aliases bounded (module docstring).

    ``where`` (a file name) starts every error: ``where:LINE: not valid YAML: PROBLEM at column C``.
    """
    import yaml

    try:
        loader = yaml.SafeLoader(text)  # checks every character first (a NUL is a ReaderError)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise DataError(f"{where}:{line}: not valid YAML: character U+{exc.character:04X} is not allowed in YAML ({exc.reason})") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_aliases(node, where, max_alias_nodes)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if mark is None:
            raise DataError(f"{where}: not valid YAML ({' '.join(str(exc).split())})") from None
        problem = exc.problem or exc.context
        context = f" ({exc.context} at line {exc.context_mark.line + 1})" if exc.problem and exc.context and exc.context_mark else ""
        raise DataError(f"{where}:{mark.line + 1}: not valid YAML: {problem} at column {mark.column + 1}{context}") from None
    except yaml.YAMLError as exc:
        raise DataError(f"{where}: not valid YAML ({' '.join(str(exc).split())})") from None
    except RecursionError:
        line = loader.get_mark().line + 1
        raise DataError(f"{where}:{line}: YAML nested deeper than the parser can read (RecursionError)") from None
    finally:
        loader.dispose()


def _check_aliases(root: Any, where: str, limit: int) -> None:
    """Refuse a document whose aliases repeat more than ``limit`` nodes in all, or form a cycle.

    ``expanded(n)`` is the number of nodes a walk of the loaded document meets under ``n``, each
    alias counted at every use; it is computed once per node (memoised), so a bomb is measured
    in time linear in its size, not in its expansion.
    """
    import yaml

    expanded: dict[int, int] = {}
    distinct = 0
    # Iterative post-order walk: (node, children pushed?) on a stack; no recursion on deep documents.
    stack: list[tuple[Any, bool]] = [(root, False)]
    open_: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            children = _children(node, yaml)
            expanded[key] = 1 + sum(expanded[id(c)] for c in children)
            continue
        if key in expanded:
            continue
        if key in open_:
            raise DataError(f"{where}:{node.start_mark.line + 1}: an alias refers to the anchor it is inside (a cycle); refusing the file")
        open_.add(key)
        distinct += 1
        stack.append((node, True))
        for child in _children(node, yaml):
            if id(child) in open_:
                raise DataError(f"{where}:{child.start_mark.line + 1}: an alias refers to the anchor it is inside (a cycle); refusing the file")
            if id(child) not in expanded:
                stack.append((child, False))
    repeated = expanded[id(root)] - distinct
    if repeated > limit:
        raise DataError(
            f"{where}: its aliases repeat {repeated} nodes, over the limit of {limit} (an anchor bomb?); write the values out, or use fewer aliases"
        )


def _children(node: Any, yaml: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def line_of(path: str | Path, keys: list[Any]) -> int:
    """The line (1-based) where the node at ``keys`` (mapping keys and sequence positions) starts in the
    YAML file ``path``, or of its deepest ancestor found; 0 when the file cannot be composed.

    For errors about a value after the document was loaded (``models[2].training_data[1]``): the
    loaded document keeps no marks, so the file is composed again (a few KB; read with the same bounds)."""
    import yaml

    try:
        text = decode_utf8(Path(path).read_bytes()[: MAX_YAML_BYTES + 1], str(path))
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except (OSError, DataError, yaml.YAMLError):
        return 0
    line = node.start_mark.line + 1 if node is not None else 0
    for key in keys:
        child = None
        if isinstance(node, yaml.MappingNode):
            child = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
            child = node.value[key]
        if child is None:
            break
        node, line = child, child.start_mark.line + 1
    return line
