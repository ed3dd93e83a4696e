"""Settings from the environment, checked at start (issue 44.11): a value medbench does not accept stops every
command before it does anything, exit 2, in one line naming the variable, its value and what is accepted;
never a stack trace, never a Dagster error. The cron and time-zone rules are held to Dagster's own, which the
schedules are built with (runtime/settings.py does not import Dagster: every command reads it)."""

import os
import subprocess
import sys

import pytest

from runtime.settings import cron_problem
from tests.orchestration.operating_env import ROOT

# (variable, value, what the one line must say is accepted)
REFUSED = [
    ("MEDBENCH_NIGHTLY_CRON", "61 25 * * *", "a cron string of 5 fields"),
    ("MEDBENCH_NIGHTLY_CRON", "0 2 * *", "4 field(s), not 5"),
    ("MEDBENCH_NIGHTLY_CRON", "0 0 30 2 *", "February has no 30th or 31st"),
    ("MEDBENCH_NIGHTLY_TZ", "Mars/Olympus", "an IANA time zone name"),
    ("MEDBENCH_NIGHTLY_TZ", "Europe", "an IANA time zone name"),
    ("MEDBENCH_UI_PORT", "notaport", "a TCP port, a whole number from 1 to 65535"),
    ("MEDBENCH_UI_PORT", "70000", "a TCP port, a whole number from 1 to 65535"),
    ("MEDBENCH_POOL_WAIT", "abc", "a number of seconds, 0 or more"),
    ("MEDBENCH_POOL_WAIT", "-5", "a number of seconds, 0 or more"),
    ("MEDBENCH_POOL_WAIT", "nan", "a number of seconds, 0 or more"),
    ("MEDBENCH_EXECUTOR", "threads", "one of multiprocess, celery, k8s"),
    ("MEDBENCH_LOG_LEVEL", "LOUD", "one of debug, info, warning"),
    ("MEDBENCH_ONLINE", "maybe", "one of 1, true, yes, on (on) or 0, false, no, off (off)"),
    ("MEDBENCH_CELERY_BROKER", "localhost:5672", "a URL, scheme://"),
    ("MEDBENCH_DATA", "{file}", "a folder, and this names a file"),
    ("MEDBENCH_STATE", "{file}", "a folder, and this names a file"),
    ("MEDBENCH_MODELS", "{folder}", "a file, and this names a folder"),
    ("MEDBENCH_ROOT", "{missing}", "an existing folder"),
    ("DAGSTER_HOME", "relative/home", "an absolute path to a folder"),
]


