"""Compare a rebuilt data folder with a version file, artifact by artifact, and say what moved.

Each artifact of the version (curated tasks, then embeddings, indices, runs, metrics of every
model x task, in stage order) is looked for in the rebuild under its key, and its files are
judged by the rule the version file gives them (:data:`medbench_release.record.RULES`; runs and
metrics by :mod:`medbench_release.tolerance`, with what the artifacts before them in the same
partition allow: a run's tolerance follows from its vectors' verdicts, its metrics' bound from the
run's). An artifact is ``identical``, ``within_tolerance`` (the rule it was judged by and its
largest difference are reported), ``differs`` (beyond the rule, or rebuilt under another key: its
inputs changed) or ``missing`` (not rebuilt). The first artifact that differs is named with its upstream
provenance beside the version's, so that a reader sees whether the data, the model or the code
moved (:func:`medbench_release.moved.first_difference`). The verdicts are :mod:`medbench_release.verdicts`; one
file by its rule is :mod:`medbench_release.compare_files`, runs and metrics :mod:`medbench_release.judge_runs`, the
printed table :mod:`medbench_release.compare_table`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from medbench_core.errors import IntegrityError
from medbench_core.storage import MANIFEST, verify_manifest
from medbench_release.compare_files import compare_file, compare_vectors
from medbench_release.compare_table import largest_differences, partitions, table
from medbench_release.judge_runs import Partition, judge_metrics, judge_run, settle_run
from medbench_release.moved import entry_changes, first_difference, short
from medbench_release.record import RULES, catalogue_entries, effective_rule, model_upstream, registry_entries, task_upstream
from medbench_release.tolerance import ARRAY_TOLERANCE
from medbench_release.verdicts import OK, ArtifactResult, FileVerdict, Rebuilt, Verdict

# The import path callers use (medbench_release.rebuild, tests) for what the modules above hold.
__all__ = [
    "OK", "ArtifactResult", "FileVerdict", "Rebuilt", "Verdict", "compare_file", "compare_vectors", "compare_version", "entry_changes", "first_difference",
    "largest_differences", "partitions", "table",
]  # fmt: skip


def _rebuilt_folder(data_dir: Path, a: dict[str, Any]) -> tuple[Path | None, list[str]]:
    """Where the rebuild put the artifact: under the version's key, else the one folder of that stage."""
    exact = data_dir / a["path"]
    if (exact / MANIFEST).exists():
        return exact, []
    if a["stage"] == "curated_task":
        return None, []
    parent = exact.parent
    found = sorted(p for p in parent.iterdir() if (p / MANIFEST).exists()) if parent.is_dir() else []
    if not found:
        return None, []
    notes = [f"{len(found)} rebuilt {a['stage']} folders for {a['model']} x {a['task']}; comparing {found[0].name}"] if len(found) > 1 else []
    return found[0], notes


