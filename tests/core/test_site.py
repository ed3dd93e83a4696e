"""The leaderboard's static site (medbench_core.site), read back as HTML: every cell with its figure, CI and mark,
the average over the tasks every shown model reads, every metric and breakdown of a task, per-query plots with
their CSV, the model's provenance and command, extra fields a later stage adds, hostile names as text, and the
versions side by side with why a cell moved. Values are those of tests/core/site_world.py, worked out by hand.
The same pages in a real browser: tests/orchestration/test_site_browser.py."""

import json

import lxml.html
import polars as pl
import pytest

from medbench_core.errors import DataError
from medbench_core.site import SiteInputs, UiLinks, build_site
from medbench_core.site.build import average, common_tasks
from medbench_core.site.gather import gather, slug
from tests.core.site_world import add_to_stats, build_world


def page(path):
    return lxml.html.fromstring(path.read_text())


def cell(doc, model: str, task: str):
    (row,) = [r for r in doc.xpath('//table[@id="overview"]/tbody/tr') if r.get("data-model") == model]
    (td,) = [td for td in row.xpath("./td") if td.get("data-task") == task]
    return td


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    world = build_world(root / "w")
    links = UiLinks("http://127.0.0.1:3999", "http://127.0.0.1:5999")
    runs = {"key-dense-t1": {"run_id": "abc123", "experiment_id": "7"}}
    out = build_site(root / "site", SiteInputs(world.board, data_root=world.data, mlflow_runs=runs, links=links, build={"git": "f" * 40}))
    return world, root / "site", out


def test_the_overview_shows_every_cell_with_its_figure_ci_and_mark(built):
    world, site, out = built
    doc = page(site / "index.html")
    stats = {(r["model"], r["task"]): r for r in json.loads(world.board.read_text())["stats"]}
    heads = [th.get("data-col") for th in doc.xpath('//table[@id="overview"]/thead/tr[1]/th')]
    assert heads == ["model", "t1", "t2", "img", "__average__"]
    assert all(th.get("scope") == "col" for th in doc.xpath('//table[@id="overview"]/thead/tr[1]/th'))
    for m in ("bm25", "dense"):
        for t in ("t1", "t2", "img"):
            td = cell(doc, m, t)
            if (m, t) == ("bm25", "img"):
                assert td.text_content().strip() == "n/a" and td.get("data-na") == "1" and td.get("data-value") == ""
                continue
            value = world.value(m, t)
            r = stats[(m, t)]
            assert float(td.get("data-value")) == pytest.approx(value, abs=1e-12)
            text = td.text_content()
            assert f"{value:.4f}" in text and f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}]" in text
            assert ("*" in td.xpath('string(.//span[@class="sig"])')) == bool(r["significant"])
    # The baseline itself is never marked; the mark follows the saved test.
    assert not cell(doc, "bm25", "t1").xpath('.//span[@class="sig"]')
    # Every model reads t1 and t2 (bm25 cannot read img): bm25 (0.625 + 0.5) / 2, dense (0.875 + 0.875) / 2.
    avg = {r.get("data-model"): r.xpath('./td[@class="avg"]')[0] for r in doc.xpath('//table[@id="overview"]/tbody/tr')}
    assert float(avg["bm25"].get("data-value")) == 0.5625 and float(avg["dense"].get("data-value")) == 0.875
    assert "over the 2 task(s) every shown model reads (t1, t2)" in doc.xpath('string(//p[@id="average-note"])')
    # t2 is research-only: marked in its header and filterable as such.
    (t2,) = doc.xpath('//table[@id="overview"]//th[@data-task="t2"]')
    assert t2.get("data-licence") == "research-only" and "research-only" in t2.text_content() and t2.get("data-languages") == "en ja"
    # Links from a cell: its Dagster partition, and its MLflow run where one was found.
    links = {a.text: a.get("href") for a in cell(doc, "dense", "t1").xpath(".//a")}
    assert links == {
        "D": "http://127.0.0.1:3999/assets/task_metrics?view=partitions&partition=dense%7Ct1",
        "M": "http://127.0.0.1:5999/#/experiments/7/runs/abc123",
    }
    assert [a.text for a in cell(doc, "bm25", "t1").xpath(".//a")] == ["D"]


def test_the_cells_dagster_links_name_the_metrics_asset():
    from assets.stage import ASSET_OF_STAGE

    assert UiLinks().metrics_asset == ASSET_OF_STAGE["metrics"]  # medbench export --site links without importing Dagster


