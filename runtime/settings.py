"""The one place that reads the environment: project paths and their overrides.

MEDBENCH_ROOT (the checkout), MEDBENCH_SHARED (the folder holding data/, default ../shared),
MEDBENCH_DATA (artifact root, default <root>/data), MEDBENCH_STATE (run state: mlflow store,
caches; default <root>/.medbench), MLFLOW_TRACKING_URI (default: SQLite in the state folder),
MEDBENCH_NIGHTLY_CRON / MEDBENCH_NIGHTLY_TZ (nightly evaluation and drift canary; default 02:00 UTC),
MEDBENCH_EXECUTOR (``multiprocess``, the default, ``celery`` for the production profile, or ``k8s``:
one Kubernetes Job per step), MEDBENCH_CELERY_BROKER / MEDBENCH_CELERY_BACKEND (the celery broker and
result backend URLs) and MEDBENCH_CELERY_CONFIG (the workers' celery YAML, whose config_source the
executor sends with; default deploy/production/celery.yaml),
MEDBENCH_DVC_REMOTE (the DVC remote of benchmark versions; default ~/.cache/medbench/dvc-remote),
MEDBENCH_CACHE (what an installation builds once and every project state reuses, such as the empty
MLflow schema; default ~/.cache/medbench), MEDBENCH_VENV_ROOT (the virtual environments scripts/setup.sh
builds, one per requirements.lock hash; default ~/.cache/medbench/venvs), DAGSTER_HOME (the Dagster instance; default
<state>/dagster_home, set up by the command line), MEDBENCH_LOG_LEVEL (Dagster's console log level in
the `medbench` command; default: nothing, a failure is said in one line and its stack trace logged
under <state>/logs; WARNING with --verbose), MEDBENCH_UI_PORT (`medbench ui`; default 3000), MEDBENCH_ONLINE
(``1`` lets hub models and datasets download and resolves hub revisions on the hub; default off:
everything is read from local folders and the local hub cache, and scripts/setup.sh keeps the
HF_*_OFFLINE switches set), MEDBENCH_POOL_WAIT (how many seconds a `medbench` command waits for a
pool slot that a live run holds before it gives up saying which run; default 3600).

Each value is checked as it is read, and a wrong one never raises here (every module imports this
one): :func:`problems` says, one line each, which variable holds what and what is accepted, and
the command line refuses to start on it (exit 2, medbench_cli/main.py), as does the Dagster code
location (:func:`check`, orchestration/definitions.py). A value refused falls back to its default
meanwhile, so that nothing reads a half-parsed setting.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from medbench_core.errors import ConfigError

_PROBLEMS: list[str] = []


class InvalidSetting(ConfigError):
    """An environment variable of medbench holds a value it does not accept (the message names each, its value and what is accepted)."""


def problems() -> list[str]:
    """One line per environment variable whose value was refused: its name, its value and what is accepted."""
    return list(_PROBLEMS)


def check() -> None:
    """Raise :class:`InvalidSetting` naming every refused variable (nothing when all are valid)."""
    if _PROBLEMS:
        raise InvalidSetting("; ".join(_PROBLEMS))


def _refuse(name: str, value: str, accepted: str) -> None:
    _PROBLEMS.append(f"{name}={value!r} is not accepted; expected {accepted}")


def _raw(name: str) -> str:
    """The variable's value; unset and empty both mean its default."""
    return os.environ.get(name) or ""


def _folder(name: str, default: Path, must_exist: bool = False) -> Path:
    raw = _raw(name)
    if not raw:
        return Path(default)
    path = Path(raw).expanduser()
    if path.exists() and not path.is_dir():
        _refuse(name, raw, "a folder, and this names a file")
    elif must_exist and not path.is_dir():
        _refuse(name, raw, "an existing folder")
    else:
        return path
    return Path(default)


def _file(name: str, default: Path) -> Path:
    raw = _raw(name)
    if not raw:
        return Path(default)
    path = Path(raw).expanduser()
    if path.is_dir():
        _refuse(name, raw, "a file, and this names a folder")
        return Path(default)
    return path


def _choice(name: str, default: str, accepted: tuple[str, ...]) -> str:
    raw = _raw(name)
    if not raw:
        return default
    if raw.strip().lower() in accepted:
        return raw.strip().lower()
    _refuse(name, raw, "one of " + ", ".join(accepted))
    return default


def _port(name: str, default: int) -> int:
    raw = _raw(name)
    if not raw:
        return default
    if raw.strip().isdigit() and 1 <= int(raw.strip()) <= 65535:
        return int(raw.strip())
    _refuse(name, raw, "a TCP port, a whole number from 1 to 65535")
    return default


