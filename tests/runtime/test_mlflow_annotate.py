"""The leaderboard's annotations of every cell's MLflow run: one search for all of them, the same runs and values.

The leaderboard annotates each (model, task) run up to three times (published, filled, contamination). Each
annotation searched MLflow for its run: about 0.1-0.5 s each on this machine, per cell (issue 53). Inside
``MLflowResource.annotating`` the runs are found in one paged search; what is logged is the same as one search per
annotation gives (each key's newest FINISHED run, a value it already holds not logged again).
"""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from runtime.resources import MLflowResource

KEYS = [f"key-{i}" for i in range(5)]


@pytest.fixture
def searches(monkeypatch) -> list[str]:
    """The filter string of every ``MlflowClient.search_runs`` call, in order."""
    calls: list[str] = []
    real = MlflowClient.search_runs

    def counting(self, experiment_ids, filter_string="", *args, **kwargs):
        calls.append(filter_string)
        return real(self, experiment_ids, filter_string, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "search_runs", counting)
    return calls


def _store(tmp_path) -> MLflowResource:
    mlflow = MLflowResource(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", artifact_root=str(tmp_path / "mlartifacts"))
    mlflow.ensure_store()
    for key in KEYS:
        mlflow.log_run("exp", key, key, {}, {"ndcg_at_10": 0.5}, {}, [])
    # key-0 replaced: its newest FINISHED run is the one annotated, the replaced one is deleted.
    mlflow.log_run("exp", "key-0", "key-0", {}, {"ndcg_at_10": 0.6}, {}, [], replace=True)
    return mlflow


def _annotate_all(mlflow: MLflowResource) -> list[str | None]:
    ids = [mlflow.annotate_run("exp", k, {"published.ndcg_at_10": 0.25 + i}, {"medbench.published_status": f"s{i}"}) for i, k in enumerate(KEYS)]
    # Twice: the values are there, nothing is logged again; a third annotation adds a tag.
    assert [mlflow.annotate_run("exp", k, {"published.ndcg_at_10": 0.25 + i}, {}) for i, k in enumerate(KEYS)] == ids
    assert [mlflow.annotate_run("exp", k, {}, {"medbench.contamination": "zero-shot"}) for k in KEYS] == ids
    assert mlflow.annotate_run("exp", "no-such-key", {"x": 1.0}, {}) is None
    return ids


def _logged(mlflow: MLflowResource, run_ids: list[str]) -> list[tuple]:
    client = mlflow.client()
    out = []
    for rid in run_ids:
        run = client.get_run(rid)
        history = client.get_metric_history(rid, "published.ndcg_at_10")
        tags = {k: v for k, v in run.data.tags.items() if k.startswith("medbench.") and k != "medbench.run_key"}
        out.append((run.data.tags["medbench.run_key"], run.data.metrics["ndcg_at_10"], [m.value for m in history], tags))
    return out


def test_annotating_every_run_asks_mlflow_once_and_logs_what_one_search_per_run_logs(tmp_path, searches):
    alone = _store(tmp_path / "alone")
    searches.clear()
    ids_alone = _annotate_all(alone)
    assert len(searches) == 16  # one search per annotation (5 + 5 + 5 + 1)

    batched = _store(tmp_path / "batched")
    searches.clear()
    with batched.annotating("exp"):
        ids = _annotate_all(batched)
    assert searches == ["attributes.status = 'FINISHED'"]  # 16 annotations, 1 search

    expected = [
        ("key-0", 0.6, [0.25], {"medbench.published_status": "s0", "medbench.contamination": "zero-shot"}),
        *((f"key-{i}", 0.5, [0.25 + i], {"medbench.published_status": f"s{i}", "medbench.contamination": "zero-shot"}) for i in range(1, 5)),
    ]
    assert _logged(alone, ids_alone) == expected
    assert _logged(batched, ids) == expected
    # A run logged while annotating drops the index: the next annotation finds the new run.
    with batched.annotating("exp"):
        batched.annotate_run("exp", "key-1", {}, {"medbench.note": "a"})
        new_id, reused = batched.log_run("exp", "key-1", "key-1", {}, {"ndcg_at_10": 0.7}, {}, [], replace=True)
        assert not reused and batched.annotate_run("exp", "key-1", {}, {"medbench.note": "b"}) == new_id
