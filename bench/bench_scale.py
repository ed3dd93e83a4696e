"""The whole pipeline at scale: `medbench run --serial` against the bare libraries, paired, stage by stage.

    python bench/bench_scale.py pipeline --docs 200000 --queries 20000 --pairs 5     # then 1200000
    python bench/bench_scale.py report                                             # tables + log-log plot

For each size a seeded synthetic BEIR task (bench/scale_corpus.py: shuffled SciFact abstracts,
12-word queries, one judgment each) is generated once under ``--work`` (default
/tmp/medbench-scale). Then the two sides run in interleaved rounds (bench/paired.py: bare then
medbench, medbench then bare, ...), each in its own process, watched by a sampler
(bench/scale_probe.py: per-process peak RSS from VmHWM, reset every 0.1 s):

- **bare**: ``python bench/bench_scale.py bare``: polars reads the BEIR files and writes them as
  Parquet; bm25s (``BM25(method="lucene", k1=1.5, b=0.75)``, ``tokenize(stopwords="en",
  stemmer=PyStemmer english)``, the settings of models.yaml's bm25) indexes title + text and saves
  the index; ``retrieve(k=100, n_threads=1)``; the run written as Parquet; pytrec_eval-terrier scores
  nDCG@10, recall@10/@100, MAP@100 and MRR@10 (a second evaluator on the run cut at 10), the
  per-query values are written as Parquet and each metric gets a 95% percentile bootstrap CI
  (scipy, 10,000 resamples, seed 0, batches of 1,000 resamples);
- **medbench**: ``medbench run --serial`` in a fresh world (its own data, state, MLflow store,
  DAGSTER_HOME, a tasks.yaml with the one task and a models.yaml with bm25 only): start-up,
  curation with its GX contract, the overlap gate, the partition's five steps, the leaderboard.
  Its stage windows are the step start/end events of Dagster's event log.

With ``--floor`` two more sides run in every round, the libraries' floor on this task
(bench/platform_floor_work.py): **floor_bare** imports the bare side's libraries and reads the task's
three tables; **floor_work** does the same after importing Dagster, MLflow and Great Expectations, then
has them do one partition's bookkeeping by their bare calls (four Dagster runs, the GX checkpoints of
medbench's contract on these tables with data docs, two MLflow runs). Their difference is what no run
through those libraries can spend less than above bare: the floor ratio of a round is (bare + that
CPU) / bare, and (bare peak + the libraries' resident memory) / bare peak for memory. ``--target-cpu``
and ``--target-memory`` print whether the medians meet a target.

Each side's CPU time is its process tree's (``os.wait4``'s rusage: the process and the children it
waited for); its peak memory, the largest single process's VmHWM. The figures are the per-round
ratios medbench / bare (CPU, wall, peak memory), median and range, with each stage's median CPU
seconds and share of the total; every round is saved in
``<work>/results/pipeline-<docs>x<queries><tag>.json`` (``report`` reads them). Runs above 400K
documents check that 14 GB are available first (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import paired  # noqa: E402
from scale_probe import Marks, Sampler, gb, read_marks  # noqa: E402

WORK = Path(os.environ.get("MEDBENCH_SCALE_WORK") or "/tmp/medbench-scale")
BM25 = {"k1": 1.5, "b": 0.75, "method": "lucene", "stopwords": "en", "stemmer": "english"}
BARE_IMPORTS = "bm25s,Stemmer,numpy,polars,pytrec_eval,scipy.stats"  # what the bare side imports (bare() below)
FLOOR_SIDES = ("floor_bare", "floor_work")
K = 100
BIG = 400_000
NEED_GB = 14


def size_name(n: int) -> str:
    """100000 -> 100k, 1200000 -> 1.2m."""
    return f"{n / 1e6:g}m" if n >= 1_000_000 else f"{n / 1e3:g}k"


def data_dir(work: Path, docs: int, queries: int) -> Path:
    from scale_corpus import ensure

    return ensure(work / "data" / f"scale_{size_name(docs)}_{size_name(queries)}", docs, queries)


def check_memory(docs: int, force: bool) -> None:
    import psutil

    avail = psutil.virtual_memory().available / 2**30
    if docs > BIG and avail < NEED_GB and not force:
        raise SystemExit(f"{docs} documents: {avail:.1f} GB available, {NEED_GB} GB wanted on this shared machine; wait, or pass --force-memory")


# --- the bare side ----------------------------------------------------------------------------


def bare(data: Path, out: Path, marks: Path) -> None:
    """The bare libraries doing medbench's work (module docstring), marking each phase."""
    m = Marks(marks)
    import bm25s
    import numpy as np
    import polars as pl
    import pytrec_eval
    import Stemmer
    from scipy.stats import bootstrap

    m.mark("import")
    out.mkdir(parents=True, exist_ok=True)
    corpus = pl.read_ndjson(data / "corpus.jsonl", schema={"_id": pl.Utf8, "title": pl.Utf8, "text": pl.Utf8})
    queries = pl.read_ndjson(data / "queries.jsonl", schema={"_id": pl.Utf8, "text": pl.Utf8})
    qrels = pl.read_csv(data / "qrels" / "test.tsv", separator="\t", schema={"query-id": pl.Utf8, "corpus-id": pl.Utf8, "score": pl.Int32})
    for name, df in (("corpus", corpus), ("queries", queries), ("qrels", qrels)):
        df.write_parquet(out / f"{name}.parquet")
    m.mark("read_write", docs=corpus.height)
    texts = corpus.select(pl.concat_str([pl.col("title").fill_null(""), pl.col("text").fill_null("")], separator=" ").str.strip_chars()).to_series().to_list()
    doc_ids = corpus["_id"].to_list()
    del corpus
    stemmer = Stemmer.Stemmer(BM25["stemmer"])
    tokens = bm25s.tokenize(texts, stopwords=BM25["stopwords"], stemmer=stemmer, show_progress=False)
    del texts
    m.mark("tokenize")
    retriever = bm25s.BM25(method=BM25["method"], k1=BM25["k1"], b=BM25["b"])
    retriever.index(tokens, show_progress=False)
    del tokens
    retriever.save(str(out / "bm25"))
    m.mark("index")
    qids = queries["_id"].to_list()
    qtok = bm25s.tokenize(queries["text"].to_list(), stopwords=BM25["stopwords"], stemmer=stemmer, return_ids=False, show_progress=False)
    docs, scores = retriever.retrieve(qtok, k=K, n_threads=1, show_progress=False)
    run = pl.DataFrame(
        {
            "query_id": np.repeat(np.array(qids, dtype=object), K),
            "doc_id": [doc_ids[i] for i in docs.ravel().tolist()],
            "score": scores.ravel().astype(np.float64),
            "rank": np.tile(np.arange(1, K + 1, dtype=np.int32), len(qids)),
        }
    )
    run.write_parquet(out / "run.parquet")
    m.mark("retrieve")
    judged: dict[str, dict[str, int]] = {}
    for q, d, s in qrels.iter_rows():
        judged.setdefault(q, {})[d] = int(s)
    as_dict: dict[str, dict[str, float]] = {}
    top10: dict[str, dict[str, float]] = {}
    for q, d, s, r in run.iter_rows():
        as_dict.setdefault(q, {})[d] = s
        if r <= 10:
            top10.setdefault(q, {})[d] = s
    res = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut_10", "recall_10", "recall_100", "map_cut_100"}).evaluate(as_dict)
    rr = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank"}).evaluate(top10)
    names = {"ndcg_cut_10": "ndcg_at_10", "recall_10": "recall_at_10", "recall_100": "recall_at_100", "map_cut_100": "map_at_100"}
    rows = [{"query_id": q, **{names[k]: res.get(q, {}).get(k, 0.0) for k in names}, "mrr_at_10": rr.get(q, {}).get("recip_rank", 0.0)} for q in sorted(judged)]
    per_query = pl.DataFrame(rows)
    per_query.write_parquet(out / "per_query.parquet")
    ci = {}
    for col in per_query.columns[1:]:
        x = per_query[col].to_numpy()
        b = bootstrap((x,), np.mean, n_resamples=10_000, vectorized=True, method="percentile", rng=np.random.default_rng(0), batch=1000)
        ci[col] = [float(b.confidence_interval.low), float(b.confidence_interval.high)]
    mean = {c: float(per_query[c].mean()) for c in per_query.columns[1:]}
    (out / "metrics.json").write_text(json.dumps({"mean": mean, "ci": ci}, indent=1))
    m.mark("evaluate", ndcg_at_10=mean["ndcg_at_10"])


