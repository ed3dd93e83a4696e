"""The export read back by the real mteb (the package pinned in requirements.lock; nothing installed here).

mteb's own loading (``mteb.ResultCache(DIR).load_results``, mteb/cache/result_cache.py) finds the
exported R2MED cell under MTEB's task name and the model under its hub id, with the very
nDCG@10 medbench computed; every model_meta.json passes mteb's ``ModelMeta`` validation.
"""

import json

import polars as pl
import pytest

from medbench_core.evaluation.exports import export, mteb_models, mteb_task_names
from medbench_core.evaluation.reports import Cell
from medbench_core.retrieval.model_registry import model_spec

pytestmark = pytest.mark.slow  # imports mteb (seconds)

BIOLOGY_REVISION = "8b9fec2db9eda4b5742d03732213fbaee8169556"  # mteb 2.26.24, mteb/tasks/retrieval/eng/r2_med_retrieval.py
BGE_REVISION = "d4aa6901d3a41ba39fb536a557fa166f842b0e09"
SPECS = [
    model_spec(name="bm25", kind="bm25", revision="bm25s-lucene", settings={"k1": 0.9, "b": 0.4}),
    model_spec(name="bge-large-en-v1.5", kind="transformers", path="BAAI/bge-large-en-v1.5", revision="main",
               settings={"pooling": "cls", "normalize": True, "max_length": 512, "instructions": {"default": "Represent this: "}}),
    model_spec(name="bge-large-en-v1.5-chunked", kind="transformers", path="BAAI/bge-large-en-v1.5", revision="main",
               settings={"long_text": "chunk", "max_length": 512}),
    model_spec(name="rrf", kind="fusion", fusion={"method": "rrf", "runs": ["bm25", "bge-large-en-v1.5"]}),
]  # fmt: skip
REVISIONS = {"bm25": "bm25s-lucene", "bge-large-en-v1.5": BGE_REVISION, "bge-large-en-v1.5-chunked": BGE_REVISION, "rrf": ""}


def cell(model: str, task: str, ndcg: float, **kw) -> Cell:
    ids = ["q1", "q2"]
    return Cell(model, task, metrics={"mean": {"ndcg_at_10": ndcg, "recall_at_100": 0.5}, "n_queries": 2},
                per_query=pl.DataFrame({"query_id": ids, "ndcg_at_10": [ndcg, ndcg]}), model_revision=REVISIONS[model], seconds=1.5, **kw)  # fmt: skip


def r2med(model: str, ndcg: float) -> Cell:
    return cell(model, "r2med_biology", ndcg, dataset="R2MED/Biology", subset="Biology", task_revision=BIOLOGY_REVISION, split="test")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export")
    cells = [
        r2med("bge-large-en-v1.5", 0.312346), r2med("bge-large-en-v1.5-chunked", 0.25), r2med("bm25", 0.19188), r2med("rrf", 0.2),
        cell("bm25", "scifact", 0.6964, task_revision="f3a140d2576115a8", split="train"),
    ]  # fmt: skip
    index = export(cells, out, models=mteb_models(SPECS, REVISIONS), tasks=mteb_task_names(cells))
    return out, index


