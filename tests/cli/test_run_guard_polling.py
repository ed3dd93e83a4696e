"""The in-process run guard (medbench_cli/inprocess.py) asks the instance for waiting steps less often while none waits.

Each ask is an SQLite query of Dagster's concurrency tables; the guard wakes every ``shortest``
seconds to look at stop signals, but asks only after an interval that doubles up to ``longest``
while nothing waits, and at every wake once a step waits. The instance is replaced by fakes that
count: the figures asserted are counts of wakes and asks, bounded by elapsed time, not timings.
"""

import time

from medbench_cli import inprocess
from orchestration import recovery


def wait_until(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_the_guard_backs_off_while_no_step_waits_and_asks_at_every_wake_once_one_does(monkeypatch):
    shortest, longest = 0.01, 0.08
    monkeypatch.setattr(inprocess, "GUARD_POLL_SECONDS", (shortest, longest))
    monkeypatch.setattr(inprocess.settings, "POOL_WAIT_SECONDS", 3600.0)
    wakes: list[float] = []
    asks: list[tuple[int, bool]] = []  # (wakes so far, whether a step waited)
    waiting: list[tuple[str, str]] = []
    monkeypatch.setattr(inprocess.stopping, "requested", lambda: wakes.append(time.monotonic()) or None)
    monkeypatch.setattr(recovery, "waiting_steps", lambda *_: asks.append((len(wakes), bool(waiting))) or list(waiting))
    monkeypatch.setattr(recovery, "reclaim", lambda _instance: [])
    told: list[str] = []
    guard = inprocess._Guard(None, "run-guard-test", ["encode"], "evaluate", told.append)
    guard.start()
    try:
        start = time.monotonic()
        wait_until(lambda: len(wakes) >= 60, timeout=20)
        elapsed = time.monotonic() - start
        idle_asks = len(asks)
        assert len(wakes) >= 60
        # Intervals 0.01, 0.02, 0.04, then 0.08 s: at most 4 asks before the longest one, then one per 0.08 s.
        assert 1 <= idle_asks <= 4 + elapsed / longest + 1, (idle_asks, len(wakes), elapsed)
        assert idle_asks < len(wakes) / 2  # asking at every wake (before the back-off) would be 60

        waiting.append(("encode", "corpus_embeddings"))  # a step now waits for a slot
        wait_until(lambda: sum(w for _, w in asks) >= 10, timeout=1.5)  # under the 2 s after which the guard tells
        seen = [n for n, w in asks if w]
        assert len(seen) >= 3
        assert seen == list(range(seen[0], seen[0] + len(seen))), seen  # one ask per wake while it waits
    finally:
        guard.finish()
    assert told == []  # nothing said before a wait of 2 s
