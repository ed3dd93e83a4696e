"""The method every bench in bench/ measures with: paired, interleaved runs, reported as ratios.

This machine is shared: its load moves from minute to minute, and two sides timed in separate
blocks compare those minutes rather than the code. So every figure is a *paired* ratio:

- the sides run in rounds, back to back, and the order alternates (A B, B A, A B, ...: the ABBA
  order; with more sides, forward then reversed), so that a drift in load falls on both sides of
  a round alike;
- each round gives one ratio per side against the baseline side; a figure is the **median** of
  those ratios over n >= 5 rounds, with their **range** (smallest, largest);
- for wall time and for **CPU time** (user + system: of this process, every thread; or of a child
  process and the children it waited for, from ``os.wait4``'s rusage). Under load the CPU ratio
  is the steadier figure: a side that waits for a core is not charged for it;
- with the 1-minute load average (``os.getloadavg``) when the measurement started and ended.

Only public means: ``time.perf_counter``, ``resource.getrusage``, ``os.wait4``, ``/proc`` for peak
memory (VmHWM, which ``/proc/self/clear_refs`` resets). Usage::

    from paired import call, measure
    m = measure({"pytrec_eval": lambda: call(trec), "medbench": lambda: call(ours)}, pairs=7)
    print(m.ratio("pytrec_eval", "medbench"))    # pytrec_eval's time / medbench's, per round
    print(m.table([("speed-up", "pytrec_eval", "medbench")]))
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

MIN_PAIRS = 5  # fewer rounds make no figure: the script says so beside the numbers


@dataclasses.dataclass(frozen=True)
class Sample:
    """One side's one run: wall and CPU seconds, peak resident memory (bytes; None if unknown), what it returned."""

    wall: float
    cpu: float
    peak_rss: int | None = None
    value: Any = dataclasses.field(default=None, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Ratio:
    """Per-round ratios of one measure (``wall``, ``cpu`` or ``peak_rss``): their median and range."""

    what: str
    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def __str__(self) -> str:
        warn = "" if self.n >= MIN_PAIRS else f"; fewer than {MIN_PAIRS} rounds: not a figure"
        return f"{self.median:.3f}x ({self.low:.3f}-{self.high:.3f}, n={self.n}{warn})"


@dataclasses.dataclass
class Measurement:
    """Every side's samples in round order, the rounds' side order, and the load average around them."""

    samples: dict[str, list[Sample]]
    orders: list[tuple[str, ...]]
    load_start: float
    load_end: float
    started: str

    def ratio(self, num: str, den: str, what: str = "cpu") -> Ratio:
        """``num``'s ``what`` divided by ``den``'s, round by round (medbench / bare: > 1 is slower than bare)."""
        pairs = zip(self.samples[num], self.samples[den], strict=True)
        return Ratio(what, tuple(getattr(a, what) / getattr(b, what) for a, b in pairs if getattr(a, what) and getattr(b, what)))

    def seconds(self, side: str, what: str = "cpu") -> tuple[float, float, float]:
        """(median, smallest, largest) of one side's ``what``."""
        xs = [getattr(s, what) for s in self.samples[side]]
        return statistics.median(xs), min(xs), max(xs)

    def load(self) -> str:
        return f"load average {self.load_start:.1f} -> {self.load_end:.1f} (1 min, {os.cpu_count()} cores)"

    def table(self, rows: Sequence[tuple[str, str, str]], memory: bool = False) -> str:
        """A markdown table, one row per (label, numerator side, denominator side): n, the CPU and wall
        ratios (median and range), each side's median seconds; ``memory`` adds the peak-memory ratio."""
        head = "| figure | n | CPU ratio, median (range) | wall ratio, median (range) | CPU s, median | wall s, median |"
        sep = "|---|---:|---:|---:|---:|---:|"
        if memory:
            head += " peak memory ratio, median (range) |"
            sep += "---:|"
        out = [head, sep]
        for label, num, den in rows:
            c, w = self.ratio(num, den, "cpu"), self.ratio(num, den, "wall")
            cells = [
                label, str(c.n), f"{c.median:.3f}x ({c.low:.3f}-{c.high:.3f})", f"{w.median:.3f}x ({w.low:.3f}-{w.high:.3f})",
                f"{self.seconds(num, 'cpu')[0]:.3f} / {self.seconds(den, 'cpu')[0]:.3f}", f"{self.seconds(num, 'wall')[0]:.3f} / {self.seconds(den, 'wall')[0]:.3f}",
            ]  # fmt: skip
            if memory:
                m = self.ratio(num, den, "peak_rss")
                cells.append(f"{m.median:.3f}x ({m.low:.3f}-{m.high:.3f})" if m.n else "-")
            out.append("| " + " | ".join(cells) + " |")
        note = f"{self.started}, {self.load()}" + (
            "" if min(len(v) for v in self.samples.values()) >= MIN_PAIRS else f"; fewer than {MIN_PAIRS} rounds: not a figure"
        )
        return "\n".join(out) + f"\n\n{note}"


def order(rounds: int, sides: Sequence[str]) -> list[tuple[str, ...]]:
    """The side order of each round: forward, reversed, forward, ... (A B, B A, A B, ... for two sides)."""
    return [tuple(sides) if r % 2 == 0 else tuple(reversed(sides)) for r in range(rounds)]


def measure(
    sides: Mapping[str, Callable[[], Sample]], pairs: int = MIN_PAIRS, *, warmup: int = 0, report: Callable[[int, str, Sample], None] | None = None
) -> Measurement:
    """Run every side ``pairs`` times in alternating order (:func:`order`), after ``warmup`` untimed rounds.

    Each side is a callable returning a :class:`Sample` (:func:`call` for a function of this
    process, :func:`child` for a command). ``report(round, side, sample)`` is called after each run.
    """
    names = list(sides)
    for _ in range(warmup):
        for name in names:
            sides[name]()
    samples: dict[str, list[Sample]] = {n: [] for n in names}
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_start = os.getloadavg()[0]
    rounds = order(pairs, names)
    for r, sequence in enumerate(rounds):
        for name in sequence:
            s = sides[name]()
            samples[name].append(s)
            if report is not None:
                report(r, name, s)
    return Measurement(samples, rounds, load_start, os.getloadavg()[0], started)


def call(fn: Callable[[], Any]) -> Sample:
    """Time ``fn()`` in this process: wall, CPU of every thread (``RUSAGE_SELF``), the peak RSS reached during it."""
    gc.collect()
    reset_peak()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    value = fn()
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return Sample(wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), peak_rss(), value)