def _seconds(name: str, default: float) -> float:
    raw = _raw(name)
    if not raw:
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if math.isfinite(value) and value >= 0:
        return value
    _refuse(name, raw, "a number of seconds, 0 or more (e.g. 3600)")
    return default


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _flag(name: str) -> bool:
    raw = _raw(name)
    if not raw or raw.strip().lower() in _FALSE:
        return False
    if raw.strip().lower() in _TRUE:
        return True
    _refuse(name, raw, f"one of {', '.join(_TRUE)} (on) or {', '.join(_FALSE)} (off)")
    return False


def _url(name: str, default: str) -> str:
    raw = _raw(name)
    if not raw:
        return default
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*://\S*", raw.strip()):
        return raw.strip()
    _refuse(name, raw, "a URL, scheme://... (e.g. pyamqp://guest@localhost//, redis://host:6379/0, rpc://)")
    return default


# A cron string as Dagster accepts it for a schedule (dagster._utils.schedules.is_valid_cron_string: croniter's
# five fields, no seconds; tests/runtime/test_settings.py holds this rule to Dagster's own). Dagster is not
# imported here: every command reads this module, and importing Dagster costs seconds.
_CRON_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# name, lowest, highest, names (numbered from the lowest)
_CRON_FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()), ("month", 1, 12, _MONTHS), ("day of week", 0, 7, _DAYS))


