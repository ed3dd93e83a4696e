"""A synthetic board for the cost of adding one model (issue 53): M cheap models x T small BEIR tasks.

    python bench/synthetic_board.py DIR [--models 50] [--tasks 40] [--queries 10] [--docs 30] [--fill]

Writes into DIR (which must not exist): ``shared/data/syn_XX/`` (one BEIR folder per task:
corpus.jsonl, queries.jsonl, qrels/test.tsv), ``tasks.yaml``, ``models.yaml`` (``bm25`` and
M - 1 more BM25 entries, each with its own k1 and b: a model costs milliseconds on these tasks) and
an empty ``state/dagster_home`` with the project's dagster.yaml; :func:`env` is the environment
that points ``medbench`` at it. Every text is drawn from a fixed vocabulary with a seeded generator,
each task's queries from its own words, so that the cross-task overlap gate passes (no query
shared, none near-duplicate) and each query has one or two relevant documents that share words
with it.

``--fill`` then builds the board (:func:`fill`): ``medbench run --models bm25`` (every task curated
with its contract, the overlap gate, bm25 on every task, the leaderboard), every other model's
partitions by the stage assets' own code called directly, one after another (each stage's
artifact and manifest, each partition's MLflow run) and recorded in Dagster as materialisations of
those data versions, and a last ``medbench run`` that plans, confirms them all and writes the
leaderboard of the whole board and the ledger. Through ``medbench run``, the 1,960 partitions would
be one Dagster run each: hours on this shared 2-core machine; the measured runs (bench/bench_add_model.py)
are real ``medbench run`` commands on the board.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORDS = (
    "aspirin statin insulin metformin warfarin heparin ibuprofen paracetamol morphine codeine penicillin amoxicillin "
    "cholesterol glucose sodium potassium calcium magnesium iron zinc vitamin folate thyroid cortisol adrenaline "
    "heart lung liver kidney brain spleen pancreas stomach colon bladder skin bone muscle nerve artery vein "
    "fever cough rash pain nausea fatigue dizziness swelling bleeding itching stiffness weakness numbness "
    "asthma diabetes hypertension migraine arthritis gout anaemia eczema psoriasis epilepsy dementia sepsis "
    "infection fracture tumour ulcer stroke embolism thrombosis fibrosis cirrhosis nephritis hepatitis colitis "
    "child adult elderly pregnant infant athlete smoker patient nurse surgeon trial cohort placebo dose "
    "reduces increases prevents causes treats worsens improves lowers raises delays predicts protects "
    "chronic acute severe mild recurrent early late daily weekly oral topical intravenous surgical"
).split()
BM25 = {"method": "lucene", "stopwords": "en", "stemmer": "english"}


def write_task(folder: Path, rng: random.Random, queries: int, docs: int) -> None:
    """One BEIR task: ``docs`` documents of 20 words, ``queries`` queries of 8 words, each relevant to one or two documents it shares words with."""
    own = rng.sample(WORDS, 60)  # the task's own share of the vocabulary
    corpus = {f"d{i}": [rng.choice(own) for _ in range(20)] for i in range(docs)}
    (folder / "qrels").mkdir(parents=True)
    rows, qrels = [], []
    for q in range(queries):
        relevant = rng.sample(sorted(corpus), rng.choice((1, 2)))
        words = [rng.choice(corpus[d]) for d in relevant for _ in range(3)] + [rng.choice(WORDS) for _ in range(8 - 3 * len(relevant))]
        rng.shuffle(words)
        words = words[:8] + [f"case{folder.name}{q}"]  # a word no other task has: no two queries are near-duplicates
        rows.append({"_id": f"q{q}", "text": " ".join(words)})
        qrels += [(f"q{q}", d, 1) for d in relevant]
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": " ".join(w)}) + "\n" for d, w in corpus.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels))


def model_entries(n: int, start: int = 0) -> list[dict]:
    """``n`` BM25 entries from the ``start``-th: ``bm25`` (k1 1.5, b 0.75) first, then ``bm25-k<k1>-b<b>`` over a grid."""
    grid = [(round(0.5 + 0.1 * i, 2), b) for i in range(30) for b in (0.75, 0.5, 0.9, 0.3, 1.0, 0.6)]
    grid.remove((1.5, 0.75))
    out = []
    for i in range(start, start + n):
        k1, b = (1.5, 0.75) if i == 0 else grid[i - 1]
        name = "bm25" if i == 0 else f"bm25-k{k1:g}-b{b:g}"
        out.append({"name": name, "kind": "bm25", "revision": "bm25s-lucene", "settings": {"k1": k1, "b": b, **BM25}})
    return out


def write_models(path: Path, models: list[dict]) -> None:
    path.write_text(json.dumps({"baseline": "bm25", "models": models}, indent=1) + "\n")  # JSON is YAML


def build(root: Path, models: int, tasks: int, queries: int, docs: int, seed: int = 0) -> None:
    if root.exists():
        raise SystemExit(f"{root} exists; give a new folder")
    rng = random.Random(seed)
    lines = ["benchmark: synthetic", "licence_allowlist: [CC-BY-4.0]", "tasks:"]
    for t in range(tasks):
        name = f"syn_{t:02d}"
        write_task(root / "shared" / "data" / name, rng, queries, docs)
        lines.append(f"  - {{name: {name}, reader: beir, path: {name}, split: test, query_licence: CC-BY-4.0, doc_licence: CC-BY-4.0}}")
    (root / "tasks.yaml").write_text("\n".join(lines) + "\n")
    write_models(root / "models.yaml", model_entries(models))
    home = root / "state" / "dagster_home"
    home.mkdir(parents=True)
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")


def env(root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment in which ``medbench`` works on the board in ``root``."""
    out = {k: v for k, v in (base if base is not None else os.environ).items() if not k.startswith("MEDBENCH_") and k != "MLFLOW_TRACKING_URI"}
    out.update(
        MEDBENCH_SHARED=str(root / "shared"), MEDBENCH_DATA=str(root / "data"), MEDBENCH_STATE=str(root / "state"),
        MEDBENCH_MODELS=str(root / "models.yaml"), MEDBENCH_TASKS=str(root / "tasks.yaml"), DAGSTER_HOME=str(root / "state" / "dagster_home"),
    )  # fmt: skip
    return out


