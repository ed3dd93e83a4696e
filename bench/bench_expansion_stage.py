"""The expansion stage's overhead on a warm run: a retriever's partition against the same retriever on expanded queries.

    python bench/bench_expansion_stage.py --task scifact --retriever bm25 --pairs 7

Writes a published expansion for every query of the task (plain ``{id, expansion}`` JSONL: the
query followed by 40 words of a document picked with a fixed seed) and a copy of models.yaml
with one more model, ``<retriever>+bench-q2d`` (kind expanded, query2doc, R2MED's combination),
into a temporary folder, and points MEDBENCH_MODELS at it. Then, on this checkout's instance and
data (the task must be curated: ``medbench run --tasks <task> --models <retriever>`` first), it
runs ``evaluate_partition`` once per partition to warm it (the expanded partition builds its
expansion, contract verdict, run and MLflow runs), then ``--pairs`` rounds of warm runs of both
in alternating order (bench/paired.py: A B, B A, ...), and reports the per-round ratio expanded /
retriever of the job's wall and CPU time (this process, every thread), median and range, and the
medians of every step's duration (from Dagster's event log). On a warm run every step is a cache hit; what the expanded partition adds
is the ``query_expansion`` step (keys, manifest check) and its ``expansion_contract`` check
(recorded verdict reused, MLflow run reused).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import paired  # noqa: E402


def write_fixture(folder: Path, task_dir: Path, retriever: str, models_file: Path) -> str:
    import polars as pl
    import yaml

    queries = pl.read_parquet(task_dir / "queries.parquet")
    corpus = pl.read_parquet(task_dir / "corpus.parquet")
    rng = random.Random(0)
    texts = corpus["text"].fill_null("").to_list()
    task = task_dir.name
    with open(folder / f"{task}.jsonl", "w") as f:
        for q, t in queries.select("query_id", "text").iter_rows():
            words = texts[rng.randrange(len(texts))].split()[:40]
            f.write(json.dumps({"id": q, "expansion": (t or "") + " " + " ".join(words)}) + "\n")
    doc = yaml.safe_load(models_file.read_text())
    name = f"{retriever}+bench-q2d"
    doc["models"].append({"name": name, "kind": "expanded", "retriever": retriever, "expansion": "bench-q2d"})
    doc["expansions"] = [
        *(doc.get("expansions") or []),
        {"name": "bench-q2d", "method": "query2doc", "source": "file", "generator": "bench", "path": str(folder), "format": "jsonl"},
    ]
    (folder / "models.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return name


def step_seconds(instance, run_id: str) -> dict[str, float]:
    """Seconds from each step's start to its success, from the run's event log."""
    start, out = {}, {}
    for entry in instance.all_logs(run_id):
        ev = entry.dagster_event
        if ev is None or not ev.step_key:
            continue
        if ev.event_type_value == "STEP_START":
            start[ev.step_key] = entry.timestamp
        elif ev.event_type_value == "STEP_SUCCESS" and ev.step_key in start:
            out[ev.step_key] = entry.timestamp - start[ev.step_key]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="scifact")
    ap.add_argument("--retriever", default="bm25")
    paired.add_arguments(ap, default=7)
    args = ap.parse_args()

    from runtime import settings

    task_dir = settings.DATA / "tasks" / args.task
    if not (task_dir / "MANIFEST.json").exists():
        sys.exit(f"task {args.task} is not curated under {settings.DATA}; run `medbench run --tasks {args.task} --models {args.retriever}` first")
    tmp = Path(tempfile.mkdtemp(prefix="bench-expansion-"))
    expanded = write_fixture(tmp, task_dir, args.retriever, settings.MODELS_FILE)
    os.environ["MEDBENCH_MODELS"] = str(tmp / "models.yaml")
    settings.MODELS_FILE = tmp / "models.yaml"

    import dagster as dg

    from medbench_cli.common import prepare_environment, quiet_run_config
    from orchestration.definitions import build_definitions
    from orchestration.registry_sync import sync_model_partitions
    from runtime.partitions import partition_key

    prepare_environment()
    defs = build_definitions()
    instance = dg.DagsterInstance.get()
    defs.resources["mlflow"].ensure_store()
    sync_model_partitions(instance, defs.resources["registry"])
    job = defs.resolve_job_def("evaluate_partition")

    def run(model: str) -> paired.Sample:
        sample = paired.call(
            lambda: job.execute_in_process(instance=instance, partition_key=partition_key(model, args.task), run_config=quiet_run_config(), raise_on_error=True)
        )
        return paired.Sample(sample.wall, sample.cpu, sample.peak_rss, step_seconds(instance, sample.value.run_id))

    models = [args.retriever, expanded]
    cold = {m: run(m).wall for m in models}
    m_ = paired.measure({m: (lambda m=m: run(m)) for m in models}, args.pairs)
    steps: dict[str, dict[str, list[float]]] = {m: {} for m in models}
    for m in models:
        for sample in m_.samples[m]:
            for k, v in sample.value.items():
                steps[m].setdefault(k, []).append(v)
    print(f"task {args.task}, {args.pairs} warm runs each (first runs: {', '.join(f'{m} {cold[m]:.2f}s' for m in models)})")
    print(m_.table([(f"{expanded} / {args.retriever}, warm partition", expanded, args.retriever)]))
    print()
    print("| step (median) | " + " | ".join(models) + " |")
    print("|---|" + "---:|" * len(models))
    order = ("corpus_embeddings", "corpus_index", "query_expansion", "retrieval_run", "task_metrics")
    names = sorted({k for m in models for k in steps[m]}, key=lambda k: (next((i for i, a in enumerate(order) if k.startswith(a)), len(order)), len(k)))
    for k in names:
        cells = [f"{statistics.median(steps[m][k]) * 1000:.0f} ms" if k in steps[m] else "-" for m in models]
        print(f"| {k} | " + " | ".join(cells) + " |")
    print("| whole job (wall) | " + " | ".join(f"{m_.seconds(m, 'wall')[0]:.2f} s" for m in models) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
