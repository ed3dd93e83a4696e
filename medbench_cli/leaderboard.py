"""``medbench leaderboard``: print the saved leaderboard (nDCG@10, model x task, with CIs and paired tests against the baseline); ``--rebuild`` first rebuilds it from the stored metrics."""

from __future__ import annotations

import argparse
import sys
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
        from medbench_cli.common import prepare_environment
        from medbench_cli.run import rebuild_leaderboard

        prepare_environment()
        rebuild_leaderboard(args.published)
    if not path.is_file():
        print(f"no leaderboard at {path}; run `medbench run` (evaluates), or `medbench leaderboard --rebuild` (from stored metrics)", file=sys.stderr)
        return 1
    print(path.read_text(), end="")
    if args.format == "md":
        from medbench_cli.common import published_summary

        line = published_summary(path)
        if line:
            print(f"[published] {line}")
    return 0
