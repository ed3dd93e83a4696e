"""``medbench release|reproduce|gc`` and ``medbench data remote|pull|push|check``: benchmark versions (medbench_release).

    medbench data remote [PATH]    show or set the DVC remote of this checkout
    medbench release TAG [--prune] after `medbench run`
    medbench reproduce [TAG]       pull and re-score; rebuild from the sources when the remote cannot give it
    medbench gc [--cloud]          never removes what a tagged or remotely recorded version needs
    medbench data check            cache objects re-hash to their names; recorded versions complete on the remote
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
    p.add_argument("--prune", action="store_true", help="first move the folders in data/ that no run of the version uses to <state>/pruned/")
    p.set_defaults(handler=_guarded(_release))
    p = sub.add_parser(
        "reproduce",
        parents=[common],
        help="pull a version and re-score it, or rebuild it from the sources; non-zero exit naming any difference",
        description=_reproduce.__doc__,
    )
    p.add_argument("tag", nargs="?", help="the version: versions/TAG.json (default: the version whose data data.dvc names)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--no-pull", action="store_true", help="use data/ as it is")
    how.add_argument("--from-sources", action="store_true", help="rebuild from the sources even when the remote holds the version")
    how.add_argument("--no-rebuild", action="store_true", help="only pull: fail (exit 3) when the remote cannot give the version")
    p.add_argument(
        "--code",
        choices=("pinned", "current"),
        default="pinned",
        help="rebuild with the code of the version's commit (default) or this checkout's code and registry",
    )
    p.add_argument("--report", type=Path, help="where the rebuild's JSON report goes (default: <state>/reproduce/TAG/report.json)")
    p.add_argument("--tolerance", type=float, help="largest absolute difference accepted in rebuilt embeddings and index vectors (default 1e-5)")
    p.add_argument("--require-mlflow", action="store_true", help="a run missing from MLflow is a difference")
    p.set_defaults(handler=_guarded(_reproduce))
    p = sub.add_parser(
        "gc", parents=[common], help="garbage-collect DVC objects, keeping every tag, branch, the workspace and every version the remote records",
        description=_gc.__doc__,
    )  # fmt: skip
    p.add_argument("--cloud", action="store_true", help="also remove from the remote the objects no version needs")
    p.add_argument(
        "--keep-hours", type=float, default=24.0, metavar="N",
        help="with --cloud, keep every remote object written in the last N hours (a push may be under way; default 24)",
    )  # fmt: skip
    p.add_argument("--no-fetch-tags", action="store_true", help="do not fetch tags from origin first")
    p.set_defaults(handler=_guarded(_gc))

    data = sub.add_parser(
        "data", help="the DVC remote and data of this checkout: remote, pull, push, check", description="The DVC remote and data of this checkout."
    )
    actions = data.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = add_command(actions, "remote", "show the remote url, or set it for this checkout (.dvc/config.local)", parents=[common])
    p.add_argument("url", nargs="?")
    p.set_defaults(handler=_guarded(_remote))
    p = add_command(actions, "pull", "configure the remote and `dvc pull` data", parents=[common])
    p.set_defaults(handler=_guarded(_pull))
    p = add_command(actions, "push", "configure the remote and `dvc push` data (every file checked on the remote)", parents=[common])
    p.set_defaults(handler=_guarded(_push))
    p = add_command(actions, "check", "re-hash the cache; check every tagged or remotely recorded version is complete on a local remote", parents=[common])
    p.set_defaults(handler=_guarded(_check))


def _guarded(handler):
    """Run ``handler(args, root)``; a VersioningError becomes its exit code, another medbench error exit 1."""

    def run(args: argparse.Namespace) -> int:
        from medbench_cli.failures import Refusal, log
        from medbench_core.errors import MedbenchError
        from medbench_release.vcs import VersioningError, repo_root

        try:
            return handler(args, repo_root(args.repo or settings.ROOT)) or 0
        except MedbenchError as exc:
            log().exception(exc)
            code = exc.exit_code if isinstance(exc, VersioningError) else 1
            kept = "data/, the DVC cache and remote, git and MLflow keep what they held (each step commits only when it succeeds)"
            if code == 3:
                kept = f"{getattr(exc, 'kept', None) or 'data/ as it was'}; nothing was scored"
            detail = str(exc).strip().splitlines()[1:]  # e.g. dvc's own words naming the missing object: the last line says they are above
            if detail:
                print("\n".join(detail), file=sys.stderr, flush=True)
            raise Refusal(str(exc), kept=kept, code=code) from exc

    return run


def _remote_url(args: argparse.Namespace) -> str | None:
    return getattr(args, "url", None) or args.remote or settings.DVC_REMOTE or None


def _tracking_uri(args: argparse.Namespace) -> str:
    return args.tracking_uri or settings.default_tracking_uri()


def _release(args: argparse.Namespace, root: Path) -> int:
    """Release data/ as benchmark version TAG: verify manifests, `dvc add` + push, commit data.dvc, tag, tag every MLflow run."""
    import datetime as dt

    from medbench_core.taskdata.catalog import load_catalog
    from medbench_release.release import release
    from medbench_release.vcs import DATA, VersioningError

    if settings.ROOT.resolve() == root:
        for var, value, own in (
            ("MEDBENCH_DATA", settings.DATA, root / DATA),
            ("MEDBENCH_MODELS", settings.MODELS_FILE, root / "models.yaml"),
            ("MEDBENCH_TASKS", settings.TASKS_FILE, root / "tasks.yaml"),
        ):
            if Path(value).resolve() != own:
                raise VersioningError(f"{var} points at {value}, but a version holds {own} (its commit pins it); unset {var} and rerun the main job")
    benchmark = load_catalog(root / "tasks.yaml").benchmark
    from runtime.store_integrity import verify_store

    verify_store(_tracking_uri(args))  # a release tags every MLflow run: never into a damaged store (issue 29.4)
    pruned = settings.STATE / "pruned" / dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") if args.prune else None
    release(
        root,
        args.tag,
        tracking_uri=_tracking_uri(args),
        benchmark=benchmark,
        remote=_remote_url(args),
        allow_dirty=args.allow_dirty,
        models_file=root / "models.yaml",
        tasks_file=root / "tasks.yaml",
        shared_data=settings.SHARED / "data",
        prune_to=pruned,
    )
    return 0


def _reproduce(args: argparse.Namespace, root: Path) -> int:
    """Reproduce a benchmark version. When the remote holds it: dvc pull, verify, re-search the stored indices and re-score
    (exit 0 only if every metric is bit-identical). When the remote is missing or unreachable: rebuild every artifact from
    the sources with the version's code, models and settings, compare each with the version file, print a table and save
    a JSON report (exit 0 only if the version reproduced). Exit 1 names what differs, 3 when a pull fails."""
    from medbench_release.record import ARRAY_TOLERANCE
    from medbench_release.reproduce import _tag_at_head, reproduce_version

    tag = args.tag or _tag_at_head(root)
    mode = "local" if args.no_pull else "sources" if args.from_sources else "pull" if args.no_rebuild else "auto"
    options = {
        "work": settings.STATE / "reproduce" / tag,
        "shared": settings.SHARED,
        "models_file": settings.MODELS_FILE,
        "tasks_file": settings.TASKS_FILE,
        "venv_root": settings.VENV_ROOT,
        "code": args.code,
        "report_path": args.report,
        "tolerance": args.tolerance or ARRAY_TOLERANCE,
    }
    out = reproduce_version(
        root, tag, tracking_uri=_tracking_uri(args), remote=_remote_url(args), mode=mode, require_mlflow=args.require_mlflow, rebuild_options=options
    )
    if out.rebuild is not None:
        return _rebuilt(out.rebuild)
    rep = out.reproduction
    if not rep.identical:
        for d in rep.differences:
            print(f"  DIFFERS {d}", file=sys.stderr)
        print(f"version {rep.tag} NOT reproduced: {len(rep.differences)} difference(s), listed above; first: {rep.differences[0]}", file=sys.stderr)
        return 1
    print(f"version {rep.tag} (data {rep.data_version}) reproduced: {len(rep.lines)} model x task, every metric bit-identical")
    return 0


def _rebuilt(res) -> int:
    counts = res.report["counts"]
    n = len(res.rows)
    if res.reproduced:
        largest = ", ".join(f"{k} {v:.2g}" for k, v in res.report.get("largest_within_tolerance", {}).items() if v is not None)
        tol = (
            f", {counts['within_tolerance']} within tolerance" + (f" (largest differences: {largest})" if largest else "") if counts["within_tolerance"] else ""
        )
        print(f"version {res.tag} (data {res.data_version}) reproduced from sources: {n} partitions, {counts['identical']} artifacts identical{tol}")
        print(f"report: {res.report_path}")
        return 0
    bad = [r["partition"] for r in res.rows if not r["reproduced"]]
    print(res.first["message"], file=sys.stderr)
    print(
        f"version {res.tag} NOT reproduced from sources: {len(bad)} of {n} partitions differ ({', '.join(bad[:8])}{', ...' if len(bad) > 8 else ''}); "
        f"the first difference is above; report: {res.report_path}", file=sys.stderr,
    )  # fmt: skip
    return 1


def _gc(args: argparse.Namespace, root: Path) -> int:
    """Garbage-collect the DVC cache, keeping every tag, branch and the workspace; with --cloud, remove from the remote the
    objects that no version needs (named here, or recorded in the remote's own version index by every release and push)
    and that were written more than --keep-hours ago. It says what it kept and why."""
    from medbench_release.gc import gc
    from medbench_release.vcs import VersioningError

    if args.keep_hours < 0:
        raise VersioningError(f"--keep-hours {args.keep_hours:g}: give 0 or more hours")
    gc(root, cloud=args.cloud, remote=_remote_url(args), fetch_tags=not args.no_fetch_tags, keep_hours=args.keep_hours)
    return 0


def _remote(args: argparse.Namespace, root: Path) -> int:
    from medbench_release.remote import configure_remote

    print(configure_remote(root, _remote_url(args)))
    return 0


def _pull(args: argparse.Namespace, root: Path) -> int:
    """Fetch the data of data.dvc and swap it into data/ whole (nothing of data/ that cannot be restored is lost)."""
    from medbench_release.remote import configure_remote
    from medbench_release.workspace import pull_data

    configure_remote(root, _remote_url(args))
    print(pull_data(root).summary())
    return 0


def _push(args: argparse.Namespace, root: Path) -> int:
    from medbench_release.remote import configure_remote, push

    configure_remote(root, _remote_url(args))
    push(root)
    return 0


def _check(args: argparse.Namespace, root: Path) -> int:
    from medbench_release.gc import leftover_temp_files, missing_on_remote, rehash_objects, tagged_versions
    from medbench_release.remote import configure_remote, local_remote_path, remote_versions

    url = configure_remote(root, _remote_url(args))
    n, bad = rehash_objects(root / ".dvc" / "cache")
    problems = list(bad)
    remote_dir = local_remote_path(root, url)
    if remote_dir:
        m, rbad = rehash_objects(remote_dir)
        recorded = {**{f"{r.get('label') or 'pushed'} ({v[:12]})": v for v, r in remote_versions(root).items()}, **tagged_versions(root)}
        problems += rbad + missing_on_remote(root, remote_dir, recorded)
        print(f"{m} remote objects re-hashed")
    temp = leftover_temp_files(root / ".dvc" / "cache")
    print(f"{n} cache objects re-hashed; {len(problems)} problem(s); {len(temp)} leftover temporary file(s) (gc removes them)")
    for p in problems:
        print(f"  {p}", file=sys.stderr)
    return 1 if problems else 0
