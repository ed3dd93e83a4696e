"""Corpus representations per model x task: dense vectors, or BM25's sparse index."""

from pathlib import Path

from assets.stage import Stage, StageRun
from medbench_core.retrieval.stages import embed_corpus
from medbench_core.storage import read_manifest


def build(run: StageRun, tmp: Path) -> list[str]:
    p, compute = run.partition, run.resources.compute
    encoder = compute.encoder(p.spec, run.config.progress)
    info = embed_corpus(p.spec, p.task, tmp, device=compute.device_for(p.spec), progress=run.config.progress, encoder=encoder, online=compute.online)
    return [*info["files"], "info.json"]


def finish(run: StageRun) -> dict:
    return {"files": len(read_manifest(run.dir("embeddings"))["files"])}


STAGE = Stage(
    "embeddings",
    build,
    finish,
    group="retrieval",
    kinds=("numpy",),
    resources=("compute",),
    description="The corpus encoded by one model (float32 vectors, or a bm25s sparse index), keyed by its provenance.",
)
