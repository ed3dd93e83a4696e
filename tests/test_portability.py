"""tests/portability.py: the lanes run every test marked ``portable``, and only the files that hold them."""

from __future__ import annotations

import re
from pathlib import Path

from tests import portability

ROOT = Path(__file__).resolve().parents[1]


def test_the_lanes_run_every_file_with_a_portable_test_and_no_other():
    marked = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if re.search(r"pytest\.mark\.portable\b", p.read_text())}
    assert marked == set(portability.FILES)


def test_each_lane_forces_every_switch_and_the_generic_lane_needs_no_cpu_flag():
    from medbench_release.kernels import SWITCHES

    by = {lane.name: lane for lane in portability.LANES}
    assert set(by) == {"generic", "avx2", "avx512"} and by["generic"].needs == ()
    for lane in portability.LANES:  # the FAISS switch is added per lane (lane_env), after what the installed faiss honours
        assert {"ATEN_CPU_CAPABILITY", *portability.THREADS, "ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE"} <= set(lane.env) <= set(SWITCHES)
    assert {by["generic"].threads, by["avx2"].threads} == {1, 2}  # one and two threads
