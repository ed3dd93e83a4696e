"""Data-contract gates on curated tasks, as blocking Dagster asset checks.

``task_contract`` runs per ``curated_task`` partition (schema, integrity, licences; on a multilingual
task, no query equal to or a near duplicate of its relevant document: ``contracts/identity.py``);
``tasks_do_not_overlap`` runs across every curated task (queries, near-duplicates, concept ids,
images). Both call medbench_core.taskdata.contracts, keep the GX results and data docs beside the data,
and record the verdict (``GATE.json`` per task, ``OVERLAP_GATE.json`` for the set) so that a
later, separate run refuses a task whose gate failed: Dagster's ``blocking`` only stops
downstream assets inside the run that ran the check.
"""

from pathlib import Path

import dagster as dg

from assets.tasks import CURATED_TASK
from assets.verdicts import overlap_judged_with, task_judged_with
from medbench_core.errors import MedbenchError
from medbench_core.taskdata.contracts import ContractResult, read_gate, record_gate, record_overlap_gate, validate_task, validate_tasks
from medbench_core.taskdata.licences import LicencePolicy
from runtime.resources import ArtifactStoreResource, RegistryResource

TASK_CHECK = "task_contract"
OVERLAP_CHECK = "tasks_do_not_overlap"

_MAX_ROWS = 50  # failing row ids per file kept in check metadata


def check_metadata(result: ContractResult, gate_file: Path | None = None) -> dict:
    """What the Dagster UI shows for a gate: verdict, failing rows, links to the GX reports."""
    failing = {f: rows[:_MAX_ROWS] for f, rows in result.failing_rows().items()}
    md = {
        "passed": result.passed,
        "research_only": result.research_only,
        "expectations": len(result.outcomes),
        "failed_expectations": len(result.failures),
        "failing_rows": dg.MetadataValue.json(failing),
        "message": dg.MetadataValue.md("```\n" + result.message + "\n```"),
    }
    if result.content_hash:
        md["content_hash"] = result.content_hash
    if result.licences:
        md["licences"] = dg.MetadataValue.json(dict(result.licences))
    if result.task_hashes:
        md["tasks_judged"] = ", ".join(sorted(result.task_hashes))
    if result.failed_tasks:
        md["failed_tasks"] = ", ".join(result.failed_tasks)
    if result.near_duplicates:
        md["near_duplicates"] = len(result.near_duplicates)
    if result.holes:  # the task's qrels holes, reported whether refused or marked
        md["qrels_holes"] = dg.MetadataValue.json(dict(result.holes))
    if result.results_path:
        md["gx_results"] = dg.MetadataValue.path(str(result.results_path))
    if result.contract_path:
        md["contract"] = dg.MetadataValue.path(str(result.contract_path))
    if result.data_docs_path:
        md["data_docs"] = dg.MetadataValue.url(Path(result.data_docs_path).resolve().as_uri())
    if gate_file:
        md["gate_file"] = dg.MetadataValue.path(str(gate_file))
    return md


def _reused(gate: dict, gate_file: Path) -> dg.AssetCheckResult:
    """The recorded verdict, when it judged exactly this content under exactly these rules."""
    md = {
        "passed": bool(gate.get("passed")),
        "reused_verdict": True,
        "recorded_at": str(gate.get("recorded_at")),
        "failing_rows": dg.MetadataValue.json(gate.get("failing_rows") or {}),
        "message": dg.MetadataValue.md("```\n" + str(gate.get("message", "")) + "\n```"),
        "gate_file": dg.MetadataValue.path(str(gate_file)),
    }
    if gate.get("holes"):
        md["qrels_holes"] = dg.MetadataValue.json(gate["holes"])
    for key in ("results_path", "data_docs_path"):
        if gate.get(key):
            md["gx_results" if key == "results_path" else "data_docs"] = dg.MetadataValue.path(str(gate[key]))
    return dg.AssetCheckResult(
        passed=bool(gate.get("passed")), metadata=md, description=str(gate.get("message", "")).splitlines()[0] if gate.get("message") else None
    )


