"""How a ``medbench`` command that cannot do what was asked ends: one last line, stack traces in a log.

The last line a refusal prints names what was wrong (file, line, id, field, task or model, as the
error says it), what was kept, and what to do; the exit code is 1 for a failed partition, check or
artifact, 2 for a usage or configuration error. Dagster's and Python's stack traces go to a log file
under the state folder (``<state>/logs/<command>-<UTC time>-<pid>.log``, created on the first
trace), which that line names; ``--verbose`` prints them instead (and Dagster's console log).
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import sys
import traceback
from pathlib import Path

from runtime import settings

USAGE = 2  # a usage or configuration error: nothing was run
FAILED = 1  # a partition, check or artifact failed


class Refusal(Exception):
    """A refusal said in one line: ``what`` was wrong, what was ``kept``, what ``todo``; ``code`` is the exit code."""

    def __init__(self, what: str, kept: str = "nothing was changed", todo: str = "", code: int = FAILED) -> None:
        super().__init__(what)
        self.what, self.kept, self.todo, self.code = what, kept, todo, code


class Log:
    """This command's log of stack traces and Dagster errors; the file is created on the first write.

    With ``verbose`` everything goes to stderr instead, as it happens.
    """

    def __init__(self, command: str, verbose: bool = False, path: Path | None = None) -> None:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.command, self.verbose = command, verbose
        self.path = path or settings.STATE / "logs" / f"{command.replace(' ', '-')}-{stamp}-{os.getpid()}.log"
        self.written = False

    def write(self, title: str, text: str) -> None:
        if self.verbose:
            print(f"--- {title}\n{text.rstrip()}", file=sys.stderr, flush=True)
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:
                f.write(f"--- {title} ({dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')})\n{text.rstrip()}\n\n")
        except OSError:  # an unwritable state folder must not hide the error itself
            print(f"--- {title}\n{text.rstrip()}", file=sys.stderr, flush=True)
            return
        self.written = True

    def exception(self, exc: BaseException) -> None:
        self.write(f"{type(exc).__name__} in medbench {self.command}", "".join(traceback.format_exception(exc)))

    def where(self) -> str:
        """``; stack traces: PATH`` once something was written there, else nothing."""
        written = self.written or (not self.verbose and self.path.is_file())  # the prepare child appends to it too
        return f"; stack traces: {self.path}" if written else ""


_LOG: Log | None = None


def start(command: str, verbose: bool = False, path: Path | None = None) -> Log:
    """This process's log (one per command; the prepare child appends to its parent's)."""
    global _LOG
    _LOG = Log(command, verbose, path)
    return _LOG


def log() -> Log:
    global _LOG
    if _LOG is None:  # a handler called without main(): tests, benches
        _LOG = Log("medbench")
    return _LOG


def console_level() -> str:
    """Dagster's console log level: MEDBENCH_LOG_LEVEL when set, WARNING with --verbose, else CRITICAL
    (nothing: a failed step is said by the command in one line, its stack trace is in the log)."""
    return settings.LOG_LEVEL or ("WARNING" if log().verbose else "CRITICAL")


def line(command: str, what: str, kept: str = "", todo: str = "") -> str:
    """The last line of a refusal: ``medbench COMMAND: error: WHAT; KEPT; TODO; stack traces: LOG``
    (``medbench run: FAILED: ...`` for failed steps)."""
    from medbench_core.retrieval.checkpoints import without_torch_advice

    what = _one_line(without_torch_advice(what))  # never relay torch's advice to unpickle a refused file
    parts = [f"medbench {command}: {'' if what.startswith('FAILED') else 'error: '}{what}"]
    parts += [p for p in (kept, todo) if p]
    return "; ".join(parts) + log().where()


def say(command: str, what: str, kept: str = "", todo: str = "") -> None:
    """Print the last line on stderr, after everything stdout holds."""
    sys.stdout.flush()
    print(line(command, what, kept, todo), file=sys.stderr, flush=True)


def _one_line(text: str) -> str:
    lines = [s.strip() for s in str(text).strip().splitlines() if s.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else "(no message)"
    return f"{lines[0]} (and {len(lines) - 1} more line(s) above)"


def unwritable(exc: BaseException) -> tuple[str, str] | None:
    """``(what, todo)`` for an error that is a write the system refused (a read-only file system, no permission)
    under a folder a variable moves (:func:`runtime.settings.written_folders`): the file it was writing, why, and
    the variable to set; None for any other error.

    The file is the deepest path the error's chain names: ``mkdir(parents=True)`` fails on the first parent it
    cannot create (``~/.cache``), having been asked for the file's folder (``~/.cache/medbench/...``)."""
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and len(chain) < 20:
        chain.append(e)
        e = e.__cause__ or e.__context__
    refused = next((e for e in chain if isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and e.filename), None)
    if refused is None:
        return None
    paths = [Path(os.fsdecode(e.filename)) for e in chain if isinstance(e, OSError) and e.filename and not isinstance(e.filename, int)]
    target = max(paths, key=lambda p: len(p.parts))
    inside = [(variable, folder) for variable, folder in settings.written_folders() if folder == target or folder in target.parents]
    if not inside:
        return None
    variable, folder = max(inside, key=lambda vf: len(vf[1].parts))  # the nearest folder that holds it
    where = os.fsdecode(refused.filename)
    why = "is on a read-only file system" if refused.errno == errno.EROFS else "is not writable by this user"
    what = f"cannot write {target}: {where} {why}"
    if variable == "HOME":
        return what, f"set HOME to a writable folder, or the variable of the tool that writes under {folder}"
    return what, f"set {variable} to a writable folder (it is {folder})"


