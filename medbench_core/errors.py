"""Errors that say what was wrong and where."""

from __future__ import annotations


class MedbenchError(Exception):
    """Base class of every error medbench raises on purpose."""


class DataError(MedbenchError):
    """Input data is malformed: the message names the file, line or ids at fault."""


class IntegrityError(MedbenchError):
    """A stored artifact does not match its manifest (truncated, corrupted or missing)."""


class ContractError(MedbenchError):
    """A data contract (schema, integrity, overlap, licence) failed for a task."""