def test_the_average_is_over_the_tasks_every_shown_model_reads(built):
    world, _, _ = built
    site = gather(SiteInputs(world.board, data_root=world.data))
    assert common_tasks(site, ["bm25", "dense"], ["t1", "t2", "img"]) == ["t1", "t2"]
    assert common_tasks(site, ["dense"], ["t1", "t2", "img"]) == ["t1", "t2", "img"]
    assert average(site, "dense", ["t1", "t2", "img"]) == pytest.approx((0.875 + 0.875 + 0.5) / 3)
    assert average(site, "bm25", ["t2"]) == 0.5 and average(site, "bm25", []) is None


def test_a_task_page_has_every_metric_its_breakdowns_plots_trust_licences_and_sources(built):
    world, site, out = built
    doc = page(site / "tasks" / "t2.html")
    tables = {t.xpath("string(caption)"): t for t in doc.xpath("//table")}
    (figures,) = [t for c, t in tables.items() if c.startswith("Every metric of each model")]
    assert [th.text_content() for th in figures.xpath("./thead/tr/th")][3:] == ["ndcg_at_10", "recall_at_10"]
    dense = [tr for tr in figures.xpath("./tbody/tr") if tr.xpath("string(th)") == "dense"][0]
    assert [td.text_content() for td in dense.xpath("./td")][2:] == ["0.8750", "1.0000"]
    # By language, from metrics.json: bm25 en (1 + 0) / 2, ja (1 + 0) / 2; dense en (0.5 + 1) / 2, ja 1.
    (langs,) = [t for c, t in tables.items() if c.startswith("nDCG@10 by language")]
    rows = {tr.xpath("string(th)"): [td.text_content() for td in tr.xpath("./td")] for tr in langs.xpath("./tbody/tr")}
    assert rows == {"bm25": ["0.5000", "0.5000"], "dense": ["0.7500", "1.0000"]}
    # dense against bm25 query by query: 0.5 < 1 (worse), 1 > 0, 1 = 1, 1 > 0.
    assert "dense: 2 better, 1 worse, 1 tied of 4" in doc.text_content()
    svg = (site / "plots" / "t2" / "vs-dense.svg").read_text()
    assert svg.startswith("<svg") and "4 queries: 2 better, 1 worse, 1 tied" in svg
    assert (site / "plots" / "t2" / "per_query.csv").read_text() == "query_id,bm25,dense\nq0,1,0.5\nq1,0,1\nq2,1,1\nq3,0,1\n"
    means = pl.read_csv(site / "plots" / "t2" / "means.csv")
    assert means["model"].to_list() == ["bm25", "dense"] and means["mean"].to_list() == [0.5, 0.875]
    text = doc.text_content()
    assert "README: CC-BY-SA-4.0" in text and "wheel: GPL-3.0-or-later" in text and "research-only" in text  # the licence lineage
    assert "queries.parquet has at least one row" in text and "task t2: gate passed (1 expectations)" in text  # the contract
    assert json.loads((world.data / "tasks" / "t2" / "MANIFEST.json").read_text())["files"]["task.json"]["sha256"] in text
    assert {f for f in out["files"] if f.startswith("plots/")} == {
        "plots/t1/means.svg", "plots/t1/means.csv", "plots/t1/per_query.csv", "plots/t1/vs-dense.svg",
        "plots/t2/means.svg", "plots/t2/means.csv", "plots/t2/per_query.csv", "plots/t2/vs-dense.svg",
        "plots/img/means.svg", "plots/img/means.csv", "plots/img/per_query.csv",  # no baseline there: nothing to plot against
    }  # fmt: skip


def test_a_model_page_has_its_cells_runs_keys_and_the_command(built):
    _, site, _ = built
    doc = page(site / "models" / "dense.html")
    text = doc.text_content()
    assert "rev-dense" in text and "key-dense-t1" in text and "run-dense-t2" in text
    assert "medbench run --models dense --tasks t1 --force" in text and f"git checkout {'f' * 40}" in text
    assert doc.xpath('//a[@data-ui="mlflow"]/@href') == ["http://127.0.0.1:5999/#/experiments/7/runs/abc123"]
    assert "not in the registry" in text  # no models.yaml given: what it does not know is said