def test_mteb_loads_the_export_finds_the_task_by_name_and_reads_the_same_ndcg(exported):
    import mteb

    out, index = exported
    task = mteb.get_task("R2MEDBiologyRetrieval")
    results = mteb.ResultCache(out).load_results(tasks=[task], include_remote=False, validate_and_filter=True)
    got = {(m.model_name, m.model_revision): {t.task_name: t for t in m.task_results} for m in results.model_results}
    assert set(got) == {("BAAI/bge-large-en-v1.5", BGE_REVISION), ("medbench/bge-large-en-v1.5-chunked", BGE_REVISION),
                        ("medbench/bm25", "bm25s-lucene"), ("medbench/rrf", None)}  # fmt: skip
    bge = got[("BAAI/bge-large-en-v1.5", BGE_REVISION)]["R2MEDBiologyRetrieval"]
    assert bge.get_score() == 0.312346 and bge.scores["test"][0]["ndcg_at_10"] == 0.312346
    assert bge.dataset_revision == task.metadata.revision == BIOLOGY_REVISION
    assert bge.scores["test"][0]["languages"] == ["eng-Latn"] and bge.scores["test"][0]["hf_subset"] == "default"
    assert got[("medbench/bm25", "bm25s-lucene")]["R2MEDBiologyRetrieval"].get_score() == 0.19188
    # All results: the task that is no MTEB task is loaded under medbench's name, beside the MTEB one.
    everything = mteb.ResultCache(out).load_results(include_remote=False)
    bm25 = next(m for m in everything.model_results if m.model_name == "medbench/bm25")
    assert sorted(t.task_name for t in bm25.task_results) == ["R2MEDBiologyRetrieval", "scifact"]
    assert index["tasks"]["scifact"]["kept_medbench_name"] is True and index["tasks"]["r2med_biology"]["mteb_task"] == "R2MEDBiologyRetrieval"


def test_every_model_meta_passes_mtebs_validation(exported):
    from mteb.models.model_meta import ModelMeta

    out, index = exported
    files = sorted(out.glob("results/*/*/model_meta.json"))
    assert [str(p.relative_to(out)) for p in files] == [
        f"results/BAAI__bge-large-en-v1.5/{BGE_REVISION}/model_meta.json",
        f"results/medbench__bge-large-en-v1.5-chunked/{BGE_REVISION}/model_meta.json",
        "results/medbench__bm25/bm25s-lucene/model_meta.json",
        "results/medbench__rrf/no_revision_available/model_meta.json",
    ]
    metas = {p.parent.parent.name: ModelMeta.model_validate_json_resolved(p.read_text()) for p in files}
    bge = metas["BAAI__bge-large-en-v1.5"]
    assert (bge.name, bge.revision, bge.similarity_fn_name.value, bge.use_instructions) == ("BAAI/bge-large-en-v1.5", BGE_REVISION, "cosine", True)
    assert bge.framework == ["Transformers", "PyTorch"] and bge.max_tokens == 512 and bge.adapted_from is None
    chunked = metas["medbench__bge-large-en-v1.5-chunked"]
    assert chunked.adapted_from == "BAAI/bge-large-en-v1.5"  # the same weights with other settings: not the hub model's own results
    assert metas["medbench__bm25"].framework == [] and metas["medbench__bm25"].model_type == ["sparse"]
    assert metas["medbench__rrf"].model_type == ["hybrid"] and metas["medbench__rrf"].revision is None
    assert index["models"] == {"bge-large-en-v1.5": "BAAI/bge-large-en-v1.5", "bge-large-en-v1.5-chunked": "medbench/bge-large-en-v1.5-chunked",
                               "bm25": "medbench/bm25", "rrf": "medbench/rrf"}  # fmt: skip
    # What mteb refuses, so that the test above could fail: a name without "/", medbench's old framework.
    bad = json.loads(files[2].read_text())
    for change in ({"name": "bm25"}, {"framework": ["medbench"]}, {"similarity_fn_name": "euclidean"}):
        with pytest.raises(ValueError):
            ModelMeta.model_validate_json_resolved(json.dumps({**bad, **change}))


def test_a_hub_dataset_no_mteb_task_reads_keeps_medbenchs_name():
    # Same dataset at another revision: not MTEB's task (its scores were computed on other data).
    other = r2med("bm25", 0.1)
    names = mteb_task_names([Cell(**{**other.__dict__, "task_revision": "0" * 40})])
    assert names["r2med_biology"]["mteb_task"] is None and "no MTEB retrieval task reads R2MED/Biology@000000000000" in names["r2med_biology"]["reason"]
