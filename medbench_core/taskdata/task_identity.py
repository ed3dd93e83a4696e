"""What a task is, so that a model's declared training data can be matched against it (tasks.yaml ``identity:``).

An entry may say which public datasets and benchmarks it is::

    - name: scifact
      identity: {beir: scifact, mteb: SciFact, hub: [BeIR/scifact, mteb/scifact], dataset: SciFact}

``beir``: its BEIR name; ``mteb``: MTEB's task name(s); ``hub``: hub dataset ids; ``dataset``: the
source dataset's own name(s); ``seed``: the seed benchmark it comes from (R2MED, M3Retrieve,
MMed-Bench-IR). Each takes a string or a list. Added without being written: the task's own name,
an MTEB task's name (``mteb_task``) and a hub dataset read (``dataset``). A declaration names the
task when one of these names equals one of its declared names, compared case-folded
(``SciFact`` = ``scifact``): a source dataset counts as the task whatever split was trained on,
since a declaration rarely says which. The identity is not a reader option and enters no key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from medbench_core.errors import DataError

IDENTITY_FIELDS = ("beir", "mteb", "hub", "dataset", "seed")


def fold(name: str) -> str:
    """A name as declarations and identities are compared: case-folded, outer spaces dropped."""
    return " ".join(str(name).split()).casefold()


@dataclass(frozen=True)
class TaskIdentity:
    """Every (field, name) a task answers to, the task's own name first."""

    task: str
    names: tuple[tuple[str, str], ...]

    def matches(self, declared: Iterable[str]) -> list[tuple[str, str]]:
        """The (field, name) pairs of this identity that a declared name equals (case-folded)."""
        wanted = {fold(d) for d in declared}
        return [(f, n) for f, n in self.names if fold(n) in wanted]

    def to_json(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for f, n in self.names:
            out.setdefault(f, []).append(n)
        return out


def read_identity(raw: Any, where: str) -> dict[str, tuple[str, ...]]:
    """The ``identity:`` mapping of a tasks.yaml entry, checked: known fields, strings or lists of strings."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise DataError(f"{where}: identity must be a mapping such as {{beir: scifact, mteb: SciFact, hub: BeIR/scifact}}, not {raw!r}")
    out: dict[str, tuple[str, ...]] = {}
    for key, value in raw.items():
        if key not in IDENTITY_FIELDS:
            from medbench_core.taskdata.readers.base import closest

            raise DataError(f"{where}: identity field {key!r} unknown{closest(str(key), IDENTITY_FIELDS)}; known: {', '.join(IDENTITY_FIELDS)}")
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, str) and v.strip() for v in values):
            raise DataError(f"{where}: identity {key} must be a name or a list of names, not {value!r}")
        out[str(key)] = tuple(v.strip() for v in values)
    return out


def task_identity(name: str, declared: Mapping[str, tuple[str, ...]], options: Mapping[str, Any]) -> TaskIdentity:
    """The identity of task ``name``: its own name, what ``declared`` (tasks.yaml) says, MTEB's name and the hub dataset it reads."""
    names: list[tuple[str, str]] = [("task", name)]
    for f in IDENTITY_FIELDS:
        names += [(f, v) for v in declared.get(f, ())]
    if options.get("mteb_task"):
        names.append(("mteb", str(options["mteb_task"])))
    if options.get("dataset"):
        names.append(("hub", str(options["dataset"])))
    seen: set[tuple[str, str]] = set()
    unique = [(f, n) for f, n in names if not ((f, fold(n)) in seen or seen.add((f, fold(n))))]
    return TaskIdentity(name, tuple(unique))