def test_the_report_writers_floors_give_the_chance_row_and_each_cells_tie_aware_figure(tmp_path):
    # As the metrics stage stores them (issue 45): the same chance value in every cell of a task, a tie-aware figure per cell.
    world = build_world(tmp_path / "w", floors={("bm25", "t1"): {"chance": 0.25, "tie_aware": 0.6}, ("dense", "t1"): {"chance": 0.25, "tie_aware": 0.875}})
    assert json.loads(world.board.read_text())["floors"]["chance"] == {"t1": 0.25}  # the writer's, not this test's, field
    build_site(tmp_path / "site", SiteInputs(world.board, data_root=world.data))
    doc = page(tmp_path / "site" / "index.html")
    chance = {td.get("data-task"): td.text_content() for td in doc.xpath('//tr[@class="chance"]/td[@data-task]')}
    assert chance == {"t1": "0.2500", "t2": "-", "img": "-"}
    # bm25 on t1: 0.625 by trec_eval, 0.6 over its tied orders, so -0.025.
    title = cell(doc, "bm25", "t1").get("title")
    assert "tie_aware 0.6000" in title and "tie_difference -0.0250" in title, title
    assert not doc.xpath('//h2[@id="field-floors"]')  # placed in the cells, not dumped as a field no page places


def test_fields_a_later_stage_adds_are_shown_by_name_with_the_chance_floor(tmp_path):
    world = build_world(tmp_path / "w", extra_json={"contamination": {"t1": {"dense": "corpus seen in training"}}})
    add_to_stats(world, {("bm25", "t1"): {"chance": 0.3, "tie_aware_ndcg_at_10": 0.61}, ("dense", "t1"): {"chance": 0.3, "tie_aware_ndcg_at_10": 0.87}})
    build_site(tmp_path / "site", SiteInputs(world.board, data_root=world.data))
    doc = page(tmp_path / "site" / "index.html")
    chance = {td.get("data-task"): td.text_content() for td in doc.xpath('//tr[@class="chance"]/td[@data-task]')}
    assert chance == {"t1": "0.3000", "t2": "-", "img": "-"}
    assert "tie_aware_ndcg_at_10 0.6100" in cell(doc, "bm25", "t1").get("title")
    task = page(tmp_path / "site" / "tasks" / "t1.html")
    (stats,) = [t for t in task.xpath("//table") if t.xpath("string(caption)").startswith("Every figure the leaderboard holds")]
    head = [th.text_content() for th in stats.xpath("./thead/tr/th")]
    col = head.index("tie_aware_ndcg_at_10")
    rows = {tr.xpath("./td")[0].text_content(): tr.xpath("./td")[col].text_content() for tr in stats.xpath("./tbody/tr")}
    assert rows == {"bm25": "0.6100", "dense": "0.8700"}
    assert "corpus seen in training" in task.text_content() and "contamination" in doc.text_content()


HOSTILE = {"bm25": "<script>window.pwned=1</script>", "dense": "de\"n'se & <b>bold</b>"}
HOSTILE_TASKS = {"t1": "t<img src=x onerror=alert(1)>", "t2": "\u202eelif\u202c \u05e9\u05dc\u05d5\u05dd", "img": "img'\"`"}


