"""The ``medbench`` console script ([project.scripts] in pyproject.toml)."""

from __future__ import annotations

import argparse
import signal
import sys

from medbench_cli import export, failures, leaderboard, models, run, stopping, ui, versions
from runtime import settings


class Parser(argparse.ArgumentParser):
    """argparse's parser; a usage error (exit 2) also says that nothing was run."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        said = "; ".join(line.strip() for line in message.splitlines() if line.strip())  # one line, the last
        self.exit(failures.USAGE, f"{self.prog}: error: {said}; nothing was run or changed\n")


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="medbench",
        description="Reproducible evaluation of medical information retrieval: curate tasks, evaluate models, release versions.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (run, ui, models, leaderboard, export, versions):
        module.add_parser(sub)
    _add_verbose(p, top=True)
    return p


def _add_verbose(p: argparse.ArgumentParser, top: bool = False) -> None:
    """``--verbose`` on every command (before or after its name): print stack traces instead of logging them."""
    p.add_argument(
        "--verbose", action="store_true", default=False if top else argparse.SUPPRESS,
        help="print Dagster's log and stack traces on stderr instead of writing them to <state>/logs/",
    )  # fmt: skip
    for action in p._actions:  # argparse keeps subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _add_verbose(sub)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    stopping.install()
    command = " ".join(c for c in (args.command, getattr(args, "action", None)) if c)
    failures.start(command, verbose=args.verbose, path=getattr(args, "log_file", None))
    if settings.problems():  # the environment's settings, checked before anything reads them (runtime/settings.py)
        failures.say(
            command, "; ".join(settings.problems()), kept="nothing was run or changed",
            todo="set each to an accepted value, or unset it for its default (docs/operating.md, Settings)",
        )  # fmt: skip
        return failures.USAGE
    try:
        return args.handler(args)
    except failures.Refusal as exc:
        failures.say(command, exc.what, exc.kept, exc.todo)
        return exc.code
    except KeyboardInterrupt as exc:  # SIGINT or SIGTERM (stopping.Stopped), or a Ctrl-C before install
        stop = exc if isinstance(exc, stopping.Stopped) else stopping.Stopped(stopping.requested() or signal.SIGINT)
        failures.say(
            command, f"stopped by {stop.name}",
            kept="kept: every complete artifact (what was being written is removed or finished by the next run)",
            todo="run the command again to finish",
        )  # fmt: skip
        return stop.exit_code
    except Exception as exc:  # the last line says what; the log (or --verbose) holds the stack
        from medbench_core.errors import ConfigError, MedbenchError

        failures.log().exception(exc)
        refused = failures.unwritable(exc)
        if refused is not None:  # a read-only HOME, a state folder of another user: which variable moves it
            failures.say(command, refused[0], kept="what was stored before is kept", todo=refused[1])
            return failures.USAGE
        ours = isinstance(exc, MedbenchError)
        failures.say(
            command, str(exc) if ours else f"unexpected {type(exc).__name__}: {exc}",
            kept="what was stored before is kept (artifacts are replaced whole or not at all)",
            todo="" if ours or failures.log().verbose else "--verbose prints the stack trace",
        )  # fmt: skip
        return failures.USAGE if isinstance(exc, ConfigError) else failures.FAILED  # tasks.yaml, models.yaml: 2


if __name__ == "__main__":
    sys.exit(main())
