"""Late interaction at 100K documents: medbench's PLAID against exact MaxSim (recall@10) and against pylate's own
PLAID index (fast-plaid) in the same run (build and search time, peak memory), on a synthetic corpus encoded by
a tiny ColBERT (tests/core/tiny_models.py: ``tiny_bert``, a random two-layer 32-wide BERT, in pylate's layout by ``tiny_colbert``,
a 32-d projection, documents up to 64 tokens).

pylate and fast-plaid do not install beside this repository's lock (bench/record_pylate_reference.py says why), so
this runs in an environment that has them and numpy/faiss (medbench's late-interaction code needs nothing else):

    python -m venv /tmp/pylate && /tmp/pylate/bin/pip install pylate==1.6.0 faiss-cpu polars psutil pillow
    nice -n 10 /tmp/pylate/bin/python bench/late_interaction.py prepare --out /tmp/li   # corpus, token vectors, exact top 10
    nice -n 10 /tmp/pylate/bin/python bench/late_interaction.py compare --out /tmp/li --repeats 5

Each build and each search runs in its own process (peak RSS from ``getrusage``), medbench and pylate
interleaved (A B A B ...), so both see the same machine load; the ratios are taken per pair.

Recall across k-means seeds (issue 47): one build and one search per library and seed, resumable; one JSON line per
(library, seed) in ``--results`` (default ``seeds-nbits{N}.jsonl`` in ``--out``), pairs already there are skipped, a build
whose search has not run yet is kept (its row in ``<results>.steps``), and the table is printed again at the end:

    nice -n 10 /tmp/pylate/bin/python bench/late_interaction.py seeds --out /tmp/li --seeds 42,1,2,3,4
    /tmp/pylate/bin/python bench/late_interaction.py seeds --out /tmp/li --seeds 42,1,2,3,4 --summary-only

``--libraries onpylate`` (after pylate's build of the same seed) builds medbench's PLAID on fast-plaid's own centroids
(medbench's codec, inverted file and search; only k-means taken from fast-plaid) and searches it: where its recall lands
between the two says whether a gap comes from the centroids or from what medbench does with them.

``diagnose --seeds ... --queries N`` reads the indexes ``seeds`` built and says where each loses the exact top 10
(its inverted file's cells; the exact top 10 among the probed documents; medbench's after each pruning).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "core")]


# --- the synthetic corpus ---------------------------------------------------------------------


def vocabulary(tokenizer) -> list[str]:
    """Whole English words of the model's vocabulary (no sub-words, no digits), in vocabulary order."""
    return [w for w in tokenizer.get_vocab() if w.isalpha() and w.isascii() and len(w) >= 3 and w.islower()]