def test_hostile_names_are_text_on_every_page(tmp_path):
    world = build_world(tmp_path / "w", HOSTILE, HOSTILE_TASKS)
    out = build_site(tmp_path / "site", SiteInputs(world.board, data_root=world.data))
    for rel in [f for f in out["files"] if f.endswith(".html")]:
        html = (tmp_path / "site" / rel).read_text()
        assert "<script>window" not in html and "<img src=x" not in html and "<b>bold" not in html, rel
        doc = lxml.html.fromstring(html)
        assert [s.get("src") for s in doc.xpath("//script")] == [f"{'../' if '/' in rel else ''}{name}" for name in ("ui.js", "site.js")], rel
        assert not doc.xpath("//img[@onerror]") and not doc.xpath("//b"), rel
    doc = page(tmp_path / "site" / "index.html")
    assert [a.text_content() for a in doc.xpath('//table[@id="overview"]/tbody/tr/th/a')] == list(HOSTILE.values())
    assert [th.get("data-task") for th in doc.xpath('//table[@id="overview"]/thead/tr[1]/th[@data-task]')] == list(HOSTILE_TASKS.values())
    # Each name has a page of its own, named by a slug that keeps no markup (and no two names share one).
    assert {slug(n) for n in (*HOSTILE.values(), *HOSTILE_TASKS.values())} == {
        p.stem for d in ("models", "tasks") for p in (tmp_path / "site" / d).glob("*.html")
    }
    assert all(set(slug(n)) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") for n in HOSTILE_TASKS.values())


def test_versions_side_by_side_with_the_moved_cells_and_why(tmp_path):
    world = build_world(tmp_path / "w")
    versions = tmp_path / "versions"
    versions.mkdir()

    def run(model, task, value, task_hash="hash-t1", revision="rev", keys=None):
        return {"model": model, "task": task, "metrics": {"ndcg_at_10": value}, "task_content_hash": task_hash, "model_revision": revision,
                "keys": keys or {"metrics": f"m-{model}-{task}"}, "mlflow_run_id": "r"}  # fmt: skip

    v1 = {"tag": "v1", "released_at": "2026-01-01T00:00:00+00:00", "code_versions": {"metrics": "1"},
          "runs": [run("bm25", "t1", 0.6, revision="rev-a"), run("dense", "t1", 0.8), run("dense", "t2", 0.875, "hash-t2")]}  # fmt: skip
    v2 = {"tag": "v2", "released_at": "2026-02-01T00:00:00+00:00", "code_versions": {"metrics": "1"},
          "runs": [run("bm25", "t1", 0.625, revision="rev-b"), run("dense", "t1", 0.85, "hash-new"), run("dense", "t2", 0.875, "hash-t2")]}  # fmt: skip
    (versions / "v2.json").write_text(json.dumps(v2))  # read in order of release, not of name
    (versions / "v1.json").write_text(json.dumps(v1))
    (versions / "notes.json").write_text("{}")
    build_site(tmp_path / "site", SiteInputs(world.board, data_root=world.data, versions_dir=versions, code_versions={"metrics": "2"}))
    doc = page(tmp_path / "site" / "versions.html")
    (table,) = [t for t in doc.xpath("//table") if "versions" in (t.get("class") or "")]
    assert [th.text_content() for th in table.xpath("./thead/tr/th")] == ["model", "task", "v1", "v2", "current"]
    rows = table.xpath("./tbody/tr")
    moved = {(tr.xpath("string(th)"), tr.xpath("string(td[1])"), i) for tr in rows for i, td in enumerate(tr.xpath("./td")[1:]) if td.get("class") == "moved"}
    # bm25/t1 0.6 -> 0.625 (v2: its revision), dense/t1 0.8 -> 0.85 (v2: the data) -> 0.875 (current: the code), dense/t2 never.
    assert moved == {("bm25", "t1", 1), ("dense", "t1", 1), ("dense", "t1", 2)}
    reasons = {tuple(td.text_content() for td in tr.xpath("./td")[:4]): tr.xpath("string(td[7])") for tr in doc.xpath('//tr[@class="moved"]')}
    assert reasons == {
        ("v1", "v2", "bm25", "t1"): "model revision rev-a → rev-b",
        ("v1", "v2", "dense", "t1"): "data: the task's content hash hash-t1 → hash-new",
        ("v2", "current", "dense", "t1"): "data: the task's content hash hash-new → hash-t1; model revision rev → rev-dense; code: metrics 1 → 2",
    }
    assert "notes.json: no runs list; not a version record" in doc.text_content()


def test_the_site_replaces_an_earlier_site_and_refuses_any_other_folder(built, tmp_path):
    world, _, _ = built
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="is not a medbench site"):
        build_site(mine, SiteInputs(world.board))
    assert (mine / "notes.txt").read_text() == "mine"
    site = tmp_path / "site"
    build_site(site, SiteInputs(world.board))
    (site / "stray.html").write_text("left from before")
    out = build_site(site, SiteInputs(world.board))  # the leaderboard alone: no task, artifact or version data
    assert not (site / "stray.html").exists() and "index.html" in out["files"]
    assert "the data folder was not given" in (site / "tasks" / "t1.html").read_text()


def test_the_markdown_head_is_the_headline_table_and_a_pointer_to_the_site(built):
    world, _, _ = built
    md = (world.data / "reports" / "leaderboard.md").read_text()
    stats = {(r["model"], r["task"]): r for r in json.loads(world.board.read_text())["stats"]}
    head, rest = md.split("\n\n", 1)[0], md
    assert head == "nDCG@10 at a glance (mean [95% CI]; * differs from bm25)"
    r = stats[("dense", "t1")]
    star = " *" if r["significant"] else ""
    assert f"| dense | 0.8750 [{r['ci_low']:.2f}, {r['ci_high']:.2f}]{star} |" in rest.split("The same as pages")[0]
    assert "| model | t1 | t2 (research-only) | img | average |" in md.split("The same as pages")[0]
    assert "| bm25 | " in md and " | n/a | 0.5625 |" in md.split("The same as pages")[0]
    line = next(line for line in md.splitlines() if line.startswith("The same as pages"))
    assert "site/index.html" in line and "Below, for terminals and diffs: nDCG@10 by model and task; Rank by nDCG@10; What each cell rests on" in line


