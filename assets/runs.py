"""Retrieval runs per model x task: the top k documents for every query, in TREC format."""

import json
from pathlib import Path

from assets.stage import Stage, StageRun
from medbench_core.pipeline import retrieve


def build(run: StageRun, tmp: Path) -> list[str]:
    p, compute, config = run.partition, run.resources.compute, run.config
    encoder = compute.encoder(p.spec, config.progress)
    _, info = retrieve(
        p.spec, p.task, run.dir("embeddings"), run.dir("index"), tmp,
        k=config.k, device=compute.torch_device(), progress=config.progress, encoder=encoder, online=compute.online,
    )  # fmt: skip
    return [*info["files"], "info.json"]


def finish(run: StageRun) -> dict:
    info = json.loads((run.dir("run") / "info.json").read_text())
    return {"k": info["k"], "rows": info["n_rows"], "seconds": info["seconds"]}


STAGE = Stage(
    "run", build, finish, group="retrieval", kinds=("parquet",), needs=("embeddings", "index"), resources=("compute",),
    description="Top-k ranking per query (ties by doc id, as trec_eval orders them), query vectors kept for re-scoring.",
)
