"""The DVC remote of benchmark versions: configure it per checkout, push to it completely.

The remote is ``medbench`` in ``.dvc/config`` (``verify = true``: a pull refuses corrupted
objects); its url defaults to ``~/.cache/medbench/dvc-remote`` and is overridden per checkout
(``.dvc/config.local``). S3 and GCS urls work with the ``dvc[s3]`` / ``dvc[gs]`` extras.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

from medbench_release.vcs import DATA, REMOTE, Log, VersioningError, data_version, dvc, git


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


def push(root: Path, log: Log = print, label: str = "") -> None:
    """`dvc push` the data of ``data.dvc``, record it in the remote's version index (``label``: e.g. ``release v3``), then make
    sure the remote holds every file of it.

    DVC skips a folder whose directory object is already on the remote, assuming its files are
    there too; a remote that lost one of them is never repaired that way. When the file-by-file
    check finds gaps, the directory object is removed from the remote and the push repeated,
    which uploads the missing files and the directory object last.
    """
    dvc(root, "push", "-r", REMOTE, "data.dvc")
    version = data_version(root)
    # Recorded before the check below: from here on gc keeps the version, so a check that passes stays true.
    record_version_on_remote(root, version, label or f"pushed from commit {git(root, 'rev-parse', '--short', 'HEAD', check=False).strip()}")
    missing = not_in_remote(root)
    if not missing:
        return
    log(f"[push] the remote lacks {len(missing)} file(s) of {version} (e.g. {missing[0]}); uploading them again")
    _drop_remote_object(root, version)
    dvc(root, "push", "-r", REMOTE, "data.dvc")
    missing = not_in_remote(root)
    if missing:
        raise VersioningError(
            f"after `dvc push`, the remote still lacks {len(missing)} file(s), e.g. {missing[:5]}; is the local cache complete (`dvc status`)?"
        )


# --- the remote's own index of the versions pushed to it -------------------------------------

INDEX = "medbench-versions"  # the remote's own version index, beside DVC's files/ (which `dvc gc` alone would prune)


def open_remote(root: Path) -> Any:
    """``(dvc Repo, its remote medbench)``; close the repo (``with repo:``) when done."""
    from dvc.repo import Repo

    repo = Repo(str(root))
    return repo, repo.cloud.get_remote(REMOTE, command="gc")


def record_version_on_remote(root: Path, version: str, label: str) -> None:
    """Write ``<remote>/medbench-versions/<version>.json``: the remote's own record that ``version`` was pushed there.

    :func:`medbench_release.gc.gc` never removes what a version in this index needs, whichever clone runs it and
    whatever tags that clone has seen (a release is pushed before its tag reaches any other clone).
    """
    import getpass
    import socket

    entry = {
        "data_version": version,
        "label": label,
        "commit": git(root, "rev-parse", "HEAD", check=False).strip(),
        "pushed_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "pushed_from": f"{getpass.getuser()}@{socket.gethostname()}:{root}",
    }
    repo, remote = open_remote(root)
    with repo:
        folder = remote.fs.join(remote.path, INDEX)
        remote.fs.makedirs(folder, exist_ok=True)
        remote.fs.pipe_file(remote.fs.join(folder, f"{version}.json"), (json.dumps(entry, indent=1) + "\n").encode())


def remote_versions(root: Path) -> dict[str, dict[str, Any]]:
    """The versions the remote's index records: data version -> its entry (``{}`` where the entry cannot be read)."""
    repo, remote = open_remote(root)
    out: dict[str, dict[str, Any]] = {}
    with repo:
        folder = remote.fs.join(remote.path, INDEX)
        if not remote.fs.exists(folder):
            return out
        for path in remote.fs.find(folder):
            name = path.rstrip("/").rsplit("/", 1)[-1]
            if not re.fullmatch(r"[0-9a-f]{32}\.dir\.json", name):
                continue
            try:
                out[name.removesuffix(".json")] = json.loads(remote.fs.cat_file(path))
            except (OSError, ValueError):
                out[name.removesuffix(".json")] = {}  # the name alone says which version it is
    return out


