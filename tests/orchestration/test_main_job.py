"""The main job's driver (orchestration.main): which model it loads while the tasks are prepared
in a second process, that a failed gate still refuses the task, and the MLflow store's fast path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from medbench_core.layout import Layout
from medbench_core.models import load_registry
from orchestration.main import model_to_warm
from orchestration.partitions import partition_key
from orchestration.registry_sync import sync_model_partitions
from orchestration.resources import MLflowResource
from tests.orchestration.operating_env import BM25, ROOT, curate, evaluate, new_world

pytestmark = pytest.mark.slow

MINILM = next(m for m in yaml.safe_load((ROOT / "models.yaml").read_text())["models"] if m["name"] == "all-MiniLM-L6-v2")


def test_the_model_to_load_is_the_first_dense_one_with_work_left(tmp_path):
    world = new_world(tmp_path / "w", [BM25, MINILM])
    defs = world.defs()
    layout = Layout(world.root / "data")
    specs = {s.name: s for s in load_registry(world.models_file)}
    bm25, minilm = specs["bm25"], specs["all-MiniLM-L6-v2"]
    both = ["scifact", "liveqa_medquad"]
    # Nothing curated yet: the dense model has work; BM25 never loads weights.
    assert model_to_warm([bm25, minilm], layout, both) == "all-MiniLM-L6-v2"
    assert model_to_warm([bm25], layout, both) is None
    with world.instance() as instance:
        sync_model_partitions(instance, world.resources()["registry"])
        curate(world, instance, defs, both)
        assert model_to_warm([minilm], layout, both) == "all-MiniLM-L6-v2"
        evaluate(instance, defs, partition_key("all-MiniLM-L6-v2", "scifact"))
        assert model_to_warm([minilm], layout, both) == "all-MiniLM-L6-v2"  # liveqa still to do
        assert model_to_warm([minilm], layout, ["scifact"]) is None
        assert model_to_warm([minilm], layout, ["scifact"], force=True) == "all-MiniLM-L6-v2"
        evaluate(instance, defs, partition_key("all-MiniLM-L6-v2", "liveqa_medquad"))
        assert model_to_warm([bm25, minilm], layout, both) is None


def test_a_failed_gate_refuses_its_task_although_the_model_was_loaded_beside_it(tmp_path):
    world = new_world(tmp_path / "w", [BM25, MINILM])
    # liveqa_medquad's questions carry a licence outside the allowlist: its contract fails.
    catalogue = (world.root / "tasks.yaml").read_text().replace("path: lq, split: test, query_licence: CC-BY-4.0", "path: lq, split: test, query_licence: unknown")
    (world.root / "tasks.yaml").write_text(catalogue)
    env = _main_env(world, tmp_path)
    argv = [sys.executable, "-m", "orchestration.main", "--tasks", "scifact,liveqa_medquad"]
    out = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    # The failed contract fails liveqa's curation run, and so the main job.
    assert out.returncode == 1 and out.stderr.rstrip().endswith("FAILED: curated_task[liveqa_medquad]"), out.stderr[-3000:]
    log = out.stdout
    assert "[warm-up] all-MiniLM-L6-v2 loaded while the tasks are prepared" in log
    assert "[curate] liveqa_medquad         FAILED" in log and "[curate] scifact                ok" in log
    assert "[evaluate] all-MiniLM-L6-v2         x scifact" in log and "x liveqa_medquad" not in log
    # The store the child created is ready, and nothing was encoded for the refused task.
    assert (world.root / "state" / ".mlflow.db.ready").is_file()
    artifacts = world.root / "data" / "artifacts" / "all-MiniLM-L6-v2"
    assert (artifacts / "scifact" / "embeddings").is_dir()
    assert not (artifacts / "liveqa_medquad").exists(), "encoded a task whose gate failed"
    board = (world.root / "data" / "reports" / "leaderboard.md").read_text()
    minilm_row = next(line for line in board.splitlines() if line.startswith("| all-MiniLM-L6-v2"))
    assert minilm_row.split("|")[2].strip() != "-" and minilm_row.split("|")[3].strip() == "-"

    # Run again: nothing left to compute, so no model is loaded and nothing runs beside.
    again = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 1, again.stderr[-3000:]
    assert "[warm-up]" not in again.stdout and "x scifact                ok (cached)" in again.stdout
    assert not (artifacts / "liveqa_medquad").exists()


def _main_env(world, tmp_path: Path) -> dict[str, str]:
    (tmp_path / "shared_root").mkdir(exist_ok=True)
    if not (tmp_path / "shared_root" / "data").exists():
        (tmp_path / "shared_root" / "data").symlink_to(world.shared)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDBENCH_") and k != "MLFLOW_TRACKING_URI"}
    env.update(
        PYTHONPATH=str(ROOT), DAGSTER_HOME=str(world.dagster_home), MEDBENCH_SHARED=str(tmp_path / "shared_root"),
        MEDBENCH_DATA=str(world.root / "data"), MEDBENCH_STATE=str(world.root / "state"),
        MEDBENCH_MODELS=str(world.models_file), MEDBENCH_TASKS=str(world.root / "tasks.yaml"),
    )
    return env


def test_a_model_that_cannot_load_fails_its_partitions_not_the_preparation(tmp_path):
    broken = {"name": "broken-folder", "kind": "sentence-transformers", "path": str(tmp_path / "no-such-model"), "revision": "x"}
    world = new_world(tmp_path / "w", [broken, BM25])
    argv = [sys.executable, "-m", "orchestration.main", "--tasks", "scifact,liveqa_medquad"]
    out = subprocess.run(argv, env=_main_env(world, tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 1
    assert "[warm-up] broken-folder could not be loaded" in out.stdout
    assert "[curate] scifact                ok" in out.stdout and "[curate] liveqa_medquad         ok" in out.stdout
    assert "x scifact                FAILED" in out.stdout and "[evaluate] bm25                     x scifact                ok" in out.stdout
    assert out.stderr.rstrip().endswith("FAILED: broken-folder|scifact, broken-folder|liveqa_medquad"), out.stderr[-2000:]
    board = (world.root / "data" / "reports" / "leaderboard.md").read_text()
    assert "| broken-folder | - | - |" in board and "| bm25 | 1.0000 |" in board, board


FAST_PATH = """
import sys
from orchestration.resources import MLflowResource
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

    from orchestration import resources, settings

    monkeypatch.setattr(settings, "CACHE", tmp_path / "cache")
    monkeypatch.chdir(tmp_path)  # the default experiment's artifact location is relative to the working directory
    MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'own.db'}").search_experiments()
    resources.MLflowResource(tracking_uri=f"sqlite:///{tmp_path / 'ours.db'}").ensure_store()
    assert resources.mlflow_schema().parent == tmp_path / "cache" / "mlflow-schema"
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

    from orchestration import resources, settings

    monkeypatch.setattr(settings, "CACHE", tmp_path / "cache")
    schema = resources.mlflow_schema()
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
        schema, tmp_path / "no_check.db", "PRAGMA writable_schema = ON",
        f"UPDATE sqlite_master SET sql = '{without.replace(chr(39), chr(39) * 2)}' WHERE name = 'runs'",
    )
    no_column = _altered_copy(schema, tmp_path / "no_column.db", "ALTER TABLE runs DROP COLUMN deleted_time")
    base = _schema(schema)
    for altered in (no_index, no_check, no_column):
        assert _schema(altered) != base, altered.name
    assert [i for i in base["tables"]["metrics"]["indices"] if i[0] == index] and not [i for i in _schema(no_index)["tables"]["metrics"]["indices"] if i[0] == index]
    assert len(_schema(no_check)["tables"]["runs"]["checks"]) == len(base["tables"]["runs"]["checks"]) - 1
