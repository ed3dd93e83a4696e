"""Parallel work in every thread pool of the libraries tests/forked.py preloads, with values exact in any
order of summation (small integers in float64): run in a forked child (``python -m tests.fork_pools``) and
in the test's own process, the two must agree (tests/test_forked.py)."""

from __future__ import annotations

import json


def results(threads: bool = True) -> dict:
    import faiss
    import numpy as np
    import polars as pl
    import pyarrow as pa
    import pyarrow.compute as pc
    import scipy.linalg
    import torch

    a = np.arange(512 * 512, dtype=np.float64).reshape(512, 512) % 7
    frame = pl.DataFrame({"k": np.arange(400_000) % 97, "v": np.arange(400_000)})
    vectors = (np.arange(20_000 * 16, dtype=np.float32).reshape(20_000, 16) % 5).astype(np.float32)
    index = faiss.IndexFlatIP(16)
    index.add(vectors)
    scores, _ = index.search(vectors[:64], 3)
    t = torch.arange(256 * 256, dtype=torch.float64).reshape(256, 256) % 3
    out = {
        "numpy": float((a @ a).sum()),  # OpenBLAS (numpy's copy)
        "scipy": float(scipy.linalg.blas.dgemm(1.0, a, a).sum()),  # OpenBLAS (scipy's copy)
        "polars": frame.group_by("k").agg(pl.col("v").sum()).sort("k")["v"].to_list()[:5] + [frame.sort("v", descending=True)["v"][0]],
        "pyarrow": pc.sum(pa.array(np.arange(1_000_000))).as_py(),
        "faiss": scores.sum(axis=1).tolist()[:8],  # OpenMP
        "torch": float((t @ t).sum()),  # torch's intra-op pool
    }
    if threads:
        out["threads"] = {"torch": torch.get_num_threads(), "faiss": faiss.omp_get_max_threads(), "polars": pl.thread_pool_size()}
    return out


if __name__ == "__main__":
    print(json.dumps(results()))