FILL = """
import sys, time
import dagster as dg
from dagster._core.definitions.data_version import CODE_VERSION_TAG, DATA_VERSION_TAG
from assets.stage import PARTITION_ASSETS, RetrievalConfig
from medbench_cli.common import prepare_environment
from orchestration.definitions import build_definitions
from orchestration.registry_sync import sync_model_partitions
prepare_environment()
defs = build_definitions()
instance = dg.DagsterInstance.get()
registry = defs.resources["registry"]
sync_model_partitions(instance, registry)
graph = defs.resolve_asset_graph()
assets = {a: defs.get_assets_def(dg.AssetKey(a)) for a in PARTITION_ASSETS}
tasks = registry.catalog().names
t0 = time.perf_counter()
models = [m.name for m in registry.models()][1:]
for i, model in enumerate(models):
    for task in tasks:
        key = f"{model}|{task}"
        for name, asset in assets.items():
            context = dg.build_asset_context(partition_key=key, resources=defs.resources, instance=instance)
            result = asset(context, RetrievalConfig())
            tags = {DATA_VERSION_TAG: result.data_version.value, CODE_VERSION_TAG: graph.get(dg.AssetKey(name)).code_version}
            event = dg.AssetMaterialization(dg.AssetKey(name), partition=key, metadata=result.metadata, tags=tags)
            instance.report_runless_asset_event(event)
    print(f"{model}: {len(tasks)} partitions ({time.perf_counter() - t0:.0f}s)", flush=True)
"""


def fill(root: Path) -> None:
    """Build the board in ``root`` (module docstring)."""
    import subprocess
    import sys

    run_env = {**env(root), "PYTHONPATH": str(ROOT)}
    medbench = [sys.executable, "-m", "medbench_cli", "run"]
    subprocess.run([*medbench, "--models", "bm25"], env=run_env, cwd=ROOT, check=True)
    subprocess.run([sys.executable, "-c", FILL], env=run_env, cwd=ROOT, check=True)
    subprocess.run(medbench, env=run_env, cwd=ROOT, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path)
    ap.add_argument("--models", type=int, default=50)
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--queries", type=int, default=10)
    ap.add_argument("--docs", type=int, default=30)
    ap.add_argument("--fill", action="store_true", help="then build the board: every model evaluated on every task (module docstring)")
    args = ap.parse_args()
    build(args.root, args.models, args.tasks, args.queries, args.docs)
    print(" ".join(f"{k}={v}" for k, v in env(args.root, {}).items()), flush=True)
    if args.fill:
        fill(args.root)


if __name__ == "__main__":
    main()
