"""bench/gpu_check.py on a machine without a GPU: one line saying what is missing, exit 0, nothing compared."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_skips_clearly_without_a_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: run bench/gpu_check.py itself, it compares the GPU and CPU paths")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines == ["[gpu_check] skipped: torch sees no CUDA device; nothing was compared (exit 0)"]