# --- Dagster results ------------------------------------------------------------------------------


def step_error(result, max_lines: int = 12) -> str:
    """The error that failed a run, as its first failed blocking check or step said it, without Dagster's
    wrappers: ``step: message`` (a bad expansion file's problems are one a line, each naming file, line
    and id). Empty when the run did not fail on a step."""
    for ev in result.all_events:  # a blocking check (a data contract) that did not pass: its verdict, not Dagster's wrapper
        if ev.event_type_value == "ASSET_CHECK_EVALUATION":
            data = ev.event_specific_data
            if data is not None and not data.passed and data.blocking:
                message = data.metadata.get("message")  # the contract's whole verdict (failing rows), as a Markdown code block
                text = str(message.value).strip().strip("`").strip() if message is not None else data.description or "failed"
                return f"{data.check_name}: " + "\n".join(line[:500] for line in text.splitlines()[:max_lines])
    for ev in result.all_events:
        if ev.is_step_failure and ev.step_failure_data and ev.step_failure_data.error:
            err = ev.step_failure_data.error
            # Dagster's wrappers (step execution, retries exhausted): the cause is ours.
            while err.cause is not None and ((err.cls_name or "").startswith("Dagster") or err.cls_name == "RetryRequestedFromPolicy"):
                err = err.cause
            from medbench_core.retrieval.checkpoints import without_torch_advice

            text = without_torch_advice(err.message.strip())
            head = text.split(": ", 1)
            if len(head) == 2 and err.cls_name and head[0].endswith(err.cls_name):  # "medbench_core.errors.DataError: ..."
                text = head[1]
            lines = [line[:500] for line in text.splitlines()[:max_lines]]
            return f"{ev.step_key}: " + "\n".join(lines) if lines else ev.step_key
    return ""


def record(title: str, result) -> None:
    """Write a failed Dagster run's errors (every failed step's full error and stack) to the log."""
    chunks = [f"Dagster run {result.run_id}"]
    for ev in result.all_events:
        if ev.is_step_failure and ev.step_failure_data and ev.step_failure_data.error:
            chunks.append(f"{ev.step_key}: STEP_FAILURE\n{ev.step_failure_data.error.to_string()}")
        elif ev.event_type_value in ("RUN_FAILURE", "ASSET_CHECK_EVALUATION", "STEP_UP_FOR_RETRY") and ev.message:
            chunks.append(f"{ev.step_key or 'run'}: {ev.event_type_value}: {ev.message}")
    log().write(title, "\n".join(chunks))
