"""M3Retrieve as published runs through ``medbench run`` from a tasks.yaml entry alone (issue 22, "Done
when"): curated with its captions and the images out of images.zip, gated, evaluated by BM25 (on the
captions, equal to bm25s + pytrec_eval) and by a CLIP model (on caption and image)."""

from __future__ import annotations

import json
import re

import pytest
import pytrec_eval

from medbench_core.layout import Layout
from tests.cli.test_run import _main_env
from tests.core.reader_fixtures import DISCIPLINES, bare_bm25, write_release
from tests.forked import python_m
from tests.orchestration.operating_env import BM25, new_world

pytestmark = pytest.mark.slow

TINY_CLIP = {
    "name": "tiny-clip-random",
    "kind": "open_clip",
    "revision": "random-seed-0",
    "settings": {"architecture": "medbench-tiny-clip", "seed": 0, "fusion": "score", "fusion_weight": 0.5},
}


def test_an_m3retrieve_entry_runs_to_the_leaderboard_with_captions_and_images(tmp_path):
    world = new_world(tmp_path / "w", [BM25, TINY_CLIP])
    write_release(world.shared / "M3Retrieve")
    catalogue = (world.root / "tasks.yaml").read_text().replace("licence_allowlist: [", "licence_allowlist: [CC-BY-SA-4.0, ")
    catalogue += "  - {name: m3r, reader: m3retrieve, path: M3Retrieve, subsets: [Cardiology]}\n"
    (world.root / "tasks.yaml").write_text(catalogue)
    out = python_m("medbench_cli", "run", "--tasks", "m3r_cardiology", env=_main_env(world, tmp_path), timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    for line in (r"\[curate\] m3r_cardiology\s+ok", r"\[evaluate\] bm25\s+x m3r_cardiology\s+ok", r"\[evaluate\] tiny-clip-random\s+x m3r_cardiology\s+ok"):
        assert re.search(line, out.stdout), (line, out.stdout)

    task = Layout(world.root / "data").load_task("m3r_cardiology")
    captions = {q: c for q, c, _ in DISCIPLINES["Cardiology"]["queries"]}
    assert dict(task.queries.select("query_id", "text").iter_rows()) == captions
    assert task.queries["image"].null_count() == 0 and set(task.queries["modality"]) == {"both"}
    assert all(task.resolve_image(r).is_file() for r in task.queries["image"])  # the images are in the curated task
    assert task.meta.licences == ("CC-BY-SA-4.0",) and not task.meta.research_only

    qrels, bare = bare_bm25("Cardiology", world.shared / "M3Retrieve")
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate({q: {d: s for d, s in r.items() if s > 0} for q, r in bare.items()})
    expected = sum(v["ndcg_cut_10"] for v in ref.values()) / len(qrels)
    saved = json.loads((world.root / "data" / "reports" / "leaderboard.json").read_text())
    cells = saved["cells"]
    metrics = world.root / "data" / "artifacts" / "bm25" / "m3r_cardiology" / "metrics" / cells["bm25/m3r_cardiology"]["metrics_key"] / "metrics.json"
    assert json.loads(metrics.read_text())["mean"]["ndcg_at_10"] == pytest.approx(expected, abs=1e-9)
    assert "tiny-clip-random/m3r_cardiology" in cells and cells["tiny-clip-random/m3r_cardiology"].get("metrics_key")
