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
    t0 = time.perf_counter()
    if which == "medbench-build":
        idx = out / f"medbench-{tag}"
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
    elif which == "medbench-search":
        index = mv.PlaidIndex(out / f"medbench-{tag}", settings)
        result["load_seconds"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        found = [index.search(qq, 10)[0][:10].tolist() for qq in q]
        result["recall_at_10"] = float(np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found, exact.tolist())]))
    elif which == "pylate-search":
        from pylate import indexes, retrieve

        index = indexes.PLAID(index_folder=str(out), index_name=f"pylate-{tag}", override=False, nbits=nbits, show_progress=False, device="cpu")
        retriever = retrieve.ColBERT(index=index)
        result["load_seconds"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        hits = retriever.retrieve(queries_embeddings=torch.from_numpy(q), k=10)
        found = [[int(h["id"]) for h in row] for row in hits]
        result["recall_at_10"] = float(np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found, exact.tolist())]))
    result["seconds"] = round(time.perf_counter() - t0, 3)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("prepare", "step", "compare"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--which", default="")
    parser.add_argument("--nbits", type=int, default=4)
    parser.add_argument("--seed", type=int, default=42, help="step: the build's sample and k-means seed (both libraries)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--build-repeats", type=int, default=None, help="builds per library (default --repeats)")
    parser.add_argument("--earlier", type=Path, default=None, help="a compare log whose rows count (resume)")
    args = parser.parse_args()
    if args.action == "prepare":
        prepare(args.out, args.docs, args.queries)
    elif args.action == "step":
        print(json.dumps(step(args.out, args.which, args.nbits, args.seed)))
    else:
        compare(args.out, args.repeats, args.nbits, args.build_repeats, args.earlier)
    return 0


if __name__ == "__main__":
    sys.exit(main())
