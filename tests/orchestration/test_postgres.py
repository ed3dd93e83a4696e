"""The production profile on a real PostgreSQL server (Debian's postgresql), started and stopped here.

initdb into a tmp folder (as the ``postgres`` user when running as root: PostgreSQL refuses to
run as root), password authentication on 127.0.0.1 and a free port, then the production
dagster.yaml with DAGSTER_PG_* pointing at it: one partitioned materialisation, one model x task
evaluation (dynamic partitions in PostgreSQL), read back with a plain PostgreSQL client.
"""

import shutil

import dagster as dg
import pytest

from orchestration.registry_sync import sync_model_partitions
from runtime.partitions import partition_key
from tests.orchestration.distributed_env import PG_DB, PG_PASSWORD, PG_USER, postgres_server
from tests.orchestration.operating_env import BM25, ROOT, curate, evaluate, new_world

pytestmark = [pytest.mark.server, pytest.mark.slow]

USER, PASSWORD, DB = PG_USER, PG_PASSWORD, PG_DB


@pytest.fixture
def postgres():
    """A PostgreSQL cluster on 127.0.0.1:<free port> with database ``medbench``; stopped and removed afterwards."""
    with postgres_server() as pg:
        yield pg


def test_a_partitioned_materialisation_against_the_production_profile(postgres, tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "production" / "dagster.yaml", home / "dagster.yaml")
    for k, v in {"DAGSTER_PG_HOST": postgres["host"], "DAGSTER_PG_PORT": str(postgres["port"]), "DAGSTER_PG_DB": DB,
                 "DAGSTER_PG_USER": USER, "DAGSTER_PG_PASSWORD": PASSWORD, "MEDBENCH_COMPUTE_LOGS": str(tmp_path / "logs")}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    world = new_world(tmp_path / "w", [BM25])
    defs = world.defs()

    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"

        curate(world, instance, defs, ["scifact"])
        sync_model_partitions(instance, world.resources()["registry"])
        evaluate(instance, defs, partition_key("bm25", "scifact"))
        assert instance.get_materialized_partitions(dg.AssetKey("curated_task")) == {"scifact"}
        assert instance.get_materialized_partitions(dg.AssetKey("task_metrics")) == {"bm25|scifact"}
        run_ids = [r.run_id for r in instance.get_runs()]

    # The rows are in PostgreSQL itself, read back with a plain client.
    import psycopg2

    with psycopg2.connect(host=postgres["host"], port=postgres["port"], user=USER, password=PASSWORD, dbname=DB) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT partition FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION' AND asset_key = %s ORDER BY partition", ('["curated_task"]',)
        )
        assert [r[0] for r in cur.fetchall()] == ["scifact"]
        cur.execute("SELECT partition FROM dynamic_partitions WHERE partitions_def_name = 'models'")
        assert [r[0] for r in cur.fetchall()] == ["bm25"]
        cur.execute("SELECT run_id, status FROM runs")
        assert sorted(cur.fetchall()) == sorted((r, "SUCCESS") for r in run_ids) and len(run_ids) == 3  # curation, overlap check, evaluation


def test_the_production_executor_is_dagsters_celery_executor(monkeypatch):
    from orchestration import definitions
    from runtime import settings

    monkeypatch.setattr(settings, "EXECUTOR", "celery")
    monkeypatch.setattr(settings, "CELERY_BROKER", "pyamqp://medbench@mq.internal//")
    celery = definitions.executor()
    assert celery.name == "celery" and celery.executor_creation_fn.__module__.startswith("dagster_celery")
    monkeypatch.setattr(settings, "EXECUTOR", "multiprocess")
    local = definitions.executor()  # Dagster's multiprocess executor (in-process for execute_in_process), steps from a forkserver
    assert local.name == "multi_or_in_process_executor" and local.executor_creation_fn.__module__.startswith("dagster")
    monkeypatch.setattr(settings, "EXECUTOR", "k8s")
    assert definitions.executor().name == "k8s"  # dagster-k8s' k8s_job_executor (tests/orchestration/test_k8s_profile.py)
    # Any other value is refused where it is read, before definitions exist (tests/runtime/test_settings.py).
