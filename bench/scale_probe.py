"""Memory and time probes shared by bench/bench_scale.py: process-tree peaks and phase marks.

Peak memory is read from the kernel's high-water mark (``VmHWM`` in ``/proc/<pid>/status``), which
the sampler resets after each read (``echo 5 > /proc/<pid>/clear_refs``, Linux >= 4.0), so each
sample is the true peak of that process over the interval, not a snapshot that could miss a
short spike. The tree's figure is the sum of its processes' interval peaks (an upper bound of
their simultaneous sum); the largest single process is reported beside it. Resident pages include
file-backed ones (memory-mapped files count while they are resident).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

_HWM = re.compile(rb"VmHWM:\s+(\d+) kB")
_RSS = re.compile(rb"VmRSS:\s+(\d+) kB")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                out.extend(int(x) for x in f.read().split())
    except OSError:
        pass
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and every descendant."""
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(_children(p))
    return seen


def peak_and_reset(pid: int) -> int:
    """Bytes: the process's peak RSS since the last reset, then reset it to the current RSS (0 if gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            m = _HWM.search(f.read())
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return 0
    return int(m.group(1)) * 1024 if m else 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the process and its waited-for children (0 if gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            m = _RSS.search(f.read())
    except OSError:
        return 0
    return int(m.group(1)) * 1024 if m else 0


@dataclass
class Sampler:
    """Polls the tree under ``pid`` every ``interval`` s: (time, sum of peaks, largest peak, processes, CPU seconds of the tree)."""

    pid: int
    interval: float = 0.1
    samples: list[tuple[float, int, int, int, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        pids = tree(self.pid)
        peaks = [peak_and_reset(p) for p in pids]
        cpu = sum(cpu_seconds(p) for p in pids)
        peaks = [p for p in peaks if p]
        if peaks:
            self.samples.append((time.time(), sum(peaks), max(peaks), len(peaks), cpu))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> "Sampler":
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def peak(self, start: float = 0.0, end: float = float("inf")) -> tuple[int, int]:
        """(tree, largest process) peak bytes over samples taken in (start, end + one interval]."""
        inside = [s for s in self.samples if start < s[0] <= end + self.interval]
        if not inside:
            return 0, 0
        return max(s[1] for s in inside), max(s[2] for s in inside)

    def cpu(self, start: float, end: float) -> float:
        """CPU seconds the tree used between ``start`` and ``end`` (the samples nearest them)."""
        before = [s[4] for s in self.samples if s[0] <= start]
        after = [s[4] for s in self.samples if s[0] >= end]
        first = before[-1] if before else (self.samples[0][4] if self.samples else 0.0)
        last = after[0] if after else (self.samples[-1][4] if self.samples else 0.0)
        return max(0.0, last - first)


class Marks:
    """Phase marks written as JSON lines (``{"phase", "start", "end"}``, wall-clock seconds) by a measured process."""

    def __init__(self, path: Path | None):
        self.path = path
        self.t = time.time()

    def mark(self, phase: str, **extra) -> None:
        now = time.time()
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(json.dumps({"phase": phase, "start": self.t, "end": now, **extra}) + "\n")
        self.t = now


def read_marks(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def gb(n: float) -> float:
    return round(n / 2**30, 3)
