"""How medbench's experiments look in MLflow's UI (issue 29.7), as MLflow 3.17's UI decides it.

Read from mlflow/server/js (3.17.2's bundle in the venv, and its sources):

- An experiment's kind is the tag ``mlflow.experimentKind``; ``custom_model_development`` is a
  classic machine-learning one (the UI's "Machine learning"), ``genai_development`` a GenAI one.
  medbench's experiments are created with the former. MLflow 3.17's own UI, however, opens every
  experiment in the view of a global "workflow type" kept in the browser (localStorage key
  :data:`WORKFLOW_KEY`, "genai" until the user switches; ``?workflowType=`` in the URL overrides it),
  not by that tag: hence the empty GenAI overview ("0 traces") a new user saw.
- The runs table shows the columns of the experiment page's saved state (localStorage, per
  experiment: :func:`persisted_state_key`), by default Source, Models and Dataset: no metric. A
  saved view is an experiment tag ``mlflow.sharedViewState.<id>`` (:data:`VIEW_TAG`) holding
  ``{"name", "createdAt", "state"}``, listed under "Views" and opened at ``?viewStateShareKey=<id>``.

- On a local server's first page, the MLflow Assistant's panel opens by itself (localStorage
  :data:`ASSISTANT_OPENED_KEY` records that it did).

So each medbench experiment carries a saved view whose columns are its metrics (the task's main
metric first, sorted best first), and the MLflow UI that ``medbench ui`` starts makes, in a browser
that never chose, the classic workflow and that view the first state, without the assistant's
panel opening by itself (medbench_cli/webserver.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
CLASSIC_ML = "custom_model_development"
VIEW_ID = "medbench"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_ID}"
VIEW_NAME = "medbench: metrics"
WORKFLOW_KEY = "mlflow.workflowType_v1"  # useWorkflowType: key "mlflow.workflowType", version 1, JSON value
# The assistant panel opens by itself on a local server's first page unless this says it already did.
ASSISTANT_OPENED_KEY = "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"


def persisted_state_key(experiment_id: str) -> str:
    """The localStorage key of the experiment page's saved state for one experiment (LocalStorageUtils 1.1, "ExperimentPage")."""
    return "-".join(("MLflowLocalStorage", "1.1", "ExperimentPage", json.dumps([experiment_id]), "ReactComponentState"))


def view_state(columns: Sequence[str]) -> dict:
    """The runs table showing the metric ``columns``, sorted by the first, best first (column keys as
    MLflow writes them: ``metrics.`<key>```, makeCanonicalSortKey)."""
    return {"selectedColumns": [f"metrics.`{c}`" for c in columns], "orderByKey": f"metrics.`{columns[0]}`", "orderByAsc": False}


def runs_view(columns: Sequence[str], current: str | None = None) -> str:
    """The value of :data:`VIEW_TAG` for :func:`view_state` of ``columns``. ``current``, the tag as it is, keeps
    its creation time, so that an unchanged view is the same string and is not written again."""
    created = 0
    try:
        created = int(json.loads(current)["createdAt"]) if current else 0
    except (ValueError, KeyError, TypeError):
        pass
    return json.dumps({"name": VIEW_NAME, "createdAt": created or int(time.time() * 1000), "state": json.dumps(view_state(columns))})


def saved_state(tag_value: str) -> str | None:
    """The view state JSON inside a :data:`VIEW_TAG` value, None when it does not read as one."""
    try:
        state = json.loads(tag_value)["state"]
        json.loads(state)
    except (ValueError, KeyError, TypeError):
        return None
    return state
