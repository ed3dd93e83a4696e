"""``medbench export --to DIR``: the saved leaderboard and each cell's metrics, verified, with a manifest."""

import json

import pytest

from medbench_core.errors import DataError, IntegrityError
from medbench_core.storage import verify_manifest
from medbench_cli.export import export
from tests.cli.command import medbench
from tests.orchestration.operating_env import operated_world

pytestmark = pytest.mark.slow


def test_export_copies_the_board_and_its_metrics_and_refuses_what_it_would_clobber(tmp_path_factory, tmp_path):
    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    data = world.root / "data"
    out = tmp_path / "out"
    assert export(data, out) == 4
    manifest = verify_manifest(out)  # every exported file against its sha256
    assert manifest["kind"] == "medbench-export" and manifest["benchmark"] == "medbench-test"
    assert set(manifest["files"]) == {"leaderboard.md", "leaderboard.csv", "leaderboard.json"} | {
        f"results/{m}/{t}/{f}" for m in ("bm25", "bm25-k12") for t in ("scifact", "liveqa_medquad") for f in ("metrics.json", "per_query.parquet")
    }
    cells = json.loads((data / "reports" / "leaderboard.json").read_text())["cells"]
    source = world.resources()["store"].artifact_dir("bm25", "scifact", "metrics", cells["bm25/scifact"]["metrics_key"])
    assert (out / "results" / "bm25" / "scifact" / "metrics.json").read_bytes() == (source / "metrics.json").read_bytes()

    # An earlier export is replaced whole; any other non-empty folder is left alone.
    (out / "stray.txt").write_text("left from before")
    assert export(data, out) == 4 and not (out / "stray.txt").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="not an earlier medbench export"):
        export(data, mine)
    assert (mine / "notes.txt").read_text() == "mine"

    # A damaged metrics artifact is not exported.
    (source / "per_query.parquet").write_bytes(b"broken")
    with pytest.raises(IntegrityError, match="per_query.parquet"):
        export(data, tmp_path / "again")
    assert not (tmp_path / "again").exists()

    cli = medbench("export", "--to", str(tmp_path / "cli"), env={"MEDBENCH_DATA": str(data)})
    assert cli.returncode == 1 and "per_query.parquet" in cli.stderr


def test_export_without_a_leaderboard_says_to_run_first(tmp_path):
    cli = medbench("export", "--to", str(tmp_path / "out"), env={"MEDBENCH_DATA": str(tmp_path / "data")})
    assert cli.returncode == 1 and "no leaderboard at" in cli.stderr and "medbench run" in cli.stderr
    assert not (tmp_path / "out").exists()