def corpus(words: list[str], n_docs: int, n_queries: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Documents of 12-40 words drawn from one of 400 topics (half the words from the topic's 60, half Zipf over all),
    queries of 4-8 words drawn from a random document's topic and that document."""
    rng = np.random.default_rng(seed)
    words_arr = np.array(words)
    zipf = 1.0 / np.arange(1, len(words) + 1)
    zipf /= zipf.sum()
    topics = [rng.choice(len(words), 60, replace=False) for _ in range(400)]
    doc_topic = rng.integers(0, 400, n_docs)
    docs = []
    for t in doc_topic:
        n = int(rng.integers(12, 41))
        own = rng.choice(topics[t], n // 2)
        common = rng.choice(len(words), n - n // 2, p=zipf)
        docs.append(" ".join(words_arr[rng.permutation(np.concatenate([own, common]))]))
    queries = []
    for d in rng.integers(0, n_docs, n_queries):
        k = int(rng.integers(4, 9))
        from_doc = rng.choice(docs[d].split(), k // 2)
        from_topic = words_arr[rng.choice(topics[doc_topic[d]], k - k // 2)]
        queries.append(" ".join([*from_doc, *from_topic]))
    return docs, queries


def prepare(out: Path, n_docs: int, n_queries: int) -> None:
    """Write the corpus, the token vectors (medbench's storage), the query vectors and the exact MaxSim top 10."""
    from pylate import models
    from tiny_models import tiny_bert, tiny_colbert

    from medbench_core.retrieval import multivector as mv

    out.mkdir(parents=True, exist_ok=True)
    # A two-layer, 32-wide random BERT (the tests' tiny_bert) under pylate's layout: MiniLM would take hours to
    # encode 100K documents on this machine, and the index's recall and cost do not depend on what the vectors mean.
    folder = tiny_colbert(out / "colbert", minilm=tiny_bert(out / "tiny-bert", "encoder"), document_length=64)
    model = models.ColBERT(model_name_or_path=str(folder), device="cpu")
    docs, queries = corpus(vocabulary(model.tokenizer), n_docs, n_queries)
    (out / "texts.json").write_text(json.dumps({"docs": docs, "queries": queries}))
    emb = out / "emb"
    emb.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    writer = mv.TokenWriter(emb, 32)
    for start in range(0, n_docs, 4096):
        writer.add([np.asarray(v) for v in model.encode(docs[start : start + 4096], is_query=False, batch_size=128)])
        print(f"encoded {min(n_docs, start + 4096)} documents", flush=True)
    n, n_tok = writer.close()
    q = np.stack([np.asarray(v) for v in model.encode(queries, is_query=True, batch_size=128)])
    np.save(out / "queries.npy", q.astype(np.float32))
    encode_s = time.perf_counter() - t0
    tokens, offsets = mv.load_tokens(emb)
    t0 = time.perf_counter()
    exact = []
    for start in range(0, len(q), 50):
        for row in mv.maxsim(q[start : start + 50], tokens, offsets):
            top = np.argsort(-row, kind="stable")[:10]
            exact.append(top.tolist())
    exact_s = time.perf_counter() - t0
    np.save(out / "exact_top10.npy", np.asarray(exact, dtype=np.int64))
    (out / "prepare.json").write_text(json.dumps({"n_docs": n, "n_tokens": n_tok, "n_queries": len(q), "encode_seconds": round(encode_s, 1),
                                                  "exact_maxsim_seconds": round(exact_s, 2)}, indent=1))  # fmt: skip
    print(json.dumps(json.loads((out / "prepare.json").read_text())))


# --- one measured step, in its own process -----------------------------------------------------


def step(out: Path, which: str, nbits: int, seed: int = 42) -> dict:
    """One build or search of medbench's or pylate's PLAID; returns seconds, peak RSS and (searches) recall@10.

    ``seed`` seeds both libraries' document sample and k-means (42 is both libraries' default). The two draw
    with different generators, so the same seed is not the same k-means run: compare several seeds, not one.
    """
    import torch

    from medbench_core.retrieval import multivector as mv

    q = np.load(out / "queries.npy")
    exact = np.load(out / "exact_top10.npy")
    settings = mv.plaid_settings({"type": "plaid", "nbits": nbits, "seed": seed}, "bench")
    result: dict = {"step": which, "nbits": nbits, "seed": seed}
    tag = f"{nbits}" if seed == 42 else f"{nbits}-s{seed}"  # the index folders' suffix
    t0, cpu0 = time.perf_counter(), time.process_time()
    if which in ("medbench-build", "onpylate-build"):
        if which == "onpylate-build":  # medbench's codec and inverted file on fast-plaid's own centroids (same seed)
            centroids = np.asarray(np.load(next((out / f"pylate-{tag}").rglob("centroids.npy"))), dtype=np.float32)
            mv._kmeans = lambda *_args, **_kw: centroids  # the only step of medbench's build that differs
        idx = out / f"{which.split('-')[0]}-{tag}"
        idx.mkdir(exist_ok=True)
        info = mv.build_plaid(out / "emb", idx, settings)
        result["n_centroids"] = info["n_centroids"]
        result["disk_bytes"] = sum(f.stat().st_size for f in idx.iterdir())
    elif which == "pylate-build":
        from pylate import indexes

        tokens, offsets = mv.load_tokens(out / "emb")
        docs = [torch.from_numpy(np.asarray(tokens[offsets[i] : offsets[i + 1]])) for i in range(len(offsets) - 1)]
        index = indexes.PLAID(index_folder=str(out), index_name=f"pylate-{tag}", override=True, nbits=nbits, seed=seed, show_progress=False, device="cpu")
        index.add_documents(documents_ids=[str(i) for i in range(len(docs))], documents_embeddings=docs)
        result["disk_bytes"] = sum(f.stat().st_size for f in (out / f"pylate-{tag}").rglob("*") if f.is_file())
    elif which in ("medbench-search", "onpylate-search"):
        index = mv.PlaidIndex(out / f"{which.split('-')[0]}-{tag}", settings)
        result["load_seconds"] = round(time.perf_counter() - t0, 3)
        t0, cpu0 = time.perf_counter(), time.process_time()
        found = [index.search(qq, 10)[0][:10].tolist() for qq in q]
        result["recall_at_10"] = float(np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found, exact.tolist())]))
    elif which == "pylate-search":
        from pylate import indexes, retrieve

        index = indexes.PLAID(index_folder=str(out), index_name=f"pylate-{tag}", override=False, nbits=nbits, show_progress=False, device="cpu")
        retriever = retrieve.ColBERT(index=index)
        result["load_seconds"] = round(time.perf_counter() - t0, 3)
        t0, cpu0 = time.perf_counter(), time.process_time()
        hits = retriever.retrieve(queries_embeddings=torch.from_numpy(q), k=10)
        found = [[int(h["id"]) for h in row] for row in hits]
        result["recall_at_10"] = float(np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found, exact.tolist())]))
    result["seconds"] = round(time.perf_counter() - t0, 3)
    result["cpu_seconds"] = round(time.process_time() - cpu0, 3)  # all threads of this process
    result["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


def compare(out: Path, repeats: int, nbits: int, build_repeats: int | None = None, earlier: Path | None = None) -> None:
    """Builds then searches, medbench and pylate interleaved (``build_repeats`` builds, ``repeats`` searches), each in
    a fresh process; ``earlier``: a log of rows already measured (JSON lines) to count with these."""
    rows = [json.loads(line) for line in earlier.read_text().splitlines() if line.startswith('{"step"')] if earlier else []
    for row in rows:
        print(json.dumps(row), flush=True)
    for phase in ("build", "search"):
        wanted = (build_repeats if build_repeats is not None else repeats) if phase == "build" else repeats
        have = len([x for x in rows if x["step"].endswith(phase)]) // 2
        for r in range(have, wanted):
            for lib in ("medbench", "pylate") if r % 2 == 0 else ("pylate", "medbench"):
                cmd = [sys.executable, __file__, "step", "--out", str(out), "--which", f"{lib}-{phase}", "--nbits", str(nbits)]
                done = subprocess.run(cmd, capture_output=True, text=True, check=True)
                row = json.loads(done.stdout.strip().splitlines()[-1])
                row["repeat"], row["load_average"] = r, os.getloadavg()[0]
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary = {"date": time.strftime("%Y-%m-%d"), "prepare": json.loads((out / "prepare.json").read_text()), "nbits": nbits, "rows": rows}
    for phase in ("build", "search"):
        for lib in ("medbench", "pylate"):
            mine = [x for x in rows if x["step"] == f"{lib}-{phase}"]
            summary[f"{lib}-{phase}"] = {
                k: [x[k] for x in mine] for k in ("seconds", "peak_rss_mib", "recall_at_10", "disk_bytes", "load_seconds") if k in mine[0]
            }
        a = [x["seconds"] for x in rows if x["step"] == f"medbench-{phase}"]
        b = [x["seconds"] for x in rows if x["step"] == f"pylate-{phase}"]
        summary[f"{phase}_time_ratio_medbench_over_pylate"] = sorted(round(x / y, 2) for x, y in zip(a, b))
    (out / f"compare-nbits{nbits}.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))


def run_step(out: Path, which: str, nbits: int, seed: int) -> dict:
    """``step`` in a fresh process; its row with the wall time of the whole process and the load average after it."""
    cmd = [sys.executable, __file__, "step", "--out", str(out), "--which", which, "--nbits", str(nbits), "--seed", str(seed)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{which} (seed {seed}) failed with exit code {done.returncode}:\n{done.stderr[-4000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    row["process_seconds"] = round(time.perf_counter() - t0, 1)
    row["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    row["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return row


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def seeds(out: Path, seed_list: list[int], nbits: int, results: Path, summary_only: bool = False, libraries: tuple = ("medbench", "pylate")) -> dict:
    """For each seed: medbench's and pylate's build, then each one's search (each in its own process, the two
    libraries' order swapped from one seed to the next); one line per (library, seed) appended to ``results``.
    ``libraries``: run only these (another ``seeds`` process may run the other one on the same ``results``)."""
    steps = results.with_name(results.name + ".steps")  # builds whose search is still to run (resume)
    for i, seed in enumerate([] if summary_only else seed_list):
        done = {(r["library"], r["seed"]) for r in read_jsonl(results) if r["nbits"] == nbits}
        both = ("medbench", "pylate") if i % 2 == 0 else ("pylate", "medbench")
        order = [lib for lib in (*both, "onpylate") if lib in libraries and (lib, seed) not in done]
        tag = f"{nbits}" if seed == 42 else f"{nbits}-s{seed}"
        if "onpylate" in order and not (out / f"pylate-{tag}").is_dir() and "pylate" not in order:
            raise SystemExit(f"onpylate seed {seed}: needs pylate's index {out / f'pylate-{tag}'} (run pylate first)")
        builds = {}
        for lib in order:
            kept = [r for r in read_jsonl(steps) if r["step"] == f"{lib}-build" and r["seed"] == seed and r["nbits"] == nbits]
            if kept and (out / f"{lib}-{tag}").is_dir():
                builds[lib] = kept[-1]
                print(f"{lib} seed {seed}: build kept from {steps.name}", flush=True)
                continue
            builds[lib] = run_step(out, f"{lib}-build", nbits, seed)
            with steps.open("a") as f:
                f.write(json.dumps(builds[lib]) + "\n")
            print(json.dumps(builds[lib]), flush=True)
        for lib in order:
            search = run_step(out, f"{lib}-search", nbits, seed)
            print(json.dumps(search), flush=True)
            build = builds[lib]
            row = {"library": lib, "seed": seed, "nbits": nbits, "recall_at_10": search["recall_at_10"],
                   "build_seconds": build["seconds"], "build_cpu_seconds": build.get("cpu_seconds"), "build_peak_rss_mib": build["peak_rss_mib"],
                   "build_load_average": build["load_average"], "build_finished_utc": build["finished_utc"],
                   "search_seconds": search["seconds"], "search_cpu_seconds": search["cpu_seconds"], "search_peak_rss_mib": search["peak_rss_mib"],
                   "search_load_seconds": search["load_seconds"], "search_load_average": search["load_average"],
                   "search_finished_utc": search["finished_utc"], "disk_bytes": build["disk_bytes"], "n_centroids": build.get("n_centroids")}  # fmt: skip
            with results.open("a") as f:
                f.write(json.dumps(row) + "\n")
    return seeds_summary(read_jsonl(results), seed_list, nbits, out)


def seeds_summary(rows: list[dict], seed_list: list[int], nbits: int, out: Path) -> dict:
    """Recall@10 per seed and library, medians and ranges, whether the ranges overlap, time ratios per seed."""
    by = {(r["library"], r["seed"]): r for r in rows if r["nbits"] == nbits and r["seed"] in seed_list}
    summary: dict = {"nbits": nbits, "seeds": seed_list, "prepare": json.loads((out / "prepare.json").read_text())}
    print(f"\nrecall@10 against exact MaxSim, nbits {nbits}")
    print("| library | " + " | ".join(f"seed {s}" for s in seed_list) + " | n | median | min-max |")
    for lib in ("medbench", "pylate", "onpylate"):
        if lib == "onpylate" and not any(k[0] == lib for k in by):
            continue
        recall = [by[(lib, s)]["recall_at_10"] for s in seed_list if (lib, s) in by]
        summary[lib] = {"recall_at_10": {s: by[(lib, s)]["recall_at_10"] for s in seed_list if (lib, s) in by}, "n": len(recall)}
        if recall:
            summary[lib] |= {"median": float(np.median(recall)), "min": min(recall), "max": max(recall)}
        cells = [f"{by[(lib, s)]['recall_at_10']:.4f}" if (lib, s) in by else "" for s in seed_list]
        tail = f"{summary[lib]['median']:.4f} | {summary[lib]['min']:.4f}-{summary[lib]['max']:.4f}" if recall else " | "
        print(f"| {lib} | " + " | ".join(cells) + f" | {len(recall)} | {tail} |")
    if summary["medbench"]["n"] and summary["pylate"]["n"]:
        m, p = summary["medbench"], summary["pylate"]
        summary["ranges_overlap"] = m["min"] <= p["max"] and p["min"] <= m["max"]
        summary["median_gap_pylate_minus_medbench"] = round(p["median"] - m["median"], 4)
        print(f"ranges overlap: {summary['ranges_overlap']}; median gap (pylate - medbench): {summary['median_gap_pylate_minus_medbench']:+.4f}")
    print("\n| seed | build s medbench / pylate (ratio) | build CPU s | search s medbench / pylate (ratio) | search CPU s | peak RSS MiB build, search |")
    summary["pairs"] = {}
    for s in seed_list:
        if ("medbench", s) in by and ("pylate", s) in by:
            a, b = by[("medbench", s)], by[("pylate", s)]
            pair = {f"{k}_ratio": round(a[k] / b[k], 3) for k in ("build_seconds", "build_cpu_seconds", "search_seconds", "search_cpu_seconds")}
            summary["pairs"][s] = pair
            cells = [
                f"{a[k]:.1f} / {b[k]:.1f}" + (f" ({pair[k + '_ratio']:.2f})" if k.endswith("_seconds") and "cpu" not in k else "")
                for k in ("build_seconds", "build_cpu_seconds", "search_seconds", "search_cpu_seconds")
            ]
            rss = f"{a['build_peak_rss_mib']:.0f} / {b['build_peak_rss_mib']:.0f}, {a['search_peak_rss_mib']:.0f} / {b['search_peak_rss_mib']:.0f}"
            print(f"| {s} | " + " | ".join(cells) + f" | {rss} |")
    for k in ("build_seconds_ratio", "search_seconds_ratio"):
        ratios = [p[k] for p in summary["pairs"].values()]
        if ratios:
            summary[f"median_{k}"] = float(np.median(ratios))
            print(f"median {k.replace('_', ' ')} (medbench / pylate): {summary[f'median_{k}']:.3f} over {len(ratios)} pairs")
    return summary


def probed(centroids: np.ndarray, ivf: np.ndarray, ivf_offsets: np.ndarray, query: np.ndarray, n_probe: int) -> np.ndarray:
    """The documents of the cells the query's tokens probe (the top ``n_probe`` centroids per token, as both searches probe)."""
    cs = centroids @ query.T
    cells = np.unique(np.argpartition(-cs, n_probe - 1, axis=0)[:n_probe].ravel())
    return np.unique(np.concatenate([ivf[ivf_offsets[c] : ivf_offsets[c + 1]] for c in cells]))


def diagnose(out: Path, seed_list: list[int], nbits: int, n_queries: int) -> dict:
    """Where each index loses the exact top 10 (issue 47): its inverted file's cells (empty, the largest one's share of
    the documents, postings per document) and the share of the exact top 10 among the documents the probe reaches; for
    medbench also after each pruning (``n_full_scores``, then a quarter) and in the final top 10. Reads the indexes
    ``seeds`` built; the first ``n_queries`` queries."""
    from medbench_core.retrieval import multivector as mv

    q, exact = np.load(out / "queries.npy")[:n_queries], np.load(out / "exact_top10.npy")[:n_queries]
    _, offsets = mv.load_tokens(out / "emb")
    n_docs = len(offsets) - 1
    cover = lambda found: float(np.mean([len(set(np.asarray(f).tolist()) & set(e)) / 10 for f, e in zip(found, exact.tolist())]))  # noqa: E731
    report: dict = {}
    for seed in seed_list:
        tag = f"{nbits}" if seed == 42 else f"{nbits}-s{seed}"
        for lib in ("medbench", "pylate"):
            folder = out / f"{lib}-{tag}"
            if lib == "medbench" and (folder / "ivf.npy").exists():
                settings = mv.plaid_settings({"type": "plaid", "nbits": nbits, "seed": seed}, "bench")
                index = mv.PlaidIndex(folder, settings)
                centroids, ivf, ivf_offsets = index.centroids, np.asarray(index.ivf), index.ivf_offsets
            elif lib == "pylate" and list(folder.rglob("ivf.npy")):
                where = next(folder.rglob("ivf.npy")).parent
                centroids = np.asarray(np.load(where / "centroids.npy"), dtype=np.float32)
                ivf, lengths = np.load(where / "ivf.npy").astype(np.int64), np.load(where / "ivf_lengths.npy").astype(np.int64)
                if len(ivf) and ivf.max() >= n_docs:  # token ids, not document ids: map to their documents
                    ivf = np.repeat(np.arange(n_docs), np.diff(offsets))[ivf]
                ivf_offsets = np.concatenate([[0], np.cumsum(lengths)])
            else:
                continue
            sizes = np.diff(ivf_offsets)
            row = {"library": lib, "seed": seed, "n_cells": len(sizes), "empty_cells": int((sizes == 0).sum()),
                   "largest_cell_share_of_documents": round(float(sizes.max()) / n_docs, 4),
                   "cells_holding_over_half_the_documents": int((sizes > n_docs / 2).sum()),
                   "postings_per_document": round(float(sizes.sum()) / n_docs, 2), "queries": len(q)}  # fmt: skip
            t0 = time.perf_counter()
            cand = [probed(centroids, ivf, ivf_offsets, qq, 8) for qq in q]
            row["probed_documents_mean"] = round(float(np.mean([len(c) for c in cand])), 1)
            row["exact_top10_among_probed"] = round(cover(cand), 4)
            if lib == "medbench":
                stages: dict = {"after_n_full_scores": [], "after_quarter": [], "final_top10": []}
                for qq, c in zip(q, cand):
                    cs = centroids @ qq.T
                    dl = offsets[c + 1] - offsets[c]
                    codes = np.asarray(index.codes[mv._rows_of(c, offsets)])
                    approx = np.maximum.reduceat(cs[codes], np.concatenate([[0], np.cumsum(dl)[:-1]]), axis=0).sum(axis=1)
                    keep = mv._best(approx, settings["n_full_scores"])
                    stages["after_n_full_scores"].append(c[keep])
                    stages["after_quarter"].append(c[keep[mv._best(approx[keep], max(10, settings["n_full_scores"] // 4))]])
                    stages["final_top10"].append(index.search(qq, 10)[0][:10])
                row |= {f"exact_top10_{k}": round(cover(v), 4) for k, v in stages.items()}
            row["seconds"] = round(time.perf_counter() - t0, 1)
            report[f"{lib}-{seed}"] = row
            print(json.dumps(row), flush=True)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("prepare", "step", "compare", "seeds", "diagnose"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--which", default="")
    parser.add_argument("--nbits", type=int, default=4)
    parser.add_argument("--seed", type=int, default=42, help="step: the build's sample and k-means seed (both libraries)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--build-repeats", type=int, default=None, help="builds per library (default --repeats)")
    parser.add_argument("--earlier", type=Path, default=None, help="a compare log whose rows count (resume)")
    parser.add_argument("--seeds", default="42,1,2,3,4", help="seeds: the k-means seeds, comma-separated")
    parser.add_argument("--results", type=Path, default=None, help="seeds: the JSON-lines file (default seeds-nbits{N}.jsonl in --out)")
    parser.add_argument("--summary-only", action="store_true", help="seeds: print the table of what is in --results, run nothing")
    parser.add_argument("--libraries", default="medbench,pylate", help="seeds: which to run, of medbench, pylate, onpylate (medbench on pylate's centroids)")
    args = parser.parse_args()
    if args.action == "prepare":
        prepare(args.out, args.docs, args.queries)
    elif args.action == "step":
        print(json.dumps(step(args.out, args.which, args.nbits, args.seed)))
    elif args.action == "seeds":
        results = args.results or args.out / f"seeds-nbits{args.nbits}.jsonl"
        seed_list = [int(x) for x in args.seeds.split(",")]
        summary = seeds(args.out, seed_list, args.nbits, results, args.summary_only, tuple(args.libraries.split(",")))
        results.with_name(results.stem + "-summary.json").write_text(json.dumps(summary, indent=1))
    elif args.action == "diagnose":
        report = diagnose(args.out, [int(x) for x in args.seeds.split(",")], args.nbits, args.queries)
        (args.out / f"diagnose-nbits{args.nbits}.json").write_text(json.dumps(report, indent=1))
    else:
        compare(args.out, args.repeats, args.nbits, args.build_repeats, args.earlier)
    return 0


if __name__ == "__main__":
    sys.exit(main())