def command_env(tmp_path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEDBENCH_") and k not in ("DAGSTER_HOME", "MLFLOW_TRACKING_URI")}
    return {**base, "PYTHONPATH": str(ROOT), "MEDBENCH_DATA": str(tmp_path / "data"), "MEDBENCH_STATE": str(tmp_path / "state"), **extra}


@pytest.mark.parametrize("variable, value, accepted", REFUSED, ids=[f"{v}={x}" for v, x, _ in REFUSED])
def test_a_setting_medbench_does_not_accept_stops_the_command_in_one_line(tmp_path, variable, value, accepted):
    (tmp_path / "a-file").write_text("not a folder\n")
    (tmp_path / "a-folder").mkdir()
    value = value.format(file=tmp_path / "a-file", folder=tmp_path / "a-folder", missing=tmp_path / "no-such-checkout")
    env = command_env(tmp_path, **{variable: value})
    # A real process each: the settings are read as the command's interpreter starts (tests/forked.py's children
    # are started with an environment of their own too, but this is what a user's shell does).
    out = subprocess.run([sys.executable, "-m", "medbench_cli", "leaderboard"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and out.stdout == "", out.stderr
    assert lines[0].startswith(f"medbench leaderboard: error: {variable}={value!r} is not accepted; expected "), lines[0]
    assert accepted in lines[0] and "nothing was run or changed" in lines[0]
    assert not (tmp_path / "data").exists() and not (tmp_path / "state").exists()


@pytest.mark.parametrize("args", [["run"], ["ui"], ["export", "--to", "out"], ["models", "sync"], ["data", "pull"], ["gc"]])
def test_every_command_checks_the_settings_before_it_starts(tmp_path, args):
    env = command_env(tmp_path, MEDBENCH_NIGHTLY_CRON="61 25 * * *", MEDBENCH_UI_PORT="notaport")
    out = subprocess.run([sys.executable, "-m", "medbench_cli", *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-3000:]
    (line,) = out.stderr.strip().splitlines()
    assert "Traceback" not in out.stderr and "Dagster" not in line
    assert "MEDBENCH_NIGHTLY_CRON='61 25 * * *' is not accepted" in line and "MEDBENCH_UI_PORT='notaport' is not accepted" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "state").exists()


def test_the_dagster_code_location_refuses_them_too(tmp_path):
    """`medbench ui`'s servers and the daemon load orchestration.definitions in processes of their own."""
    env = command_env(tmp_path, MEDBENCH_NIGHTLY_TZ="Mars/Olympus")
    probe = "from orchestration.definitions import build_definitions\ntry:\n    build_definitions()\nexcept Exception as e:\n    print(type(e).__name__, e)"
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == (
        "InvalidSetting MEDBENCH_NIGHTLY_TZ='Mars/Olympus' is not accepted; expected an IANA time zone name, e.g. UTC, Europe/Paris, America/New_York"
    ), out.stderr[-3000:]


def test_accepted_values_are_read(tmp_path):
    env = command_env(
        tmp_path, MEDBENCH_NIGHTLY_CRON="30 3 * * mon-fri", MEDBENCH_NIGHTLY_TZ="Europe/Paris", MEDBENCH_UI_PORT=" 3917 ", MEDBENCH_POOL_WAIT="2.5",
        MEDBENCH_EXECUTOR="celery", MEDBENCH_LOG_LEVEL="info", MEDBENCH_ONLINE="off", MEDBENCH_CELERY_BROKER="redis://mq:6379/0",
    )  # fmt: skip
    probe = (
        "from runtime import settings as s; print(s.problems(), s.NIGHTLY_CRON, s.NIGHTLY_TIMEZONE, s.UI_PORT, s.POOL_WAIT_SECONDS, s.EXECUTOR, "
        "s.LOG_LEVEL, s.ONLINE, s.CELERY_BROKER)"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[] 30 3 * * mon-fri Europe/Paris 3917 2.5 celery INFO False redis://mq:6379/0", out.stderr[-2000:]


# Cron strings and whether Dagster's schedule takes them (dagster._utils.schedules.is_valid_cron_string, asked below).
CRONS = [
    "0 2 * * *", "  0 2 * * *  ", "0\t2 * * *", "*/5 * * * *", "0-59/15 * * * *", "5/15 * * * *", "*/100 * * * *", "1,2,3 * * * *",
    "5-1 * * * *", "5-1/2 * * * *", "0 2 * * 7", "0 2 * * sun", "0 2 * JAN-MAR mon-fri", "* * * * 7-0", "* * * feb-jan *", "0 0 * dec-jan/2 *",
    "0 0 29 2 *", "0 0 30 2,3 *", "0 0 30,1 2 *", "0 0 30-31 2 *", "0 0 */31 2 *", "0 0 L * *", "0 0 l * *", "0 0 L,1 * *", "0 0 1-L * *",
    "0 0 L 2 *", "0 0 31-1 * *", "0 2 ? * *", "0 2 * * ?", "0 0 * * 5#3", "0 0 * * sun#1", "0 0 * * 7#1", "@daily", "@hourly", "@weekly",
    "61 25 * * *", "* * *", "0 2 * * * *", "", "0 0 30 2 *", "0 0 31 2 *", "0 0 30 feb,feb *", "0 0 30/5 2 *", "@reboot", "0 2 * * 8",
    "*/0 * * * *", "-1 * * * *", "0 24 * * *", "0 0 0 * *", "0 0 1 0 *", "0 0 1 13 *", "a b c d e", "H * * * *", "1,,2 * * * *",
    "60-1 * * * *", "0 2 * * 5L", "0 0 LW * *", "0 0 15W * *", "0 0 * * L", "0 0 L/2 * *", "0 0 */L * *", "0 0 ?/2 * *", "0 0 * * ?,1",
    "0 0 * * 5#6", "0 0 * * 5#0", "0 0 * * 1-5#2", "0 0 * * 1,5#3", "0 0 * * #1", "0 0 1-2-3 * *", "0 0 * * mon-", "0 0 * 1/2/3 *",
]  # fmt: skip


def test_the_cron_rule_is_dagsters():
    from dagster._utils.schedules import is_valid_cron_string

    disagree = [c for c in CRONS if (not cron_problem(c)) != is_valid_cron_string(c)]
    assert disagree == []
    assert sum(map(is_valid_cron_string, CRONS)) == 35  # both kinds are in the list


ZONES = ["UTC", "utc", "Europe/Paris", "America/Argentina/Buenos_Aires", "Etc/GMT+5", "EST5EDT", "Mars/Olympus", "Europe", "../etc/passwd", "Europe/Paris "]


@pytest.mark.parametrize("name", ZONES)
def test_the_time_zone_rule_is_dagsters(tmp_path, name):
    """A time zone the schedule's definition takes (dagster._time.get_timezone), and no other, is accepted."""
    import dagster as dg

    try:
        dg.ScheduleDefinition(name="probe", cron_schedule="0 2 * * *", job_name="j", execution_timezone=name.strip())
        dagster_takes = True
    except dg.DagsterInvalidDefinitionError:
        dagster_takes = False
    out = subprocess.run(
        [sys.executable, "-c", "from runtime import settings; print(settings.problems())"],
        env=command_env(tmp_path, MEDBENCH_NIGHTLY_TZ=name), cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (out.stdout.strip() == "[]") == dagster_takes, out.stdout + out.stderr[-2000:]
