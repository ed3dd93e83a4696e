"""``medbench export --to DIR``: the saved leaderboard and each cell's metrics, verified, with a manifest."""

import json

import polars as pl
import pytest

from medbench_cli.export import export
from medbench_core.errors import DataError, IntegrityError
from medbench_core.storage import verify_manifest
from tests.cli.command import medbench
from tests.orchestration.operating_env import operated_world

pytestmark = pytest.mark.slow


def test_export_copies_the_board_and_its_metrics_and_refuses_what_it_would_clobber(tmp_path_factory, tmp_path):
    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    data = world.root / "data"
    out = tmp_path / "out"
    assert export(data, out, world.root / "models.yaml") == 4
    manifest = verify_manifest(out)  # every exported file against its sha256
    assert manifest["kind"] == "medbench-export" and manifest["benchmark"] == "medbench-test"
    models, tasks = ("bm25", "bm25-k12"), ("scifact", "liveqa_medquad")
    assert set(manifest["files"]) == (
        {"leaderboard.md", "leaderboard.csv", "leaderboard.json", "stats.csv", "heatmap.png", "index.json"}
        | {f"diff/{t}/bm25-k12.png" for t in tasks}  # each model against the baseline bm25, per task
        | {f"metrics/{m}/{t}/{f}" for m in models for t in tasks for f in ("metrics.json", "per_query.parquet")}
        | {f"results/medbench__{m}/bm25s-lucene/{f}" for m in models for f in ("model_meta.json", "scifact.json", "liveqa_medquad.json")}
        | {f"trec/{m}/{t}.trec" for m in models for t in tasks}
        | {f"trust/{m}.png" for m in models}  # what each cell rests on, per model (docs/trust.md)
    )
    cells = json.loads((data / "reports" / "leaderboard.json").read_text())["cells"]
    store = world.resources()["store"]
    source = store.artifact_dir("bm25", "scifact", "metrics", cells["bm25/scifact"]["metrics_key"])
    assert (out / "metrics" / "bm25" / "scifact" / "metrics.json").read_bytes() == (source / "metrics.json").read_bytes()
    # The bundled tasks are no MTEB tasks: they keep medbench's names, and the manifest says so.
    assert manifest["mteb"]["not_mteb_tasks"] == ["liveqa_medquad", "scifact"]
    assert manifest["mteb"]["models"] == {"bm25": "medbench/bm25", "bm25-k12": "medbench/bm25-k12"}
    for m in models:
        for t in tasks:
            # The MTEB result carries the stored means under MTEB's fields; the TREC run is the stored one, byte for byte.
            stored = json.loads((store.artifact_dir(m, t, "metrics", cells[f"{m}/{t}"]["metrics_key"]) / "metrics.json").read_text())
            doc = json.loads((out / "results" / f"medbench__{m}" / "bm25s-lucene" / f"{t}.json").read_text())
            (scores,) = doc["scores"]["test"]  # the tiny catalogue's split
            assert doc["task_name"] == t and doc["mteb_version"] is None and doc["dataset_revision"] == store.load_task(t).content_hash()
            assert scores["main_score"] == scores["ndcg_at_10"] == stored["mean"]["ndcg_at_10"] and scores["hf_subset"] == "default"
            assert scores["languages"] == ["eng-Latn"]
            # bpref and condensed nDCG: the mean over the queries whose qrels hold a judged non-relevant document, absent
            # where none does (docs/trust.md); worked out here from the stored per-query values and qrels.
            holes = ("bpref_at_100", "ndcg_condensed_at_10")
            assert {k: scores[k] for k in stored["mean"] if k not in holes} == {k: v for k, v in stored["mean"].items() if k not in holes}
            per_query = pl.read_parquet(store.artifact_dir(m, t, "metrics", cells[f"{m}/{t}"]["metrics_key"]) / "per_query.parquet")
            qrels = store.load_task(t).qrels
            with_nonrel = set(qrels.filter(pl.col("relevance") == 0).get_column("query_id").cast(pl.Utf8).to_list())
            kept = per_query.filter(pl.col("query_id").cast(pl.Utf8).is_in(sorted(with_nonrel)))
            for h in holes:
                if kept.height == 0:
                    assert h not in scores
                elif kept.height == per_query.height:
                    assert scores[h] == stored["mean"][h]
                else:
                    assert scores[h] == pytest.approx(kept.get_column(h).mean(), abs=1e-12)
            assert doc["medbench"]["provenance"]["metrics_key"] == cells[f"{m}/{t}"]["metrics_key"]
            run = store.artifact_dir(m, t, "run", cells[f"{m}/{t}"]["run_key"])
            assert (out / "trec" / m / f"{t}.trec").read_bytes() == (run / "run.trec").read_bytes()
    meta = json.loads((out / "results" / "medbench__bm25" / "bm25s-lucene" / "model_meta.json").read_text())
    assert (meta["name"], meta["revision"], meta["framework"], meta["model_type"]) == ("medbench/bm25", "bm25s-lucene", [], ["sparse"])
    first = (out / "trec" / "bm25" / "scifact.trec").read_text().splitlines()[0].split()
    assert first[1] == "Q0" and first[3] == "1" and first[5] == "medbench-bm25"  # qid Q0 docid rank score tag

    # An earlier export is replaced whole when it holds only its own files; any other non-empty folder is left alone.
    assert export(data, out, world.root / "models.yaml") == 4 and verify_manifest(out)["files"] == manifest["files"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="not an earlier medbench export"):
        export(data, mine, world.root / "models.yaml")
    assert (mine / "notes.txt").read_text() == "mine"

    # A damaged metrics artifact is not exported.
    (source / "per_query.parquet").write_bytes(b"broken")
    with pytest.raises(IntegrityError, match="per_query.parquet"):
        export(data, tmp_path / "again", world.root / "models.yaml")
    assert not (tmp_path / "again").exists()

    cli = medbench("export", "--to", str(tmp_path / "cli"), env={"MEDBENCH_DATA": str(data)})
    assert cli.returncode == 1 and "per_query.parquet" in cli.stderr


