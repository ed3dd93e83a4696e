"""Errors that say what was wrong and where."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class MedbenchError(Exception):
    """Base class of every error medbench raises on purpose."""


class DataError(MedbenchError):
    """Input data is malformed: the message names the file, line or ids at fault."""


class IntegrityError(MedbenchError):
    """A stored artifact does not match its manifest (truncated, corrupted or missing)."""


class ContractError(MedbenchError):
    """A data contract (schema, integrity, overlap, licence) failed for a task."""


class DiskFull(MedbenchError, OSError):
    """A write that ran out of space (ENOSPC): the message names the device, where it is mounted, what is free and
    the file or folder being written (:func:`medbench_core.storage.disk_full`). Still an OSError for ``except OSError``."""

    def __init__(self, message: str, path: str) -> None:
        import errno

        OSError.__init__(self, errno.ENOSPC, message, path)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # pickled across processes (Dagster's step errors) with its own message
        return (type(self), (self.message, self.filename))


class ConfigError(DataError):
    """A configuration file of the project (tasks.yaml, models.yaml) is wrong: a command exits 2 on it, before any work."""


def config_errors(load: F) -> F:
    """Decorate a loader of configuration (tasks.yaml, models.yaml): the DataErrors it raises become ConfigErrors."""

    @functools.wraps(load)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return load(*args, **kwargs)
        except ConfigError:
            raise
        except DataError as exc:
            raise ConfigError(str(exc)) from exc

    return wrapper  # type: ignore[return-value]
