"""Compiled Jinja templates kept between processes, as Python keeps its modules' bytecode (issue 52).

Every ``medbench run`` renders Jinja templates twice over: Great Expectations' data docs (each view it makes builds a
new ``jinja2.Environment``, so every page compiles its templates again: about 50 compilations per checkpoint's docs)
and the leaderboard's site. Compiling is pure Python (0.3 s of CPU for the site's templates on the project machine,
more for the data docs'); rendering from compiled code is what the pages need. :func:`bytecode_cache` gives the
environments jinja's own ``FileSystemBytecodeCache``: each template's code stored under a key of its name and file,
checked against the source's checksum and jinja's bytecode version on every load (a changed template, or another
jinja or Python, compiles afresh), written to a temporary name and renamed. The pages are the same bytes either way
(tests/core/test_template_cache.py).

The cache lives where jinja puts it by default (a folder of the user's own, mode 0700, in the temporary directory),
not in the data or state: it holds code, not results, so a fresh world reuses it as it reuses the modules' ``.pyc``.
A folder that cannot be made or written costs only the compiling: nothing fails for want of a cache.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any


def _cache_class():
    import jinja2

    class QuietFileSystemBytecodeCache(jinja2.FileSystemBytecodeCache):
        """jinja's cache, where a template that cannot be stored (a full or read-only disk) is just compiled the next time too."""

        def dump_bytecode(self, bucket: Any) -> None:
            try:
                super().dump_bytecode(bucket)
            except OSError:
                pass

    return QuietFileSystemBytecodeCache


def make_bytecode_cache(directory: str | Path | None = None):
    """A bytecode cache in ``directory`` (None: jinja's default folder for this user), or None where none can be made."""
    cls = _cache_class()
    try:
        if directory is not None:
            Path(directory).mkdir(parents=True, exist_ok=True)
            return cls(str(directory))
        return cls()  # jinja picks (and secures) the folder
    except (OSError, RuntimeError):  # RuntimeError: jinja found no safe temporary folder
        return None


@functools.cache
def bytecode_cache():
    """The process's bytecode cache (:func:`make_bytecode_cache` in jinja's default folder), made once."""
    return make_bytecode_cache()
