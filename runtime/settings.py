"""The one place that reads the environment: project paths and their overrides.

MEDBENCH_ROOT (the checkout), MEDBENCH_SHARED (the folder holding data/, default ../shared),
MEDBENCH_DATA (artifact root, default <root>/data), MEDBENCH_STATE (run state: mlflow store,
caches; default <root>/.medbench), MLFLOW_TRACKING_URI (default: SQLite in the state folder),
MEDBENCH_NIGHTLY_CRON / MEDBENCH_NIGHTLY_TZ (nightly evaluation and drift canary; default 02:00 UTC),
MEDBENCH_EXECUTOR (``multiprocess``, the default, ``celery`` for the production profile, or ``k8s``:
one Kubernetes Job per step), MEDBENCH_CELERY_BROKER / MEDBENCH_CELERY_BACKEND (the celery broker and
result backend URLs) and MEDBENCH_CELERY_CONFIG (the workers' celery YAML, whose config_source the
executor sends with; default deploy/production/celery.yaml),
MEDBENCH_DVC_REMOTE (the DVC remote of benchmark versions; default ~/.cache/medbench/dvc-remote),
MEDBENCH_CACHE (what an installation builds once and every project state reuses, such as the empty
MLflow schema; default ~/.cache/medbench), MEDBENCH_VENV_ROOT (the virtual environments scripts/setup.sh
builds, one per requirements.lock hash; default ~/.cache/medbench/venvs), DAGSTER_HOME (the Dagster instance; default
<state>/dagster_home, set up by the command line), MEDBENCH_LOG_LEVEL (Dagster's console log level in
the `medbench` command; default: nothing, a failure is said in one line and its stack trace logged
under <state>/logs; WARNING with --verbose), MEDBENCH_UI_PORT (`medbench ui`; default 3000), MEDBENCH_ONLINE
(``1`` lets hub models and datasets download and resolves hub revisions on the hub; default off:
everything is read from local folders and the local hub cache, and scripts/setup.sh keeps the
HF_*_OFFLINE switches set), MEDBENCH_POOL_WAIT (how many seconds a `medbench` command waits for a
pool slot that a live run holds before it gives up saying which run; default 3600).
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
NIGHTLY_CRON = os.environ.get("MEDBENCH_NIGHTLY_CRON") or "0 2 * * *"
NIGHTLY_TIMEZONE = os.environ.get("MEDBENCH_NIGHTLY_TZ") or "UTC"
EXECUTOR = os.environ.get("MEDBENCH_EXECUTOR") or "multiprocess"
CELERY_BROKER = os.environ.get("MEDBENCH_CELERY_BROKER") or "pyamqp://guest@localhost//"
CELERY_BACKEND = os.environ.get("MEDBENCH_CELERY_BACKEND") or "rpc://"
CELERY_CONFIG = Path(os.environ.get("MEDBENCH_CELERY_CONFIG") or ROOT / "deploy" / "production" / "celery.yaml")
DVC_REMOTE = os.environ.get("MEDBENCH_DVC_REMOTE") or ""  # empty: the url in .dvc/config(.local)
CACHE = Path(os.environ.get("MEDBENCH_CACHE") or Path.home() / ".cache" / "medbench")
VENV_ROOT = Path(os.environ.get("MEDBENCH_VENV_ROOT") or Path.home() / ".cache" / "medbench" / "venvs")
DAGSTER_HOME = os.environ.get("DAGSTER_HOME") or ""  # empty: the project's, <state>/dagster_home
LOG_LEVEL = os.environ.get("MEDBENCH_LOG_LEVEL") or ""  # empty: the command decides (medbench_cli.failures.console_level)
UI_PORT = int(os.environ.get("MEDBENCH_UI_PORT") or 3000)
ONLINE = (os.environ.get("MEDBENCH_ONLINE") or "0").strip().lower() in ("1", "true", "yes", "on")
POOL_WAIT_SECONDS = float(os.environ.get("MEDBENCH_POOL_WAIT") or 3600)


def default_tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{STATE / 'mlflow.db'}"