def cron_problem(cron: str) -> str:
    """Why ``cron`` is not a cron string Dagster schedules on ('' when it is one): five fields (minute 0-59,
    hour 0-23, day of month 1-31 or L, month 1-12 or jan-dec, day of week 0-7 or sun-sat), each ``*``, a
    value, a range ``a-b`` (one that wraps, ``fri-mon``, too), any of them with ``/step``, or a comma-separated
    list of those; ``?`` for a whole day field, ``day#n`` (the n-th such day of the month) for a whole day of
    week; or one of @yearly, @monthly, @weekly, @daily, @hourly."""
    text = cron.strip()
    if text.lower() in _CRON_ALIASES:
        return ""
    fields = text.lower().split()
    if len(fields) != 5:
        return f"{len(fields)} field(s), not 5"
    expanded = []
    for value, (what, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        got = _cron_field(value, what, low, high, names)
        if got is None:
            return f"{what} {value!r} is not *, a value from {low} to {high}{' or a name' if names else ''}, a range, a step or a list of those"
        expanded.append(got)
    if expanded[3] == {2} and len(expanded[2]) == 1 and expanded[2] <= {30, 31}:
        return "February has no 30th or 31st"
    return ""


def _cron_field(value: str, what: str, low: int, high: int, names: tuple[str, ...]) -> set[int] | None:
    """The values one field names, or None when it is not valid there."""
    if value == "?" and what.startswith("day"):
        return set(range(low, high + 1))
    if what == "day of week" and "#" in value:
        day, _, nth = value.partition("#")
        number = _cron_number(day, low, high, names)
        return {number} if number is not None and nth.isdigit() and 1 <= int(nth) <= 5 else None
    out: set[int] = set()
    for item in value.split(","):
        got = _cron_item(item, low, high, names, last=what == "day of month")
        if got is None:
            return None
        out |= got
    return out


def _cron_item(item: str, low: int, high: int, names: tuple[str, ...], last: bool) -> set[int] | None:
    """The values one comma-separated item of a field names (``L``, the last day of the month, is 32: any month has one)."""
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit() or int(step_text) == 0:
            return None
        step = int(step_text)
    if base == "*":
        return set(range(low, high + 1, step))
    if last and base == "l" and not slash:
        return {high + 1}
    first, dash, end_text = base.partition("-")
    start = _cron_number(first, low, high, names)
    end = (high if last and end_text == "l" else _cron_number(end_text, low, high, names)) if dash else (high if slash else start)
    if start is None or end is None:
        return None
    if end < start:  # wraps around: fri-mon
        return set(range(start, high + 1, step)) | set(range(low, end + 1, step))
    return set(range(start, end + 1, step))


def _cron_number(text: str, low: int, high: int, names: tuple[str, ...]) -> int | None:
    if text in names:
        return low + names.index(text)
    if text.isdigit() and low <= int(text) <= high:
        return int(text)
    return None


def _cron(name: str, default: str) -> str:
    raw = _raw(name)
    if not raw:
        return default
    why = cron_problem(raw)
    if not why:
        return raw.strip()
    _refuse(name, raw, f"a cron string of 5 fields, minute hour day-of-month month day-of-week, e.g. '0 2 * * *' ({why})")
    return default


def _timezone(name: str, default: str) -> str:
    """An IANA time zone name, as Dagster loads a schedule's (zoneinfo.ZoneInfo, dagster._time.get_timezone)."""
    from zoneinfo import ZoneInfo

    raw = _raw(name)
    if not raw:
        return default
    if raw.strip() in ("UTC", "utc"):  # Dagster's own spellings of UTC (get_timezone)
        return raw.strip()
    try:
        ZoneInfo(raw.strip())
        return raw.strip()
    except (KeyError, ValueError, OSError):  # ZoneInfoNotFoundError is a KeyError; a folder or a path outside the database: the others
        pass
    _refuse(name, raw, "an IANA time zone name, e.g. UTC, Europe/Paris, America/New_York")
    return default


def _dagster_home() -> str:
    raw = _raw("DAGSTER_HOME")
    if raw and not os.path.isabs(raw):
        _refuse("DAGSTER_HOME", raw, "an absolute path to a folder (Dagster's instance)")
        return ""
    if raw and os.path.exists(raw) and not os.path.isdir(raw):
        _refuse("DAGSTER_HOME", raw, "a folder, and this names a file")
        return ""
    return raw


ROOT = _folder("MEDBENCH_ROOT", Path(__file__).resolve().parent.parent, must_exist=True)
SHARED = _folder("MEDBENCH_SHARED", ROOT.parent / "shared")
DATA = _folder("MEDBENCH_DATA", ROOT / "data")
STATE = _folder("MEDBENCH_STATE", ROOT / ".medbench")
MODELS_FILE = _file("MEDBENCH_MODELS", ROOT / "models.yaml")
TASKS_FILE = _file("MEDBENCH_TASKS", ROOT / "tasks.yaml")
NIGHTLY_CRON = _cron("MEDBENCH_NIGHTLY_CRON", "0 2 * * *")
NIGHTLY_TIMEZONE = _timezone("MEDBENCH_NIGHTLY_TZ", "UTC")
EXECUTOR = _choice("MEDBENCH_EXECUTOR", "multiprocess", ("multiprocess", "celery", "k8s"))
CELERY_BROKER = _url("MEDBENCH_CELERY_BROKER", "pyamqp://guest@localhost//")
CELERY_BACKEND = _url("MEDBENCH_CELERY_BACKEND", "rpc://")
CELERY_CONFIG = _file("MEDBENCH_CELERY_CONFIG", ROOT / "deploy" / "production" / "celery.yaml")
DVC_REMOTE = _raw("MEDBENCH_DVC_REMOTE")  # empty: the url in .dvc/config(.local); a path or any URL DVC knows
CACHE = _folder("MEDBENCH_CACHE", Path.home() / ".cache" / "medbench")
VENV_ROOT = _folder("MEDBENCH_VENV_ROOT", Path.home() / ".cache" / "medbench" / "venvs")
DAGSTER_HOME = _dagster_home()  # empty: the project's, <state>/dagster_home
# Dagster's console log level (empty: the command decides, medbench_cli.failures.console_level); Dagster takes the names upper-case.
LOG_LEVEL = _choice("MEDBENCH_LOG_LEVEL", "", ("debug", "info", "warning", "warn", "error", "critical", "fatal")).upper()
UI_PORT = _port("MEDBENCH_UI_PORT", 3000)
ONLINE = _flag("MEDBENCH_ONLINE")
POOL_WAIT_SECONDS = _seconds("MEDBENCH_POOL_WAIT", 3600.0)


def written_folders() -> list[tuple[str, Path]]:
    """The folders medbench (or a library it runs) writes into, each with the variable that moves it: a write
    refused under one of them names that variable (medbench_cli.failures.unwritable); HOME holds the defaults."""
    hf_home = Path(os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface")
    return [
        ("MEDBENCH_CACHE", CACHE),
        ("MEDBENCH_VENV_ROOT", VENV_ROOT),
        ("MEDBENCH_STATE", STATE),
        ("DAGSTER_HOME", Path(DAGSTER_HOME) if DAGSTER_HOME else STATE / "dagster_home"),
        ("MEDBENCH_DATA", DATA),
        # The benchmark versions' DVC remote: a local one (.dvc/config's default is ~/.cache/medbench/dvc-remote).
        ("MEDBENCH_DVC_REMOTE", Path(DVC_REMOTE).expanduser() if DVC_REMOTE and "://" not in DVC_REMOTE else Path.home() / ".cache/medbench/dvc-remote"),
        ("HF_HOME", hf_home),
        ("HOME", Path.home()),
    ]


def default_tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{STATE / 'mlflow.db'}"
