"""Progress bars (tqdm) for the steps a user waits for: encoding, index building, search.

Bars are on in an interactive terminal and off in CI and in logs. The library reads no
environment variables, so the decision is the caller's: the orchestration calls
:func:`want_progress` with ``sys.stderr.isatty()`` and ``os.environ`` once and passes the result
down as ``progress=``. Functions taking ``progress: bool | None`` treat None as "is stderr a
terminal?" (:func:`resolve`). Bars write to stderr only, and showing them never changes a result.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

# Set (to anything but "", "0" or "false") by the common CI services; any of them means "no bars".
CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "JENKINS_URL", "TF_BUILD", "TEAMCITY_VERSION", "CIRCLECI", "TRAVIS")


def want_progress(stderr_isatty: bool, environ: Mapping[str, str]) -> bool:
    """True in an interactive terminal outside CI: stderr is a TTY, ``TERM`` is not ``dumb`` and no CI variable is set."""
    if not stderr_isatty or environ.get("TERM") == "dumb":
        return False
    return not any(str(environ.get(v, "")).strip().lower() not in ("", "0", "false") for v in CI_VARIABLES)


def resolve(progress: bool | None) -> bool:
    """``progress`` itself, or for None whether stderr is a terminal."""
    if progress is None:
        isatty = getattr(sys.stderr, "isatty", None)
        return bool(isatty and isatty())
    return bool(progress)


@contextlib.contextmanager
def library_bars(progress: bool | None) -> Iterator[None]:
    """Within the block, transformers' own bars (e.g. "Loading weights") follow ``progress``; restored after."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # transformers absent: nothing of it to silence
        yield
        return
    was = hf_logging.is_progress_bar_enabled()
    if resolve(progress):
        hf_logging.enable_progress_bar()
    else:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


def bar(iterable: Iterable[Any] | None = None, *, total: int | None = None, desc: str = "", unit: str = "it", progress: bool | None = False) -> Any:
    """A tqdm bar on stderr, silent (writes nothing) unless ``progress`` resolves to True."""
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=not resolve(progress), file=sys.stderr, dynamic_ncols=True)
