"""The sample of near-duplicate text pairs read by hand to set the Jaccard threshold (docs/contamination.md).

    python bench/contamination_sample.py DATA_ROOT [--seed 0]

DATA_ROOT holds curated tasks (``tasks/<name>``, as ``medbench run`` writes them). Within each of
scifact, liveqa_medquad, frenchmedmcqa and icd10_crosslingual, each set of queries or documents is
compared with itself (medbench_core.evaluation.contamination.texts, threshold 0.5 for the look
below the threshold); it prints the counts and 25 pairs drawn at Jaccard >= 0.7 and 10 below, texts cut at 300 characters.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data_root", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from medbench_core.evaluation.contamination import texts as tx
    from medbench_core.evaluation.contamination.audit import task_texts
    from medbench_core.layout import Layout

    layout = Layout(args.data_root)
    rng = random.Random(args.seed)
    rows = []
    for name in ["scifact", "liveqa_medquad", "frenchmedmcqa", "icd10_crosslingual"]:
        for s in task_texts(layout.load_task(name)):
            found = [r for r in tx.near_duplicates(s, [tx.TextSet("self", s.side, s.ids, s.texts, s.sigs)], threshold=0.5) if r["id"] < r["other_id"]]
            for r in found:
                i, j = s.ids.index(r["id"]), s.ids.index(r["other_id"])
                rows.append((name, s.side, r["jaccard"], s.texts[i][:300], s.texts[j][:300]))
    high = [r for r in rows if r[2] >= 0.7]
    low = [r for r in rows if r[2] < 0.7]
    print(f"{len(rows)} pairs at >= 0.5; {len(high)} at >= 0.7, {len(low)} in [0.5, 0.7)")
    for r in rng.sample(high, min(25, len(high))) + rng.sample(low, min(10, len(low))):
        print(f"---- {r[0]} {r[1]} {r[2]}\nA: {r[3]}\nB: {r[4]}")


if __name__ == "__main__":
    main()
