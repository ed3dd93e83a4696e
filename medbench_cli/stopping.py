"""How a ``medbench`` command stops: Ctrl-C (SIGINT) and ``kill`` (SIGTERM) end it, wherever it is.

Outside Dagster either signal raises :class:`Stopped` (a ``KeyboardInterrupt``) in the main thread;
the command ends with one line saying so, and exit code 128 + the signal's number (130, 143).

Inside an in-process Dagster run, Dagster takes both signals over: it raises them in the step that
is running, at its next Python instruction, records the run failed and returns a failed result, as
for any failed step. Left at that, the command went on with its next partition. That a signal came
is still known here: the interpreter writes the number of every signal it handles into the wakeup
descriptor (:func:`signal.set_wakeup_fd`), whoever's handler runs; :func:`check`, called after each
run, raises :class:`Stopped` then. Where Dagster sits on the signal instead (a step waiting for a
pool slot, which no check for interrupts reaches), :mod:`medbench_cli.inprocess` stops the run.
"""

from __future__ import annotations

import os
import signal
import threading

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []  # the first stop signal this process received
_wakeup: list[tuple[int, int]] = []  # the wakeup pipe (read end, write end)
_lock = threading.Lock()


class Stopped(KeyboardInterrupt):
    """The command was told to stop by ``signum``."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(self.name)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _handler(signum: int, frame) -> None:
    if not _received:
        _received.append(signum)
    raise Stopped(signum)


def install() -> None:
    """SIGINT and SIGTERM raise :class:`Stopped`, even when the command started with them ignored, and are recorded.

    A background job of a non-interactive shell (``medbench run &`` in a script, many CI runners)
    starts with SIGINT ignored, and Dagster's in-process execution copies SIGINT's handler onto
    SIGTERM after every job (``setup_interrupt_handlers`` in dagster/_utils/interrupts.py): such a
    command ignored both, and so did every process it started (an ignored signal stays ignored
    across exec; a handled one is reset to its default).
    """
    if threading.current_thread() is not threading.main_thread():
        return  # a command called from a thread (tests): signals are the main thread's
    _received.clear()
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _handler)
    read, write = os.pipe()  # not inherited by the processes the command starts (PEP 446)
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    with _lock:
        for fd in _wakeup.pop() if _wakeup else ():  # a second command in this process (tests)
            os.close(fd)
        _wakeup.append((read, write))


def requested() -> int | None:
    """The first stop signal this process received (SIGINT or SIGTERM), None while there was none."""
    with _lock:
        if _wakeup:
            try:
                while data := os.read(_wakeup[0][0], 512):
                    for signum in data:
                        if signum in _STOP_SIGNALS and not _received:
                            _received.append(signum)
            except (BlockingIOError, OSError):
                pass
    return _received[0] if _received else None


def check() -> None:
    """Raise :class:`Stopped` if the command was told to stop (by a signal Dagster handled in a run)."""
    signum = requested()
    if signum is not None:
        raise Stopped(signum)