def compare_version(
    record: dict[str, Any], rebuilt: Rebuilt, *, published_file: Callable[[str], Path | None] | None = None, tolerance: float = ARRAY_TOLERANCE
) -> list[ArtifactResult]:
    """Judge every artifact of ``record`` against the rebuild, in the version file's (stage) order."""
    models, catalogue = registry_entries(rebuilt.models_text), catalogue_entries(rebuilt.tasks_text)
    metrics_of = {(r["model"], r["task"], r["keys"]["metrics"]): r["metrics"] for r in record["runs"]}
    kinds = {(r["model"], r["task"]): r.get("model_kind") for r in record["runs"]}
    located: dict[tuple[str | None, str, str], tuple[Path | None, list[str]]] = {}
    for a in record["artifacts"]:
        located[(a["model"], a["task"], a["stage"])] = _rebuilt_folder(rebuilt.data_dir, a)
    results: list[ArtifactResult] = []
    results_by: dict[tuple[str | None, str, str], ArtifactResult] = {}
    parts: dict[tuple[str | None, str], Partition] = {}
    for a in record["artifacts"]:
        folder, notes = located[(a["model"], a["task"], a["stage"])]
        res = ArtifactResult(a["stage"], a["model"], a["task"], a["path"], a["key"], None, Verdict.MISSING, list(notes), upstream=a["upstream"])
        results_by[(a["model"], a["task"], a["stage"])] = res
        if folder is None:
            res.notes.append("not rebuilt (see the rebuild's log)")
            results.append(res)
            continue
        try:
            manifest = verify_manifest(folder)
        except IntegrityError as exc:
            res.verdict, res.rebuilt_key = Verdict.DIFFERS, folder.name
            res.notes.append(str(exc))
            results.append(res)
            continue
        if a["stage"] == "curated_task":
            res.rebuilt_key = manifest.get("content_hash", "")
            res.rebuilt_upstream = task_upstream(folder, catalogue.get(a["task"]), rebuilt.shared_data, rebuilt.code_versions.get("curated_task", ""))
        else:
            res.rebuilt_key = folder.name
            keys = {
                s: (located[(a["model"], a["task"], s)][0].name if located.get((a["model"], a["task"], s), (None,))[0] else "")
                for s in ("embeddings", "index", "run", "metrics")
            }
            res.rebuilt_upstream = model_upstream(folder, a["stage"], keys, models.get(a["model"]))
        got_files = manifest.get("files", {})
        part = parts.setdefault((a["model"], a["task"]), Partition())
        for name in sorted(set(a["files"]) | set(got_files)):
            if name not in a["files"]:
                res.files[name] = FileVerdict(Verdict.DIFFERS, rule="exact", detail="not in the version")
                continue
            want, rule = a["files"][name], effective_rule(name, a["files"][name]["rule"])
            if rule in ("run", "per_query", "metrics"):  # judged below, with what the partition's artifacts before them allow
                same = got_files.get(name) is not None and got_files[name]["sha256"] == want["sha256"]
                res.files[name] = FileVerdict(Verdict.IDENTICAL if same else Verdict.PENDING, rule)
                continue
            pub = published_file(f"{a['path']}/{name}") if published_file and rule in ("array", "faiss") else None
            judged = replace(compare_file(name, want, folder, got_files.get(name), published=pub, metrics=None, tolerance=tolerance), rule=rule)
            res.files[name] = judged
            if rule in ("array", "faiss") and judged.verdict == Verdict.WITHIN_TOLERANCE:
                part.vectors_moved = True
        if a["stage"] == "run":
            judge_run(res, a, folder, part, located, results_by, published_file, tolerance, kinds.get((a["model"], a["task"])))
        elif a["stage"] == "metrics":
            judge_metrics(res, a, folder, part, metrics_of.get((a["model"], a["task"], a["key"])), rebuilt.data_dir, published_file)
        for name, f in res.files.items():
            if f.verdict == Verdict.PENDING:  # a file of a stage that no judge above covers
                res.files[name] = replace(f, verdict=Verdict.DIFFERS, detail="other bytes, and no rule to judge them by here")
        verdicts = {f.verdict for f in res.files.values()}
        # What the artifact's own rule measures: a run's score differences, a metrics artifact's metric differences, else values.
        own = [n for n in res.files if effective_rule(n, "") in {"run": ("run",), "metrics": ("metrics", "per_query")}.get(a["stage"], ())]
        diffs = [f.max_abs_diff for n, f in res.files.items() if f.max_abs_diff is not None and (not own or n in own)]
        res.max_abs_diff = max(diffs) if diffs else None
        res.rule = _deciding_rule(res.files, a["stage"])
        if res.rebuilt_key != a["key"]:
            same = verdicts <= set(OK)
            res.verdict = Verdict.DIFFERS
            res.notes.insert(0, f"rebuilt under key {short(res.rebuilt_key)}, the version has {short(a['key'])}" + (" (same files)" if same else ""))
        elif Verdict.DIFFERS in verdicts:
            res.verdict = Verdict.DIFFERS
        elif Verdict.WITHIN_TOLERANCE in verdicts:
            res.verdict = Verdict.WITHIN_TOLERANCE
        else:
            res.verdict = Verdict.IDENTICAL
        results.append(res)
        if a["stage"] == "metrics" and part.run_result is not None and part.run_pending:
            settle_run(part.run_result, res)
    return results


def _deciding_rule(files: dict[str, FileVerdict], stage: str = "") -> str:
    """The rule of the file that decided the artifact's verdict (the worst one), else of the first file."""
    own = {"run": "run", "metrics": "metrics"}.get(stage, "")
    for verdict in (Verdict.DIFFERS, Verdict.WITHIN_TOLERANCE, Verdict.IDENTICAL):
        found = [f for f in files.values() if f.verdict == verdict and f.rule]
        # A run's (a metrics artifact's) own rule first, then the artifact's content, its info.json last.
        found.sort(key=lambda f: (not (own and f.rule.startswith(own)), f.rule.startswith("json")))
        if found:
            rule = found[0].rule
            return rule if ":" in rule else f"{rule}: {RULES.get(rule, '')}"
    return ""
