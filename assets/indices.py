"""Search indices per model x task: exact FAISS inner-product (built on a GPU where one exists)."""

import json
from pathlib import Path

from assets.stage import Stage, StageRun
from medbench_core.retrieval.stages import build_corpus_index


def build(run: StageRun, tmp: Path) -> list[str]:
    info = build_corpus_index(run.partition.spec, run.dir("embeddings"), tmp, use_gpu=run.resources.compute.use_gpu_for_faiss(), progress=run.config.progress)
    return [*info["files"], "info.json"]


def finish(run: StageRun) -> dict:
    info = json.loads((run.dir("index") / "info.json").read_text())
    return {"index_type": info["type"], "built_on": info["built_on"]}


STAGE = Stage(
    "index",
    build,
    finish,
    group="retrieval",
    kinds=("faiss",),
    needs=("embeddings",),
    resources=("compute",),
    description="The FAISS index over one model's corpus vectors (BM25: none needed), with a sha256 manifest.",
)