# --- credentials never reach a tracked file ---------------------------------------------------

# DVC remote options that hold a secret (S3, GCS, Azure, SSH, HTTP, WebDAV, Google Drive). They
# belong in .dvc/config.local (`dvc remote modify --local`) or the environment, never .dvc/config.
CREDENTIAL_OPTIONS = frozenset(
    {
        "password",
        "passphrase",
        "secret_access_key",
        "access_key_id",
        "session_token",
        "sas_token",
        "account_key",
        "connection_string",
        "client_secret",
        "gdrive_client_secret",
        "gdrive_service_account_json_file_path",
        "token",
        "custom_auth_header",
    }
)


def public_url(url: str) -> str:
    """``url`` without a password (``ssh://user:secret@host/p`` -> ``ssh://user@host/p``): what may be recorded."""
    from urllib.parse import urlsplit, urlunsplit

    if "://" not in url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username}@{host}" if parts.username else host
    return urlunsplit(parts._replace(netloc=netloc))


def config_credentials(text: str, where: str) -> list[str]:
    """Credentials in a DVC config text, named by section and option (never by value)."""
    found, section = [], ""
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s[1:-1].strip().replace("'", "").replace('"', "")
            continue
        key, sep, value = s.partition("=")
        key = key.strip().lower()
        if not sep or s.startswith(("#", ";")):
            continue
        if key in CREDENTIAL_OPTIONS:
            found.append(f"{where}: [{section}] {key}")
        elif key == "url" and public_url(value.strip()) != value.strip():
            found.append(f"{where}: [{section}] url carries a password")
    return found


def tracked_credentials(root: Path) -> list[str]:
    """Credentials in the tracked DVC config, as committed at HEAD and as in the workspace."""
    from medbench_release.vcs import git

    found = config_credentials((root / ".dvc" / "config").read_text(), ".dvc/config") if (root / ".dvc" / "config").exists() else []
    committed = git(root, "show", "HEAD:.dvc/config", check=False)
    found += [f for f in config_credentials(committed, ".dvc/config at HEAD") if f.replace(" at HEAD", "") not in found]
    return found


# --- is the version on the remote? -------------------------------------------------------------

_PROBE = """
import json, sys
from dvc.repo import Repo
root, remote, oid = sys.argv[1:4]
try:
    with Repo(root) as repo:
        odb = repo.cloud.get_remote_odb(remote, command="pull")
        print(json.dumps({"state": "present" if odb.fs.exists(odb.oid_to_path(oid)) else "absent"}))
except Exception as exc:
    print(json.dumps({"state": "unreachable", "why": (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]}))
"""


def version_on_remote(root: Path, url: str, version: str, timeout: float = 120) -> tuple[str, str]:
    """Whether the remote holds version ``version`` (its directory object): ``present``, ``absent`` or ``unreachable``, and why.

    A local folder is looked at directly; another url through DVC (its filesystem for the scheme,
    which needs the matching extra: ``dvc[s3]``, ``dvc[gs]``, ``dvc[ssh]``), given ``timeout`` seconds.
    Only the directory object is looked for: a remote that has it but lacks a file of the version
    is damaged, and `dvc pull` says which file.
    """
    import subprocess
    import sys

    folder = local_remote_path(root, url)
    if folder is not None:
        if not folder.is_dir():
            return "unreachable", f"remote folder {folder} does not exist"
        obj = folder / "files" / "md5" / version[:2] / version[2:]
        return ("present", "") if obj.exists() else ("absent", f"remote folder {folder} does not hold data {version}")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE, str(root), REMOTE, version], cwd=root, capture_output=True, check=False, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return "unreachable", f"remote {public_url(url)} did not answer in {timeout:.0f}s"
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return "unreachable", f"remote {public_url(url)}: {(proc.stderr.strip().splitlines() or ['no answer'])[-1][:300]}"
    if answer["state"] == "absent":
        return "absent", f"remote {public_url(url)} does not hold data {version}"
    if answer["state"] == "unreachable":
        return "unreachable", f"remote {public_url(url)} unreachable: {answer.get('why', '')}"
    return "present", ""
