"""Retrieval runs per model x task: the top k documents for every query, in TREC format.

A retriever searches its own index. A model built from upstreams (fusion, cross-encoder rerank,
a retriever on expanded queries) builds its run from what they stored
(:func:`medbench_core.retrieval.derived.build_derived_run`); its inputs are loaded and verified before
anything is written, so a missing or failed upstream stores nothing.
"""

import json
from pathlib import Path

from assets.stage import Stage, StageRun
from medbench_core.retrieval.derived import build_derived_run, check_inputs, inputs
from medbench_core.retrieval.kinds.capabilities import model_for_run
from medbench_core.retrieval.kinds.derived_base import is_derived
from medbench_core.retrieval.stages import retrieve


def check(run: StageRun) -> None:
    """A derived model's inputs, each verified; DataError naming the upstream, the task and what to run otherwise."""
    p = run.partition
    if is_derived(p.spec):
        run.inputs = p.load_inputs()
        check_inputs(p.spec, p.task, run.inputs)  # e.g. a rerank depth beyond the upstream's k


def build(run: StageRun, tmp: Path) -> list[str]:
    p, compute, config = run.partition, run.resources.compute, run.config
    if is_derived(p.spec):
        return build_derived(run, tmp)
    encoder = compute.encoder(p.spec, config.progress)
    _, info = retrieve(
        p.spec, p.task, run.dir("embeddings"), run.dir("index"), tmp,
        k=config.k, device=compute.device_for(p.spec), progress=config.progress, encoder=encoder, online=compute.online,
    )  # fmt: skip
    return [*info["files"], "info.json"]


def build_derived(run: StageRun, tmp: Path) -> list[str]:
    p, compute, config = run.partition, run.resources.compute, run.config
    # The model kept loaded in this process: the cross-encoder, or an expanded model's retriever's encoder.
    loaded = model_for_run(p.spec, p.registry)
    model = compute.encoder(loaded, config.progress) if loaded is not None else None
    _, info = build_derived_run(p.spec, p.task, run.inputs, tmp, k=config.k, device=compute.torch_device(), progress=config.progress, model=model)
    return [*info["files"], "info.json"]


def finish(run: StageRun) -> dict:
    info = json.loads((run.dir("run") / "info.json").read_text())
    shown = {"k": info["k"], "rows": info["n_rows"], "seconds": info["seconds"]}
    if is_derived(run.partition.spec):
        ups = info.get("upstream", {})
        shown["upstream"] = ", ".join(f"{name} {ups.get(name, '')}" for name in inputs(run.partition.spec))
    if info.get("notes"):  # e.g. an expanded run's empty expansions, scored as R2MED scores them
        shown["notes"] = "\n".join(info["notes"])
    return shown


STAGE = Stage(
    "run",
    build,
    finish,
    group="retrieval",
    kinds=("parquet",),
    needs=("embeddings", "index"),
    resources=("compute",),
    check=check,
    description="Top-k ranking per query (ties by doc id, as trec_eval orders them), query vectors kept for re-scoring; "
    "a fusion, reranker or expanded model builds it from its upstreams' stored runs, corpus and expansion.",
)