def run_bare(work: Path, data: Path, label: str) -> dict:
    out = work / f"bare-{label}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    marks = out / "marks.jsonl"
    cmd = [sys.executable, str(Path(__file__).resolve()), "bare", "--data", str(data), "--out", str(out / "files"), "--marks", str(marks)]
    return _watch(cmd, dict(os.environ), out, lambda: read_marks(marks))


# --- the medbench side ------------------------------------------------------------------------


def make_world(root: Path, data: Path, task: str) -> dict[str, str]:
    """A fresh medbench world around ``data``: tasks.yaml (one beir task), models.yaml (bm25 only), empty state. Returns its environment."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "shared" / "data").mkdir(parents=True)  # the corpus stays where it is, named by its absolute path (a link out is refused)
    (root / "tasks.yaml").write_text(
        "benchmark: medbench-scale\n"
        "licence_allowlist: [CC-BY-4.0, ODC-By-1.0]\n"
        "tasks:\n"
        f"  - name: {task}\n    reader: beir\n    path: {Path(data).resolve()}\n    split: test\n"
        "    query_licence: CC-BY-4.0\n    doc_licence: ODC-By-1.0\n    discipline: biomedicine\n"
        "    source: synthetic, bench/scale_corpus.py (shuffled SciFact abstracts)\n"
    )
    bm25 = {"name": "bm25", "kind": "bm25", "revision": "bm25s-lucene", "settings": BM25}
    (root / "models.yaml").write_text(json.dumps({"baseline": "bm25", "models": [bm25]}, indent=1) + "\n")
    home = root / "state" / "dagster_home"
    home.mkdir(parents=True)
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    env = dict(os.environ)
    env.update(
        MEDBENCH_SHARED=str(root / "shared"), MEDBENCH_DATA=str(root / "data"), MEDBENCH_STATE=str(root / "state"),
        MEDBENCH_MODELS=str(root / "models.yaml"), MEDBENCH_TASKS=str(root / "tasks.yaml"), DAGSTER_HOME=str(home),
    )  # fmt: skip
    env.pop("MLFLOW_TRACKING_URI", None)
    # Bytecode written and reused, as an installed package has it (with PYTHONDONTWRITEBYTECODE, as this machine sets it,
    # every medbench process compiled its own modules: 0.6 s of CPU a run; the bare side's libraries keep theirs).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def dagster_steps(home: Path) -> list[dict]:
    """Every step of every run in the instance at ``home``: job, step key, start and end (wall clock)."""
    import dagster as dg

    inst = dg.DagsterInstance.from_config(str(home))
    kinds = {dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE}
    steps: dict[tuple[str, str], dict] = {}
    for rec in inst.get_run_records():
        run = rec.dagster_run
        for ev in inst.all_logs(run.run_id, of_type=kinds):
            s = steps.setdefault((run.run_id, ev.step_key), {"job": run.job_name, "phase": ev.step_key})
            if ev.dagster_event.event_type == dg.DagsterEventType.STEP_START:
                s["start"] = ev.timestamp
            else:
                s["end"] = ev.timestamp
                s["ok"] = ev.dagster_event.event_type == dg.DagsterEventType.STEP_SUCCESS
    return sorted((s for s in steps.values() if "start" in s and "end" in s), key=lambda s: s["start"])


def run_medbench(work: Path, data: Path, label: str, code: Path = ROOT) -> dict:
    """``medbench run --serial`` of the checkout at ``code`` (default this one) in a fresh world."""
    root = work / f"medbench-{label}"
    env = make_world(root, data, "scale")
    env.update(MEDBENCH_ROOT=str(code), PYTHONPATH=str(code))
    cmd = [sys.executable, "-m", "medbench_cli", "run", "--serial"]
    out = _watch(cmd, env, root, lambda: dagster_steps(root / "state" / "dagster_home"), cwd=code)
    for f in (root / "data" / "artifacts").glob("bm25/scale/metrics/*/metrics.json"):
        out["ndcg_at_10"] = json.loads(f.read_text())["mean"]["ndcg_at_10"]
    return out


# --- watching a process -----------------------------------------------------------------------


def _watch(cmd: list[str], env: dict, folder: Path, phases, cwd: Path | None = None) -> dict:
    """Run ``cmd`` under the sampler; its output to ``folder/output.log``; phases from ``phases()`` afterwards.

    CPU seconds and the largest process's peak come from ``os.wait4`` (the process and the children
    it waited for); the sampler gives each phase's CPU and peaks, and the tree's summed peak."""
    log = open(folder / "output.log", "w")
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    sampler = Sampler(proc.pid).start()
    _, status, usage = os.wait4(proc.pid, 0)
    code = proc.returncode = os.waitstatus_to_exitcode(status)
    t1 = time.time()
    sampler.stop()
    log.close()
    cpu = usage.ru_utime + usage.ru_stime
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {code}; see {folder / 'output.log'}:\n" + (folder / "output.log").read_text()[-3000:])
    rows = []
    for p in phases():
        tree_peak, proc_peak = sampler.peak(p["start"], p["end"])
        rows.append(
            {
                **p,
                "seconds": round(p["end"] - p["start"], 3),
                "cpu_s": round(sampler.cpu(p["start"], p["end"]), 2),
                "peak_tree_gb": gb(tree_peak),
                "peak_proc_gb": gb(proc_peak),
            }
        )
    tree_peak, proc_peak = sampler.peak()
    return {
        "wall_s": round(t1 - t0, 2), "cpu_s": round(cpu, 2), "start": t0, "end": t1, "maxrss_gb": gb(usage.ru_maxrss * 1024),
        "peak_tree_gb": gb(tree_peak), "peak_proc_gb": gb(max(proc_peak, usage.ru_maxrss * 1024)), "phases": rows,
        "timeline": [(round(t - t0, 2), gb(s), gb(m), round(c, 2)) for t, s, m, _, c in sampler.samples],
    }  # fmt: skip


# --- stage table --------------------------------------------------------------------------------

# medbench step -> the stage it belongs to; the bare phase of each stage.
STAGE_OF_STEP = {
    "curated_task": "curate",
    "curated_task_task_contract": "contract",
    "curated_task_tasks_do_not_overlap": "overlap",
    "corpus_embeddings": "index",
    "corpus_index": "index",
    "query_expansion": "other steps",
    "query_expansion_expansion_contract": "other steps",
    "retrieval_run": "retrieve",
    "task_metrics": "metrics",
    "leaderboard": "leaderboard",
}
BARE_STAGE = {"import": "start-up", "read_write": "curate", "tokenize": "index", "index": "index", "retrieve": "retrieve", "evaluate": "metrics"}
ORDER = ["start-up", "curate", "contract", "overlap", "index", "other steps", "retrieve", "metrics", "leaderboard", "outside steps"]


def stage_table(side: dict, mapping: dict, fallback: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    covered = 0.0
    for p in side["phases"]:
        stage = mapping.get(p["phase"], fallback)
        row = out.setdefault(stage, {"seconds": 0.0, "cpu_s": 0.0, "peak_tree_gb": 0.0, "peak_proc_gb": 0.0})
        row["seconds"] = round(row["seconds"] + p["seconds"], 2)
        row["cpu_s"] = round(row["cpu_s"] + p.get("cpu_s", 0.0), 2)
        row["peak_tree_gb"] = max(row["peak_tree_gb"], p["peak_tree_gb"])
        row["peak_proc_gb"] = max(row["peak_proc_gb"], p["peak_proc_gb"])
        covered += p["seconds"]
    rest = side["wall_s"] - covered
    if rest > 0.01:
        key = "start-up" if mapping is BARE_STAGE else "outside steps"
        row = out.setdefault(key, {"seconds": 0.0, "cpu_s": 0.0, "peak_tree_gb": 0.0, "peak_proc_gb": 0.0})
        row["seconds"] = round(row["seconds"] + rest, 2)
        row["cpu_s"] = round(row["cpu_s"] + max(0.0, side["cpu_s"] - sum(p.get("cpu_s", 0.0) for p in side["phases"])), 2)
        inside = [(p["start"], p["end"]) for p in side["phases"]]
        outside = [s for s in side.get("timeline", []) if not any(a - side["start"] <= s[0] <= b - side["start"] for a, b in inside)]
        if outside:
            row["peak_tree_gb"] = max(row["peak_tree_gb"], max(s[1] for s in outside))
            row["peak_proc_gb"] = max(row["peak_proc_gb"], max(s[2] for s in outside))
    return out


def pipeline(args: argparse.Namespace) -> None:
    import datetime as dt

    (args.work / "results").mkdir(parents=True, exist_ok=True)
    print(paired.header("pipeline: medbench run --serial vs bare polars + bm25s + pytrec_eval + scipy"), flush=True)
    for docs in [int(x) for x in args.docs.split(",")]:
        check_memory(docs, args.force_memory)
        data = data_dir(args.work, docs, args.queries)
        label = f"{size_name(docs)}x{size_name(args.queries)}"
        res = {
            "docs": docs,
            "queries": args.queries,
            "code": str(args.code),
            "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "load_before": os.getloadavg(),
            "rounds": [],
        }
        path = args.work / "results" / f"pipeline-{label}{args.tag}.json"

        def side(name: str):
            def run() -> paired.Sample:
                if name in FLOOR_SIDES:
                    cmd = [sys.executable, str(ROOT / "bench" / "platform_floor_work.py"), "--data", str(data), "--imports", BARE_IMPORTS, "--lean"]
                    cmd += ["--mlflow-template", str(empty_mlflow_store(args.work))]
                    log = args.work / f"{name}-{label}.log"
                    sample = paired.child(cmd + (["--bare"] if name == "floor_bare" else []), timeout=3600, log=log)
                    said = json.loads(log.read_text().strip().splitlines()[-1])
                    peak = gb(sample.peak_rss)
                    out = {"wall_s": round(sample.wall, 2), "cpu_s": round(sample.cpu, 2), "peak_proc_gb": peak, "peak_tree_gb": peak, "load": os.getloadavg()}
                    out["rss_after_imports_gb"] = said["rss_after_imports_gb"]
                    return paired.Sample(sample.wall, sample.cpu, sample.peak_rss, out | {"phases": [], "timeline": []})
                check_memory(docs, args.force_memory)
                out = run_bare(args.work, data, label) if name == "bare" else run_medbench(args.work, data, label, args.code)
                if name == "bare":
                    ev = [p for p in out["phases"] if p["phase"] == "evaluate"]
                    out["ndcg_at_10"] = ev[0].get("ndcg_at_10") if ev else None
                out["load"] = os.getloadavg()
                return paired.Sample(out["wall_s"], out["cpu_s"], int(out["peak_proc_gb"] * 2**30), out)

            return run

        def keep(r: int, name: str, sample: paired.Sample) -> None:
            out = sample.value
            print(
                f"[{label}] round {r + 1} {name}: wall {out['wall_s']} s, CPU {out['cpu_s']} s, "
                f"peak {out['peak_proc_gb']} GB (tree {out['peak_tree_gb']}), load {out['load'][0]:.1f}",
                flush=True,
            )
            if len(res["rounds"]) <= r:
                res["rounds"].append({})
            res["rounds"][r][name] = {k: v for k, v in out.items() if k != "timeline"} | {"timeline": out["timeline"][::10]}
            path.write_text(json.dumps(res, indent=1))  # after every run: a long measurement interrupted keeps what it has
            if not args.keep:
                shutil.rmtree(args.work / f"{name}-{label}", ignore_errors=True)

        sides = args.sides.split(",") + (list(FLOOR_SIDES) if args.floor else [])
        m = paired.measure({name: side(name) for name in sides}, args.pairs, report=keep)
        res["load_after"] = os.getloadavg()
        res["figures"] = (
            {what: list(m.ratio("medbench", "bare", what).values) for what in ("cpu", "wall", "peak_rss")} if {"bare", "medbench"} <= set(sides) else {}
        )
        if {"bare", *FLOOR_SIDES} <= set(sides):
            res["floor"] = floor_figures(m)
        path.write_text(json.dumps(res, indent=1))
        if {"bare", "medbench"} <= set(sides):
            print(f"\n{docs:,} documents x {args.queries:,} queries\n" + m.table([("medbench / bare", "medbench", "bare")], memory=True))
            print_stages(res)
            if "floor" in res:
                print_floor(res["floor"])
            print_targets(m, res.get("floor"), args.target_cpu, args.target_memory)
        print(f"saved {path}")


def empty_mlflow_store(work: Path) -> Path:
    """An empty SQLite store made by MLflow itself (its migrations, its default experiment), once, outside any timed side."""
    path = work / "floor-mlflow-empty.db"
    if not path.is_file():
        from mlflow.tracking import MlflowClient

        tmp = path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments()
        tmp.rename(path)
    return path


def floor_figures(m: paired.Measurement) -> dict[str, list[float]]:
    """Per round: the libraries' floor above bare (CPU s, resident GB) and the smallest ratios to bare it allows."""
    bare, fb, fw = (m.samples[s] for s in ("bare", *FLOOR_SIDES))
    cpu = [w.cpu - b.cpu for b, w in zip(fb, fw)]
    # Resident once imported and the tables read, platform minus bare: under every later peak of a process that imported them.
    rss = [w.value["rss_after_imports_gb"] - b.value["rss_after_imports_gb"] for b, w in zip(fb, fw)]
    return {
        "cpu_s": cpu,
        "libraries_gb": rss,
        "cpu_ratio": [(x.cpu + c) / x.cpu for x, c in zip(bare, cpu)],
        "memory_ratio": [(x.peak_rss / 2**30 + r) / (x.peak_rss / 2**30) for x, r in zip(bare, rss)],
        "floor_bare_cpu_s": [b.cpu for b in fb],
        "floor_work_cpu_s": [w.cpu for w in fw],
    }


