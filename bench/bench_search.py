"""Exact search through medbench vs bare FAISS, an IVF index, and how time and memory grow with the corpus, paired.

    nice -n 5 python bench/bench_search.py [--sizes 100000,400000,1200000] [--queries 1000] [--k 100] [--pairs 5]

Synthetic, seeded corpora of float32 unit vectors (384 dims by default): a mixture of 4,096
Gaussian clusters (each vector is its centre plus as much noise again, so clusters overlap and
nearest neighbours are not a cluster's members alone); queries are corpus vectors plus the same
noise (relative to a unit vector). Each corpus is written once into a work folder (``--work``, default
``/tmp/medbench-bench-search``) through medbench's block writer. Then, per size, one child
process per side so that each peak RSS (``ru_maxrss``: resident pages, file-backed ones
included) belongs to that side alone, one size at a time, the two sides in interleaved rounds
(bench/paired.py: bare then medbench, medbench then bare, ...):

- **bare**: ``np.load`` of the corpus, ``faiss.IndexFlatIP`` ``add``, ``search(queries, k)``;
- **medbench**: ``index.build_index`` over the memory-mapped file, filled block by block (what
  ``pipeline.build_corpus_index`` does), ``save_index``, ``load_index(mmap=True)`` (what
  ``pipeline.retrieve`` does) and ``index.search`` (ties by doc id, the run frame);
- **ivf**: the same medbench path with ``ModelSpec.index`` = ``--ivf`` (JSON, default
  ``{"type": "ivf", "nlist": 1024, "nprobe": 32}``, the ``index:`` of a models.yaml entry);
  recall@10 against the exact top 10.

Figures are per-round ratios, median and range: medbench / bare of each child's build + search
(wall and CPU timed inside the child: the build and the median search) and peak RSS (``os.wait4``);
and, inside each medbench child,
``--pairs`` interleaved rounds of its search against FAISS alone on the same loaded index (wall
and CPU), which isolates the search layer's cost (ties by doc id, the run frame) from the
machine's mood. IVF figures are medians of ``--pairs`` searches in one child. Prints the tables;
writes a log-log plot of time and memory against corpus size (``--plot``, default
bench/search_scale.png).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import paired  # noqa: E402

CENTRES = 4096
NOISE = 1.0  # noise norm relative to the centre's: same-cluster cosine about 0.5


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def make_corpus(folder: Path, n: int, dim: int, n_queries: int, seed: int) -> None:
    """corpus.npy (n x dim) and queries.npy in ``folder``, block by block (never the whole corpus in memory)."""
    from medbench_core.retrieval.vectors import BLOCK_ROWS, write_npy_blocks

    centres = np.random.default_rng(seed).standard_normal((CENTRES, dim)).astype(np.float32)

    def block(start: int, rows: int) -> np.ndarray:
        rng = np.random.default_rng([seed, 1, start])
        return _unit(centres[rng.integers(0, CENTRES, rows)] + NOISE * rng.standard_normal((rows, dim), dtype=np.float32))

    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "corpus.npy.tmp"
    write_npy_blocks(tmp, n, dim, ((slice(s, min(s + BLOCK_ROWS, n)), block(s, min(BLOCK_ROWS, n - s))) for s in range(0, n, BLOCK_ROWS)))
    rng = np.random.default_rng([seed, 2])
    picks = np.sort(rng.choice(n, n_queries, replace=False))
    base = np.load(tmp, mmap_mode="r")[picks]
    # the same relative noise as a document around its centre: a query is about as far from its source document
    np.save(folder / "queries.npy", _unit(base + NOISE / np.sqrt(dim) * rng.standard_normal(base.shape, dtype=np.float32)))
    os.replace(tmp, folder / "corpus.npy")


def _rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def child(mode: str, folder: Path, k: int, ivf: dict, repeats: int, sweep: list[int]) -> dict:
    import faiss

    queries = np.load(folder / "queries.npy")
    n, dim = np.load(folder / "corpus.npy", mmap_mode="r").shape
    out: dict = {"mode": mode, "n": n}
    if mode == "bare":
        index = faiss.IndexFlatIP(dim)
        built = paired.call(lambda: index.add(np.load(folder / "corpus.npy")))
        out["build_s"], out["build_cpu"] = built.wall, built.cpu
        searches = [paired.call(lambda: index.search(queries, k)) for _ in range(repeats)]
        ids = searches[-1].value[1]
        out["search_s"], out["search_cpu"] = statistics.median(x.wall for x in searches), statistics.median(x.cpu for x in searches)
        np.save(folder / "exact_top10.npy", ids[:, :10])
        out["peak_rss_gb"] = _rss_gb()
        return out

    from medbench_core.retrieval.index import build_index, load_index, save_index, search
    from medbench_core.retrieval.vectors import iter_blocks

    spec = {"type": "flat"} if mode == "medbench" else ivf
    corpus = np.load(folder / "corpus.npy", mmap_mode="r", allow_pickle=False)  # rows are read when touched
    built = paired.call(lambda: build_index(corpus, spec, use_gpu=False, add_blocks=lambda: (b for _, b in iter_blocks(folder / "corpus.npy"))))
    index, _ = built.value
    out["build_s"], out["build_cpu"] = built.wall, built.cpu
    t0 = time.perf_counter()
    save_index(index, folder / f"{mode}.faiss")
    del index
    index = load_index(folder / f"{mode}.faiss", mmap=True)  # as pipeline.retrieve loads it
    out["save_load_s"] = time.perf_counter() - t0
    doc_ids = [f"d{i}" for i in range(n)]
    query_ids = [f"q{i}" for i in range(len(queries))]
    # Interleaved with FAISS alone on the same index: the search layer's own cost, paired.
    m = paired.measure(
        {
            "medbench": lambda: paired.call(lambda: search(index, queries, query_ids, doc_ids, k)),
            "faiss": lambda: paired.call(lambda: index.search(queries, k)),
        },
        repeats,
    )
    run = m.samples["medbench"][-1].value
    out["search_s"], out["faiss_alone_search_s"] = m.seconds("medbench", "wall")[0], m.seconds("faiss", "wall")[0]
    out["search_cpu"] = m.seconds("medbench", "cpu")[0]
    out["search_ratio"] = {what: list(m.ratio("medbench", "faiss", what).values) for what in ("wall", "cpu")}
    # The search layer alone (ties, run frame), timed on FAISS's answers replayed: steady under load.
    replay = _Replay(index, queries, min(n, k + 32))
    layer = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        search(replay, queries, query_ids, doc_ids, k)
        layer.append(time.perf_counter() - t0)
    out["layer_s"] = statistics.median(layer)
    top10 = run.filter(run["rank"] <= 10)["doc_id"].str.slice(1).cast(int).to_numpy().reshape(len(queries), 10)
    exact = np.load(folder / "exact_top10.npy")
    recall = lambda found: float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact)]))  # noqa: E731
    if mode == "ivf":
        out["recall_at_10"] = recall(top10)
        out["sweep"] = []
        for nprobe in sweep:  # the same index searched with other nprobe values (a search-time setting)
            index.nprobe = nprobe
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                run = search(index, queries, query_ids, doc_ids, k)
                times.append(time.perf_counter() - t0)
            found = run.filter(run["rank"] <= 10)["doc_id"].str.slice(1).cast(int).to_numpy().reshape(len(queries), 10)
            out["sweep"].append({"nprobe": nprobe, "search_s": statistics.median(times), "recall_at_10": recall(found)})
    else:
        out["same_top10_as_bare"] = bool(np.array_equal(top10, exact))
    os.remove(folder / f"{mode}.faiss")
    out["peak_rss_gb"] = _rss_gb()
    return out


class _Replay:
    """Answers ``search`` with results FAISS computed once (the margin search medbench asks for)."""

    def __init__(self, index, queries: np.ndarray, k2: int):
        self.ntotal, self.answer = index.ntotal, index.search(queries, k2)

    def search(self, queries, k):
        return self.answer


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, style in (("bare", "o--"), ("medbench", "s-"), ("ivf", "^-")):
        mine = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["n"])
        ns = [r["n"] for r in mine]
        label = {"bare": "bare FAISS flat", "medbench": "medbench flat", "ivf": "medbench IVF"}[mode]
        a.loglog(ns, [r["build_s"] for r in mine], style, label=f"{label}: build")
        a.loglog(ns, [r["search_s"] for r in mine], style, alpha=0.5, label=f"{label}: search")
        b.loglog(ns, [r["peak_rss_gb"] for r in mine], style, label=label)
    a.set(xlabel="documents", ylabel="seconds", title="time")
    b.set(xlabel="documents", ylabel="peak RSS, GB", title="memory")
    for ax in (a, b):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,400000,1200000")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    paired.add_arguments(ap)
    ap.add_argument("--nprobe-sweep", default="4,8,16,32,64")
    ap.add_argument("--ivf", default='{"type": "ivf", "nlist": 1024, "nprobe": 32}')
    ap.add_argument("--work", default="/tmp/medbench-bench-search")
    ap.add_argument("--plot", default=str(ROOT / "bench" / "search_scale.png"))
    ap.add_argument("--child", nargs=2, metavar=("MODE", "FOLDER"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    ivf = json.loads(args.ivf)
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]), args.k, ivf, args.pairs, [int(x) for x in args.nprobe_sweep.split(",") if x])))
        return

    print(paired.header("exact search: medbench vs bare FAISS"), flush=True)
    rows = []
    pairs_of: dict[int, paired.Measurement] = {}
    for n in (int(s) for s in args.sizes.split(",")):
        folder = Path(args.work) / f"{n}x{args.dim}-q{args.queries}-s{args.seed}"
        if not (folder / "corpus.npy").exists():
            t0 = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.bench_search import make_corpus; from pathlib import Path; "
                    f"make_corpus(Path({str(folder)!r}), {n}, {args.dim}, {args.queries}, {args.seed})",
                ],
                check=True,
            )
            print(f"{n:,} x {args.dim}: corpus written in {time.perf_counter() - t0:.0f} s", flush=True)

        def side(mode: str):
            def go() -> paired.Sample:
                cmd = [
                    sys.executable,
                    __file__,
                    "--k",
                    str(args.k),
                    "--ivf",
                    args.ivf,
                    "--pairs",
                    str(args.pairs),
                    "--nprobe-sweep",
                    args.nprobe_sweep,
                    "--child",
                    mode,
                    str(folder),
                ]
                log = Path(tempfile.mkstemp(suffix=".log")[1])
                try:
                    sample = paired.child(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, log=log)
                    out = json.loads([x for x in log.read_text().splitlines() if x.startswith("{")][-1])
                finally:
                    log.unlink(missing_ok=True)
                print(json.dumps(out), f"child wall {sample.wall:.1f} s, CPU {sample.cpu:.1f} s, load average {os.getloadavg()[0]:.1f}", flush=True)
                # The same work on both sides: the build and one search (the median of the child's), timed inside it.
                return paired.Sample(out["build_s"] + out["search_s"], out["build_cpu"] + out["search_cpu"], sample.peak_rss, out)

            return go

        side("bare")()  # the exact top 10 the medbench children compare with
        m = paired.measure({"bare": side("bare"), "medbench": side("medbench")}, args.pairs)
        pairs_of[n] = m
        rows += [s.value for s in m.samples["bare"][-1:] + m.samples["medbench"][-1:]]
        rows.append(side("ivf")().value)
        print(
            f"\n{n:,} x {args.dim}: build + one search (the median of {args.pairs}), each side in its own process; peak RSS of the process\n"
            + m.table([("medbench / bare", "medbench", "bare")], memory=True),
            flush=True,
        )
        r = {w: [v for s in m.samples["medbench"] for v in s.value["search_ratio"][w]] for w in ("wall", "cpu")}
        for w in ("wall", "cpu"):
            v = r[w]
            print(
                f"medbench search / FAISS alone, same index, {w}: median {statistics.median(v):.3f}x "
                f"({min(v):.3f}-{max(v):.3f}, n={len(v)} rounds in {len(m.samples['medbench'])} processes)"
            )

    by = {(r["mode"], r["n"]): r for r in rows}
    print(f"\nexact (flat) through medbench vs bare FAISS IndexFlatIP; IVF {ivf}; {args.queries:,} queries, k = {args.k}\n")
    print(
        "| documents | corpus GB | build s: bare / medbench | search s: bare / medbench | medbench / bare: build+search "
        "| medbench search / FAISS alone, same index | search layer alone s (share of FAISS search) | peak RSS GB: bare / medbench "
        "| IVF build s | IVF search s | IVF speed-up (search) | IVF recall@10 | IVF peak RSS GB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sorted({r["n"] for r in rows}):
        b, m, v = by["bare", n], by["medbench", n], by["ivf", n]
        assert m["same_top10_as_bare"], f"medbench's exact top 10 differs from bare FAISS at {n}"
        print(
            f"| {n:,} | {n * args.dim * 4 / 1e9:.2f} | {b['build_s']:.1f} / {m['build_s']:.1f} | {b['search_s']:.2f} / {m['search_s']:.2f} | "
            f"{(m['build_s'] + m['search_s']) / (b['build_s'] + b['search_s']):.3f}x | {m['search_s'] / m['faiss_alone_search_s']:.3f}x | "
            f"{m['layer_s']:.3f} ({m['layer_s'] / min(m['faiss_alone_search_s'], b['search_s']):.1%}) | "
            f"{b['peak_rss_gb']:.2f} / {m['peak_rss_gb']:.2f} | {v['build_s']:.1f} | {v['search_s']:.2f} | {m['search_s'] / v['search_s']:.1f}x | "
            f"{v['recall_at_10']:.3f} | {v['peak_rss_gb']:.2f} |"
        )
    print("\nIVF nprobe sweep (same index, search s / recall@10; exact flat search s for scale):\n")
    sweep = sorted({p["nprobe"] for r in rows if r["mode"] == "ivf" for p in r["sweep"]})
    print("| documents | exact s | " + " | ".join(f"nprobe {p}" for p in sweep) + " |\n|---:|---:|" + "---:|" * len(sweep))
    for n in sorted({r["n"] for r in rows}):
        cells = {p["nprobe"]: p for p in by["ivf", n]["sweep"]}
        print(
            f"| {n:,} | {by['medbench', n]['search_s']:.2f} | "
            + " | ".join(f"{cells[p]['search_s']:.2f} s / {cells[p]['recall_at_10']:.3f}" for p in sweep)
            + " |"
        )
    plot(rows, Path(args.plot))
    print(f"\nplot: {args.plot}")


if __name__ == "__main__":
    main()