def _unloadable(name: str, exc: Exception) -> ContractResult:
    return ContractResult(name=name, passed=False, outcomes=(), message=f"task {name}: cannot be judged: {exc}")


def build_task_checks(partitions_def: dg.PartitionsDefinition, asset: dg.AssetKey | str = CURATED_TASK) -> list[dg.AssetChecksDefinition]:
    """The two blocking checks on the curated-task asset: per partition, and across all tasks."""

    @dg.asset_check(
        asset=asset,
        name=TASK_CHECK,
        blocking=True,
        partitions_def=partitions_def,
        description=(
            "Schema, referential integrity and licence allowlist of one curated task (Great Expectations); on a multilingual task, "
            "no query equal to or a near duplicate of its relevant document."
        ),
    )
    def task_contract(context: dg.AssetCheckExecutionContext, store: ArtifactStoreResource, registry: RegistryResource) -> dg.AssetCheckResult:
        name = context.partition_key
        catalog = registry.catalog()
        entry = catalog.task(name)
        layout = store.layout
        folder = layout.task_dir(name)
        try:
            task = store.load_task(name)
        except MedbenchError as exc:
            result = _unloadable(name, exc)
            judged_with = ""
        else:
            holes = str(entry.options.get("qrels_holes") or "refuse")  # refuse or mark the task's qrels holes (docs/trust.md)
            judged_with = task_judged_with(catalog, entry, task.content_hash())
            gate = read_gate(layout.gate_file(name))
            if gate and gate.get("judged_with") == judged_with:
                return _reused(gate, layout.gate_file(name))
            policy = LicencePolicy.from_config(catalog.licence_allowlist)
            result = validate_task(task, layout.gate_reports_dir(name), policy=policy, research_only=entry.research_only, qrels_holes=holes)
        gate_file = record_gate(folder, result, judged_with=judged_with) if folder.exists() else None
        return dg.AssetCheckResult(passed=result.passed, metadata=check_metadata(result, gate_file), description=result.message.splitlines()[0])

    @dg.asset_check(
        asset=asset,
        name=OVERLAP_CHECK,
        blocking=True,
        description="No query (exact after normalisation, or near-duplicate), concept id or image shared between curated tasks.",
    )
    def tasks_do_not_overlap(context: dg.AssetCheckExecutionContext, store: ArtifactStoreResource, registry: RegistryResource) -> dg.AssetCheckResult:
        tasks, not_curated = [], []
        for name in registry.catalog().names:
            try:
                tasks.append(store.load_task(name))
            except MedbenchError:
                not_curated.append(name)
        layout = store.layout
        catalog = registry.catalog()
        dup = catalog.test_image_duplicates  # the exact-duplicate image check across test splits (docs/contamination.md)
        judged_with = overlap_judged_with(((t.name, t.content_hash()) for t in tasks), dup)
        gate = read_gate(layout.overlap_gate_file())
        # The key names every task judged, so a verdict is reused only for exactly that set.
        if gate and gate.get("judged_with") == judged_with:
            check = _reused(gate, layout.overlap_gate_file())
        else:
            splits = {e.name: str(e.options.get("split") or "test") for e in catalog.tasks}
            result = validate_tasks(tasks, layout.overlap_reports_dir(), test_image_duplicates=dup, splits=splits)
            gate_file = record_overlap_gate(layout.tasks_root(), result, judged_with=judged_with)
            check = dg.AssetCheckResult(passed=result.passed, metadata=check_metadata(result, gate_file), description=result.message.splitlines()[0])
        if not not_curated:
            return check
        # Not curated yet (or corrupt): not judged here, and refused downstream.
        return dg.AssetCheckResult(passed=check.passed, metadata={**check.metadata, "not_judged": ", ".join(not_curated)}, description=check.description)

    return [task_contract, tasks_do_not_overlap]