def test_contamination_marks_zero_shot_shares_and_a_tasks_image_pairs_with_their_thumbnails(tmp_path):
    # leaderboard.json's contamination section as the leaderboard writes it (docs/contamination.md), with hand-chosen values,
    # and the img task's audit folder at the key its cells name: one image pair with another task, and its thumbnail.
    from PIL import Image

    from medbench_core.storage import write_manifest

    cells = {
        "dense/t1": {"mark": "trained-on-task", "audited": True, "share": 0.5, "n_queries": 4, "contaminated_queries": 2, "n_clean": 2,
                     "decontaminated": 0.75, "decontaminated_ci": [0.5, 1.0], "contaminated_docs": 0, "audit_key": "k-t1",
                     "evidence": "2 of 4 test queries near-duplicated in its training data: texts:/m.jsonl (2, texts:/m.jsonl)"},
        "bm25/t1": {"mark": "unknown", "audited": False, "evidence": "bm25 declares no training data"},
        "dense/img": {"mark": "zero-shot", "audited": True, "share": 0.0, "n_queries": 4, "contaminated_queries": 0, "n_clean": 4,
                      "decontaminated": 0.875, "decontaminated_ci": [0.75, 1.0], "contaminated_docs": 0, "audit_key": "k-img",
                      "evidence": "declares MSMARCO; none is this task (img)"},
    }  # fmt: skip
    world = build_world(tmp_path / "w", extra_json={"contamination": {"zero_shot": {"bm25": None, "dense": 50}, "cells": cells}})
    audit = world.data / "audits" / "img" / "k-img"
    (audit / "thumbs").mkdir(parents=True)
    pair = {"kind": "image", "side": "doc", "id": "d1", "split": "test", "source": "task:t1", "other_side": "query", "other_id": "q9",
            "other_split": "test", "jaccard": None, "phash_distance": 2, "dhash_distance": 3, "exact": False}  # fmt: skip
    pl.DataFrame([pair]).write_parquet(audit / "pairs.parquet")
    (audit / "info.json").write_text("{}\n")
    Image.new("RGB", (264, 142), "white").save(audit / "thumbs" / "000.png")
    write_manifest(audit, ["pairs.parquet", "info.json", "thumbs/000.png"])

    out = build_site(tmp_path / "site", SiteInputs(world.board, data_root=world.data))
    doc = page(tmp_path / "site" / "index.html")
    (table,) = [t for t in doc.xpath("//table") if "contamination mark" in t.xpath("string(./caption)")]
    rows = {r.get("data-model"): r for r in table.xpath("./tbody/tr")}
    assert rows["dense"].xpath("string(./td[1])") == "50%" and rows["bm25"].xpath("string(./td[1])") == "unknown"
    marks = {}
    for m, r in rows.items():
        for td in r.xpath("./td[@data-task]"):
            marks[(m, td.get("data-task"))] = (td.get("data-mark"), " ".join(td.text_content().split()))
    assert marks[("dense", "t1")] == ("trained-on-task", "T 0.50") and marks[("dense", "img")] == ("zero-shot", "Z")
    assert marks[("bm25", "t1")] == ("unknown", "? (not audited)") and marks[("bm25", "t2")] == (None, "")
    assert not doc.xpath('//h2[@id="field-contamination"]')  # placed, not dumped as an unplaced field

    task = page(tmp_path / "site" / "tasks" / "t1.html")
    (ct,) = [t for t in task.xpath("//table") if "decontaminated" in t.xpath("string(./caption)")]
    cols = [th.text for th in ct.xpath("./thead/tr/th")]
    (dense,) = [r for r in ct.xpath("./tbody/tr") if r.xpath("string(./td[1])") == "dense"]
    got = dict(zip(cols, [td.text_content() for td in dense.xpath("./td")]))
    assert got["mark"] == "trained-on-task" and got["share"] == "0.5000" and got["decontaminated"] == "0.7500" and got["n_clean"] == "2"
    img = page(tmp_path / "site" / "tasks" / "img.html")
    assert "1 image pair(s) with another task's images" in img.text_content() and "audits/img/k-img" in img.text_content()
    (pairs,) = [t for t in img.xpath("//table") if "Image pairs" in t.xpath("string(./caption)")]
    assert [td.text_content() for td in pairs.xpath("./tbody/tr/td")][:3] == ["doc", "d1", "test"]
    (src,) = img.xpath('//figure[@class="thumb"]/img/@src')
    assert src == "img-audit/000.png" and (tmp_path / "site" / "tasks" / src).read_bytes() == (audit / "thumbs" / "000.png").read_bytes()
    assert "tasks/img-audit/000.png" in out["files"]
    assert "zero-shot share: 50% of its marked cells" in page(tmp_path / "site" / "models" / "dense.html").text_content()
