"""The compare as the command prints it: a row per partition, a column per stage, and the largest differences accepted."""

from __future__ import annotations

from typing import Any

from medbench_release.verdicts import OK, ArtifactResult, Verdict

_CELL = {Verdict.IDENTICAL: "same", Verdict.MISSING: "missing", Verdict.DIFFERS: "DIFFERS"}


def _cell(r: ArtifactResult) -> str:
    if r.verdict == Verdict.WITHIN_TOLERANCE:
        return f"~{r.max_abs_diff:.1e}" if r.max_abs_diff is not None else "~ties"
    return _CELL[r.verdict]


def partitions(results: list[ArtifactResult]) -> list[dict[str, Any]]:
    """One row per curated task and per model x task: each stage's verdict and whether it reproduced."""
    rows: dict[str, dict[str, Any]] = {}
    for r in results:
        row = rows.setdefault(r.partition, {"partition": r.partition, "stages": {}, "reproduced": True})
        row["stages"][r.stage] = {"verdict": r.verdict, "cell": _cell(r), "max_abs_diff": r.max_abs_diff}
        row["reproduced"] = row["reproduced"] and r.verdict in OK
    return list(rows.values())


def table(rows: list[dict[str, Any]], record: dict[str, Any], main_metric: str = "ndcg_at_10") -> str:
    """The printed table: a row per partition, a column per stage, the version's main metric."""
    stages = ("curated_task", "embeddings", "index", "run", "metrics")
    metric = {f"{r['model']} x {r['task']}": r["metrics"].get(main_metric) for r in record["runs"]}
    width = max([len("partition")] + [len(r["partition"]) for r in rows])
    head = f"{'partition':<{width}}  " + "  ".join(f"{s:<12}" for s in stages) + f"  {main_metric:<10}  verdict"
    out = [head, "-" * len(head)]
    for row in rows:
        cells = "  ".join(f"{row['stages'].get(s, {}).get('cell', '-'):<12}" for s in stages)
        m = metric.get(row["partition"])
        out.append(
            f"{row['partition']:<{width}}  {cells}  {f'{m:.4f}' if m is not None else '':<10}  {'reproduced' if row['reproduced'] else 'NOT reproduced'}"
        )
    return "\n".join(out)


def largest_differences(results: list[ArtifactResult]) -> dict[str, float | None]:
    """The largest difference accepted within tolerance, by what it measures: vectors, scores (runs), metrics."""
    kinds = {"embeddings": "vectors", "index": "vectors", "run": "scores", "metrics": "metrics"}
    out: dict[str, float | None] = {"vectors": None, "scores": None, "metrics": None}
    for r in results:
        what = kinds.get(r.stage)
        if what and r.verdict == Verdict.WITHIN_TOLERANCE and r.max_abs_diff is not None:
            out[what] = max(out[what] or 0.0, r.max_abs_diff)
    return out