def _median_range(xs: list[float], fmt: str = ".3f") -> str:
    import statistics

    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}}, n={len(xs)})"


def print_floor(floor: dict[str, list[float]]) -> None:
    print(
        "\nthe libraries' floor on this task (bench/platform_floor_work.py: Dagster, GX and MLflow imported and doing one partition's "
        "bookkeeping by their bare calls, minus the bare libraries' imports and reads):\n"
        f"  CPU above bare: {_median_range(floor['cpu_s'], '.2f')} s -> smallest CPU ratio to bare {_median_range(floor['cpu_ratio'])}\n"
        f"  their resident memory once imported: {_median_range(floor['libraries_gb'])} GB -> (bare peak + it) / bare peak "
        f"{_median_range(floor['memory_ratio'])}"
    )


def print_targets(m: paired.Measurement, floor: dict | None, target_cpu: float | None, target_memory: float | None) -> None:
    for what, key, target, fkey in (("CPU", "cpu", target_cpu, "cpu_ratio"), ("peak memory", "peak_rss", target_memory, "memory_ratio")):
        if target is None:
            continue
        r = m.ratio("medbench", "bare", key)
        under = f"; the floor allows {_median_range(floor[fkey])}" if floor else ""
        print(f"target: {what} medbench / bare <= {target:g}x: {r} -> {'met' if r.median <= target else 'MISSED'}{under}")