def test_export_without_a_leaderboard_says_to_run_first(tmp_path):
    cli = medbench("export", "--to", str(tmp_path / "out"), env={"MEDBENCH_DATA": str(tmp_path / "data")})
    assert cli.returncode == 1 and "no leaderboard at" in cli.stderr and "medbench run" in cli.stderr
    assert not (tmp_path / "out").exists()


def test_export_over_an_earlier_one_replaces_only_its_own_files_and_refuses_to_delete_anything_else(tmp_path_factory, tmp_path):
    """Issue 44, item 5: `export --to out; echo work > out/analysis.md; export --to out` deleted analysis.md (exit 0)."""
    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    env = {"MEDBENCH_DATA": str(world.root / "data"), "MEDBENCH_MODELS": str(world.root / "models.yaml")}
    out = tmp_path / "out"
    assert medbench("export", "--to", str(out), env=env).returncode == 0
    exported = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    cases = {
        "analysis.md": lambda: (out / "analysis.md").write_text("work\n"),  # the case
        "metrics/bm25/my-notes.txt": lambda: (out / "metrics" / "bm25" / "my-notes.txt").write_text("mine\n"),  # inside the export's folders
        "leaderboard.md (changed since it was exported)": lambda: (out / "leaderboard.md").write_text("my edits\n"),
        "mine/ (an empty folder)": lambda: (out / "mine").mkdir(),
        "shared (a link)": lambda: (out / "shared").symlink_to(tmp_path),
    }
    for name, make in cases.items():
        before_leaderboard = (out / "leaderboard.md").read_bytes()
        make()
        held = {p.relative_to(out): (p.read_bytes() if p.is_file() and not p.is_symlink() else None) for p in out.rglob("*")}

        proc = medbench("export", "--to", str(out), env=env)

        assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
        last = proc.stderr.strip().splitlines()
        assert len(last) == 1 and f"{out} holds 1 thing(s) the earlier export there did not write: {name}" in last[0], (name, last)
        assert "move them out, or export to a new folder" in last[0]
        assert {p.relative_to(out): (p.read_bytes() if p.is_file() and not p.is_symlink() else None) for p in out.rglob("*")} == held, name
        # Moved out again, the export replaces its own files.
        target = out / name.split(" (")[0].rstrip("/")
        if target.is_symlink() or target.is_file():
            target.unlink()
        else:
            target.rmdir()
        if name.startswith("leaderboard.md"):
            (out / "leaderboard.md").write_bytes(before_leaderboard)
    assert medbench("export", "--to", str(out), env=env).returncode == 0
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == exported


def test_export_site_writes_the_pages_of_the_saved_leaderboard_with_each_cells_mlflow_run(tmp_path_factory, tmp_path):
    world = operated_world(tmp_path_factory).copy_to(tmp_path / "w")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(world.shared)  # MEDBENCH_SHARED holds data/
    env = {
        "MEDBENCH_SHARED": str(tmp_path / "shared"), "MEDBENCH_DATA": str(world.root / "data"), "MEDBENCH_STATE": str(world.root / "state"),
        "MEDBENCH_MODELS": str(world.models_file),
        "MEDBENCH_TASKS": str(world.root / "tasks.yaml"), "MLFLOW_TRACKING_URI": f"sqlite:///{world.root / 'mlflow.db'}",
    }  # fmt: skip
    site = tmp_path / "site"
    cli = medbench("export", "--site", str(site), env=env)
    assert cli.returncode == 0 and f"wrote the leaderboard's site to {site}" in cli.stdout, cli.stderr
    index = (site / "index.html").read_text()
    client = world.resources()["mlflow"].client()
    experiment = client.get_experiment_by_name("medbench-test").experiment_id
    for name, prov in json.loads((world.root / "data" / "reports" / "leaderboard.json").read_text())["cells"].items():
        (run,) = client.search_runs([experiment], filter_string=f"tags.`medbench.run_key` = '{prov['metrics_key']}'")
        assert f"/#/experiments/{experiment}/runs/{run.info.run_id}" in index, name
    # Its task pages read the stored provenance: the curated task's manifest and the catalogue's source files.
    task = (site / "tasks" / "scifact.html").read_text()
    assert json.loads((world.root / "data" / "tasks" / "scifact" / "MANIFEST.json").read_text())["files"]["qrels.parquet"]["sha256"] in task
    assert "corpus.jsonl" in task and "beir" in task
    # A folder that is not a site is refused (a usage error) and left alone; --to or --site is needed.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    refused = medbench("export", "--site", str(tmp_path / "mine"), env=env)
    assert refused.returncode == 2 and "is not a medbench site" in refused.stderr and (tmp_path / "mine" / "notes.txt").read_text() == "mine"
    assert medbench("export", env=env).returncode == 2
