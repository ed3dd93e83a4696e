"""The one place that reads the environment: project paths and their overrides.

MEDBENCH_ROOT (the checkout), MEDBENCH_SHARED (the folder holding data/, default ../shared),
MEDBENCH_DATA (artifact root, default <root>/data), MEDBENCH_STATE (run state: mlflow store,
caches; default <root>/.medbench), MLFLOW_TRACKING_URI (default: SQLite in the state folder).
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(os.environ.get("MEDBENCH_ROOT") or Path(__file__).resolve().parent.parent)
SHARED = Path(os.environ.get("MEDBENCH_SHARED") or ROOT.parent / "shared")
DATA = Path(os.environ.get("MEDBENCH_DATA") or ROOT / "data")
STATE = Path(os.environ.get("MEDBENCH_STATE") or ROOT / ".medbench")
MODELS_FILE = Path(os.environ.get("MEDBENCH_MODELS") or ROOT / "models.yaml")
TASKS_FILE = Path(os.environ.get("MEDBENCH_TASKS") or ROOT / "tasks.yaml")


def default_tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{STATE / 'mlflow.db'}"