def stage_medians(res: dict, side: str) -> dict[str, dict[str, float]]:
    """Each stage's median (over the rounds) CPU s, wall s and peak GB of ``side``."""
    import statistics

    mapping, fallback = (STAGE_OF_STEP, "other steps") if side != "bare" else (BARE_STAGE, "other")
    tables = [stage_table(r[side], mapping, fallback) for r in res["rounds"] if side in r]
    out = {}
    for st in ORDER:
        rows = [t[st] for t in tables if st in t]
        if rows:
            out[st] = {k: statistics.median(x[k] for x in rows) for k in ("cpu_s", "seconds", "peak_proc_gb")}
    return out


def print_stages(res: dict) -> None:
    """Each stage's median CPU s, its share of the side's total, and the bare stage beside it."""
    import statistics

    mb, bare_ = stage_medians(res, "medbench"), stage_medians(res, "bare")
    total_m = statistics.median(r["medbench"]["cpu_s"] for r in res["rounds"] if "medbench" in r)
    total_b = statistics.median(r["bare"]["cpu_s"] for r in res["rounds"] if "bare" in r)
    print("\n| stage | medbench CPU s (median) | share | bare CPU s (median) | share | medbench peak GB | bare peak GB |\n|---|---:|---:|---:|---:|---:|---:|")
    for st in ORDER:
        a, b = mb.get(st), bare_.get(st)
        if not a and not b:
            continue
        fa = f"{a['cpu_s']:.1f} | {100 * a['cpu_s'] / total_m:.1f} %" if a else "- | -"
        fb = f"{b['cpu_s']:.1f} | {100 * b['cpu_s'] / total_b:.1f} %" if b else "- | -"
        print(f"| {st} | {fa} | {fb} | {a['peak_proc_gb'] if a else '-'} | {b['peak_proc_gb'] if b else '-'} |")
    print(f"| total | {total_m:.1f} | 100 % | {total_b:.1f} | 100 % | | |")
    nd = {s: {r[s].get("ndcg_at_10") for r in res["rounds"] if s in r} for s in ("medbench", "bare")}
    print(f"nDCG@10: medbench {sorted(nd['medbench'], key=str)}, bare {sorted(nd['bare'], key=str)}")


