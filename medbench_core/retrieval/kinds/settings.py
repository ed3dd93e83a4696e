"""A kind's settings: a typed, frozen dataclass read from an entry's ``settings:`` mapping.

Every kind declares its own subclass of :class:`KindSettings`. Reading a mapping refuses an unknown
key (naming the closest known one), a value of the wrong type and a value outside the field's
choices, so a typo in models.yaml is an error instead of a silently used default.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar

from medbench_core.errors import DataError


def closest(word: str, known: list[str] | tuple[str, ...]) -> str:
    """`` (did you mean 'x'?)`` for the known word closest to ``word``, or ``""``."""
    match = difflib.get_close_matches(word, list(known), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _type_name(tp: Any) -> str:
    return " or ".join("null" if a is type(None) else getattr(a, "__name__", str(a)) for a in typing.get_args(tp)) or getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """``value`` as type ``tp`` (float accepts ints; no bool where a number is asked), or DataError."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except DataError:
                continue
        raise DataError(f"{where} must be {_type_name(tp)}, not {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is bool or tp is str:
        if isinstance(value, tp):
            return value
    elif origin in (dict, Mapping) or tp in (dict, Mapping):
        if isinstance(value, Mapping):
            return {str(k): v for k, v in value.items()}
    elif origin in (list, tuple) or tp in (list, tuple):
        if isinstance(value, (list, tuple)):
            return list(value)
    else:
        return value
    raise DataError(f"{where} must be {_type_name(tp)}, not {value!r}")


@dataclasses.dataclass(frozen=True)
class KindSettings:
    """Base of every kind's settings. Subclasses add fields with defaults and may set:

    ``CHOICES``: field -> allowed values; ``QUERY_ONLY``: fields that change only how queries are
    encoded (they enter the run key, not the corpus embedding key); ``HINTS``: key -> why a key
    that belongs to another kind is not taken here; and :meth:`check` for rules across fields.
    """

    CHOICES: ClassVar[dict[str, tuple[Any, ...]]] = {}
    QUERY_ONLY: ClassVar[tuple[str, ...]] = ()
    HINTS: ClassVar[dict[str, str]] = {}

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, where: str, kind: str) -> KindSettings:
        """Read ``raw`` (an entry's ``settings:``); ``where`` names the file and entry in errors."""
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise DataError(f"{where}: settings must be a mapping, not {raw!r}")
        known = cls.names()
        for key in raw:
            if key not in known:
                hint = f": {cls.HINTS[key]}" if key in cls.HINTS else closest(str(key), known)
                listed = ", ".join(sorted(known)) or "none"
                raise DataError(f"{where}: unknown setting {key!r} for kind {kind}{hint}; known settings: {listed}")
        hints = typing.get_type_hints(cls)
        values = {}
        for key, value in raw.items():
            value = _coerce(value, hints[key], f"{where}: setting {key!r}")
            if key in cls.CHOICES and value not in cls.CHOICES[key]:
                allowed = ", ".join(str(c) for c in cls.CHOICES[key] if c is not None)
                raise DataError(f"{where}: {key} {value!r} unknown; use one of {allowed}")
            values[key] = value
        settings = cls(**values)
        settings.check(where)
        return settings

    def check(self, where: str) -> None:
        """Rules across fields; raise DataError naming ``where``."""

    def explicit(self) -> dict[str, Any]:
        """The settings that differ from their defaults, as an entry would write them.

        This is what enters the model's identity: writing a default out changes no key, and a
        changed default is an output change that bumps the kind's version.
        """
        out = {}
        for f in dataclasses.fields(self):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            value = getattr(self, f.name)
            if value != default:
                out[f.name] = value
        return out

    def without(self, names: tuple[str, ...]) -> dict[str, Any]:
        """:meth:`explicit` without ``names``."""
        return {k: v for k, v in self.explicit().items() if k not in names}


@dataclasses.dataclass(frozen=True)
class NoSettings(KindSettings):
    """A kind that takes no settings."""
