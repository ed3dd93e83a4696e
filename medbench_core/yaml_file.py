"""Reading the project's YAML files (tasks.yaml, models.yaml) with errors that name the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medbench_core.errors import DataError


def read_yaml_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """The top-level mapping of the YAML file ``path`` (``what`` names it in errors: "task catalogue").

    An empty file is an empty mapping; a missing file, invalid YAML or a top level that is not a
    mapping is a DataError naming the file.
    """
    import yaml

    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: {what} not found")
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if mark is None:
            raise DataError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from exc
        context = f" ({exc.context} at line {exc.context_mark.line + 1})" if getattr(exc, "context", None) and exc.context_mark else ""
        raise DataError(f"{path}:{mark.line + 1}: not valid YAML: {exc.problem} at column {mark.column + 1}{context}") from exc
    if not isinstance(doc, dict):
        raise DataError(f"{path}: expected a mapping at the top level (keys such as 'tasks:' or 'models:'), found {type(doc).__name__}")
    return doc
