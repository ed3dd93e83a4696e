"""Declared versions and golden outputs (tests/core/golden_outputs.py).

Every stage's output for every kind equals the recorded one, or its version was bumped (and the
outputs recorded again). Shown on temporary copies of the library: an output changed without a
bump fails the check, a bump without recording fails it too, and moving a module to another
subpackage changes no output and no artifact key of the bundled demo. Shown in this process, by
changing what production calls: a leaderboard that averages over fewer tasks, and BM25 without its
per-language stemmer, fail the check; ``--record --only`` merges and deletes nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import golden_outputs
import numpy as np
import pytest
from golden_outputs import GOLDEN, compare, compute, models_yaml, record

from medbench_core.retrieval.kinds import KINDS

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("MEDBENCH_SHARED", ROOT.parent / "shared"))

BUNDLED_KEYS = """
import json, sys, tempfile
from pathlib import Path
from medbench_core.retrieval.derived import registry_partition_keys
from medbench_core.retrieval.model_registry import load_registry
from medbench_core.taskdata.catalog import build_task, load_catalog
root, shared = Path(sys.argv[1]), Path(sys.argv[2])
specs = load_registry(root / "models.yaml")
with tempfile.TemporaryDirectory() as tmp:
    keys = {e.name: registry_partition_keys(specs, build_task(e, shared / "data", Path(tmp) / e.name)) for e in load_catalog(root / "tasks.yaml").tasks}
