"""Git and DVC underneath benchmark versions: the subprocesses, the checkout, the data hash, the records.

Exit codes carried by :class:`VersioningError`: 1 a metric or ranking differs, or an artifact fails
its manifest; 2 a usage or setup error; 3 ``dvc pull`` failed (nothing was scored).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from medbench_core.errors import MedbenchError
from medbench_core.yaml_file import load_yaml

REMOTE = "medbench"
DATA = "data"
VERSIONS = "versions"
_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")
_LOCK_ERROR = "Unable to acquire lock"
_GIT_IDENTITY = ("-c", "user.name=medbench release", "-c", "user.email=medbench@localhost")

Log = Callable[[str], None]


class VersioningError(MedbenchError):
    """A release, reproduction or collection step failed; ``exit_code`` is what the CLI returns."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


class PullError(VersioningError):
    """A version's data could not be fetched whole: data/ was left as it was, nothing was scored.

    ``kept`` says what was kept (e.g. "data/ as it was (89 files, none changed)"); the command's last line repeats it.
    """

    def __init__(self, message: str, kept: str | None = None):
        super().__init__(message, exit_code=3)
        self.kept = kept


# --- subprocesses -------------------------------------------------------------------------


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(f"    {ln}" for ln in text.strip().splitlines()[-lines:])


def dvc(root: Path, *args: str, retries: int = 6, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python -m dvc ARGS`` in ``root``; retry while another DVC process holds the repo lock.

    DVC refuses a second command on the same repository at once ("Unable to acquire lock");
    those fail cleanly and are retried with a growing pause. Other failures raise
    VersioningError with DVC's last lines.
    """
    cmd = [sys.executable, "-m", "dvc", *args]
    for attempt in range(retries + 1):
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        if proc.returncode == 0 or not check:
            return proc
        if _LOCK_ERROR in proc.stderr + proc.stdout and attempt < retries:
            time.sleep(min(0.25 * 2**attempt, 4.0))
            continue
        raise VersioningError(f"`dvc {' '.join(args)}` failed in {root} (exit {proc.returncode}):\n{_tail(proc.stderr + proc.stdout)}")
    raise AssertionError("unreachable")


def git(root: Path, *args: str, check: bool = True) -> str:
    """Run git in ``root``; returns stdout. Errors name the command and git's message."""
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise VersioningError(f"`git {' '.join(args)}` failed in {root} (exit {proc.returncode}):\n{_tail(proc.stderr + proc.stdout)}")
    return proc.stdout


def git_commit_args(root: Path) -> tuple[str, ...]:
    # CI machines often have no git identity; a release must not fail for that.
    if git(root, "config", "user.email", check=False).strip():
        return ()
    return _GIT_IDENTITY


def repo_root(path: str | Path) -> Path:
    """The top of the git checkout at ``path``, which must hold .dvc/config."""
    root = Path(path).resolve()
    top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode != 0:
        raise VersioningError(f"{root}: not a git checkout; benchmark versions are git tags (clone the repository first)")
    if Path(top.stdout.strip()).resolve() != root:
        raise VersioningError(f"{root}: run from the top of the checkout ({top.stdout.strip()})")
    if not (root / ".dvc" / "config").exists():
        raise VersioningError(f"{root}: no .dvc/config; this checkout predates DVC versioning (git pull, or run `dvc init`)")
    return root


# --- data versions and tags -----------------------------------------------------------------


def data_version(root: Path, rev: str | None = None) -> str:
    """The DVC hash of ``data/`` recorded in ``data.dvc`` (at git ``rev``, or in the workspace)."""
    where = f"data.dvc at {rev}" if rev else str(root / "data.dvc")
    if rev:
        text = git(root, "show", f"{rev}:data.dvc", check=False)
        if not text:
            raise VersioningError(f"{where}: not found; {rev} is not a released benchmark version")
    else:
        if not (root / "data.dvc").exists():
            raise VersioningError(f"{where}: not found; run `medbench release TAG` first")
        text = (root / "data.dvc").read_text()
    doc = load_yaml(text, where) or {}
    for out in doc.get("outs", []):
        if out.get("path") == DATA and out.get("md5"):
            return str(out["md5"])
    raise VersioningError(f"{where}: no md5 for the output 'data'; re-run `dvc add data`")


def version_record(root: Path, tag: str) -> dict[str, Any]:
    """``versions/<tag>.json`` as committed at ``tag``."""
    text = git(root, "show", f"{tag}:{VERSIONS}/{tag}.json", check=False)
    if not text:
        raise VersioningError(f"{tag}: no {VERSIONS}/{tag}.json in that commit; it was not made by `release`")
    return json.loads(text)


def check_tag(tag: str) -> None:
    if not _TAG_RE.match(tag):
        raise VersioningError(f"tag {tag!r}: use letters, digits, '.', '_' or '-' (it names versions/{tag}.json too)")


def tag_commit(root: Path, tag: str) -> str | None:
    out = git(root, "rev-parse", "-q", "--verify", f"refs/tags/{tag}^{{commit}}", check=False).strip()
    return out or None
