"""Fusion and cross-encoder partitions materialised through Dagster (the evaluate_partition job), against references.

A world with 30 real SciFact claims (their abstracts and 100 others): BM25 and all-MiniLM-L6-v2
are evaluated as retrievers, then

- ``rrf`` (RRF, k = 60, over both): its nDCG@10 equals ranx's ``fuse(method="rrf")`` on the same
  two stored runs (ranks given explicitly, as tests/core/test_fusion.py does, since ranx orders
  tied scores arbitrarily) scored by pytrec_eval-terrier, to 1e-9; its MLflow run names both
  upstream run keys; its embeddings and index stages store nothing and say why (not ``n/a``);
- ``rerank`` (a seeded random-weight cross-encoder folder over BM25's top 20): its scores equal
  ``CrossEncoder(folder).predict`` on the same (query, document) pairs;
- bad inputs fail alone with a clear error naming the model, the upstream, the task and what to
  run, and store nothing (no artifact folder, no MLflow run): a fusion whose upstream was never
  evaluated, one whose upstream failed, a rerank depth beyond the upstream's k.
"""

import polars as pl
import pytest
import pytrec_eval

from medbench_core.evaluation.metrics import qrels_to_dict, run_to_dict
from medbench_core.retrieval.derived import registry_partition_keys
from medbench_core.retrieval.fuse_rerank import ranked
from orchestration.registry_sync import sync_model_partitions
from tests.orchestration.derived_env import (
    BM25_K12,
    MINILM,
    evaluate,
    failure_message,
    materialization_metadata,
    mlflow_runs,
    run_frame,
    tiny_cross_encoder,
    write_registry,
    write_scifact_small,
)  # fmt: skip
from tests.orchestration.operating_env import BM25, curate, new_world

pytestmark = [pytest.mark.slow, pytest.mark.model]

RRF = {"name": "rrf", "kind": "fusion", "fusion": {"method": "rrf", "k": 60, "runs": ["bm25", "all-MiniLM-L6-v2"]}}
NEVER_RUN = {"name": "rrf-never-run", "kind": "fusion", "fusion": {"method": "rrf", "runs": ["bm25", "bm25-k12"]}}
BROKEN = {"name": "broken-folder", "kind": "sentence-transformers", "path": "", "revision": "x"}  # path: a folder that is no model
FAILED_UP = {"name": "rrf-failed-up", "kind": "fusion", "fusion": {"method": "rrf", "runs": ["bm25", "broken-folder"]}}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("derived") / "w"
    world = new_world(root, [BM25])
    write_scifact_small(world.shared / "sci")
    ce = tiny_cross_encoder(root / "tiny-ce")
    (root / "broken-model").mkdir()
    (root / "broken-model" / "config.json").write_text('{"model_type": "no-such-architecture"}')  # keys resolve, loading fails
    rerank = {"name": "rerank", "kind": "cross-encoder", "path": str(ce), "rerank": {"upstream": "bm25", "depth": 20}, "batch_size": 16}
    too_deep = {**rerank, "name": "rerank-too-deep", "rerank": {"upstream": "bm25", "depth": 200}}
    write_registry(
        world.models_file,
        [BM25, MINILM, BM25_K12, {**BROKEN, "path": str(root / "broken-model")}, RRF, rerank, too_deep, NEVER_RUN, FAILED_UP],
        baseline="bm25",
    )
    defs = world.defs()
    with world.instance() as instance:
        sync_model_partitions(instance, world.resources()["registry"])
        curate(world, instance, defs, ["scifact", "liveqa_medquad"])
        results = {m: evaluate(instance, defs, m, "scifact") for m in ("bm25", "all-MiniLM-L6-v2", "rrf", "rerank")}
        results["rrf-again"] = evaluate(instance, defs, "rrf", "scifact")
    assert all(r.success for name, r in results.items()), {n: failure_message(r) for n, r in results.items() if not r.success}
    world.results = results
    return world


def keys_of(world, task="scifact"):
    store, registry = world.resources()["store"], world.resources()["registry"]
    return registry_partition_keys(registry.models(), store.load_task(task), names=["rrf", "rerank"], expansions=registry.expansions())


