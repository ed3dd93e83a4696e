"""``medbench release|reproduce|gc`` and ``medbench data remote|pull|push|check``: benchmark versions (medbench_release).

    medbench data remote [PATH]    show or set the DVC remote of this checkout
    medbench release TAG           after `medbench run`
    medbench reproduce [TAG]       in a clone checked out at TAG
    medbench gc [--cloud]          never removes what a tagged version needs
    medbench data check            cache objects re-hash to their names; tags complete on the remote
    medbench data pull | push

Exit codes: 0 done / identical; 1 a metric or ranking differs, or an artifact fails its manifest;
2 a usage or setup error; 3 ``dvc pull`` failed (nothing was scored).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from medbench_cli.common import add_command
from runtime import settings


def add_parser(sub) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--repo", help="the checkout (default: MEDBENCH_ROOT or this one)")
    common.add_argument("--remote", help="DVC remote url for this checkout (default: MEDBENCH_DVC_REMOTE, else .dvc/config)")
    common.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else the project's SQLite store)")

    p = sub.add_parser("release", parents=[common], help="commit data/ to DVC, push, commit data.dvc, tag, tag the MLflow runs", description=_release.__doc__)
    p.add_argument("tag")
    p.add_argument("--allow-dirty", action="store_true", help="release although tracked code differs from HEAD")
    p.set_defaults(handler=_guarded(_release))
    p = sub.add_parser("reproduce", parents=[common], help="pull a version and re-score it; non-zero exit naming any difference", description=_reproduce.__doc__)
    p.add_argument("tag", nargs="?", help="the version (default: the released tag at HEAD)")
    p.add_argument("--no-pull", action="store_true", help="use data/ as it is")
    p.add_argument("--require-mlflow", action="store_true", help="a run missing from MLflow is a difference")
    p.set_defaults(handler=_guarded(_reproduce))
    p = sub.add_parser("gc", parents=[common], help="garbage-collect DVC objects, keeping every tag, branch and the workspace", description=_gc.__doc__)
    p.add_argument("--cloud", action="store_true", help="also remove unused objects from the remote")
    p.add_argument("--no-fetch-tags", action="store_true", help="do not fetch tags from origin first")
    p.set_defaults(handler=_guarded(_gc))

    data = sub.add_parser("data", help="the DVC remote and data of this checkout: remote, pull, push, check", description="The DVC remote and data of this checkout.")
    actions = data.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = add_command(actions, "remote", "show the remote url, or set it for this checkout (.dvc/config.local)", parents=[common])
    p.add_argument("url", nargs="?")
    p.set_defaults(handler=_guarded(_remote))
    p = add_command(actions, "pull", "configure the remote and `dvc pull` data", parents=[common])
    p.set_defaults(handler=_guarded(_pull))
    p = add_command(actions, "push", "configure the remote and `dvc push` data (every file checked on the remote)", parents=[common])
    p.set_defaults(handler=_guarded(_push))
    p = add_command(actions, "check", "re-hash the cache; check every tagged version is complete on a local remote", parents=[common])
    p.set_defaults(handler=_guarded(_check))


def _guarded(handler):
    """Run ``handler(args, root)``; a VersioningError becomes its exit code, another medbench error exit 1."""

    def run(args: argparse.Namespace) -> int:
        from medbench_core.errors import MedbenchError
        from medbench_release.vcs import VersioningError, repo_root

        try:
            return handler(args, repo_root(args.repo or settings.ROOT)) or 0
        except VersioningError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.exit_code
        except MedbenchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1

    return run


def _remote_url(args: argparse.Namespace) -> str | None:
    return getattr(args, "url", None) or args.remote or settings.DVC_REMOTE or None


def _tracking_uri(args: argparse.Namespace) -> str:
    return args.tracking_uri or settings.default_tracking_uri()


def _release(args: argparse.Namespace, root: Path) -> int:
    """Release data/ as benchmark version TAG: verify manifests, `dvc add` + push, commit data.dvc, tag, tag every MLflow run."""
    from medbench_core.catalog import load_catalog
    from medbench_release.release import release
    from medbench_release.vcs import DATA, VersioningError

    if settings.DATA.resolve() != root / DATA and settings.ROOT.resolve() == root:
        raise VersioningError(f"MEDBENCH_DATA points at {settings.DATA}, but a version holds {root / DATA}; unset MEDBENCH_DATA and rerun the main job")
    tasks = settings.TASKS_FILE if root == settings.ROOT.resolve() else root / "tasks.yaml"
    benchmark = load_catalog(tasks).benchmark
    release(root, args.tag, tracking_uri=_tracking_uri(args), benchmark=benchmark, remote=_remote_url(args), allow_dirty=args.allow_dirty)
    return 0


def _reproduce(args: argparse.Namespace, root: Path) -> int:
    """Reproduce a benchmark version in a checkout at its tag: dvc pull, re-search the stored indices, re-score; exit 0 only if bit-identical."""
    from medbench_release.reproduce import reproduce

    rep = reproduce(root, args.tag, tracking_uri=_tracking_uri(args), remote=_remote_url(args), pull=not args.no_pull, require_mlflow=args.require_mlflow)
    if not rep.identical:
        print(f"version {rep.tag} NOT reproduced: {len(rep.differences)} difference(s)", file=sys.stderr)
        for d in rep.differences:
            print(f"  DIFFERS {d}", file=sys.stderr)
        return 1
    print(f"version {rep.tag} (data {rep.data_version}) reproduced: {len(rep.lines)} model x task, every metric bit-identical")
    return 0


def _gc(args: argparse.Namespace, root: Path) -> int:
    """Garbage-collect the DVC cache (and with --cloud the remote), keeping every tag, branch and the workspace."""
    from medbench_release.gc import gc

    gc(root, cloud=args.cloud, remote=_remote_url(args), fetch_tags=not args.no_fetch_tags)
    return 0


def _remote(args: argparse.Namespace, root: Path) -> int:
    from medbench_release.remote import configure_remote

    print(configure_remote(root, _remote_url(args)))
    return 0


def _pull(args: argparse.Namespace, root: Path) -> int:
    from medbench_release.remote import configure_remote
    from medbench_release.vcs import REMOTE, dvc

    configure_remote(root, _remote_url(args))
    print(dvc(root, "pull", "-r", REMOTE, "data.dvc").stdout.strip())
    return 0


def _push(args: argparse.Namespace, root: Path) -> int:
    from medbench_release.remote import configure_remote, push

    configure_remote(root, _remote_url(args))
    push(root)
    return 0


def _check(args: argparse.Namespace, root: Path) -> int:
    from medbench_release.gc import leftover_temp_files, missing_on_remote, rehash_objects, tagged_versions
    from medbench_release.remote import configure_remote, local_remote_path

    url = configure_remote(root, _remote_url(args))
    n, bad = rehash_objects(root / ".dvc" / "cache")
    problems = list(bad)
    remote_dir = local_remote_path(root, url)
    if remote_dir:
        m, rbad = rehash_objects(remote_dir)
        problems += rbad + missing_on_remote(root, remote_dir, tagged_versions(root))
        print(f"{m} remote objects re-hashed")
    temp = leftover_temp_files(root / ".dvc" / "cache")
    print(f"{n} cache objects re-hashed; {len(problems)} problem(s); {len(temp)} leftover temporary file(s) (gc removes them)")
    for p in problems:
        print(f"  {p}", file=sys.stderr)
    return 1 if problems else 0
