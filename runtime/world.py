"""Which project state a Dagster run wrote into: its data root and its MLflow store, as run tags.

One Dagster instance may serve several project states (a DAGSTER_HOME set on purpose for two checkouts, or
two MEDBENCH_STATE folders of one checkout sharing it): a partition's status in the instance is then that of
whichever state ran it last. A run is tagged with the data root and the MLflow store it writes into, as it is
launched by the command line (medbench_cli/inprocess.py) and by every partition step that runs
(assets/stage.py, assets/metrics.py: so are the runs the UI, a schedule or a sensor launches); the leaderboard
of one state reads only the runs of that state, or runs that name none (issue 44.7).
"""

from __future__ import annotations

import re
from pathlib import Path

DATA_TAG = "medbench/data"
MLFLOW_TAG = "medbench/mlflow"
WORLD_TAGS = (DATA_TAG, MLFLOW_TAG)


def data_identity(root: str | Path) -> str:
    """The data root as one path whatever spelled it (relative, through a link)."""
    return str(Path(root).expanduser().resolve())


def mlflow_identity(tracking_uri: str) -> str:
    """The MLflow store: a SQLite file's resolved path, or a server's URL without credentials."""
    if tracking_uri.startswith("sqlite:///"):
        return "sqlite:///" + str(Path(tracking_uri[len("sqlite:///") :]).expanduser().resolve())
    return re.sub(r"//[^/@]*@", "//", tracking_uri)


def world_tags(data_root: str | Path | None = None, tracking_uri: str | None = None) -> dict[str, str]:
    """The tags naming a state: those given (a step that has no MLflow store names only its data root)."""
    tags = {}
    if data_root is not None:
        tags[DATA_TAG] = data_identity(data_root)
    if tracking_uri is not None:
        tags[MLFLOW_TAG] = mlflow_identity(tracking_uri)
    return tags


def foreign(run_tags: dict[str, str], ours: dict[str, str]) -> bool:
    """Whether a run with ``run_tags`` wrote into another state than ``ours``: it names a data root or store that
    differs (a run that names none, from before these tags or launched bare, is not told apart)."""
    return any(run_tags.get(k) not in (None, v) for k, v in ours.items())


def tag_run(instance, run_id: str, tags: dict[str, str]) -> None:
    """Add ``tags`` to the run, unless it already carries them (one write per run and tag, not per step)."""
    run = instance.get_run_by_id(run_id)
    missing = {k: v for k, v in tags.items() if run is None or run.tags.get(k) != v}
    if run is not None and missing:
        instance.add_run_tags(run_id, missing)