def child(
    cmd: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    log: Path | None = None,
    timeout: float | None = None,
) -> Sample:
    """Run ``cmd`` and time it from launch to exit: wall; CPU and peak RSS from ``os.wait4`` (the child
    and every descendant it waited for; the peak is the largest single process's). Raises on a non-zero exit."""
    out = open(log, "w") if log else subprocess.DEVNULL
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), env=dict(env) if env is not None else None, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        deadline = None if timeout is None else t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG if deadline else 0)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                raise TimeoutError(f"{' '.join(cmd)}: over {timeout} s")
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
    finally:
        if log:
            out.close()
    if proc.returncode != 0:
        tail = Path(log).read_text()[-3000:] if log else ""
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}" + (f"; {log}:\n{tail}" if log else ""))
    return Sample(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)


def reset_peak() -> None:
    """Reset this process's peak RSS (VmHWM) where Linux allows it; a no-op elsewhere."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_rss() -> int | None:
    """This process's peak RSS in bytes since the last :func:`reset_peak` (VmHWM), or None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def add_arguments(parser: argparse.ArgumentParser, default: int = MIN_PAIRS) -> None:
    """``--pairs N``: rounds of every side (median and range over them; fewer than 5 make no figure)."""
    parser.add_argument(
        "--pairs", type=int, default=default, help=f"interleaved rounds of every side (ABBA order); figures need >= {MIN_PAIRS} (default {default})"
    )


def header(what: str) -> str:
    """The first line every bench prints: what, when, where, the load now."""
    return f"# {what}: {time.strftime('%Y-%m-%d %H:%M %Z')}, {os.cpu_count()} cores, Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}"