def test_rrf_partition_equals_ranx_fuse_scored_by_pytrec_eval(world):
    from ranx import Run, fuse

    keys = keys_of(world)
    task = world.resources()["store"].load_task("scifact")
    qrels = qrels_to_dict(task.qrels)
    # ranx on the two stored runs, their trec_eval ranks made explicit (score = 1000 - rank).
    inputs = [
        Run(run_to_dict(ranked(run_frame(world, m, "scifact", keys[m]["run"])).with_columns(score=1000.0 - pl.col("rank")))) for m in RRF["fusion"]["runs"]
    ]
    theirs = {
        q: dict(sorted(d.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:100]) for q, d in fuse(inputs, method="rrf", params={"k": 60}).run.items()
    }
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(theirs)
    reference = sum(per_query.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / len(qrels)

    md = materialization_metadata(world.results["rrf"])
    assert md["task_metrics"]["ndcg_at_10"] == pytest.approx(reference, abs=1e-9)
    ours = run_to_dict(run_frame(world, "rrf", "scifact", keys["rrf"]["run"]))
    for q, docs in theirs.items():
        assert set(ours[q]) == set(docs) and max(abs(ours[q][d] - s) for d, s in docs.items()) < 1e-12, q
    # A fusion, not one of its inputs.
    inputs_ndcg = [materialization_metadata(world.results[m])["task_metrics"]["ndcg_at_10"] for m in RRF["fusion"]["runs"]]
    assert all(abs(reference - v) > 1e-4 for v in inputs_ndcg)


def test_rrf_stores_no_embeddings_or_index_and_says_why_and_names_its_upstreams_in_mlflow(world):
    keys = keys_of(world)
    md = materialization_metadata(world.results["rrf"])
    for asset in ("corpus_embeddings", "corpus_index"):
        assert md[asset]["applicable"] is True and md[asset]["label"] == "derived"
        assert md[asset]["reason"].startswith("built from upstream runs (bm25, all-MiniLM-L6-v2)")
        assert md[asset]["data_version"] == f"derived-{keys['rrf']['run']}"
    assert md["query_expansion"]["label"] == "none"
    artifacts = world.root / "data" / "artifacts" / "rrf" / "scifact"
    assert sorted(p.name for p in artifacts.iterdir()) == ["metrics", "run"]
    assert md["retrieval_run"]["upstream"] == f"bm25 {keys['bm25']['run']}, all-MiniLM-L6-v2 {keys['all-MiniLM-L6-v2']['run']}"

    (run,) = mlflow_runs(world, "rrf")
    params = run.data.params
    assert params["upstream.bm25.run_key"] == keys["bm25"]["run"]
    assert params["upstream.all-MiniLM-L6-v2.run_key"] == keys["all-MiniLM-L6-v2"]["run"]
    assert params["upstream_models"] == "bm25,all-MiniLM-L6-v2"
    assert params["run_key"] == keys["rrf"]["run"] and params["model_kind"] == "fusion"
    assert run.data.metrics["ndcg_at_10"] == md["task_metrics"]["ndcg_at_10"]
    # The second evaluation is all cache hits, and reuses the MLflow run.
    again = materialization_metadata(world.results["rrf-again"])
    assert again["retrieval_run"]["cache_hit"] and again["task_metrics"]["cache_hit"] and again["task_metrics"]["mlflow_run_reused"]


def test_rerank_partition_scores_equal_cross_encoder_predict(world):
    from sentence_transformers import CrossEncoder

    keys = keys_of(world)
    task = world.resources()["store"].load_task("scifact")
    upstream = ranked(run_frame(world, "bm25", "scifact", keys["bm25"]["run"])).filter(pl.col("rank") <= 20)
    qtext = dict(task.queries.select("query_id", "text").iter_rows())
    dtext = dict(zip(task.corpus["doc_id"].to_list(), task.doc_text()))
    pairs = [(qtext[q], dtext[d]) for q, d in upstream.select("query_id", "doc_id").iter_rows()]
    direct = CrossEncoder(str(world.root / "tiny-ce")).predict(pairs, batch_size=16).tolist()
    want = {}
    for (q, d), s in zip(upstream.select("query_id", "doc_id").iter_rows(), direct):
        want.setdefault(q, {})[d] = s
    got = run_to_dict(run_frame(world, "rerank", "scifact", keys["rerank"]["run"]))
    assert set(got) == set(want)
    for q, docs in want.items():
        assert set(got[q]) == set(docs)
        assert max(abs(got[q][d] - s) for d, s in docs.items()) < 1e-6, q
    run = run_frame(world, "rerank", "scifact", keys["rerank"]["run"])
    assert run.group_by("query_id").len()["len"].max() == 20
    md = materialization_metadata(world.results["rerank"])
    assert md["corpus_embeddings"]["reason"].startswith("built from upstream runs (bm25)")
    (logged,) = mlflow_runs(world, "rerank")
    assert logged.data.params["upstream.bm25.run_key"] == keys["bm25"]["run"]


def stored_nothing(world, model: str) -> bool:
    return not (world.root / "data" / "artifacts" / model).exists() and mlflow_runs(world, model) == []


@pytest.mark.parametrize(
    "model,upstream,evaluate_first,fragments",
    [
        ("rrf-never-run", "bm25-k12", [], ["upstream model 'bm25-k12' has no retrieval_run on task scifact", "it was not evaluated, or its evaluation failed",
                                           "medbench run --models bm25-k12 --tasks scifact"]),
        ("rrf-failed-up", "broken-folder", ["broken-folder"], ["upstream model 'broken-folder' has no retrieval_run on task scifact",
                                                               "medbench run --models broken-folder --tasks scifact"]),
        ("rerank-too-deep", "bm25", [], ["rerank depth 200 is deeper than upstream run 'bm25' (k=100) on task scifact", "lower rerank.depth to <= 100"]),
    ],
)  # fmt: skip
def test_a_bad_input_fails_its_partition_alone_naming_the_entry_and_stores_nothing(world, model, upstream, evaluate_first, fragments):
    defs = world.defs()
    with world.instance() as instance:
        for m in evaluate_first:
            assert not evaluate(instance, defs, m, "scifact").success  # the upstream itself fails
        res = evaluate(instance, defs, model, "scifact")
    assert not res.success
    message = failure_message(res)
    assert f"model {model}: " in message
    for fragment in fragments:
        assert fragment in message, message
    failed = {e.step_key for e in res.all_events if e.is_step_failure}
    assert failed == {"retrieval_run"}
    assert stored_nothing(world, model)