print(json.dumps(keys, sort_keys=True))
"""


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> tuple[Path, dict]:
    """Every output of the fixture as this code makes it (its folder, its entries with their judges), computed once."""
    root = tmp_path_factory.mktemp("golden")
    return root, compute(root)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.portable
def test_every_stage_output_is_the_recorded_one_or_its_version_was_bumped(golden):
    problems = compare(json.loads(GOLDEN.read_text()), golden[1])
    assert problems == []


def _swap_apart(rows: list[list], gap: float) -> tuple[list[list], str, str, str]:
    """``rows`` of a run with the first two neighbours of a query whose scores are more than ``gap`` apart swapped."""
    for i in range(len(rows) - 1):
        (q, a, _, sa), (q2, b, _, sb) = rows[i], rows[i + 1]
        if q == q2 and sa - sb > gap:
            out = [list(r) for r in rows]
            out[i][1], out[i + 1][1] = b, a
            return out, q, a, b
    raise AssertionError(f"no neighbours more than {gap:g} apart")


def _bm25_k1(k1: float):
    """golden_outputs.models_yaml with the bm25 model's k1 changed: a changed BM25 setting, its version not bumped."""
    production = golden_outputs.models_yaml

    def changed(root: Path) -> str:
        text = production(root)
        assert "{name: bm25, kind: bm25, settings: {k1: 1.2," in text
        return text.replace("{name: bm25, kind: bm25, settings: {k1: 1.2,", f"{{name: bm25, kind: bm25, settings: {{k1: {k1},", 1)

    return changed


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.portable
def test_a_change_beyond_the_rule_differs_in_the_golden_check(golden, tmp_path, monkeypatch):
    """Under every lane: a pair of documents further apart than τ swapped, a metric outside its tie bound, a vector
    moved by more than ε, and a changed BM25 setting each fail the check, named and said to differ."""
    from medbench_release.tolerance import widened

    recorded, (_, now) = json.loads(GOLDEN.read_text()), golden
    run = now["minilm/run"]
    rows, q, a, b = _swap_apart(run["output"]["rows"], 2 * widened(run["_judge"].tau.tau, golden_outputs.RHO))
    swapped = golden_outputs.problem("minilm/run", recorded["minilm/run"], {**run, "output": {**run["output"], "rows": rows}})
    assert "minilm/run: output changed without a version bump" in swapped and f"beyond τ, first: query {q}: " in swapped, swapped

    metrics = now["minilm/metrics"]
    low = metrics["_judge"].bounds.low["ndcg_at_10"]
    moved = {**metrics["output"], "mean": {**metrics["output"]["mean"], "ndcg_at_10": low - 0.01}}
    changed = golden_outputs.problem("minilm/metrics", recorded["minilm/metrics"], {**metrics, "output": moved})
    assert "minilm/metrics: output changed without a version bump" in changed and "made now: ndcg_at_10: " in changed, changed

    emb = now["minilm/embeddings"]
    corpus = [list(r) for r in emb["output"]["corpus"]]
    corpus[0][0] += 3 * golden_outputs.ARRAY_TOLERANCE
    vectors = golden_outputs.problem("minilm/embeddings", recorded["minilm/embeddings"], {**emb, "output": {**emb["output"], "corpus": corpus}})
    assert "minilm/embeddings: output changed without a version bump" in vectors and "differs: corpus: " in vectors and "> ε 1e-05" in vectors, vectors

    monkeypatch.setattr(golden_outputs, "models_yaml", _bm25_k1(1.3))
    problems = compare(recorded, compute(tmp_path, {"bm25"}))  # other scores, the same rankings: the metrics hold
    assert {"bm25/embeddings", "bm25/run"} <= _names(problems) and all(n.startswith("bm25/") for n in _names(problems)), problems
    assert all("output changed without a version bump" in p and "(exact work)" in p for p in problems), problems


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.portable
def test_the_golden_artifacts_reproduce_the_recorded_version(golden):
    """``medbench reproduce``'s compare (compare_version) against tests/core/golden_version.json, made on another
    machine or kernel path: every artifact identical or within the rule, under every lane."""
    import golden_version

    from medbench_release.compare import OK

    record = json.loads(golden_version.VERSION.read_text())
    results = golden_version.judge(golden[0], record)
    assert len(results) == len(record["artifacts"]) >= 4 * 4 * 2
    bad = {r.label: [f"{n}: {f.detail}" for n, f in r.files.items() if f.verdict not in OK] for r in results if r.verdict not in OK}
    assert bad == {}
    assert all(r.rule for r in results)  # every verdict names its rule


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.portable
def test_a_change_beyond_the_rule_differs_in_the_reproduce_compare(golden, tmp_path, monkeypatch):
    """The same changes, made to the rebuilt artifacts (a copy): ``medbench reproduce``'s compare says they differ."""
    import golden_version
    import polars as pl

    from medbench_core.storage import MANIFEST, write_manifest
    from medbench_release.tolerance import ARRAY_TOLERANCE, score_tolerance

    def rewrite_manifest(folder: Path) -> None:
        write_manifest(folder, sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST))

    root = tmp_path / "rebuilt"
    shutil.copytree(golden[0], root, ignore=shutil.ignore_patterns("hub", "hf_modules", "bounds"))
    art = root / "artifacts"
    # minilm x text: two neighbours further apart than τ swapped.
    run_dir = art / "minilm" / "text" / "run"
    run = pl.read_parquet(run_dir / "run.parquet")
    tau = score_tolerance([np.load(run_dir / "query_embeddings.npy")], [np.load(art / "minilm" / "text" / "embeddings" / "corpus.npy")], ARRAY_TOLERANCE).tau
    rows, q, a, b = _swap_apart([list(r) for r in run.select("query_id", "doc_id", "rank", "score").iter_rows()], 2 * tau)
    run.with_columns(pl.Series("doc_id", [r[1] for r in rows], dtype=run.schema["doc_id"])).write_parquet(run_dir / "run.parquet", statistics=False)
    rewrite_manifest(run_dir)
    # clip x images: a metric moved by 0.05.
    metrics_dir = art / "clip" / "images" / "metrics"
    doc = json.loads((metrics_dir / "metrics.json").read_text())
    doc["mean"]["ndcg_at_10"] += 0.05
    (metrics_dir / "metrics.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    rewrite_manifest(metrics_dir)
    # bm25: built with k1 1.3, its version not bumped.
    monkeypatch.setattr(golden_outputs, "models_yaml", _bm25_k1(1.3))
    other = tmp_path / "k1"
    compute(other, {"bm25"})
    shutil.rmtree(art / "bm25")
    shutil.copytree(other / "artifacts" / "bm25", art / "bm25")

    by = {r.label: r for r in golden_version.judge(root)}
    assert by["run minilm x text"].verdict == "differs" and f"query {q}: " in by["run minilm x text"].files["run.parquet"].detail
    assert by["metrics clip x images"].verdict == "differs" and "ndcg_at_10" in by["metrics clip x images"].files["metrics.json"].detail
    assert by["embeddings bm25 x text"].verdict == by["run bm25 x text"].verdict == "differs"
    assert "exact" in by["run bm25 x text"].rule
    untouched = [r for label, r in by.items() if r.model in ("colbert",) or (r.model == "clip" and r.task != "images")]
    assert untouched and all(r.verdict in ("identical", "within_tolerance") for r in untouched)


def test_every_registered_kind_has_a_model_in_the_fixture(tmp_path):
    """Derived from KINDS: a kind without a written entry gets the model its ``example_entry()`` declares, so its outputs are made and checked."""
    import yaml

    models = yaml.safe_load(models_yaml(tmp_path))["models"]
    assert {m["kind"] for m in models} == set(KINDS)
    recorded = json.loads(GOLDEN.read_text())
    for m in models:  # each model's run is recorded (on its home task: images for a kind that reads images, text otherwise)
        assert any(name.startswith(f"{m['name']}/") and name.endswith(("/run", "/derived_run", "/expanded_run")) for name in recorded), m["name"]


def _names(problems: list[str]) -> set[str]:
    return {p.split(": ", 1)[0] for p in problems}


def test_a_leaderboard_that_averages_over_fewer_tasks_fails_the_check(tmp_path, monkeypatch):
    """The leaderboard users see is reports.leaderboard's (through write_leaderboard); dropping a task from its average is caught."""
    import polars as pl

    from medbench_core.evaluation import reports

    production = reports.leaderboard

    def fewer(cells, models, tasks, metric="ndcg_at_10"):
        board = production(cells, models, tasks, metric)

        def average(row):  # the mean over every task it can read but the last
            over = row["averaged_over"].split(", ")[:-1]
            values = [row[t] for t in over]
            return round(sum(values) / len(values), 4) if values and None not in values else None

        return board.with_columns(pl.Series("average", [average(r) for r in board.iter_rows(named=True)], dtype=pl.Float64))

    monkeypatch.setattr(reports, "leaderboard", fewer)
    problems = compare(json.loads(GOLDEN.read_text()), compute(tmp_path, {"leaderboard"}))
    assert _names(problems) == {"leaderboard", "reports"}  # the cells themselves hold
    assert all("output changed without a version bump" in p for p in problems)


def _words_only(self, spec, task):
    """Every record analysed by the model's own stopwords and stemmer: no analyser per language."""
    from medbench_core.retrieval.analysis import words

    langs = set(task.queries["language"].unique().to_list()) | set(task.corpus["language"].unique().to_list())
    return {lang: words(spec.settings.stopwords, spec.settings.stemmer) for lang in langs}


@pytest.mark.parametrize("where", ["bm25_settings", "analyzers"])
def test_bm25_without_its_per_language_stemmer_fails_the_check(tmp_path, monkeypatch, where):
    """``language_analyzers: {fr: {stopwords: fr, stemmer: french}}`` (the bundled bm25's) dropped from the
    effective settings, or from the kind's per-language analysis: the French candidate-set task's BM25 outputs move."""
    from dataclasses import asdict

    from medbench_core.retrieval import bm25_index
    from medbench_core.retrieval.kinds.bm25 import BM25Kind

    assert compare(json.loads(GOLDEN.read_text()), compute(tmp_path / "before", {"bm25"})) == []  # as recorded before the change
    if where == "bm25_settings":
        production = bm25_index.bm25_settings
        monkeypatch.setattr(bm25_index, "bm25_settings", lambda settings, language=None: production(settings, None))
    else:
        monkeypatch.setattr(BM25Kind, "analyzers", _words_only)
        monkeypatch.setattr(BM25Kind, "analyzer", lambda self, spec, task: bm25_index.bm25_settings(asdict(spec.settings)))
    problems = compare(json.loads(GOLDEN.read_text()), compute(tmp_path / "after", {"bm25"}))
    assert "bm25/frenchmedmcqa/embeddings" in _names(problems)
    assert all(name.startswith("bm25/") for name in _names(problems))  # the text task's bm25 is English: unchanged
    if where == "analyzers":  # French documents stemmed as English: other scores
        assert {"bm25/frenchmedmcqa/run", "bm25/frenchmedmcqa/metrics", "bm25/multi/run"} <= _names(problems)


def test_record_only_merges_and_rewrites_only_what_differs(tmp_path, monkeypatch):
    recorded = json.loads(GOLDEN.read_text())
    damaged = {k: v for k, v in recorded.items() if k != "bm25/frenchmedmcqa/index"}  # one entry missing, one wrong
    damaged["bm25/run"] = {**recorded["bm25/run"], "output": {"rows": [], "info": {}}}
    path = tmp_path / "golden_outputs.json"
    path.write_text(json.dumps(damaged, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    monkeypatch.setattr(golden_outputs, "GOLDEN", path)
    assert golden_outputs.main(["--record", "--only", "bm25"]) == 0
    again = json.loads(path.read_text())
    assert golden_outputs.outputs(again) == golden_outputs.outputs(recorded)  # the other models' entries all kept
    # What the two rewritten entries were made with is kept beside them; the entries that held keep theirs.
    for name in ("bm25/frenchmedmcqa/index", "bm25/run"):
        made = golden_outputs.recorded_environment(name, again)
        assert made is not None and {"cpu", "kernels", "libraries"} <= set(made) and made["kernels"]["torch"]["cpu_capability"]
    assert golden_outputs.recorded_environment("minilm/run", again) == golden_outputs.recorded_environment("minilm/run", recorded)
    mine = {k: v for k, v in again.items() if k != golden_outputs.RECORDED_ON} | {golden_outputs.RECORDED_ON: recorded.get(golden_outputs.RECORDED_ON)}
    mine = {k: v for k, v in mine.items() if v is not None}
    # byte for byte but for the environments: entries that hold are written as recorded
    assert json.dumps(mine, indent=1, sort_keys=True, ensure_ascii=False) + "\n" == GOLDEN.read_text()


def test_record_without_only_removes_what_is_no_longer_made_and_keeps_what_holds():
    entry = {"versions": "run=1", "tolerance": "neural", "output": [0.5]}
    recorded = {"kept": entry, "moved": entry, "gone": entry}
    now = {"kept": {**entry, "output": [0.5 + 1e-6]}, "moved": {**entry, "output": [0.7]}, "new": entry}
    merged, written, removed = record(recorded, now, None)
    assert merged == {"kept": entry, "moved": now["moved"], "new": entry} and written == ["moved", "new"] and removed == ["gone"]
    assert record(recorded, now, {"x"})[0] == {**merged, "gone": entry}  # with --only nothing is removed


def library_copy(tmp: Path) -> Path:
    """The library, the registry and the golden-output check in a fresh folder (changed by the tests)."""
    copy = tmp / "copy"
    for package in ("medbench_core", "medbench_release"):  # the library and the rule its golden outputs are judged by
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "tests" / "core").mkdir(parents=True)
    for name in ("golden_outputs.py", "golden_outputs.json", "tiny_models.py"):
        shutil.copy(ROOT / "tests" / "core" / name, copy / "tests" / "core" / name)
    for name in ("models.yaml", "tasks.yaml"):
        shutil.copy(ROOT / name, copy / name)
    return copy


def check(copy: Path, only: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONSAFEPATH": "1"}
    return subprocess.run(
        [sys.executable, str(copy / "tests" / "core" / "golden_outputs.py"), "--check", "--only", only], cwd=copy, env=env, capture_output=True, text=True
    )


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: {old!r}"
    path.write_text(text.replace(old, new))


@pytest.mark.slow
@pytest.mark.model
def test_an_output_change_without_a_version_bump_fails_and_a_bump_asks_for_recording(tmp_path):
    copy = library_copy(tmp_path)
    assert check(copy, "bm25").returncode == 0  # the copy as it is passes
    # BM25's default stopword list changes what it indexes; the fixture's entry does not set it.
    edit(copy / "medbench_core" / "retrieval" / "kinds" / "bm25.py", 'stopwords: str | list | None = "en"', "stopwords: str | list | None = None")
    unbumped = check(copy, "bm25")
    assert unbumped.returncode == 1
    assert "bm25/embeddings: output changed without a version bump (curated_task=1 embeddings=1 bm25=1)" in unbumped.stdout
    edit(copy / "medbench_core" / "retrieval" / "kinds" / "bm25.py", 'version = "1"', 'version = "2"')
    bumped = check(copy, "bm25")
    assert bumped.returncode == 1
    assert "bm25/embeddings: versions curated_task=1 embeddings=1 bm25=1 -> curated_task=1 embeddings=1 bm25=2: record the new outputs" in bumped.stdout


def move_module(copy: Path, old: str, new: str) -> None:
    """Move module ``old`` (dotted) to ``new`` and rewrite every import of it in the copy, as a refactoring would."""
    src, dst = copy / (old.replace(".", "/") + ".py"), copy / (new.replace(".", "/") + ".py")
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(src, dst)
    pattern = re.compile(rf"\b{re.escape(old)}\b")
    parent_old, leaf = old.rsplit(".", 1)
    parent_new, leaf_new = new.rsplit(".", 1)
    for path in copy.rglob("*.py"):
        text = path.read_text()
        alias = leaf_new if leaf_new == leaf else f"{leaf_new} as {leaf}"
        changed = re.sub(rf"^(\s*)from {re.escape(parent_old)} import {leaf}$", rf"\1from {parent_new} import {alias}", pattern.sub(new, text), flags=re.M)
        if changed != text:
            path.write_text(changed)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.skipif(not (SHARED / "data").is_dir(), reason="needs ../shared/data (the bundled tasks)")
def test_moving_a_module_to_another_subpackage_changes_no_output_and_no_key_of_the_bundled_demo(tmp_path):
    copy = library_copy(tmp_path)
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    before = subprocess.run(
        [sys.executable, "-c", BUNDLED_KEYS, str(copy), str(SHARED)], env={**env, "PYTHONPATH": str(copy)}, capture_output=True, text=True, check=True
    )
    move_module(copy, "medbench_core.retrieval.ranking", "medbench_core.evaluation.ranking")
    move_module(copy, "medbench_core.retrieval.bm25_index", "medbench_core.taskdata.lexical")
    assert not (copy / "medbench_core" / "retrieval" / "ranking.py").exists()
    after = subprocess.run(
        [sys.executable, "-c", BUNDLED_KEYS, str(copy), str(SHARED)], env={**env, "PYTHONPATH": str(copy)}, capture_output=True, text=True, check=True
    )
    keys = json.loads(before.stdout)
    assert json.loads(after.stdout) == keys
    assert sum(len(stages) for models in keys.values() for stages in models.values()) >= 60  # every stage of every model on every task
    moved = check(copy, "bm25,fusion")
    assert moved.returncode == 0, moved.stdout + moved.stderr
