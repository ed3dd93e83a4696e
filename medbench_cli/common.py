"""What several subcommands share: the process environment, name validation, a quiet Dagster log."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import warnings
from pathlib import Path

from runtime import settings


def describe(doc: str) -> str:
    """A command's --help description: the first paragraph of its module docstring, without the ````medbench x````: label."""
    first = doc.strip().split("\n\n")[0]
    text = re.sub(r"^``medbench [^`]*``: ", "", " ".join(first.split()))
    return text[:1].upper() + text[1:]


def add_command(sub, name: str, help: str, **kwargs) -> argparse.ArgumentParser:
    """A subcommand whose --help description is its one-line help, as a sentence."""
    return sub.add_parser(name, help=help, description=help[:1].upper() + help[1:] + ".", **kwargs)


def prepare_environment() -> None:
    """Offline model loading (unless MEDBENCH_ONLINE), and the Dagster instance of this state, <state>/dagster_home,
    with the project's dagster.yaml, unless DAGSTER_HOME names another (set on purpose: used as it is). The
    instance follows MEDBENCH_STATE: two states never share one run history by accident (issue 44.7). Called once a
    command's arguments and configuration files were found valid: it writes the instance's dagster.yaml."""
    if not settings.ONLINE:
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
            os.environ.setdefault(name, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    project_yaml = (settings.ROOT / "dagster.yaml").read_text()
    if not settings.DAGSTER_HOME:
        home = settings.STATE / "dagster_home"
        home.mkdir(parents=True, exist_ok=True)
        if not (home / "dagster.yaml").is_file() or (home / "dagster.yaml").read_text() != project_yaml:
            (home / "dagster.yaml").write_text(project_yaml)
        os.environ["DAGSTER_HOME"] = str(home)
    elif not Path(settings.DAGSTER_HOME, "dagster.yaml").exists():  # set on purpose, new: made, with the project's settings
        Path(settings.DAGSTER_HOME).mkdir(parents=True, exist_ok=True)
        Path(settings.DAGSTER_HOME, "dagster.yaml").write_text(project_yaml)
    warnings.filterwarnings("ignore")


def quiet_run_config() -> dict:
    """Dagster's console log off (or at MEDBENCH_LOG_LEVEL, WARNING with --verbose): the command says a failure in one line."""
    from medbench_cli.failures import console_level

    return {"loggers": {"console": {"config": {"log_level": console_level()}}}}


def leaderboard_run_config(published: Path | None = None) -> dict:
    """The leaderboard job's run config: quiet logs and, with ``--published DIR``, that folder of published results."""
    config = quiet_run_config()
    if published is not None:
        config["ops"] = {"leaderboard": {"config": {"published": str(Path(published).resolve())}}}
    return config


def published_summary(board_md: Path) -> str | None:
    """The one line saying how many cells reproduce the published scores (leaderboard.json beside ``board_md``), if any were compared."""
    import json

    try:
        doc = json.loads(board_md.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return None
    return (doc.get("published") or {}).get("summary")


def unknown_names(kind: str, given: list[str], known: list[str], source: str | Path) -> str | None:
    """Why some of ``given`` are not ``known`` (with the closest known name for a near miss); None when all are."""
    lines = []
    for name in given:
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        lines.append(f"unknown {kind} {name!r}{hint}")
    if not lines:
        return None
    return "; ".join(lines) + f" ({source} has: {', '.join(known)})"


def check_names(parser: argparse.ArgumentParser, kind: str, value: str | None, known: list[str], source: str | Path) -> list[str]:
    """The comma-separated names in ``value`` (default: all of ``known``); a name not in ``known`` exits 2 before any work."""
    if not value:
        return list(known)
    given = [n for n in value.split(",") if n]
    problem = unknown_names(kind, given, known, source)
    if problem:
        parser.error(problem)  # exit code 2, with the usage line
    return given
