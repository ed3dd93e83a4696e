"""The DVC remote of benchmark versions: configure it per checkout, push to it completely.

The remote is ``medbench`` in ``.dvc/config`` (``verify = true``: a pull refuses corrupted
objects); its url defaults to ``~/.cache/medbench/dvc-remote`` and is overridden per checkout
(``.dvc/config.local``). S3 and GCS urls work with the ``dvc[s3]`` / ``dvc[gs]`` extras.
"""

from __future__ import annotations

import json
from pathlib import Path

from medbench_release.vcs import DATA, REMOTE, Log, VersioningError, data_version, dvc


def configure_remote(root: Path, url: str | None = None) -> str:
    """Make ``medbench`` the remote of ``root``, with ``url`` if given (the command line passes MEDBENCH_DVC_REMOTE).

    The url goes into ``.dvc/config.local`` (not committed), so each checkout can point at its
    own folder or bucket; ``verify = true`` is enforced. Returns the effective url.
    """
    config = _dvc_config(root)
    if url:
        if "://" not in url:
            url = str(Path(url).expanduser().resolve())
        if config.get(f"remote.{REMOTE}.url") != url:
            dvc(root, "remote", "modify", "--local", REMOTE, "url", url)
            config[f"remote.{REMOTE}.url"] = url
    if not config.get(f"remote.{REMOTE}.url"):
        raise VersioningError(f"{root}: no DVC remote {REMOTE!r}; set one with `medbench data remote PATH`")
    if config.get(f"remote.{REMOTE}.verify") != "true":
        dvc(root, "remote", "modify", "--local", REMOTE, "verify", "true")
    return config[f"remote.{REMOTE}.url"]


def _dvc_config(root: Path) -> dict[str, str]:
    """The merged DVC config: `dvc config --list` prints system, global, project, local; the last wins."""
    out: dict[str, str] = {}
    for line in dvc(root, "config", "--list").stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def local_remote_path(root: Path, url: str) -> Path | None:
    """The folder of a local remote url, or None for s3://, gs:// and other schemes."""
    if url.startswith("file://"):
        return Path(url[len("file://") :])
    if "://" in url:
        return None
    p = Path(url).expanduser()
    return p if p.is_absolute() else (root / ".dvc" / p).resolve()  # DVC resolves relative urls from .dvc/



def not_in_remote(root: Path) -> list[str]:
    """Files of the workspace's data.dvc that the remote lacks, checked file by file."""
    proc = dvc(root, "data", "status", "--not-in-remote", "-r", REMOTE, "--json", "--granular", DATA)
    return sorted(json.loads(proc.stdout or "{}").get("not_in_remote", []))


def _drop_remote_object(root: Path, oid: str) -> None:
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        odb = repo.cloud.get_remote_odb(REMOTE, command="push")
        path = odb.oid_to_path(oid)
        if odb.fs.exists(path):
            odb.fs.rm(path)


def push(root: Path, log: Log = print) -> None:
    """`dvc push` the data of ``data.dvc``, then make sure the remote holds every file of it.

    DVC skips a folder whose directory object is already on the remote, assuming its files are
    there too; a remote that lost one of them is never repaired that way. When the file-by-file
    check finds gaps, the directory object is removed from the remote and the push repeated,
    which uploads the missing files and the directory object last.
    """
    dvc(root, "push", "-r", REMOTE, "data.dvc")
    missing = not_in_remote(root)
    if not missing:
        return
    version = data_version(root)
    log(f"[push] the remote lacks {len(missing)} file(s) of {version} (e.g. {missing[0]}); uploading them again")
    _drop_remote_object(root, version)
    dvc(root, "push", "-r", REMOTE, "data.dvc")
    missing = not_in_remote(root)
    if missing:
        raise VersioningError(f"after `dvc push`, the remote still lacks {len(missing)} file(s), e.g. {missing[:5]}; is the local cache complete (`dvc status`)?")


