"""Running ``medbench`` as users do (``python -m medbench_cli``, what the console script calls), on temporary folders."""

import os
import subprocess
import sys
from pathlib import Path

from tests.orchestration.operating_env import ROOT


def medbench(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEDBENCH_") and k not in ("DAGSTER_HOME", "MLFLOW_TRACKING_URI")}
    return subprocess.run(
        [sys.executable, "-m", "medbench_cli", *args], env={**base, "PYTHONPATH": str(ROOT), **(env or {})}, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def state_env(tmp_path: Path) -> dict[str, str]:
    """Data, state and instance in ``tmp_path`` (none of them exist yet)."""
    return {"MEDBENCH_DATA": str(tmp_path / "data"), "MEDBENCH_STATE": str(tmp_path / "state"), "DAGSTER_HOME": str(tmp_path / "dagster_home")}
