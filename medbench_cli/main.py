"""The ``medbench`` console script ([project.scripts] in pyproject.toml)."""

from __future__ import annotations

import argparse
import sys

from medbench_cli import export, leaderboard, models, run, ui, versions
from medbench_cli.common import restore_stop_signals


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="medbench",
        description="Reproducible evaluation of medical information retrieval: curate tasks, evaluate models, release versions.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (run, ui, models, leaderboard, export, versions):
        module.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    restore_stop_signals()
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
