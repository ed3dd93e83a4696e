"""The MLflow store's creation (runtime/mlflow_store.py): the ready-marker fast path, and a store copied
from the cached empty schema equal to one MLflow creates itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.mlflow_store import MLflowResource
from tests.orchestration.operating_env import ROOT

pytestmark = pytest.mark.slow


FAST_PATH = """
import sys
from runtime.mlflow_store import MLflowResource
MLflowResource(tracking_uri=sys.argv[1]).ensure_store()
print("mlflow imported" if "mlflow" in sys.modules else "mlflow not imported")
"""


def test_a_ready_store_is_not_migrated_again_and_an_unfinished_one_is_completed(tmp_path):
    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    MLflowResource(tracking_uri=uri).ensure_store()
    marker = tmp_path / ".mlflow.db.ready"
    from importlib.metadata import version

    assert marker.read_text().strip() == version("mlflow")

    def ensure_in_new_process() -> str:
        out = subprocess.run([sys.executable, "-c", FAST_PATH, uri], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout.strip().splitlines()[-1]

    assert ensure_in_new_process() == "mlflow not imported"
    # A creation killed before the marker was written: the next one lets MLflow finish it.
    marker.unlink()
    assert ensure_in_new_process() == "mlflow imported"
    assert marker.is_file()
    # A marker from another MLflow version does not count either.
    marker.write_text("0.0.1\n")
    assert ensure_in_new_process() == "mlflow imported"
    assert marker.read_text().strip() == version("mlflow")


LAZY = """
import sys
from runtime.mlflow_store import MLflowResource
store = MLflowResource(tracking_uri=sys.argv[1])
store.ensure_store(open_now=False)
print("mlflow imported" if "mlflow" in sys.modules else "mlflow not imported")
"""


def test_a_store_opened_later_is_completed_by_the_first_client(tmp_path):
    # ensure_store(open_now=False) (medbench run) copies the schema without importing MLflow; the first
    # client, in any process, lets MLflow open it under the store's lock and writes the ready marker.
    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    out = subprocess.run([sys.executable, "-c", LAZY, uri], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "mlflow not imported"
    marker = tmp_path / ".mlflow.db.ready"
    assert db.is_file() and not marker.exists()
    experiments = MLflowResource(tracking_uri=uri).client().search_experiments()
    assert [e.name for e in experiments] == ["Default"] and marker.is_file()
    MLflowResource(tracking_uri=uri).ensure_store()  # ready: nothing to do
    assert [e.name for e in MLflowResource(tracking_uri=uri).client().search_experiments()] == ["Default"]


def _schema(db: Path) -> dict:
    """The store's schema by meaning: the same whatever order MLflow's migrations emitted the DDL in.

    Per table: columns in order with type, nullability and default; primary key; foreign keys,
    indices, unique and CHECK constraints as sorted sets (their order in the DDL text varies with
    the hash seed). Triggers and views by their SQL; the alembic head and the experiments' rows.
    """
    import sqlite3

    import sqlalchemy

    def norm(sql) -> str:
        return " ".join(str(sql or "").split())

    engine = sqlalchemy.create_engine(f"sqlite:///{db}")
    try:
        insp = sqlalchemy.inspect(engine)
        tables = {}
        for t in sorted(insp.get_table_names()):
            tables[t] = {
                "columns": [(c["name"], str(c["type"]), c["nullable"], norm(c["default"]), c.get("autoincrement")) for c in insp.get_columns(t)],
                "primary_key": insp.get_pk_constraint(t)["constrained_columns"],
                "foreign_keys": sorted(
                    (tuple(f["constrained_columns"]), f["referred_table"], tuple(f["referred_columns"]), tuple(sorted(f["options"].items())))
                    for f in insp.get_foreign_keys(t)
                ),
                "indices": sorted((i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in insp.get_indexes(t)),
                "unique": sorted((str(u["name"]), tuple(u["column_names"])) for u in insp.get_unique_constraints(t)),
                "checks": sorted((str(c["name"]), norm(c["sqltext"])) for c in insp.get_check_constraints(t)),
            }
    finally:
        engine.dispose()
    with sqlite3.connect(db) as con:
        return {
            "tables": tables,
            "other": sorted((k, n, norm(sql)) for k, n, sql in con.execute("SELECT type, name, sql FROM sqlite_master WHERE type IN ('trigger', 'view')")),
            "alembic": con.execute("SELECT version_num FROM alembic_version").fetchall(),
            "experiments": con.execute("SELECT experiment_id, name, artifact_location, lifecycle_stage FROM experiments").fetchall(),
        }


def test_a_store_copied_from_the_schema_is_the_store_mlflow_makes(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from runtime import mlflow_store, settings

    monkeypatch.setattr(settings, "CACHE", tmp_path / "cache")
    monkeypatch.chdir(tmp_path)  # the default experiment's artifact location is relative to the working directory
    MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'own.db'}").search_experiments()
    mlflow_store.MLflowResource(tracking_uri=f"sqlite:///{tmp_path / 'ours.db'}").ensure_store()
    assert mlflow_store.mlflow_schema().parent == tmp_path / "cache" / "mlflow-schema"
    own, ours = _schema(tmp_path / "own.db"), _schema(tmp_path / "ours.db")
    assert len(own["tables"]) > 20 and [e[1] for e in own["experiments"]] == ["Default"]
    assert sum(len(t["indices"]) for t in own["tables"].values()) > 10
    assert ("source_type", "source_type IN ('NOTEBOOK', 'JOB', 'LOCAL', 'UNKNOWN', 'PROJECT')") in own["tables"]["runs"]["checks"]
    assert ours == own


def _altered_copy(db: Path, out: Path, *statements: str) -> Path:
    import shutil
    import sqlite3

    shutil.copyfile(db, out)
    with sqlite3.connect(out) as con:
        for sql in statements:
            con.execute(sql)
    return out


def test_the_schema_comparison_sees_a_missing_index_constraint_or_column(tmp_path, monkeypatch):
    """The comparison above keeps its power: one index, CHECK constraint or column less is a different schema."""
    import sqlite3

    from runtime import mlflow_store, settings

    monkeypatch.setattr(settings, "CACHE", tmp_path / "cache")
    schema = mlflow_store.mlflow_schema()
    assert _schema(_altered_copy(schema, tmp_path / "same.db")) == _schema(schema)
    with sqlite3.connect(schema) as con:
        index = con.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'metrics' AND sql IS NOT NULL").fetchone()[0]
        runs_sql = con.execute("SELECT sql FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    no_index = _altered_copy(schema, tmp_path / "no_index.db", f"DROP INDEX {index}")
    # SQLite cannot drop a constraint: rewrite the table's stored DDL without it, as a bad migration would leave it.
    check = "CONSTRAINT source_type CHECK"
    assert check in runs_sql
    start = end = runs_sql.index(check)
    depth = 0
    for end in range(runs_sql.index("(", start), len(runs_sql)):  # to the CHECK's balancing parenthesis
        depth += {"(": 1, ")": -1}.get(runs_sql[end], 0)
        if depth == 0:
            break
    end += 1
    without = runs_sql[:start].rstrip().rstrip(",") + runs_sql[end:]
    no_check = _altered_copy(
        schema,
        tmp_path / "no_check.db",
        "PRAGMA writable_schema = ON",
        f"UPDATE sqlite_master SET sql = '{without.replace(chr(39), chr(39) * 2)}' WHERE name = 'runs'",
    )
    no_column = _altered_copy(schema, tmp_path / "no_column.db", "ALTER TABLE runs DROP COLUMN deleted_time")
    base = _schema(schema)
    for altered in (no_index, no_check, no_column):
        assert _schema(altered) != base, altered.name
    assert [i for i in base["tables"]["metrics"]["indices"] if i[0] == index] and not [
        i for i in _schema(no_index)["tables"]["metrics"]["indices"] if i[0] == index
    ]
    assert len(_schema(no_check)["tables"]["runs"]["checks"]) == len(base["tables"]["runs"]["checks"]) - 1
