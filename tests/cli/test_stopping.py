"""medbench_cli/stopping.py: SIGINT and SIGTERM stop a command, also when it started with them ignored,
and a signal that another handler took (Dagster's, inside a run) is still known to the command.

The whole path (a `medbench run` stopped while waiting for a pool slot, and mid-step) is in
tests/orchestration/test_kills.py; these are its two mechanisms, in a bare process (no Dagster).
"""

import signal
import subprocess
import sys

from tests.orchestration.operating_env import ROOT

SCRIPT = """
import os, signal, sys, time
from medbench_cli import stopping

stopping.install()
print("handlers", signal.getsignal(signal.SIGINT) is signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN, flush=True)
try:
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    time.sleep(5)
    print("not stopped")
except stopping.Stopped as exc:
    print("stopped", exc.name, exc.exit_code)
print("requested", stopping.requested())

# A second command in this process, and a foreign handler that swallows the signal (as Dagster's
# does during a run, until a step checks for it): check() still raises.
stopping.install()
signal.signal(signal.SIGTERM, lambda signum, frame: None)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.1)
try:
    stopping.check()
    print("not recorded")
except stopping.Stopped as exc:
    print("recorded", exc.name)
"""


def _ignoring_both():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def test_sigint_and_sigterm_stop_a_command_even_when_it_started_ignoring_them():
    for name, code in (("SIGINT", 130), ("SIGTERM", 143)):
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT, name], cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            preexec_fn=_ignoring_both, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.stdout.splitlines() == ["handlers True", f"stopped {name} {code}", f"requested {int(getattr(signal, name))}", "recorded SIGTERM"], out.stderr
