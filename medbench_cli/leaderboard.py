"""``medbench leaderboard``: print the saved leaderboard (nDCG@10, model x task, with CIs and paired tests
against the baseline); ``--rebuild`` first rebuilds it from the stored metrics."""

from __future__ import annotations

import argparse
from pathlib import Path

from medbench_cli.common import describe
from runtime import settings


def add_parser(sub) -> None:
    p = sub.add_parser("leaderboard", help="print the saved leaderboard (nDCG@10, model x task)", description=describe(__doc__))
    p.add_argument("--rebuild", action="store_true", help="rebuild it from the stored metrics first (the build_leaderboard job; nothing is evaluated)")
    p.add_argument("--format", choices=("md", "csv", "json"), default="md", help="which saved form to print (default: md)")
    p.add_argument(
        "--published", type=Path, metavar="DIR",
        help="rebuild it with this folder of published results (MTEB's results layout or R2MED's result files) beside ours",
    )  # fmt: skip
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from medbench_core.layout import Layout

    path = Layout(settings.DATA).leaderboard_file(args.format)
    if args.rebuild or args.published:
        from medbench_cli import failures
        from medbench_cli.common import prepare_environment
        from medbench_cli.run import rebuild_leaderboard

        prepare_environment()
        res = rebuild_leaderboard(args.published)
        if not res.success:
            # e.g. a metrics.json edited by hand: the saved leaderboard is not replaced by one without that cell.
            failures.record("leaderboard --rebuild", res)
            reason = failures.step_error(res).removeprefix("leaderboard: ")
            lines = reason.splitlines()
            raise failures.Refusal(
                " ".join(lines[:2]) + (f" (and {len(lines) - 2} more)" if len(lines) > 2 else ""),
                kept=f"{path.parent} left as it was" if path.is_file() else "nothing was written",
            )
    if not path.is_file():
        from medbench_cli.failures import Refusal

        raise Refusal(f"no leaderboard at {path}", todo="run `medbench run` (evaluates), or `medbench leaderboard --rebuild` (from stored metrics)")
    print(path.read_text(), end="")
    if args.format == "md":
        from medbench_cli.common import published_summary

        line = published_summary(path)
        if line:
            print(f"[published] {line}")
    return 0
