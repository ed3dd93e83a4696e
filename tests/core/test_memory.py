"""medbench_core/memory.py: what the first call freezes stays out of later collections, and cycles made later are still collected."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.orchestration.operating_env import ROOT

SCRIPT = textwrap.dedent(
    """
    import gc, json, time, weakref
    import dagster, great_expectations  # ~hundreds of thousands of tracked objects, as in a `medbench run`
    from medbench_core.memory import give_back_free_memory

    class Node:
        pass

    def cycle():
        a, b = Node(), Node()
        a.other, b.other = b, a
        return weakref.ref(a)

    before = cycle()  # garbage before the first call: collected by it, not frozen
    t = time.process_time(); give_back_free_memory(); first = time.process_time() - t
    frozen = gc.get_freeze_count()
    later = cycle()  # garbage made after the first call
    t = time.process_time(); give_back_free_memory(); second = time.process_time() - t
    print(json.dumps({"frozen": frozen, "before": before() is None, "later": later() is None, "first": first, "second": second,
                      "frozen after": gc.get_freeze_count()}))
    """
)


def test_the_first_call_freezes_the_survivors_and_later_cycles_are_still_collected():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    said = json.loads(out.stdout.splitlines()[-1])
    assert said["before"] and said["later"]  # both cycles collected: the one made before and the one made after the freeze
    assert said["frozen"] > 100_000 and said["frozen after"] == said["frozen"]  # frozen once: the libraries, not each stage's objects
    assert said["second"] < said["first"] / 5, said  # the second walks only what was made since