def _rounds(res: dict) -> dict:
    """Results of any version of this script as paired rounds (one unpaired run per side before 2026-11-27)."""
    if "rounds" not in res:
        res["rounds"] = [{s: res[s] for s in ("medbench", "bare") if res.get(s)}]
        res["unpaired"] = True
    return res


def report(args: argparse.Namespace) -> None:
    """Markdown tables of the saved results (the paired figures and the stages), the log-log slopes, and the plot."""
    import math
    import statistics

    files = sorted((args.work / "results").glob("pipeline-*.json"))
    res = [_rounds(json.loads(f.read_text())) | {"file": f.stem} for f in files if not any(x in f.stem for x in args.exclude.split(",") if x)]
    res = [r for r in res if any("medbench" in x for x in r["rounds"])]
    res.sort(key=lambda r: (r["file"].endswith("-before") is False, r["docs"]))
    print(
        "| run | documents x queries | n | CPU medbench / bare, median (range) | wall, median (range) "
        "| peak memory (largest process), median (range) | medbench CPU s | bare CPU s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in res:
        pairs = [x for x in r["rounds"] if {"medbench", "bare"} <= set(x)]

        def ratio(key: str) -> str:
            v = [x["medbench"][key] / x["bare"][key] for x in pairs]
            return f"{statistics.median(v):.3f}x ({min(v):.3f}-{max(v):.3f})" if v else "-"

        cpu_m = statistics.median(x["medbench"]["cpu_s"] for x in r["rounds"] if "medbench" in x)
        cpu_b = f"{statistics.median(x['bare']['cpu_s'] for x in pairs):.0f}" if pairs else "-"
        note = " (one run per side, not paired)" if r.get("unpaired") else ""
        print(
            f"| {r['file'].removeprefix('pipeline-')}{note} | {r['docs']:,} x {r['queries']:,} | {len(pairs)} "
            f"| {ratio('cpu_s')} | {ratio('wall_s')} | {ratio('peak_proc_gb')} | {cpu_m:.0f} | {cpu_b} |"
        )
    for r in res:
        print(f"\n{r['file'].removeprefix('pipeline-')}:")
        print_stages(r)
    after = {r["docs"]: r for r in res if r["file"].endswith(args.slope_tag)}
    if len(after) >= 2:
        lo, hi = min(after), max(after)
        a, b = stage_medians(after[lo], "medbench"), stage_medians(after[hi], "medbench")
        print(f"\nlog-log slopes of medbench's stages from {lo:,} to {hi:,} documents (CPU seconds; peak GB):")
        for st in ORDER:
            if st in a and st in b and a[st]["cpu_s"] > 0 and b[st]["cpu_s"] > 0:
                ts = math.log(b[st]["cpu_s"] / a[st]["cpu_s"]) / math.log(hi / lo)
                ms = math.log(max(b[st]["peak_proc_gb"], 1e-3) / max(a[st]["peak_proc_gb"], 1e-3)) / math.log(hi / lo)
                print(f"  {st:<14} time {ts:5.2f}  memory {ms:5.2f}")
    if args.plot:
        _plot(res, args.plot)


def _plot(res: list[dict], path: Path) -> None:
    import statistics

    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    def med(r: dict, side: str, key: str) -> float:
        return statistics.median(x[side][key] for x in r["rounds"] if side in x)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for tag, style in (("-before", "--"), ("-after", "-")):
        rows = sorted((r for r in res if r["file"].endswith(tag)), key=lambda r: r["docs"])
        if not rows:
            continue
        x = [r["docs"] for r in rows]
        ax1.plot(x, [med(r, "medbench", "cpu_s") for r in rows], style, marker="o", color="tab:blue", label=f"medbench {tag[1:]}")
        ax2.plot(x, [med(r, "medbench", "peak_proc_gb") for r in rows], style, marker="o", color="tab:blue", label=f"medbench {tag[1:]}")
        with_bare = [r for r in rows if any("bare" in x for x in r["rounds"])]
        if with_bare:
            xb = [r["docs"] for r in with_bare]
            ax1.plot(xb, [med(r, "bare", "cpu_s") for r in with_bare], style, marker="s", color="tab:orange", label=f"bare {tag[1:]}")
            ax2.plot(xb, [med(r, "bare", "peak_proc_gb") for r in with_bare], style, marker="s", color="tab:orange", label=f"bare {tag[1:]}")
    for ax, label in ((ax1, "CPU seconds, whole run (median of rounds)"), (ax2, "peak RSS of the largest process, GB")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("documents")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("medbench run --serial (bm25) vs bare polars + bm25s + pytrec_eval + scipy")
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    print(f"plot: {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pipeline", help="medbench run --serial vs the bare libraries, per size")
    p.add_argument("--docs", default="200000")
    p.add_argument("--queries", type=int, default=20_000)
    paired.add_arguments(p)
    p.add_argument("--sides", default="bare,medbench")
    p.add_argument("--work", type=Path, default=WORK)
    p.add_argument("--tag", default="", help="suffix of the result file (e.g. -before)")
    p.add_argument("--keep", action="store_true", help="keep each side's folders (the medbench world, the bare outputs)")
    p.add_argument("--force-memory", action="store_true")
    p.add_argument("--code", type=Path, default=ROOT, help="the medbench checkout to run (e.g. a `git archive` of an earlier commit); default this one")
    p.add_argument("--floor", action="store_true", help="also the libraries' floor on this task, every round (module docstring)")
    p.add_argument("--target-cpu", type=float, help="print whether the median CPU ratio medbench / bare is at most this")
    p.add_argument("--target-memory", type=float, help="print whether the median peak-memory ratio is at most this")
    r = sub.add_parser("report", help="tables, slopes and the log-log plot of the saved results")
    r.add_argument("--work", type=Path, default=WORK)
    r.add_argument("--exclude", default="smoke", help="comma-separated parts of result names to leave out")
    r.add_argument("--slope-tag", default="-after")
    r.add_argument("--plot", type=Path, help="write the log-log plot here (e.g. bench/pipeline_scale.png)")
    b = sub.add_parser("bare", help="(internal) the bare side, in its own process")
    b.add_argument("--data", type=Path, required=True)
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--marks", type=Path, required=True)
    args = ap.parse_args()
    if args.cmd == "pipeline":
        pipeline(args)
    elif args.cmd == "report":
        report(args)
    elif args.cmd == "bare":
        bare(args.data, args.out, args.marks)


if __name__ == "__main__":
    main()
